"""Output agreement: does a speculative arm return the same text as the baseline for the same prompt?

At temperature 0 speculative decoding is meant to be lossless: the target model verifies every
drafted token, so each request's output should equal the baseline's. Requests are paired across
arms by ``(repeat, prompt_id)`` (the sweep gives measured request *i* of plan position *k* the same
prompt for the same parameters) and compared by ``output_digest`` (a hash of the generated text
that the client stores; the text itself is not stored). Per arm and concurrency:

- ``pairs``: prompts answered without error, with a digest, by both arms;
- ``identical``: pairs whose digests match; ``identical_pct`` = identical ÷ pairs × 100.

A share below 100 % at temperature 0 is flagged: either the speculative configuration changes
outputs (a correctness problem) or the server is nondeterministic under batching (floating-point
reductions that depend on batch shape). To tell them apart, measure the baseline against itself
(two runs of the same configuration): if the baseline also disagrees with itself at the same
levels, it is batch nondeterminism; if only the speculative arm disagrees, suspect the
speculation. In a study that is one more arm defined exactly like the baseline (e.g.
``baseline-again``): each repeat's arms share their prompts. The position of the first difference needs the output tokens or text, which result
sets do not store yet.
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from specsweep.markup import md_text
from specsweep.store import ResultSet

COLUMNS = ["arm", "concurrency", "pairs", "identical", "identical_pct", "temperature", "flagged"]


def _answered(rs: ResultSet) -> pd.DataFrame:
    req = rs.requests
    if req is None or "output_digest" not in req or "prompt_id" not in req:
        return pd.DataFrame(columns=["repeat", "prompt_id", "concurrency", "output_digest"])
    ok = req[~req["warmup"].astype(bool) & req["error"].isna() & req["output_digest"].notna()]
    return ok[["repeat", "prompt_id", "concurrency", "output_digest"]]


def output_agreement(sets: Sequence[ResultSet], baseline: str = "baseline") -> pd.DataFrame:
    """Per speculative arm and concurrency: paired prompts, identical outputs, share, flag.

    Empty when the baseline is absent or no result set has per-request digests.
    """
    by_arm = {rs.arm: rs for rs in sets}
    if baseline not in by_arm:
        return pd.DataFrame(columns=COLUMNS)
    base = _answered(by_arm[baseline])
    rows = []
    for arm, rs in by_arm.items():
        if arm == baseline:
            continue
        temperature = float(rs.meta.get("sweep", {}).get("temperature", 0.0) or 0.0)
        pairs = _answered(rs).merge(base, on=["repeat", "prompt_id"], suffixes=("", "_base"))
        for c, part in pairs.groupby("concurrency"):
            same = int((part["output_digest"] == part["output_digest_base"]).sum())
            pct = 100.0 * same / len(part) if len(part) else float("nan")
            rows.append({"arm": arm, "concurrency": int(c), "pairs": int(len(part)), "identical": same,
                         "identical_pct": pct, "temperature": temperature,
                         "flagged": bool(temperature == 0.0 and same < len(part))})
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["arm", "concurrency"]).reset_index(drop=True) \
        if rows else pd.DataFrame(columns=COLUMNS)


def agreement_markdown(table: pd.DataFrame, baseline: str = "baseline") -> str:
    """The agreement in sentences: every flagged level, or a clean bill (untrusted names escaped)."""
    if table.empty:
        return ("No output agreement: the result sets have no paired per-request output digests "
                f"against the baseline *{md_text(baseline)}*.")
    lines = []
    for arm, part in table.groupby("arm", sort=False):
        flagged = part[part["flagged"]]
        if part["temperature"].gt(0).any():
            lines.append(f"- *{md_text(arm)}*: measured at temperature > 0, where outputs are not expected to match.")
        elif flagged.empty:
            lines.append(f"- *{md_text(arm)}*: identical to the baseline on all {int(part['pairs'].sum())} paired "
                         "prompts at every level (lossless, as expected at temperature 0).")
        else:
            levels = ", ".join(f"C={int(r.concurrency)}: {r.identical_pct:.0f} % of {int(r.pairs)}"
                               for r in flagged.itertuples())
            lines.append(f"- ⚠ *{md_text(arm)}*: outputs differ from the baseline at temperature 0 ({levels} "
                         "identical). Either the speculative configuration changes outputs (a correctness "
                         "problem) or the server is nondeterministic under batching; measure the baseline "
                         "against itself to tell them apart.")
    return "\n".join(lines)
