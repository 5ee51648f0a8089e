"""Prompts for a sweep: seeded random token IDs of fixed length, or a prompt file.

Every arm of a study must see the same prompts in the same order, so prompt ``i`` depends only
on (workload, i): random IDs come from ``numpy.random.default_rng([seed, i])``; a prompt file is
read in file order and cycled. Output length is fixed: every request asks for ``output_tokens``
with ``ignore_eos`` (``client.build_body``), so arms do the same amount of work.

Chat endpoints take no token IDs: with ``random-ids`` the ``openai-chat`` flavour sends the same
IDs rendered as text (one word per ID from a fixed word list), so the prompt length in tokens is
approximate there; the server's own ``prompt_tokens`` is recorded per request.

Prompt file (``workload="path/to/prompts.jsonl"``): JSON Lines, one prompt per line, each an
object with ``"prompt"`` (text), ``"input_ids"`` (token IDs) or ``"messages"`` (chat messages);
or a ``.txt`` file with one prompt per line. Its SHA-256 is recorded as the dataset digest.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from specsweep.client import Flavour, build_body

RANDOM_IDS = "random-ids"
#: token IDs drawn from [low, high): above the special tokens of common tokenizers, below every
#: common vocabulary size (Llama 3: 128k, Qwen: 151k, Mistral: 32k)
DEFAULT_ID_RANGE = (1000, 30000)
_WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case point "
    "government company number group problem fact river stone cloud garden window letter engine market "
    "signal forest bridge music paper silver orange planet winter summer harbor valley rocket ladder"
).split()

Prompt = str | list[int] | list[dict[str, Any]]


@dataclass(frozen=True)
class Workload:
    """What every request of a sweep asks for (lengths in tokens)."""

    kind: str  # "random-ids" or "prompt-file"
    input_tokens: int | None
    output_tokens: int
    seed: int = 0
    path: Path | None = None
    dataset_digest: str | None = None
    id_range: tuple[int, int] = DEFAULT_ID_RANGE
    prompts: tuple[Prompt, ...] = field(default=(), repr=False, compare=False)

    def describe(self) -> dict[str, Any]:
        """The ``workload`` record of meta.json."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "ignore_eos": True,
            "seed": self.seed,
            "dataset_digest": self.dataset_digest,
        }
        if self.kind == RANDOM_IDS:
            out["id_range"] = list(self.id_range)
            out["description"] = (f"{self.input_tokens} random token IDs in [{self.id_range[0]}, {self.id_range[1]}) "
                                  f"per prompt (numpy default_rng([seed, i])), {self.output_tokens} output tokens with ignore_eos")
        else:
            out["path"] = str(self.path)
            out["prompts"] = len(self.prompts)
            out["description"] = (f"{len(self.prompts)} prompts from {self.path.name if self.path else '?'} in file order, "
                                  f"cycled; {self.output_tokens} output tokens with ignore_eos")
        return out

    def prompt(self, i: int, flavour: Flavour) -> Prompt:
        """Prompt number ``i`` (0-based, any size) shaped for ``flavour``."""
        if self.kind == RANDOM_IDS:
            assert self.input_tokens is not None
            rng = np.random.default_rng([self.seed, i])
            ids = rng.integers(self.id_range[0], self.id_range[1], size=self.input_tokens).tolist()
            if flavour == "openai-chat":
                return " ".join(_WORDS[t % len(_WORDS)] for t in ids)
            return ids
        item = self.prompts[i % len(self.prompts)]
        if flavour == "openai-chat" and isinstance(item, list) and item and isinstance(item[0], int):
            raise ValueError(f"{self.path}: prompt {i % len(self.prompts)} is token IDs, which chat endpoints do "
                             "not accept; use api openai-completions or sglang, or give text prompts")
        if flavour != "openai-chat" and isinstance(item, list) and item and isinstance(item[0], dict):
            return "\n".join(str(m.get("content", "")) for m in item)
        return item

    def bodies(self, flavour: Flavour, indices: Sequence[int], *, model: str | None, temperature: float,
               output_tokens: int | None = None) -> list[dict[str, Any]]:
        """Request bodies for prompts ``indices`` with a fixed output length (``ignore_eos``).

        ``output_tokens`` overrides the workload's length (warm-up and preflight requests).
        """
        tokens = output_tokens or self.output_tokens
        return [build_body(flavour, self.prompt(i, flavour), tokens, temperature=temperature, model=model)
                for i in indices]


def random_ids(input_tokens: int, output_tokens: int, seed: int = 0,
               id_range: tuple[int, int] = DEFAULT_ID_RANGE) -> Workload:
    """Seeded random token-ID prompts of ``input_tokens`` tokens."""
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number of tokens >= 1; got {value!r}")
    lo, hi = id_range
    if not 0 <= lo < hi:
        raise ValueError(f"id_range must be (low, high) with 0 <= low < high; got {id_range!r}")
    return Workload(RANDOM_IDS, input_tokens, output_tokens, seed=seed, id_range=(lo, hi))


def _parse_line(path: Path, n: int, line: str) -> Prompt:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg}); each line must be an object with "
                         "'prompt', 'input_ids' or 'messages'") from exc
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, dict):
        raise ValueError(f"{path}:{n}: expected an object with 'prompt', 'input_ids' or 'messages', got {type(obj).__name__}")
    if isinstance(obj.get("prompt"), str):
        return obj["prompt"]
    ids = obj.get("input_ids")
    if isinstance(ids, list) and ids and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        return ids
    msgs = obj.get("messages")
    if isinstance(msgs, list) and msgs and all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
        return msgs
    raise ValueError(f"{path}:{n}: needs 'prompt' (text), 'input_ids' (non-negative ints) or 'messages' "
                     "(list of {role, content}); found keys " + ", ".join(sorted(obj)))


def prompt_file(path: str | Path, output_tokens: int, input_tokens: int | None = None, seed: int = 0) -> Workload:
    """Prompts read from a JSON Lines (``.jsonl``) or text (one prompt per line) file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"workload {str(path)!r}: no such prompt file; give 'random-ids' or the path of a "
                         ".jsonl / .txt prompt file")
    raw = path.read_bytes()
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError(f"workload {str(path)!r}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the prompt "
                         "file as UTF-8") from exc
    if path.suffix == ".jsonl":
        prompts = [_parse_line(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
    else:
        prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise ValueError(f"{path}: has no prompts")
    if isinstance(output_tokens, bool) or not isinstance(output_tokens, int) or output_tokens < 1:
        raise ValueError(f"output_tokens must be a whole number of tokens >= 1; got {output_tokens!r}")
    return Workload("prompt-file", input_tokens, output_tokens, seed=seed, path=path.resolve(),
                    dataset_digest="sha256:" + hashlib.sha256(raw).hexdigest(), prompts=tuple(prompts))


def make_workload(workload: str, input_tokens: int, output_tokens: int, seed: int) -> Workload:
    """The notebook's ``workload`` parameter: ``"random-ids"`` or a prompt-file path."""
    if workload == RANDOM_IDS:
        return random_ids(input_tokens, output_tokens, seed)
    return prompt_file(workload, output_tokens, seed=seed)
