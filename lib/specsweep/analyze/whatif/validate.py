"""How good the predictions are, computed on the same data: leave-one-level-out and cross-arm errors.

- **Leave-one-level-out** (per arm): each measured level is predicted from a model fitted to the
  arm's other levels, at that level's own settings; error % = (predicted ÷ measured − 1) × 100 for
  aggregate tok/s, per-user speed, TTFT p50 and e2e p50. A level whose batch size lies outside the
  others' (the smallest and largest) cannot be predicted without extrapolating: it is counted as
  refused, not as an error. Summaries: mean and worst absolute error over the predicted levels.
- **Cross-arm**: where a study holds two arms that differ only in settings the model predicts (the
  running-request cap, the KV pool size), every level of one arm is predicted from the other's
  model with the first arm's settings, and compared with its measurement.

Nothing here is typed in: every figure on a page comes from these functions.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.whatif.model import ArmModel, fit
from specsweep.analyze.whatif.observe import ArmData, server_setting
from specsweep.analyze.whatif.setting import FIGURES, Setting, model_for, predict_model
from specsweep.results.store import ResultSet

__all__ = ["loo", "loo_rms", "loo_summary", "cross_arm", "comparable_pairs", "validate"]

#: measured figure of each predicted one (replicate keys of ``observe.ArmData``)
MEASURED: dict[str, str] = {"aggregate_tok_s": "output_tok_s", "user_tok_s": "user_tok_s",
                            "ttft_p50_s": "ttft_p50_s", "e2e_p50_s": "e2e_p50_s"}
#: settings that must agree for one arm to predict another (anything else differing: not comparable)
SAME: tuple[str, ...] = ("speculative_algorithm", "speculative_num_steps", "speculative_num_draft_tokens",
                         "speculative_eagle_topk", "model_path", "tp_size", "chunked_prefill_size")


def _measured(d: ArmData, i: int, fig: str) -> float:
    key = MEASURED[fig]
    if d.level_only and key == "e2e_p50_s":
        key = "e2e_mean_s"
    return float(d.replicates[key][0, i])


def _point_only(d: ArmData) -> ArmData:
    """The measurement row only (validation needs no band)."""
    out = d.subset(np.ones(len(d.concurrency), bool))
    out.replicates = {k: v[:1] for k, v in d.replicates.items()}
    return out


def loo(m: ArmModel | ArmData) -> pd.DataFrame:
    """One row per measured level: predicted from the others, error % per figure (NaN: refused)."""
    d = m.data if isinstance(m, ArmModel) else m
    d = _point_only(d)
    rows = []
    for i, c in enumerate(d.concurrency):
        keep = np.ones(len(d.concurrency), bool)
        keep[i] = False
        row: dict[str, Any] = {"arm": d.arm, "concurrency": float(c), "running_requests": float(d.admitted[i])}
        if keep.sum() < 2:
            row.update(refused=True, why="fewer than two other levels")
            rows.append(row)
            continue
        sub = fit(d.subset(keep))
        res, info = predict_model(sub, Setting(float(c)))
        row.update(refused=res is None, why=info.get("why"))
        for f in FIGURES:
            meas = _measured(d, i, f)
            pred = float(res[f][0]) if res is not None else math.nan
            row[f + "_measured"] = meas
            row[f + "_predicted"] = pred
            row[f + "_err_pct"] = (pred / meas - 1) * 100 if res is not None and meas > 0 and math.isfinite(pred) \
                else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def loo_summary(table: pd.DataFrame) -> dict[str, Any]:
    """Mean and worst absolute error % per figure over the predicted levels, and the counts."""
    out: dict[str, Any] = {"levels": len(table), "predicted": int((~table["refused"].astype(bool)).sum())
                           if len(table) else 0}
    for f in FIGURES:
        col = f + "_err_pct"
        e = table[col].abs().dropna() if col in table else pd.Series(dtype=float)
        out[f + "_mean_abs_pct"] = float(e.mean()) if len(e) else math.nan
        out[f + "_worst_abs_pct"] = float(e.max()) if len(e) else math.nan
        out[f + "_rms_pct"] = float(np.sqrt((e ** 2).mean())) if len(e) else math.nan
    return out


def loo_rms(m: ArmModel) -> dict[str, float]:
    """The arm's leave-one-level-out RMS error % per figure (computed once per model, kept on it)."""
    if m.loo_rms_pct is None:
        s = loo_summary(loo(m))
        m.loo_rms_pct = {f: s[f + "_rms_pct"] for f in FIGURES}
    return m.loo_rms_pct


def comparable_pairs(comp: Comparison) -> list[tuple[str, str, list[str]]]:
    """(source, target, [what differs]) for arms that differ only in the cap or the pool size."""
    out = []
    for a in comp.arms:
        for b in comp.arms:
            if a == b:
                continue
            ma, mb = comp.metas[a], comp.metas[b]
            if any(server_setting(ma, k) != server_setting(mb, k) for k in SAME):
                continue
            if bool(server_setting(ma, "speculative_algorithm")) != bool(server_setting(mb, "speculative_algorithm")):
                continue
            diff = []
            if comp.caps.get(a) != comp.caps.get(b):
                diff.append("max_running_requests")
            if server_setting(ma, "max_total_num_tokens") != server_setting(mb, "max_total_num_tokens"):
                diff.append("pool size")
            if diff:
                out.append((a, b, diff))
    return out


def cross_arm(comp: Comparison, source: str, target: str, sets: Sequence[ResultSet] | None = None,
              *, source_model: ArmModel | None = None) -> pd.DataFrame:
    """Every level of ``target`` predicted from ``source``'s model with ``target``'s cap and pool."""
    m = source_model or model_for(comp, source, sets, n_boot=20)
    from specsweep.analyze.whatif.observe import observe  # the target's measurement

    t = observe(comp, target, sets, n_boot=20)
    rows = []
    pool = t.pool_tokens if t.pool_tokens != m.data.pool_tokens else None
    for i, c in enumerate(t.concurrency):
        res, info = predict_model(m, Setting(float(c), max_running_requests=t.cap, pool_tokens=pool))
        row: dict[str, Any] = {"source": source, "target": target, "concurrency": float(c),
                               "running_predicted": info.get("running_requests", math.nan),
                               "running_measured": float(t.admitted[i]), "refused": res is None,
                               "why": info.get("why")}
        for f in FIGURES:
            meas = _measured(t, i, f)
            pred = float(res[f][0]) if res is not None else math.nan
            row[f + "_measured"], row[f + "_predicted"] = meas, pred
            row[f + "_err_pct"] = (pred / meas - 1) * 100 if res is not None and meas > 0 and math.isfinite(pred) \
                else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def validate(comp: Comparison, sets: Sequence[ResultSet] | None = None) -> dict[str, Any]:
    """Every arm's leave-one-level-out table and summary, and every comparable pair's cross-arm table."""
    arms = {}
    models = {}
    for a in comp.arms:
        models[a] = model_for(comp, a, sets, n_boot=20)
        table = loo(models[a])
        arms[a] = {"table": table, "summary": loo_summary(table)}
    pairs = []
    for src, dst, diff in comparable_pairs(comp):
        table = cross_arm(comp, src, dst, sets, source_model=models[src])
        pairs.append({"source": src, "target": dst, "differs": diff, "table": table,
                      "summary": loo_summary(table)})
    return {"arms": arms, "pairs": pairs}
