"""The join of arms on concurrency: each arm's level rows made comparable, then one row per (arm, level).

Input: the arms' result sets, keyed by arm, the baseline first. Output: each arm's level rows (one per
concurrency and repeat, with Little's-law estimates where e2e was not measured, without the metric
columns whose definitions differ between arms) and the joined table (one row per arm and concurrency:
metrics averaged over repeats, ``n_repeats``, the concurrency estimate); the per-user speed metric
every arm has.

Invariant: two arms set a metric against each other only where both define it the same way, and
only at concurrency levels both measured (docs/method.md, "How a verdict is reached"). Where they
define the aggregate throughput differently (they count output tokens differently: other tools or
token-count modes), the token-based figures stay empty and the waits that do not depend on the count
(TTFT, e2e) are still compared; arms that share neither are refused.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.metrics import SOURCE_COUNTERS, SOURCE_PER_REQUEST
from specsweep.errors import InputError
from specsweep.results.meta import Meta
from specsweep.results.store import ResultSet
from specsweep.servers.llamacpp import TIMINGS


class NoSharedLevelError(InputError, ValueError):
    """An arm and the baseline were measured at no common concurrency: nothing can be compared."""


#: columns of ``levels`` that are identifiers or counts, not metrics to compare
NOT_METRICS: frozenset[str] = frozenset(
    {"run_id", "arm", "concurrency", "repeat", "n_requests", "n_ok", "n_errors", "window_s",
     "output_tokens", "steady_window_s", "token_source", "n_repeats", "requested_output_tokens",
     "short_outputs", "warmup_requests", "moe_pct"}
)
#: the per-user speed metrics, in order of preference: mean 1/TPOT, else per-request tok/s (level-only data)
USER_METRICS: tuple[str, ...] = ("user_tok_s_mean", "request_tok_s_mean")


def measured_requests(rs: ResultSet) -> pd.DataFrame | None:
    """The arm's measured requests that succeeded (no warm-up, no error, at least one output token), or None."""
    if rs.requests is None or rs.requests.empty:
        return None
    req = rs.requests[~rs.requests["warmup"].astype(bool)]
    if "sentinel" in req:  # a sentinel run measures drift, not the arm
        req = req[~req["sentinel"].fillna(False).astype(bool)]
    ok = req["error"].isna() & (req["output_tokens"].fillna(0) > 0)
    return req[ok]


def comparable_acceptance(lv: pd.DataFrame) -> pd.DataFrame:
    """Level rows whose accept length is tokens per target step: rows that recorded llama.cpp's
    per-drafted-step figure as the level's (result sets written before the figure became tokens per
    target step) take ``spec_tokens_per_step`` instead, as a sweep now records it, and gain
    ``spec_draft_share`` from their step counts. Other rows are returned as they are."""
    need = {"spec_tokens_per_step", "spec_accept_length", "spec_accept_length_source"}
    if not need <= set(lv.columns):
        return lv
    # only llama.cpp's levels have spec_tokens_per_step; a sweep now records them per request
    old = lv["spec_accept_length_source"].astype(str).eq(SOURCE_COUNTERS) & lv["spec_tokens_per_step"].notna()
    if not old.any():
        return lv
    lv = lv.copy()
    lv.loc[old, "spec_accept_length"] = lv.loc[old, "spec_tokens_per_step"]
    lv.loc[old, "spec_accept_length_source"] = SOURCE_PER_REQUEST
    lv.loc[old, "spec_accept_length_formula"] = TIMINGS.timings_formula
    if {"spec_verify_steps_counters", "spec_plain_steps"} <= set(lv.columns):
        steps = lv["spec_verify_steps_counters"] + lv["spec_plain_steps"]
        lv.loc[old & (steps > 0), "spec_draft_share"] = lv["spec_verify_steps_counters"] / steps
    return lv


def _with_littles_law(rs: ResultSet) -> pd.DataFrame:
    """The arm's level rows, plus ``e2e_mean_est_s`` (Little's law) where no e2e was measured."""
    lv = comparable_acceptance(rs.levels).copy()
    out_tokens = rs.meta.workload.output_tokens
    measured = "e2e_mean_s" in lv and lv["e2e_mean_s"].notna().any()
    if not measured and isinstance(out_tokens, (int, float)) and out_tokens > 0 and "output_tok_s" in lv:
        agg = pd.to_numeric(lv["output_tok_s"], errors="coerce")
        conc = lv["concurrency"]
        if all(isinstance(x.dtype, np.dtype) and x.dtype.kind in "iuf" for x in (agg, conc)):  # numpy: same figures
            a = agg.to_numpy(float)
            lv["e2e_mean_est_s"] = conc.to_numpy() * float(out_tokens) / np.where(a > 0, a, np.nan)
        else:
            lv["e2e_mean_est_s"] = (conc * float(out_tokens) / agg.where(agg > 0)).astype(float)
    return lv


#: the id of specsweep's own definition of a metric (``meta.json`` ``metric_definition_ids`` names others)
OWN_DEFINITION: str = "specsweep"


def agreeing_definitions(metas: dict[str, Meta], raw_levels: dict[str, pd.DataFrame]
                         ) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """The arms' level frames without the metric columns whose definitions differ between arms, and one
    note per metric left out, naming each arm's definition.

    A result set imported from another tool names in ``meta.json`` ``metric_definition_ids`` the
    definition behind each column where it is not specsweep's (:data:`OWN_DEFINITION` otherwise);
    two arms compare a metric only where those ids agree, so figures of different definitions are
    never set against each other.
    """
    ids = {a: m.metric_definition_ids for a, m in metas.items()}
    if not any(ids.values()):
        return raw_levels, []
    columns = sorted({c for lv in raw_levels.values() for c in lv.columns})
    notes, drop = [], []
    for col in columns:
        having = [a for a, lv in raw_levels.items() if col in lv.columns and lv[col].notna().any()]
        seen = {a: str(ids[a].get(col, OWN_DEFINITION)) for a in having}
        if len(set(seen.values())) > 1:
            drop.append(col)
            from specsweep.markup import md_text  # the notes are shown as Markdown; ids come from meta.json

            said = "; ".join(f"'{md_text(a)}': {md_text(d)}" for a, d in seen.items())
            name = f"`{col}`" if str(col).replace("_", "").isalnum() else md_text(col)
            notes.append(f"Metric {name} is not compared: the arms define it differently ({said}).")
    if not drop:
        return raw_levels, []
    return {a: lv.drop(columns=[c for c in drop if c in lv.columns]) for a, lv in raw_levels.items()}, notes


def _group_means(lv: pd.DataFrame, columns: list[str]) -> dict[str, np.ndarray] | None:
    """The columns of ``lv.groupby("concurrency", as_index=False)[columns].mean()`` plus ``n_repeats``
    (distinct ``repeat`` values per level), in numpy: a pandas groupby has a fixed set-up cost however
    few the rows, and a comparison makes two (a verdict-draw case makes hundreds). Each level's
    mean skips missing values and is missing where all are, as pandas'; its sum is a plain float64
    sum where pandas compensates (Kahan), so a mean may differ from pandas' in its last bits (at
    most 4e-16 relative over the committed result sets and 180 verdict draws). None where
    ``concurrency`` or ``repeat`` is not a plain numpy integer column (a missing repeat makes it
    float) or a column is not a plain numpy number or flag: pandas then."""
    dtypes = dict(zip(lv.columns, lv.dtypes))
    if lv.empty or not all(isinstance(dtypes[c], np.dtype) and dtypes[c].kind in "iub"
                           for c in ("concurrency", "repeat")) or not all(
            isinstance(dtypes[c], np.dtype) and dtypes[c].kind in "iufb" for c in columns):
        return None
    keys, inv = np.unique(lv["concurrency"].to_numpy(), return_inverse=True)
    n = len(keys)
    out: dict[str, np.ndarray] = {"concurrency": keys}
    values = lv[columns].to_numpy(dtype=float)  # one block, not a pandas column look-up per metric
    for j, c in enumerate(columns):
        v = values[:, j]
        ok = ~np.isnan(v)
        where = inv[ok]
        count = np.bincount(where, minlength=n)
        total = np.bincount(where, weights=v[ok], minlength=n)
        out[c] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    rep = lv["repeat"].to_numpy().astype(np.int64)
    span = int(rep.max()) - int(rep.min()) + 1
    if span * n < 2**62:  # each (level, repeat) pair as one integer: a 1-d unique, not a 2-d one
        pair_level = np.unique(inv.astype(np.int64) * span + (rep - rep.min())) // span
    else:
        pair_level = np.unique(np.stack([inv.astype(np.int64), rep]), axis=1)[0]
    out["n_repeats"] = np.bincount(pair_level, minlength=n)
    return out


def aggregate_levels(rs: ResultSet, lv: pd.DataFrame) -> pd.DataFrame:
    """One row per concurrency of an arm's level rows ``lv``: numeric columns averaged over repeats,
    plus ``spec_accept_length_source`` (the repeats' sources, joined) where the levels name it."""
    numeric = [c for c, dtype in lv.dtypes.items()
               if c not in {"run_id", "arm", "token_source"} and pd.api.types.is_numeric_dtype(dtype)]
    columns = [c for c in numeric if c not in {"concurrency"}]
    # the columns after the averages, in order: which figures the acceptance came from (named, not
    # averaged) where the levels name it, then whether the arm has measured requests
    tail: dict[str, Any] = {}
    if "spec_accept_length_source" in lv.columns:
        sources = lv.groupby("concurrency")["spec_accept_length_source"].agg(
            lambda s: "; ".join(sorted(set(s.dropna().astype(str)))) or None)
        tail["spec_accept_length_source"] = sources.to_numpy()  # one per level, in concurrency order
    tail["has_requests"] = measured_requests(rs) is not None
    means = _group_means(lv, columns)
    if means is not None:  # every column at once: no column added after
        means.pop("repeat", None)
        return pd.DataFrame({"arm": [rs.arm] * len(means["concurrency"]), **means, **tail})
    agg = lv.groupby("concurrency", as_index=False)[columns].mean()
    agg["n_repeats"] = lv.groupby("concurrency")["repeat"].nunique().to_numpy()
    agg = agg.drop(columns=["repeat"], errors="ignore")
    agg.insert(0, "arm", rs.arm)
    for name, value in tail.items():
        agg[name] = value
    return agg


def joinable_levels(by_arm: dict[str, ResultSet]) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Each arm's level rows with Little's-law estimates, without the metrics whose definitions differ
    between arms, and one note per metric left out (:func:`agreeing_definitions`). A ValueError where
    the aggregate throughput itself is defined differently: nothing could be compared."""
    raw_levels = {a: _with_littles_law(rs) for a, rs in by_arm.items()}
    raw_levels, definition_notes = agreeing_definitions({a: rs.meta for a, rs in by_arm.items()}, raw_levels)
    if any("output_tok_s" not in lv.columns for lv in raw_levels.values()):
        raw_levels = _without_token_figures(raw_levels, definition_notes)
        definition_notes = [*definition_notes, TOKEN_FIGURES_NOTE]
    return raw_levels, definition_notes


#: what the page says where the arms count tokens differently (tools or token-count modes)
TOKEN_FIGURES_NOTE = ("The arms count output tokens differently (different tools or token-count modes), so the "
                      "token-based figures defined differently (named above), aggregate throughput and per-user speed "
                      "among them, are left out and no throughput verdict is given; time to first token and "
                      "end-to-end time, which do not depend on the count, are compared where the arms define them "
                      "alike.")
#: what stays comparable between arms that count tokens differently: waits, not token rates
COUNT_FREE_PREFIXES: tuple[str, ...] = ("ttft_", "e2e_")


def token_figures_compared(levels: pd.DataFrame) -> bool:
    """Whether the joined ``levels`` compare aggregate throughput (False where the arms count tokens
    differently and :func:`joinable_levels` left every token-based figure out)."""
    return "output_tok_s" in levels and bool(levels["output_tok_s"].notna().any())


def _without_token_figures(raw_levels: dict[str, pd.DataFrame], notes: list[str]) -> dict[str, pd.DataFrame]:
    """The arms' level rows with the aggregate throughput and per-user speeds present but empty
    (the join's keys), where the arms define the aggregate throughput differently; a ValueError,
    with ``notes``, where they share no count-free figure (TTFT, e2e) either: nothing to compare."""
    shared = set.intersection(*({c for c in lv.columns if c.startswith(COUNT_FREE_PREFIXES) and lv[c].notna().any()}
                                for lv in raw_levels.values()))
    if not shared:
        raise ValueError("the arms' aggregate throughput cannot be compared, and they share no time to first token "
                         "or end-to-end time: " + " ".join(notes))
    empty = ["output_tok_s", *USER_METRICS]
    return {a: lv.drop(columns=[c for c in empty if c in lv.columns]).assign(**{c: math.nan for c in empty})
            for a, lv in raw_levels.items()}


def require_shared_levels(raw_levels: dict[str, pd.DataFrame], baseline: str) -> None:
    """:class:`NoSharedLevelError`, naming both level lists, where an arm and the baseline share no concurrency."""
    base_cs = sorted(int(c) for c in raw_levels[baseline]["concurrency"].unique())
    for arm in (a for a in raw_levels if a != baseline):
        arm_cs = sorted(int(c) for c in raw_levels[arm]["concurrency"].unique())
        if not set(arm_cs) & set(base_cs):
            raise NoSharedLevelError(
                f"arm '{arm}' (concurrency {', '.join(map(str, arm_cs))}) and baseline '{baseline}' (concurrency "
                f"{', '.join(map(str, base_cs))}) share no concurrency level, so nothing can be compared; "
                "measure both arms at the same levels")


class AllFailedError(InputError, ValueError):
    """An arm whose every request failed: it has no speed to compare (bad input for a report, exit 2)."""


def join_levels(by_arm: dict[str, ResultSet], raw_levels: dict[str, pd.DataFrame],
                definition_notes: list[str]) -> tuple[pd.DataFrame, str]:
    """(one row per arm and concurrency — :func:`aggregate_levels` of every arm, plus the concurrency
    estimate aggregate ÷ per-user speed and whether the effective concurrency was measured —, the
    per-user speed metric every arm has). A ValueError, with the definition notes, where none has one."""
    levels = pd.concat([aggregate_levels(by_arm[a], raw_levels[a]) for a in raw_levels], ignore_index=True)
    user_metric = _user_metric(levels)
    if user_metric is None and levels["output_tok_s"].isna().all():  # token figures left out: none is compared
        user_metric = USER_METRICS[0]
    failed = [a for a, lv in raw_levels.items() if "n_ok" in lv and len(lv) and not lv["n_ok"].fillna(0).gt(0).any()]
    if user_metric is None and failed:
        raise AllFailedError(f"arm {failed[0]!r}: every request failed (100 % errors), so it has no speed to compare; "
                         "leave its result set out (a study does, and names it) or measure it again")
    if user_metric is None:
        raise ValueError("no per-user speed metric (user_tok_s_mean or request_tok_s_mean) is present in every arm"
                         + "".join(f" {n}" for n in definition_notes))
    levels["concurrency_estimate"] = levels["output_tok_s"] / levels[user_metric]
    measured = levels["effective_concurrency"] if "effective_concurrency" in levels else pd.Series(math.nan, index=levels.index)
    levels["effective_concurrency_kind"] = np.where(measured.notna(), "measured", "estimate")
    return levels, user_metric


def _user_metric(levels: pd.DataFrame) -> str | None:
    """The first of :data:`USER_METRICS` that every arm of ``levels`` has at some level, or None."""
    arm_of_row = levels["arm"].to_numpy(object)
    arm_masks = [arm_of_row == a for a in dict.fromkeys(arm_of_row)]  # the arms present, as groupby("arm") sees them

    def in_every_arm(metric: str) -> bool:
        has = levels[metric].notna().to_numpy()
        return all(has[mask].any() for mask in arm_masks)

    return next((m for m in USER_METRICS if m in levels.columns and in_every_arm(m)), None)


#: the columns :func:`join_levels` adds that are no metric to compare
_JOIN_COLUMNS: frozenset[str] = frozenset({"has_requests", "concurrency_estimate", "effective_concurrency_kind"})


def compared_metrics(levels: pd.DataFrame) -> list[str]:
    """The joined table's numeric columns that are metrics (not :data:`NOT_METRICS` or added by the join), in order."""
    return [c for c in levels.columns
            if c not in NOT_METRICS and c not in _JOIN_COLUMNS and pd.api.types.is_numeric_dtype(levels[c])]
