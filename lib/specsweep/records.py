"""The record of one streamed request, shared by the client (which fills it) and metrics.

All times are absolute ``time.perf_counter()`` seconds taken in the measuring process; result
sets store them relative to the level's start (see ``store``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TokenSource = Literal["usage", "tokenize", "chunks"]


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request.

    ``chunk_times`` holds the arrival time (seconds, perf_counter) of every SSE chunk that carried
    at least one new output token, in order; ``chunk_tokens`` the number of new output tokens each
    of those chunks carried (from the server's cumulative counts), or ``None`` when the server gave
    no per-chunk counts. ``output_tokens`` is the server's own count (``usage.completion_tokens``
    or SGLang ``meta_info.completion_tokens``) with ``token_source="usage"``; only when the server
    gives none is it the number of token-carrying chunks, with ``token_source="chunks"``, until the
    returned text (kept in ``output_text`` only in that case) is counted with the server's
    tokenizer (``token_source="tokenize"``). It is never the requested length.

    A failed request keeps whatever arrived before the failure and says why in ``error``.
    """

    t_sent: float
    t_end: float
    http_status: int | None = None
    error: str | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    token_source: TokenSource | None = None
    finish_reason: str | None = None
    output_digest: str | None = None
    #: per-request figures the server reported, e.g. ``e2e_latency_s``, ``spec_accept_length``,
    #: ``spec_verify_ct`` (SGLang final ``meta_info``)
    server: dict[str, float] = field(default_factory=dict)
    #: the generated text, kept only when the server gave no token counts (for ``/tokenize``)
    output_text: str | None = None

    @property
    def ok(self) -> bool:
        """True when the request finished without error and produced at least one token."""
        return self.error is None and bool(self.output_tokens)
