r"""Why each speedup is what it is: an arm's aggregate and per-user deltas split into factors, per level.

At one concurrency, with n the requests each arm ran at once and u its per-user speed::

    aggregate ratio = (n_arm ÷ n_base)                      running requests
                    × (u_base(n_arm) ÷ u_base(n_base))      the baseline's own speed at the arm's smaller/larger batch
                    × (u_arm(n_arm) ÷ u_base(n_arm))        speculation at the same batch = L × t_base ÷ t_arm
                    × residual                              prefill share, ramp-up, mean-of-ratios (per-slot efficiency)

``u_base(n_arm)`` is the baseline's model (``model.py``) at the arm's batch: interpolated, never
extrapolated (outside the baseline's batch sizes the split is not made). The speculation factor is
``accept length × (baseline step time ÷ speculative step time at the running batch)``: where the
accept length L is known it splits further into L and the step-time ratio. Per-user ratio = the
second × third factors. "Points" share a level's Δ % among the factors in proportion to their
logarithms (the factors multiply, so their logs add up exactly to ln(aggregate ratio)).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.whatif.model import ArmModel
from specsweep.analyze.whatif.observe import _num, server_setting
from specsweep.analyze.whatif.setting import model_for
from specsweep.results.meta import Meta
from specsweep.results.store import ResultSet

__all__ = ["FACTORS", "decompose", "decomposition_sentence"]

#: factor column -> what it stands for (the chart's legend)
FACTORS: dict[str, str] = {
    "running_factor": "running requests (arm ÷ baseline)",
    "batch_factor": "per-user speed from the batch size alone (baseline at the arm's batch ÷ at its own)",
    "spec_factor": "speculation at the same batch (accept length × baseline step ÷ speculative step)",
    "other_factor": "prefill share, ramp-up and averaging (per-slot efficiency)",
}


def _accept(m: ArmModel, meta: Meta, i: int) -> tuple[float, str]:
    d = m.data
    if d.speculative and not d.level_only and d.accept_length[i] > 1.0:
        return float(d.accept_length[i]), "measured"
    seen = _num(server_setting(meta, "observed_accept_length"))
    if seen is not None and d.speculative:
        return seen, "assumed: seen outside the sweep"
    return math.nan, "unknown"


def decompose(comp: Comparison, arm: str, sets: Sequence[ResultSet] | None = None, *,
              models: dict[str, ArmModel] | None = None) -> pd.DataFrame:
    """One row per level both ``arm`` and the baseline measured: deltas, the factors, their points."""
    models = models if models is not None else {}
    for a in (arm, comp.baseline):
        if a not in models:
            models[a] = model_for(comp, a, sets, n_boot=20)
    ma, mb = models[arm], models[comp.baseline]
    meta = comp.metas[arm]
    rows = []
    for i, c in enumerate(ma.data.concurrency):
        hits = np.flatnonzero(np.isclose(mb.data.concurrency, c))
        if not len(hits):
            continue
        j = int(hits[0])
        a_arm = float(ma.data.replicates["output_tok_s"][0, i])
        a_base = float(mb.data.replicates["output_tok_s"][0, j])
        u_arm = float(ma.data.replicates["user_tok_s"][0, i])
        u_base = float(mb.data.replicates["user_tok_s"][0, j])
        n_arm, n_base = float(ma.data.admitted[i]), float(mb.data.admitted[j])
        row: dict[str, Any] = {"arm": arm, "concurrency": float(c), "aggregate_delta_pct": (a_arm / a_base - 1) * 100,
                               "user_delta_pct": (u_arm / u_base - 1) * 100, "running_arm": n_arm,
                               "running_baseline": n_base}
        # the baseline's own per-user speed at the arm's batch (interpolated; refused outside its batches)
        lo, hi = mb.n_range
        inside = lo - 1e-6 <= n_arm <= hi + 1e-6
        u_base_at = float(mb.at("jensen", n_arm)[0] / mb.at("tpot_s", n_arm)[0]) if inside else math.nan
        why = None if inside else (f"the baseline never ran {n_arm:.0f} requests at once (it ran {lo:g}–{hi:g}); "
                                   "its speed there would be extrapolated")
        row["baseline_user_at_arm_batch"] = u_base_at
        row["running_factor"] = n_arm / n_base
        row["batch_factor"] = u_base_at / u_base
        row["spec_factor"] = u_arm / u_base_at
        row["other_factor"] = (a_arm / a_base) / (row["running_factor"] * row["batch_factor"] * row["spec_factor"])
        acc, source = _accept(ma, meta, i)
        row["accept_length"], row["accept_length_source"] = acc, source
        row["step_ratio"] = row["spec_factor"] / acc if math.isfinite(acc) else math.nan  # t_base ÷ t_arm
        row["split"] = bool(math.isfinite(u_base_at))
        row["why"] = why
        total = math.log(a_arm / a_base)
        for f in FACTORS:
            v = row[f]
            row[f.replace("_factor", "_points")] = (math.log(v) / total * row["aggregate_delta_pct"]
                                                    if math.isfinite(v) and v > 0 and abs(total) > 1e-12 else math.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def _pct(f: float) -> str:
    return f"{(f - 1) * 100:+.0f} %"


def decomposition_sentence(row: dict[str, Any] | pd.Series, arm: str, baseline: str) -> str:
    """One plain sentence for one level's decomposition (numbers from the row)."""
    r = dict(row)
    c = int(r["concurrency"])
    head = (f"At {c} concurrent requests {arm}'s aggregate is {r['aggregate_delta_pct']:+.0f} % against {baseline} "
            f"and its per-user speed {r['user_delta_pct']:+.0f} %")
    if not r.get("split"):
        return head + f"; the delta cannot be split here ({r.get('why') or 'no baseline figure at that batch'})."
    text = (f"{head}: it ran {r['running_arm']:.0f} requests at once against {r['running_baseline']:.0f} "
            f"({_pct(r['running_factor'])}, {r['running_points']:+.0f} points), the batch size alone moves per-user "
            f"speed {_pct(r['batch_factor'])} ({r['batch_points']:+.0f} points), speculation at the same batch gives "
            f"{_pct(r['spec_factor'])} ({r['spec_points']:+.0f} points)")
    if math.isfinite(r.get("accept_length", math.nan)):
        text += (f" — accept length {r['accept_length']:.2f} ({r['accept_length_source']}) against a speculative step "
                 f"{1 / r['step_ratio']:.2f}× the baseline's at that batch")
    text += f", and the rest (prefill share, ramp-up) {_pct(r['other_factor'])} ({r['other_points']:+.0f} points)."
    return text
