"""The throughput-vs-interactivity Pareto frontier over every arm and level.

Input: the joined levels (one row per arm and concurrency) and the per-user speed column. Output:
one row per (arm, concurrency) with its aggregate tok/s, per-user speed and ``on_frontier``.

Invariant: a point is on the frontier when no other point beats it on one axis without losing on
the other; a point missing either figure is never on it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def pareto_frontier(points: pd.DataFrame, x: str, y: str) -> pd.Series:
    """True for rows no other row dominates (>= on both ``x`` and ``y``, > on one)."""
    xs, ys = points[x].to_numpy(float), points[y].to_numpy(float)
    # dominates[j, i]: row j is >= row i on both and > on one (NaN compares False: dominates nothing)
    dominates = ((xs[:, None] >= xs) & (ys[:, None] >= ys) & ((xs[:, None] > xs) | (ys[:, None] > ys)))
    flags = ~dominates.any(axis=0) & ~np.isnan(xs) & ~np.isnan(ys)
    return pd.Series(flags.tolist(), index=points.index)


def pareto_table(levels: pd.DataFrame, user_metric: str) -> pd.DataFrame:
    """One row per row of ``levels``: arm, concurrency, aggregate tok/s, ``user_metric`` and ``on_frontier``
    (over per-user speed and aggregate tok/s)."""
    # every column shares ``levels``' index: named, pandas does not align them
    return pd.DataFrame({**{c: levels[c] for c in ("arm", "concurrency", "output_tok_s", user_metric)},
                         "on_frontier": pareto_frontier(levels, user_metric, "output_tok_s")}, index=levels.index)
