"""Per-category metrics: the level metrics of each category's requests, a group-by over the same definitions.

Input: request rows with a ``category`` (default "all"). Output: one row per (run, arm, concurrency,
repeat, category) of :func:`specsweep.analyze.metrics.level_metrics` figures, plus the category's share.

Invariant: a category's figure is defined exactly as the level's (docs/method.md), never a new definition.
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from specsweep.analyze.metrics import acceptance_from_requests, level_metrics
from specsweep.workloads.datasets import with_category

__all__ = ["category_metrics"]


#: level metrics that need all C slots of the level; undefined for a category that is not all of it
_WHOLE_LEVEL_ONLY = ("steady_window_s", "steady_output_tok_s")


def category_metrics(requests: pd.DataFrame) -> pd.DataFrame:
    """Per-(run, arm, concurrency, repeat, category) metrics: the level metrics of
    :func:`specsweep.analyze.metrics.level_metrics` over each category's measured requests.

    Same definitions as the level's, applied to the category's rows (warm-up excluded), so
    per-request figures (TTFT, TPOT, per-user tok/s, e2e percentiles) mean what they mean per
    level. Window-based figures (``output_tok_s``, ``request_per_s``, ``effective_concurrency``)
    use the category's own window [its first send, its last finish]: in a mixed workload the
    categories interleave, so that is close to the level's window and the figure is the
    category's share. ``steady_*`` needs all C slots and is NaN unless the category is the whole
    level. ``spec_accept_length`` is the sweep's per-request acceptance over the category's
    requests (``metrics.acceptance_from_requests``), NaN unless each of them carries the server's figures.
    ``category_share``: the category's fraction of the level's measured requests.
    """
    frame = with_category(requests)
    if "warmup" in frame.columns:
        frame = frame[~frame["warmup"].astype(bool)]
    keys = [k for k in ("run_id", "arm", "concurrency", "repeat") if k in frame.columns]
    if "concurrency" not in keys:
        raise ValueError("category_metrics: the requests frame needs a 'concurrency' column")
    rows: list[dict[str, Any]] = []
    for level_key, level in frame.groupby(keys, sort=True, dropna=False):
        level_key = level_key if isinstance(level_key, tuple) else (level_key,)
        base = dict(zip(keys, level_key))
        for cat, part in level.groupby("category", sort=True):
            m = level_metrics(part.reset_index(drop=True), int(base["concurrency"]))
            if len(part) != len(level):
                for col in _WHOLE_LEVEL_ONLY:
                    m[col] = math.nan
            m["spec_accept_length"] = _accept_length(part)
            m["category_share"] = len(part) / len(level)
            rows.append({**base, "category": str(cat), **m})
    return pd.DataFrame(rows)


def _accept_length(part: pd.DataFrame) -> float:
    """The sweep's per-level acceptance from per-request figures
    (``metrics.acceptance_from_requests``), applied to one category's rows; NaN unless every
    successful row carries them (counter deltas cannot be split by category)."""
    acc = acceptance_from_requests(part)
    return acc.accept_length if acc is not None else math.nan
