"""Token accounting of one streamed response: the server's token counts (claims to check) → chunks.

Input, per JSON event of a stream in order (``client``'s flavour parsers produce it): its arrival
time (perf_counter seconds), the cumulative completion-token count it carried (or None) and
whether it carried content (text or token IDs). Output: which events are timed as chunks, the
tokens each carried, the request's output tokens and where that number came from.

Three cases (:func:`account_tokens`):

- **continuous counts**: a chunk carries the rise of the cumulative count over the largest count
  before it, and only chunks carrying ≥ 1 token are timed (the chat role chunk and usage-only
  chunks never count). Taken for SGLang's ``/generate`` whenever any count arrived, and for the
  OpenAI flavours only when *every* content chunk carried a count (a server that counts on some
  chunks only would otherwise move TTFT to its first counted chunk), or when no content chunk
  came but two different positive counts did;
- **counts at the end only**: content chunks are timed, ``chunk_tokens`` is None and the output
  is the largest count;
- **no counts**: content chunks are timed and counted (``token_source="chunks"``).

Every count is a claim: one beyond :data:`MAX_COUNT` (int32: no context is longer) cannot be real
and makes the request an error with the reason (:func:`drop_implausible`), its other counts kept.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# MAX_COUNT: a larger claim makes the request an error row (``client.parse_exchange``), never an OverflowError
from specsweep.results.records import MAX_COUNT, TokenSource, times_array, tokens_array

__all__ = ["MAX_COUNT", "TokenAccount", "account_tokens", "drop_implausible"]


@dataclass(slots=True)
class TokenAccount:
    """One request's tokens as :func:`account_tokens` counts them.

    ``chunk_times``: arrival times (perf_counter seconds, float64) of the timed chunks;
    ``chunk_tokens``: tokens each carried (int32, see ``records.tokens_array``), None when the
    counts did not say; ``output_tokens``: the request's output tokens; ``token_source``:
    ``"usage"`` (the server's counts) or ``"chunks"`` (content chunks counted).
    """

    chunk_times: np.ndarray
    chunk_tokens: np.ndarray | None
    output_tokens: int
    token_source: TokenSource


def drop_implausible(counts: list[int | None], huge: float | None,
                     prompt_tokens: int | None) -> tuple[list[int | None], int | None, str | None]:
    """Apply the int32 rule: ``(counts, prompt_tokens, error)`` with the impossible claims removed.

    ``counts``: cumulative completion-token counts per event (None where an event had none);
    ``huge``: the first count the server wrote as a non-integer number beyond :data:`MAX_COUNT`
    (``1e40``, NaN), or None. A completion count beyond it (an integer one first, else ``huge``)
    becomes None and the error names it; otherwise a prompt count beyond it becomes None and the
    error names that. ``error`` is None when every claim is possible (``counts`` is then returned
    as given).
    """
    bad: float | None = next((c for c in counts if c is not None and c > MAX_COUNT), huge)
    if bad is None:
        if prompt_tokens is not None and prompt_tokens > MAX_COUNT:
            return counts, None, f"implausible prompt token count: the server claims {prompt_tokens:,} prompt tokens"
        return counts, prompt_tokens, None
    kept = [None if c is not None and c > MAX_COUNT else c for c in counts]
    claimed = f"{bad:,}" if isinstance(bad, int) else f"{bad:g}"
    return kept, prompt_tokens, (f"implausible token count: the server claims {claimed} completion tokens "
                                 f"(more than {MAX_COUNT:,}, the most a count can be)")


def account_tokens(times: Sequence[float], counts: Sequence[int | None], contents: Sequence[bool], *,
                   counts_per_chunk: bool) -> TokenAccount:
    """Chunks and tokens of one stream from its events (see the module's three cases).

    ``times``/``counts``/``contents``: per event, its arrival time (perf_counter seconds), its
    cumulative completion-token count (None: none; already checked by :func:`drop_implausible`) and
    whether it carried content. ``counts_per_chunk``: the server's counts are per chunk whenever any
    arrives (SGLang's ``meta_info``), whatever the content chunks say.
    """
    content_counts = [c for c, has in zip(counts, contents) if has]
    continuous = (
        (counts_per_chunk and any(c is not None for c in counts))
        or (bool(content_counts) and all(c is not None for c in content_counts))
        or (not content_counts and len({c for c in counts if c}) >= 2)
    )
    if continuous:
        chunk_times: list[float] = []
        chunk_tokens: list[int] = []
        last = 0
        for t, c in zip(times, counts):
            if c is not None:
                if c > last:
                    chunk_times.append(t)
                    chunk_tokens.append(c - last)
                    last = c
        return TokenAccount(times_array(chunk_times), tokens_array(chunk_tokens), last, "usage")
    timed = times_array([t for t, has in zip(times, contents) if has])
    given = [c for c in counts if c is not None]
    if given:
        return TokenAccount(timed, None, max(given), "usage")
    return TokenAccount(timed, None, len(timed), "chunks")
