"""Token counts a server claims, checked against what was asked for and what arrived.

Every count from a server is a claim. A request whose claim is impossible becomes an error row
with the reason (its tokens then count toward no throughput), rather than a figure 100× too high:

- more completion tokens than the request allowed (``max_tokens``): no server generates past it,
  with ``ignore_eos`` or without (fewer than asked under ``ignore_eos`` is a *short output*, which
  levels count in ``short_outputs``, not an impossibility);
- a final count below the number of token-carrying chunks that arrived (each carried at least one
  token);
- a count beyond int32 (:data:`specsweep.client.MAX_COUNT`) is refused earlier, while the
  stream is parsed.

``/tokenize`` counts of returned text are checked against the text's bytes where they are taken
(``probe.TokenCounter``: a tokenizer yields at most about one token per UTF-8 byte).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["implausible_count", "reject_implausible"]

#: prefix of the error of a request whose count was refused (what the report and tests look for)
PREFIX = "implausible token count"


def implausible_count(rec: Any, max_tokens: int | None) -> str | None:
    """Why ``rec`` (a ``RequestRecord``) claims an impossible output count, or None when it is plausible.

    ``max_tokens``: the most output tokens the request allowed (None: unknown, not checked).
    """
    n = rec.output_tokens
    if n is None:
        return None
    if n < 0:
        return f"{PREFIX}: the server claims {n:,} completion tokens (a count cannot be negative)"
    if max_tokens is not None and n > max_tokens:
        return (f"{PREFIX}: the server claims {n:,} completion tokens ({rec.token_source}) for a request that "
                f"allowed at most {max_tokens:,}")
    if rec.token_source in ("usage", "tokenize") and rec.chunk_tokens is None and n < len(rec.chunk_times):
        return (f"{PREFIX}: the server claims {n:,} completion tokens ({rec.token_source}) but "
                f"{len(rec.chunk_times):,} token-carrying chunks arrived")
    return None


def reject_implausible(records: Sequence[Any], max_tokens: Sequence[int | None]) -> list[str]:
    """Turn every record with an impossible count into an error row (in place), its reason as the error.

    ``max_tokens[i]``: the most output tokens request ``i`` allowed. Records already failed are left
    as they are. Returns the reasons, ``"request <i>: <why>"``, in request order.
    """
    out = []
    for i, (rec, cap) in enumerate(zip(records, max_tokens)):
        if rec.error is not None:
            continue
        why = implausible_count(rec, cap)
        if why is not None:
            rec.error = why
            out.append(f"request {i}: {why}")
    return out
