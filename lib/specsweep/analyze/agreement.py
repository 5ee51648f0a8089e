"""Output agreement: does a speculative arm return the same text as the baseline for the same prompt?

At temperature 0 speculative decoding is meant to be lossless: the target model verifies every
drafted token, so each request's output should equal the baseline's. Requests are paired across
arms by ``(repeat, prompt_id)`` (the sweep gives measured request *i* of plan position *k* the same
prompt for the same parameters) and compared by their text fingerprints, which the client stores
per request (:func:`specsweep.results.records.output_fingerprint`; the full text is not stored):
``output_digest`` (a hash of the whole generated text), ``output_head`` (its first 200 characters)
and ``output_blocks`` (a hash of every 64-character block). Per arm and concurrency:

- ``pairs``: prompts answered without error, with a digest, by both arms;
- ``identical``: pairs whose digests match; ``identical_pct`` = identical ÷ pairs × 100;
- ``first_diff_median_chars``: over the pairs that differ, the median position (characters from the
  start of the output, 0-based) of the first character that differs. Inside the first 200
  characters the position is exact (the heads are compared); past them it is the start of the first
  differing 64-character block, so it may be up to 63 characters early. When one output is a prefix
  of the other, the first difference is where the shorter one ends. ``first_diff_exact`` counts the
  differing pairs placed exactly. NaN where no pair differs or the result sets predate the blocks.

A share below 100 % at temperature 0 is flagged: either the speculative configuration changes
outputs (a correctness problem) or the server is nondeterministic under batching (floating-point
reductions that depend on batch shape). To tell them apart, measure the baseline against itself
(two runs of the same configuration): if the baseline also disagrees with itself at the same
levels, it is batch nondeterminism; if only the speculative arm disagrees, suspect the
speculation. In a study that is one more arm defined exactly like the baseline (e.g.
``baseline-again``): each repeat's arms share their prompts. Where the first difference lies helps
too: batch nondeterminism flips a near-tie late and at random positions; a drafter whose tokens
are accepted without proper verification tends to differ early and at every level.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from specsweep.markup import md_text
from specsweep.results.records import BLOCK_CHARS, DIGEST_BYTES, HEAD_CHARS
from specsweep.results.store import ResultSet

COLUMNS = ["arm", "concurrency", "pairs", "identical", "identical_pct", "first_diff_median_chars",
           "first_diff_exact", "temperature", "flagged"]
_KEEP = ["repeat", "prompt_id", "concurrency", "output_digest", "output_head", "output_blocks"]


def _answered(rs: ResultSet) -> pd.DataFrame:
    req = rs.requests
    if req is None or "output_digest" not in req or "prompt_id" not in req:
        return pd.DataFrame(columns=_KEEP)
    ok = req[~req["warmup"].astype(bool) & req["error"].isna() & req["output_digest"].notna()]
    return ok.reindex(columns=_KEEP)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _bytes(value: object) -> bytes | None:
    return bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None


def _paired(rs: ResultSet, base: ResultSet) -> pd.DataFrame:
    """The prompts both answered, one row per pair: the arm's columns and the baseline's (``_base``)."""
    return _answered(rs).merge(_answered(base), on=["repeat", "prompt_id"], suffixes=("", "_base"))


def _place(row: Any) -> tuple[int, bool] | None:
    """:func:`first_difference` of one :func:`_paired` row (baseline first)."""
    return first_difference(_text(row.output_head_base), _bytes(row.output_blocks_base),
                            _text(row.output_head), _bytes(row.output_blocks))


def first_difference(head_a: str | None, blocks_a: bytes | None,
                     head_b: str | None, blocks_b: bytes | None) -> tuple[int, bool] | None:
    """Where two outputs first differ: ``(position in characters, exact)``; None when it is unknown.

    ``head_*``: the first :data:`HEAD_CHARS` characters; ``blocks_*``: the 64-character block
    hashes (:func:`specsweep.results.records.output_fingerprint`). Identical fingerprints give None too (no
    difference to place). Past the heads the position is the start of the first differing block
    (``exact`` False).
    """
    if blocks_a is None or blocks_b is None or head_a is None or head_b is None:
        return None
    na, nb = len(blocks_a) // DIGEST_BYTES, len(blocks_b) // DIGEST_BYTES
    a = np.frombuffer(blocks_a[:min(na, nb) * DIGEST_BYTES], dtype=np.uint64)
    b = np.frombuffer(blocks_b[:min(na, nb) * DIGEST_BYTES], dtype=np.uint64)
    differ = np.flatnonzero(a != b)
    if differ.size:
        block = int(differ[0])
    elif na == nb:
        return None  # the same blocks: the same text
    else:
        return min(na, nb) * BLOCK_CHARS, True  # one is the other's prefix, ending on a block boundary
    start = block * BLOCK_CHARS
    if start < HEAD_CHARS:
        for j in range(start, min(len(head_a), len(head_b))):
            if head_a[j] != head_b[j]:
                return j, True
        if len(head_a) != len(head_b):
            return min(len(head_a), len(head_b)), True  # the shorter output ended inside its head
        return HEAD_CHARS, False  # the heads agree: the difference lies between 200 and the block's end
    return start, False


def output_agreement(sets: Sequence[ResultSet], baseline: str = "baseline") -> pd.DataFrame:
    """Per speculative arm and concurrency: paired prompts, identical outputs, share, flag.

    Empty when the baseline is absent or no result set has per-request digests.
    """
    by_arm = {rs.arm: rs for rs in sets}
    if baseline not in by_arm:
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for arm, rs in by_arm.items():
        if arm == baseline:
            continue
        temperature = float(rs.meta.sweep.temperature or 0.0)
        pairs = _paired(rs, by_arm[baseline])
        for c, part in pairs.groupby("concurrency"):
            equal = part["output_digest"] == part["output_digest_base"]
            same = int(equal.sum())
            pct = 100.0 * same / len(part) if len(part) else float("nan")
            known = [p for p in map(_place, part[~equal].itertuples()) if p is not None]
            rows.append({"arm": arm, "concurrency": int(c), "pairs": int(len(part)), "identical": same,
                         "identical_pct": pct,
                         "first_diff_median_chars": float(np.median([p for p, _ in known])) if known else float("nan"),
                         "first_diff_exact": sum(exact for _, exact in known),
                         "temperature": temperature,
                         "flagged": bool(temperature == 0.0 and same < len(part))})
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["arm", "concurrency"]).reset_index(drop=True) \
        if rows else pd.DataFrame(columns=COLUMNS)


def agreement_markdown(table: pd.DataFrame, baseline: str = "baseline", controls: Sequence[str] = ()) -> str:
    """The agreement in sentences: every flagged level, or a clean bill (untrusted names escaped).

    A control arm (configured like the baseline) that differs measures the server's own
    nondeterminism: it is said so, and it is the floor the other arms' agreement is read against.
    """
    if table.empty:
        return ("No output agreement: the result sets have no paired per-request output digests "
                f"against the baseline *{md_text(baseline)}*.")
    lines = []
    within = 0  # arms read as within the control's floor
    floor = _control_floor(table, controls)
    for arm, part in table.groupby("arm", sort=False):
        flagged = part[part["flagged"]]
        if arm in controls and not flagged.empty and not part["temperature"].gt(0).any():
            lines.append(_control_line(str(arm), flagged))
        elif floor and not flagged.empty and not part["temperature"].gt(0).any():
            line, inside = _against_floor(str(arm), part, flagged, floor, _control_totals(table, controls))
            lines.append(line)
            within += inside
        elif part["temperature"].gt(0).any():
            lines.append(f"- *{md_text(arm)}*: measured at temperature > 0, where outputs are not expected to match.")
        elif flagged.empty:
            lines.append(f"- *{md_text(arm)}*: identical to the baseline on all {int(part['pairs'].sum())} paired "
                         "prompts at every level (lossless, as expected at temperature 0).")
        else:
            levels = ", ".join(f"C={int(r.concurrency)}: {r.identical_pct:.0f} % of {int(r.pairs)}"
                               for r in flagged.itertuples())
            lines.append(f"- ⚠ *{md_text(arm)}*: outputs differ from the baseline at temperature 0 ({levels} "
                         f"identical). {_where_markdown(flagged)}Either the speculative configuration changes "
                         "outputs (a correctness problem) or the server is nondeterministic under batching; "
                         "measure the baseline against itself to tell them apart (batch nondeterminism "
                         "differs late and at scattered positions, and the baseline disagrees with itself too).")
    if within:  # said once for every arm read against the control's floor
        lines.append(f"\n{'That is' if within == 1 else 'For each of these arms that is'} consistent with the server's "
                     "own nondeterminism under batching, not proof that the speculative configuration changes "
                     "nothing: compare the differing prompts' texts before calling an arm lossless.")
    return "\n".join(lines)


#: identical outputs (percentage points) an arm may fall below the control arm's at the same level and
#: still be read as the server's own nondeterminism: a level pairs tens of prompts, so a smaller gap is noise
FLOOR_MARGIN_PCT: float = 10.0


def _control_floor(table: pd.DataFrame, controls: Sequence[str]) -> dict[int, float]:
    """{concurrency: the lowest identical % of any control arm there}: the server's own nondeterminism."""
    part = table[table["arm"].isin(list(controls)) & table["temperature"].eq(0)]
    return {int(c): float(v) for c, v in part.groupby("concurrency")["identical_pct"].min().items()}


def _control_line(arm: str, flagged: pd.DataFrame) -> str:
    levels = ", ".join(f"C={int(r.concurrency)}: {r.identical_pct:.0f} % of {int(r.pairs)}" for r in flagged.itertuples())
    return (f"- *{md_text(arm)}* (control, configured like the baseline): its outputs differ from the baseline's at "
            f"temperature 0 ({levels} identical). That is the server's own nondeterminism under batching, the floor "
            "against which the other arms' agreement is read.")


def _control_totals(table: pd.DataFrame, controls: Sequence[str]) -> tuple[int, int] | None:
    """(differing pairs, pairs) of the control arm that differs most from the baseline over all its
    levels at temperature 0, or None without one."""
    part = table[table["arm"].isin(list(controls)) & table["temperature"].eq(0)]
    if part.empty:
        return None
    sums = part.groupby("arm")[["pairs", "identical"]].sum()
    worst = (sums["pairs"] - sums["identical"]).idxmax()
    return int(sums.loc[worst, "pairs"] - sums.loc[worst, "identical"]), int(sums.loc[worst, "pairs"])


def _against_floor(arm: str, part: pd.DataFrame, flagged: pd.DataFrame, floor: dict[int, float],
                   control: tuple[int, int] | None) -> tuple[str, bool]:
    """(the line, whether the arm is within the floor): a speculative arm's differing outputs read
    against the control arm's floor at the same levels.

    Within ``FLOOR_MARGIN_PCT`` points of the control's share at every level the arm is *consistent
    with* the server's own nondeterminism — said with both totals, never as proof that the speculative
    configuration changes nothing (a level pairs tens of prompts)."""
    below = [r for r in flagged.itertuples() if r.identical_pct < floor.get(int(r.concurrency), 100.0) - FLOOR_MARGIN_PCT]
    levels = ", ".join(f"C={int(r.concurrency)}: {r.identical_pct:.0f} % (control "
                       f"{floor.get(int(r.concurrency), float('nan')):.0f} %)" for r in flagged.itertuples())
    differ, pairs = int((part["pairs"] - part["identical"]).sum()), int(part["pairs"].sum())
    totals = f"{differ} of {pairs} pairs differ in all" + (f", the control's {control[0]} of {control[1]}" if control else "")
    if not below:
        more = differ / pairs > control[0] / control[1] if control and pairs and control[1] else False
        return (f"- *{md_text(arm)}*: outputs differ from the baseline at temperature 0 "
                + ("somewhat more often than the control arm's, " if more else "about as often as the control arm's, ")
                + f"within {FLOOR_MARGIN_PCT:.0f} points of its share at every level ({levels} identical; {totals})."), True
    return (f"- ⚠ *{md_text(arm)}*: outputs differ from the baseline at temperature 0 more than the control arm's "
            f"do ({levels} identical; {totals}). {_where_markdown(flagged)}Beyond the server's own nondeterminism, the "
            "speculative configuration changes outputs: a correctness problem to report."), False


def _where_markdown(flagged: pd.DataFrame) -> str:
    """The median first-difference position per flagged level, as a sentence (or nothing if unknown)."""
    known = flagged[flagged["first_diff_median_chars"].notna()] if "first_diff_median_chars" in flagged else flagged[:0]
    if known.empty:
        return ("Where they first differ is unknown (these result sets store no text fingerprints). ")
    parts = []
    for r in known.itertuples():
        differing = int(r.pairs) - int(r.identical)
        approx = "" if int(r.first_diff_exact) == differing else " or a little later"
        parts.append(f"C={int(r.concurrency)}: character {r.first_diff_median_chars:.0f}{approx}")
    return ("Median position of the first difference, in characters from the start of the output "
            f"(exact inside the first {HEAD_CHARS}, else to within {BLOCK_CHARS}): " + ", ".join(parts) + ". ")


class DifferenceExample(TypedDict):
    """One differing pair as :func:`first_difference_example` shows it (positions in characters)."""

    concurrency: int
    repeat: int
    prompt_id: int
    position: int
    offset: int
    baseline: str
    arm: str


def first_difference_example(sets: Sequence[ResultSet], arm: str, baseline: str = "baseline",
                             width: int = 40) -> DifferenceExample | None:
    """One differing pair of ``arm`` against the baseline, for display: the pair whose first
    difference comes earliest, with up to ``width`` characters either side of it from both heads.

    Returns ``{"concurrency", "repeat", "prompt_id", "position", "offset", "baseline", "arm"}``
    (``offset``: where the difference lies inside each excerpt; the two excerpts are untrusted
    server text: escape them where shown) or None when no pair differs
    or the difference lies past the stored heads.
    """
    by_arm = {rs.arm: rs for rs in sets}
    if baseline not in by_arm or arm not in by_arm:
        return None
    pairs = _paired(by_arm[arm], by_arm[baseline])
    best: tuple[int, Any] | None = None  # Any: a pandas itertuples row
    for r in pairs[pairs["output_digest"] != pairs["output_digest_base"]].itertuples():
        place = _place(r)
        if place is not None and place[1] and (best is None or place[0] < best[0]):
            best = (place[0], r)
    if best is None:
        return None
    pos, r = best
    lo = max(0, pos - width)
    return {"concurrency": int(r.concurrency), "repeat": int(r.repeat), "prompt_id": int(r.prompt_id),
            "position": pos, "offset": pos - lo,
            "baseline": str(r.output_head_base)[lo:pos + width], "arm": str(r.output_head)[lo:pos + width]}
