"""Token counts a server claims, checked against what was asked for and what arrived.

Every count from a server is a claim. A request whose claim is impossible becomes an error row
with the reason (its tokens then count toward no throughput), rather than a figure 100× too high:

- more completion tokens than the request allowed (``max_tokens``): no server generates past it,
  with ``ignore_eos`` or without (fewer than asked under ``ignore_eos`` is a *short output*, which
  levels count in ``short_outputs``, not an impossibility);
- a final count below the number of token-carrying chunks that arrived (each carried at least one
  token);
- a count beyond int32 (:data:`specsweep.measure.client.MAX_COUNT`) is refused earlier, while the
  stream is parsed.

``/tokenize`` counts of returned text are checked against the text's bytes where they are taken
(``probe.TokenCounter``: a tokenizer yields at most about one token per UTF-8 byte).

A server's own count is also compared with the text that arrived (:func:`suspect_count`): more
tokens than the text has bytes is flagged, not refused, since tokens that decode to nothing
(special tokens generated under ``ignore_eos``) are possible.

A level of natural-length requests that all report exactly the requested count and finish by
``length`` while their texts differ in length :data:`PADDED_TEXT_RATIO`-fold or more is flagged
(:func:`padded_outputs`): a server that pads every stream to a fixed length with end-of-sequence
tokens (SGLang's proposed ``--padded-output-tokens``) reports the padding as completion tokens.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["PADDED_TEXT_RATIO", "implausible_count", "padded_outputs", "reject_implausible", "suspect_count"]

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


#: tokens beyond the text's largest possible byte count before a count is flagged
SUSPECT_SLACK = 16


def suspect_count(rec: Any) -> str | None:
    """Why ``rec``'s count (the server's own) is more than the text that arrived can hold, or None.

    The text's length is bounded by its fingerprint (``output_blocks``: one 8-byte hash per
    64 characters, see ``records.output_fingerprint``), its bytes by 4 per character (UTF-8); a
    count above that plus :data:`SUSPECT_SLACK` is flagged.
    """
    from specsweep.results.records import BLOCK_CHARS, DIGEST_BYTES

    n = rec.output_tokens
    if n is None or rec.token_source != "usage" or rec.output_blocks is None or rec.error is not None:
        return None
    chars = len(rec.output_blocks) // DIGEST_BYTES * BLOCK_CHARS
    if n > 4 * chars + SUSPECT_SLACK:
        return (f"the server claims {n:,} completion tokens for a text of at most {chars:,} characters "
                f"({4 * chars:,} bytes)")
    return None


#: how many times longer the longest text of a level must be than its shortest (both at the same
#: reported count) before the counts are suspected of padding
PADDED_TEXT_RATIO = 3
#: fewest requests a level needs before :func:`padded_outputs` judges it
PADDED_MIN_REQUESTS = 4


def padded_outputs(requests: Any) -> str | None:
    """Why a natural-length level's counts look padded, or None (see the module notes).

    ``requests``: the level's request rows (``output_tokens``, ``requested_output_tokens``,
    ``finish_reason``, ``output_blocks``, ``error``). Text lengths come from the fingerprint (one
    8-byte hash per 64 characters), so the shortest text is at most ``64 × its blocks`` characters
    and the longest more than ``64 × (its blocks − 1)``.
    """
    from specsweep.results.records import BLOCK_CHARS, DIGEST_BYTES

    ok = requests[requests["error"].isna() & (requests["output_tokens"].fillna(0) > 0)]
    if len(ok) < PADDED_MIN_REQUESTS or not (ok["output_tokens"] == ok["requested_output_tokens"]).all():
        return None
    if not (ok["finish_reason"] == "length").all():
        return None
    blocks = [len(b) // DIGEST_BYTES for b in ok["output_blocks"] if isinstance(b, (bytes, bytearray))]
    if len(blocks) < len(ok) or min(blocks) < 1:
        return None
    shortest, longest = min(blocks) * BLOCK_CHARS, (max(blocks) - 1) * BLOCK_CHARS
    if longest < PADDED_TEXT_RATIO * shortest:
        return None
    n = int(ok["output_tokens"].iloc[0])
    return (f"all {len(ok)} natural-length requests report exactly the {n:,} tokens requested and finish by 'length', "
            f"yet their texts run from at most {shortest:,} to over {longest:,} characters: a server that pads every "
            "stream to a fixed length (SGLang's --padded-output-tokens) counts the padding as completion tokens, "
            "so check the server's flags before trusting this level's throughput")


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
