"""Predictions for an arm under settings nobody measured, each with a band, or a refusal that says why.

Changed settings (any combination): offered ``concurrency`` levels, ``max_running_requests`` (the
cap), the KV pool (``max_total_num_tokens`` in tokens, or ``mem_fraction_static`` with the GPU
memory per rank), the ``accept_length`` (tokens per step per request, e.g. from another workload or
category) and the ``output_tokens`` per request. How each enters the model (``model.py``):

- running requests n = min(C, cap, pool limit). The pool limit is what the arm's saturated levels
  showed (requests held below the cap with clients queued), scaled by the new pool size and by the
  tokens a request holds (prompt + output, :data:`FOOTPRINT_ASSUMPTION`); without such a level it
  is the pool ÷ (prompt + output tokens).
- the decode step time t(n) is the arm's own, interpolated at n: it does not depend on how many
  drafts are accepted (the verify pass is as wide either way), so another accept length changes the
  tokens each step yields, not the step. Another output length keeps t(n) as measured
  (:data:`CONTEXT_ASSUMPTION`) and is refused above the measured one (longer contexts than any run).

A state the arm measured (the same concurrency and running requests, accept and output length
unchanged) is predicted by its measurement: a cap raised where the pool, not the cap, held the
running requests changes nothing the model can see.

Refusals: n outside the batch sizes the arm ran (interpolation only), an offered concurrency beyond
``OFFERED_REACH`` (2) × the largest level measured, an accept length below 1 or
above the tokens verified per step, speculation settings on an arm that does not speculate, a
longer output than measured, a pool change without the figures it needs.

Band: the 2.5–97.5 % percentiles over the bootstrap replicates (``observe.py``), widened in
quadrature by 1.96 × the arm's leave-one-level-out RMS error of the same figure (``validate.py``),
so the band covers both measurement noise and the interpolation's own error.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.whatif.model import ArmModel
from specsweep.analyze.whatif.observe import WhatIfError
from specsweep.analyze.whatif.setting import FIGURES, Setting, model_for, predict_model
from specsweep.analyze.whatif.validate import loo_rms
from specsweep.results.store import ResultSet

__all__ = ["predict"]

def _setting_text(s: Setting, d: Any) -> str:
    parts = []
    if s.max_running_requests is not None:
        parts.append(f"max_running_requests={s.max_running_requests}")
    if s.pool_tokens is not None:
        parts.append(f"pool={s.pool_tokens} tokens")
    if s.accept_length is not None:
        parts.append(f"accept_length={s.accept_length:g}")
    if s.output_tokens is not None:
        parts.append(f"output_tokens={s.output_tokens:g}")
    return ", ".join(parts) or "as measured"


def _pool_from_fraction(m: ArmModel, fraction: float, gpu_mem_gib: float | None) -> int:
    d = m.data
    kv = d.memory_usage.get("kvcache")
    if d.mem_fraction_static is None or not kv or not d.pool_tokens:
        raise WhatIfError(f"mem_fraction_static={fraction}: arm '{d.arm}' recorded no mem_fraction_static, KV cache "
                          "size (memory_usage.kvcache) or pool size; pass max_total_num_tokens instead")
    if gpu_mem_gib is None:
        raise WhatIfError(f"mem_fraction_static={fraction}: pass gpu_mem_gib (memory per GPU rank, GiB) — the KV "
                          "pool grows by gpu_mem_gib × the change in fraction, and servers do not report it")
    new_kv = kv + gpu_mem_gib * (fraction - d.mem_fraction_static)
    if new_kv <= 0:
        raise WhatIfError(f"mem_fraction_static={fraction}: leaves no memory for the KV pool")
    return int(d.pool_tokens * new_kv / kv)


#: the largest count (concurrency, requests, tokens, GiB) a what-if question may name: no server runs
#: more, and beyond it a float no longer holds every whole number its model computes with
MAX_COUNT = 10**9
#: each parameter: (whole numbers only, the least value, the greatest)
_BOUNDS: dict[str, tuple[bool, float, float]] = {
    "max_running_requests": (True, 1, MAX_COUNT), "max_total_num_tokens": (True, 1, MAX_COUNT),
    "mem_fraction_static": (False, 0, 1), "gpu_mem_gib": (False, 0, MAX_COUNT),
    "accept_length": (False, 0, MAX_COUNT), "output_tokens": (False, 0, MAX_COUNT),
}


def _check_number(name: str, value: object, whole: bool, low: float, high: float) -> None:
    """:class:`WhatIfError` unless ``value`` is a number (not a bool) in (``low``, ``high``] (NaN and ∞ are not)."""
    kinds = (int, np.integer) if whole else (int, float, np.integer, np.floating)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kinds):
        raise WhatIfError(f"{name}={value!r}: must be a {'whole ' if whole else ''}number, not {type(value).__name__}")
    if not low < value <= high:  # type: ignore[operator]  # NaN fails both comparisons
        raise WhatIfError(f"{name}={value!r}: must lie in ({low:g}, {high:g}]")


def _check_numbers(**values: object) -> None:
    """Each given parameter checked by its :data:`_BOUNDS` (None: not given)."""
    for name, value in values.items():
        if value is not None:
            _check_number(name, value, *_BOUNDS[name])


def _levels(concurrency: object) -> list[float]:
    """The offered concurrency levels asked for: numbers from 1 to :data:`MAX_COUNT` (not bools)."""
    if isinstance(concurrency, (str, bytes)) or not isinstance(concurrency, Sequence | np.ndarray):
        raise WhatIfError(f"concurrency={concurrency!r}: give a list of levels, e.g. [32, 64]")
    for c in concurrency:
        _check_number("concurrency", c, False, 0, MAX_COUNT)
        if not c >= 1:
            raise WhatIfError(f"concurrency={c!r}: every level must be ≥ 1")
    return [float(c) for c in concurrency]


def predict(
    comp: Comparison,
    arm: str,
    *,
    concurrency: Sequence[float] | None = None,
    max_running_requests: int | None = None,
    max_total_num_tokens: int | None = None,
    mem_fraction_static: float | None = None,
    gpu_mem_gib: float | None = None,
    accept_length: float | None = None,
    output_tokens: float | None = None,
    sets: Sequence[ResultSet] | None = None,
    n_boot: int = 200,
    seed: int = 0,
    widen: bool = True,
    model: ArmModel | None = None,
) -> pd.DataFrame:
    """Predict ``arm`` of ``comp`` under changed settings: one row per concurrency.

    Columns: ``arm, concurrency, setting, running_requests, limited_by, aggregate_tok_s, user_tok_s,
    ttft_p50_s, e2e_p50_s`` each with ``_lo``/``_hi`` (95 % band), ``max_running_requests,
    pool_tokens, accept_length, output_tokens, measured`` (a measured level with unchanged settings),
    ``refused`` and ``why``. ``sets``: the result sets ``comp`` was built from (their request rows
    give the bootstrap band). Bad parameters raise :class:`WhatIfError` naming them.
    """
    _check_numbers(max_running_requests=max_running_requests, max_total_num_tokens=max_total_num_tokens,
                   mem_fraction_static=mem_fraction_static, gpu_mem_gib=gpu_mem_gib, accept_length=accept_length,
                   output_tokens=output_tokens)
    if max_total_num_tokens is not None and mem_fraction_static is not None:
        raise WhatIfError("give max_total_num_tokens or mem_fraction_static, not both")
    m = model or model_for(comp, arm, sets, n_boot=n_boot, seed=seed)
    d = m.data
    pool = max_total_num_tokens
    if mem_fraction_static is not None:
        pool = _pool_from_fraction(m, mem_fraction_static, gpu_mem_gib)
    levels = _levels(concurrency) if concurrency is not None else [float(c) for c in d.concurrency]
    rms = None
    if widen:
        rms = loo_rms(m)
    rows = []
    unchanged = all(v is None for v in (max_running_requests, pool, accept_length, output_tokens))
    for c in levels:
        s = Setting(float(c), max_running_requests, pool, accept_length, output_tokens)
        res, info = predict_model(m, s)
        row: dict[str, Any] = {"arm": arm, "concurrency": float(c), "setting": _setting_text(s, d),
                               "running_requests": info.get("running_requests", math.nan),
                               "limited_by": info.get("limited_by"),
                               "max_running_requests": info.get("max_running_requests"),
                               "pool_tokens": info.get("pool_tokens"), "accept_length": info.get("accept_length"),
                               "output_tokens": info.get("output_tokens"),
                               "measured": bool(unchanged and np.isclose(d.concurrency, c).any()),
                               "refused": res is None, "why": info.get("why")}
        for f in FIGURES:
            if res is None or not np.isfinite(res[f][0]):
                row[f] = row[f + "_lo"] = row[f + "_hi"] = math.nan
                continue
            v = res[f]
            point = float(v[0])
            lo, hi = np.nanpercentile(v[1:], [2.5, 97.5]) if len(v) > 1 else (point, point)
            lo, hi = min(lo, point), max(hi, point)
            if rms is not None and math.isfinite(rms.get(f, math.nan)):
                extra = 1.96 * rms[f] / 100 * abs(point)
                lo = point - math.hypot(point - lo, extra)
                hi = point + math.hypot(hi - point, extra)
            row[f], row[f + "_lo"], row[f + "_hi"] = point, float(lo), float(hi)
        rows.append(row)
    return pd.DataFrame(rows)
