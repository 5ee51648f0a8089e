"""The API flavours specsweep speaks: each one's request path and streaming request body.

``sglang`` (``POST /generate``, SGLang's native API), ``openai-completions`` and ``openai-chat``
(the OpenAI routes every server here offers). A body asks for a fixed output length
(``ignore_eos``) and, on the OpenAI routes, for a cumulative token count in every chunk.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = ["FLAVOURS", "PATHS", "Flavour", "build_body", "check_flavour"]

Flavour = Literal["sglang", "openai-completions", "openai-chat"]

FLAVOURS: tuple[Flavour, ...] = ("sglang", "openai-completions", "openai-chat")
PATHS: dict[Flavour, str] = {
    "sglang": "/generate",
    "openai-completions": "/v1/completions",
    "openai-chat": "/v1/chat/completions",
}


def check_flavour(flavour: str) -> Flavour:
    """``flavour`` as a :data:`Flavour`; ValueError naming the choices otherwise."""
    if flavour not in PATHS:
        raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}; got {flavour!r}")
    return flavour  # type: ignore[return-value]


def build_body(
    flavour: Flavour,
    prompt: str | Sequence[int] | Sequence[Mapping[str, Any]],
    max_tokens: int,
    *,
    temperature: float = 0.0,
    min_tokens: int | None = None,
    model: str | None = None,
    extra: Mapping[str, Any] | None = None,
    ignore_eos: bool = True,
) -> dict[str, Any]:
    """The JSON body of one streaming request, by default with fixed output length (``ignore_eos``).

    ``prompt``: text, or a list of token IDs (``sglang`` → ``input_ids``; ``openai-completions`` →
    ``prompt`` as a list), or for ``openai-chat`` text (sent as one user message) or a list of
    message dicts. ``max_tokens``: output tokens to generate. ``min_tokens``: sent as
    ``min_new_tokens`` / ``min_tokens`` when given. ``model``: the OpenAI ``model`` field (omitted
    when None; servers then use their only model). ``extra``: more top-level keys, merged last.
    ``ignore_eos``: False lets the model stop at its end of sequence (``max_tokens`` is then a
    maximum: the sweep's ``output_length="natural"``).

    ``stream`` is always top-level (SGLang rejects it inside ``sampling_params``); the OpenAI flavours
    ask for ``stream_options: {include_usage, continuous_usage_stats}`` so every chunk carries the
    cumulative token count.
    """
    check_flavour(flavour)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an integer >= 1; got {max_tokens!r}")
    if min_tokens is not None and (not isinstance(min_tokens, int) or not 0 <= min_tokens <= max_tokens):
        raise ValueError(f"min_tokens must be an integer in [0, max_tokens={max_tokens}]; got {min_tokens!r}")
    is_text = isinstance(prompt, str)
    body: dict[str, Any]
    if flavour == "sglang":
        sp: dict[str, Any] = {"max_new_tokens": max_tokens, "ignore_eos": ignore_eos, "temperature": temperature}
        if min_tokens is not None:
            sp["min_new_tokens"] = min_tokens
        if not is_text and not _is_token_ids(prompt):
            raise ValueError("prompt for flavour 'sglang' must be text or a list of token IDs (ints)")
        body = {("text" if is_text else "input_ids"): prompt if is_text else list(prompt),  # type: ignore[arg-type]
                "sampling_params": sp, "stream": True}
    else:
        body = {}
        if model is not None:
            body["model"] = model
        if flavour == "openai-completions":
            if not is_text and not _is_token_ids(prompt):
                raise ValueError("prompt for flavour 'openai-completions' must be text or a list of token IDs (ints)")
            body["prompt"] = prompt if is_text else list(prompt)  # type: ignore[arg-type]
            body["max_tokens"] = max_tokens
        else:
            if is_text:
                body["messages"] = [{"role": "user", "content": prompt}]
            elif prompt and all(isinstance(m, Mapping) for m in prompt):
                body["messages"] = [dict(m) for m in prompt]  # type: ignore[arg-type]
            else:
                raise ValueError("prompt for flavour 'openai-chat' must be text or a list of message dicts "
                                 "(chat endpoints take no token-ID prompts)")
            body["max_tokens"] = max_tokens
            body["max_completion_tokens"] = max_tokens
        body["temperature"] = temperature
        body["ignore_eos"] = ignore_eos
        if min_tokens is not None:
            body["min_tokens"] = min_tokens
        body["stream"] = True
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if extra:
        body.update(extra)
    return body


def _is_token_ids(prompt: object) -> bool:
    return isinstance(prompt, Sequence) and not isinstance(prompt, (str, bytes)) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt)
