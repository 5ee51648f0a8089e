"""Where to measure next: the untested setting whose prediction is least certain and could change the verdict.

Input: a comparison, its result sets and (optionally) the arms' fitted models. Output: one setting
(arm, concurrency and any changed server setting) with its prediction, or None.

Invariant: only a setting that could change the verdict is proposed — its band contains the
baseline's aggregate there, or the model refuses it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from specsweep.analyze.compare import Comparison
from specsweep.analyze.whatif.model import ArmModel
from specsweep.analyze.whatif.predict import predict
from specsweep.analyze.whatif.setting import model_for
from specsweep.results.store import ResultSet

__all__ = ["CAP_CANDIDATES", "least_certain"]

#: caps tried when raising a capped arm's max_running_requests
CAP_CANDIDATES: tuple[int, ...] = (64, 96, 128, 192, 256)


def _baseline_at(comp: Comparison, c: float, models: dict[str, ArmModel], sets: Sequence[ResultSet] | None) -> float:
    lv = comp.arm_levels(comp.baseline)
    hit = lv[np.isclose(lv["concurrency"].astype(float), c)]
    if len(hit):
        return float(hit["output_tok_s"].iloc[0])
    p = predict(comp, comp.baseline, concurrency=[c], model=models[comp.baseline], widen=False)
    return float(p["aggregate_tok_s"].iloc[0])


def _midpoints(levels: Sequence[float]) -> list[float]:
    lv = sorted(levels)
    return [float(round(math.sqrt(a * b))) for a, b in zip(lv, lv[1:]) if round(math.sqrt(a * b)) not in lv]


def least_certain(comp: Comparison, sets: Sequence[ResultSet] | None = None, *,
                    models: dict[str, ArmModel] | None = None) -> dict[str, Any] | None:
    """The untested setting whose prediction is least certain among those that could change the verdict.

    Candidates, for every candidate arm: concurrency levels between the measured ones; the cap raised
    (capped arms, :data:`CAP_CANDIDATES`); the KV pool as large as the baseline's. A candidate
    *could change the verdict* where its aggregate band contains the baseline's aggregate at that
    concurrency, or where the model refuses it (extrapolation: nothing is known). Least certain:
    refused first, then the widest band relative to the prediction.
    """
    models = models if models is not None else {}
    for a in comp.arms:
        if a not in models:
            models[a] = model_for(comp, a, sets)
    base_pool = models[comp.baseline].data.pool_tokens
    best: tuple[float, dict[str, Any]] | None = None
    for arm in comp.candidate_arms:
        m = models[arm]
        levels = [float(c) for c in m.data.concurrency]
        settings: list[dict[str, Any]] = [{}]
        if m.data.cap:
            settings += [{"max_running_requests": v} for v in CAP_CANDIDATES if v > m.data.cap]
        if base_pool and m.data.pool_tokens and base_pool > m.data.pool_tokens:
            settings.append({"max_total_num_tokens": int(base_pool)})
        for s in settings:
            cs = _midpoints(levels) if not s else levels
            if not cs:
                continue
            p = predict(comp, arm, concurrency=cs, model=m, **s)
            for row in p.to_dict("records"):
                c = row["concurrency"]
                b = _baseline_at(comp, c, models, sets)
                if row["refused"]:
                    # an extrapolation the model cannot make: it could change the verdict where the arm loses
                    meas = comp.arm_levels(arm)
                    hit = meas[np.isclose(meas["concurrency"].astype(float), c)]
                    if s and (not len(hit) or float(hit["output_tok_s"].iloc[0]) < b):
                        score = math.inf
                    else:
                        continue
                else:
                    lo, hi, pt = row["aggregate_tok_s_lo"], row["aggregate_tok_s_hi"], row["aggregate_tok_s"]
                    if not lo <= b <= hi:
                        continue
                    score = (hi - lo) / pt
                key = (score, c)
                item = {"arm": arm, "setting": s, "concurrency": c, "prediction": row, "baseline_aggregate_tok_s": b,
                        "score": score}
                if best is None or key > (best[0], best[1]["concurrency"]) or (
                        key == (best[0], best[1]["concurrency"]) and len(s) < len(best[1]["setting"])):
                    best = (score, item)
    return best[1] if best is not None else None
