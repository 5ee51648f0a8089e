"""Per-category speedups: curves, crossovers, deltas, tables and their sentences."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.curves import DeltaCurve
from specsweep.decide.text import tested_bracket
from specsweep.markup import md_text
from specsweep.report.display import _band, _fmt, _pct_or_dash
from specsweep.results.columns import metric_info


def _category_levels(comp: Comparison, arm: str) -> list[int]:
    """The levels a category view shows for one arm: the lowest level both it and the baseline measured,
    and the two levels around its first aggregate crossover, or else the highest shared level."""
    shared = comp.shared_levels(arm)
    if not shared:
        return []
    cx = comp.crossover(arm, "output_tok_s")
    around = [int(cx.iloc[0]["c_low"]), int(cx.iloc[0]["c_high"])] if len(cx) else [shared[-1]]
    return sorted({shared[0], *around})


def has_categories(sets: Sequence[Any]) -> bool:
    """True when the result sets' measured requests carry more than one prompt category."""
    from specsweep.workloads.datasets import with_category

    seen: set[str] = set()
    for rs in sets:
        req = getattr(rs, "requests", None)
        if req is None or req.empty:
            continue
        req = with_category(req)
        if "warmup" in req.columns:
            req = req[~req["warmup"].astype(bool)]
        seen.update(str(c) for c in req["category"].unique())
    return len(seen) > 1


def _repeat_interval(arm_values: Sequence[float], base_values: Sequence[float]) -> tuple[float, float]:
    """95 % interval of Δ% = (arm / baseline − 1) × 100 from per-repeat values: a two-sample t
    interval on ln(value) (pooled variance, n_arm + n_base − 2 degrees of freedom), mapped back to %.
    (nan, nan) unless both sides have two or more positive repeats."""
    from scipy import special

    a = np.log([v for v in arm_values if v > 0 and not math.isnan(v)])
    b = np.log([v for v in base_values if v > 0 and not math.isnan(v)])
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan
    dof = len(a) + len(b) - 2
    pooled = ((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / dof
    se = math.sqrt(pooled * (1 / len(a) + 1 / len(b)))
    diff, t = float(a.mean() - b.mean()), float(special.stdtrit(dof, 0.975))
    return (math.exp(diff - t * se) - 1) * 100, (math.exp(diff + t * se) - 1) * 100


#: a category gets its own delta curves (and may get a crossover) only where it was measured at this
#: many levels shared with the baseline, with at least ``noise.MIN_REQUESTS`` measured requests of
#: the category in every run of the level on both arms
MIN_CATEGORY_LEVELS: int = 3


#: the category view's two figures: (key in the frames, title)
CATEGORY_FIGURES: tuple[tuple[str, str], ...] = (("aggregate", "aggregate share"), ("user", "per-user speed"))


@dataclass
class CategoryFit:
    """The delta curve of one figure (``"aggregate"`` share or ``"user"`` speed) of one prompt
    category, one speculative arm against the baseline: the levels it was fitted on (those with
    enough requests of the category, see :data:`MIN_CATEGORY_LEVELS`) and the curve, or None
    when there were too few of them."""

    arm: str
    category: str
    figure: str
    levels: list[int]
    curve: DeltaCurve | None
    #: how many category curves share the arm's 5 % error budget (2 figures × fitted categories)
    family: int = 0


def _category_column(comp: Comparison, figure: str) -> str:
    """The level-metric column behind a category figure: the comparison's per-user metric or output tok/s."""
    return comp.user_metric if figure == "user" else "output_tok_s"


def _enough_requests(req: pd.DataFrame, concurrency: int, category: str) -> bool:
    """True when every run of the level has at least ``noise.MIN_REQUESTS`` measured requests of the category."""
    from specsweep.analyze.noise import MIN_REQUESTS

    level = req[req["concurrency"] == concurrency]
    runs = level["repeat"].unique() if "repeat" in level else [0]
    if not len(runs):
        return False
    part = level[level["category"] == category]
    counts = part.groupby("repeat").size() if "repeat" in part else pd.Series({0: len(part)})
    return all(int(counts.get(r, 0)) >= MIN_REQUESTS for r in runs)


def category_curves(comp: Comparison, sets: Sequence[Any], *, n_boot: int = 400,
                    seed: int = 0) -> dict[tuple[str, str, str], CategoryFit]:
    """Per spec arm, prompt category and figure (``"aggregate"``, ``"user"``): the category's delta
    curve, fitted exactly as the whole-run verdict's (:func:`specsweep.analyze.noise.fit_metric`: the
    same model, noise sources and 95 % simultaneous band, ``comp.assumed_noise_pct`` where there
    are no repeats) over the category's rows of :func:`specsweep.analyze.categories.category_metrics`.

    A category is fitted only on the levels shared with the baseline where every run has at least
    ``noise.MIN_REQUESTS`` measured requests of it on both arms, and only when there are at least
    :data:`MIN_CATEGORY_LEVELS` such levels (else ``curve`` is None). The band's Bonferroni family
    is 2 figures × the arm's fitted categories (``CategoryFit.family``), so a claim about any
    category keeps the 5 % error budget. Keys: (arm, category, figure). Empty without categories.
    """
    from specsweep.analyze.categories import category_metrics
    from specsweep.analyze.join import measured_requests
    from specsweep.analyze.noise import fit_metric
    from specsweep.workloads.datasets import with_category

    if not has_categories(sets):
        return {}
    by_arm = {rs.arm: rs for rs in sets}
    data: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}
    for arm in comp.arms:
        rs = by_arm.get(arm)
        if rs is None:
            continue
        ok = measured_requests(rs)
        if ok is None or ok.empty:
            continue
        data[arm] = (category_metrics(rs.requests), with_category(ok))
    if comp.baseline not in data:
        return {}
    cm_b, req_b = data[comp.baseline]
    rng = np.random.default_rng(seed)
    out: dict[tuple[str, str, str], CategoryFit] = {}
    for arm in comp.spec_arms:
        if arm not in data:
            continue
        cm_a, req_a = data[arm]
        shared = comp.shared_levels(arm)
        cats = sorted(set(cm_a["category"]) & set(cm_b["category"]))
        levels = {cat: [c for c in shared if _enough_requests(req_a, c, cat) and _enough_requests(req_b, c, cat)]
                  for cat in cats}
        fitted = [cat for cat in cats if len(levels[cat]) >= MIN_CATEGORY_LEVELS]
        family = len(CATEGORY_FIGURES) * len(fitted)
        for cat in cats:
            for figure, _ in CATEGORY_FIGURES:
                col = _category_column(comp, figure)
                curve = None
                if cat in fitted and col in cm_a and col in cm_b:
                    curve = fit_metric(col, levels[cat], cm_a[cm_a["category"] == cat], cm_b[cm_b["category"] == cat],
                                       req_a[req_a["category"] == cat], req_b[req_b["category"] == cat], n_boot, rng,
                                       family, comp.assumed_noise_pct)
                    if curve is not None and len(curve.concurrency) < MIN_CATEGORY_LEVELS:
                        curve = None
                    if curve is not None:
                        curve.family_label = "category curves"
                out[(arm, cat, figure)] = CategoryFit(arm, cat, figure, levels[cat], curve, family)
    return out


def category_crossovers(comp: Comparison, sets: Sequence[Any],
                        curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> pd.DataFrame:
    """One row per spec arm, category and figure: where the category's fitted delta curve
    credibly crosses 0, by the whole-run rule (:func:`specsweep.analyze.crossover.curve_crossovers`: credibly
    positive at one level and credibly negative at a later one, or the reverse, with no credible
    level between; placed at the curve's zero on log2(concurrency)).

    ``status``: ``"crossover"`` (the first one: ``c_low``, ``c_high``, ``crossover_concurrency``,
    ``direction``; ``n_crossovers`` counts them), ``"none"`` (a curve, no credible sign change)
    or ``"too few levels"`` (no curve: fewer than :data:`MIN_CATEGORY_LEVELS` levels with enough
    requests). ``above`` / ``below``: the levels where the band lies above / below 0;
    ``fit_min_pct`` / ``fit_max_pct``: the fitted Δ% range over the levels (%). ``curves``:
    :func:`category_curves` already computed for these sets.
    """
    from specsweep.analyze.crossover import curve_crossovers

    fits = category_curves(comp, sets) if curves is None else curves
    columns = ["arm", "category", "figure", "n_levels", "levels", "status", "n_crossovers", "c_low", "c_high",
               "crossover_concurrency", "direction", "above", "below", "fit_min_pct", "fit_max_pct", "method"]
    rows = []
    for (arm, cat, figure), fit in fits.items():
        row: dict[str, Any] = {"arm": arm, "category": cat, "figure": figure, "n_levels": len(fit.levels),
                               "levels": list(fit.levels), "status": "too few levels", "n_crossovers": 0,
                               "c_low": None, "c_high": None, "crossover_concurrency": math.nan, "direction": None,
                               "above": [], "below": [], "fit_min_pct": math.nan, "fit_max_pct": math.nan,
                               "method": None}
        curve = fit.curve
        if curve is not None:
            cred = curve.credible
            pct = (np.exp(curve.fitted) - 1) * 100
            row.update(status="none", method=curve.method(), fit_min_pct=float(pct.min()), fit_max_pct=float(pct.max()),
                       above=[int(c) for c, s in zip(curve.concurrency, cred) if s > 0],
                       below=[int(c) for c, s in zip(curve.concurrency, cred) if s < 0])
            cx = curve_crossovers(curve)
            if cx:
                first = cx[0]
                # one bracket everywhere: the category's tested levels just around its X
                lo, hi = tested_bracket([int(c) for c in curve.concurrency], float(first["crossover_concurrency"]))
                row.update(status="crossover", n_crossovers=len(cx), c_low=lo, c_high=hi,
                           crossover_concurrency=first["crossover_concurrency"], direction=first["direction"])
        rows.append(row)
    order = {name: i for i, (name, _) in enumerate(CATEGORY_FIGURES)}
    frame = pd.DataFrame(rows, columns=columns)
    if frame.empty:
        return frame
    frame["_o"] = frame["figure"].map(order)
    return frame.sort_values(["arm", "_o", "category"]).drop(columns="_o").reset_index(drop=True)


def category_deltas(comp: Comparison, sets: Sequence[Any],
                    curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> pd.DataFrame:
    """Per spec arm, shown level (:func:`_category_levels`) and prompt category: the category's
    acceptance length on the arm, and its per-user speed and aggregate share on both arms with Δ%.

    Every figure is :func:`specsweep.analyze.categories.category_metrics` over the arm's measured requests,
    averaged over repeats; Δ% = (arm / baseline − 1) × 100 as for whole levels. The aggregate share
    is the category's output tokens ÷ its own window inside the level (tok/s): a share of the
    level's throughput, not what the category would get on its own.

    Intervals (``*_ci_low_pct`` / ``*_ci_high_pct``, %; ``*_ci_kind`` says which): where the
    category has a fitted delta curve at the level (:func:`category_curves`), its 95 %
    simultaneous band (``"band"``; ``*_fit_pct`` is the fitted Δ% there), as the verdict's;
    else a 95 % interval from repeats (``"repeats"``, :func:`_repeat_interval`); else none
    (``"none"``, NaN: one run and too few levels for a curve). ``curves``: :func:`category_curves`
    already computed for these sets. Empty when the requests carry one category or none.
    """
    from specsweep.analyze.categories import category_metrics

    columns = ["arm", "concurrency", "category", "category_share", "accept_length", "accept_length_baseline",
               "n_repeats"]
    for name in ("user", "aggregate"):
        columns += [f"{name}_baseline", f"{name}_arm", f"{name}_delta_pct", f"{name}_fit_pct", f"{name}_ci_low_pct",
                    f"{name}_ci_high_pct", f"{name}_ci_kind"]
    if not has_categories(sets):
        return pd.DataFrame(columns=columns)
    fits = category_curves(comp, sets) if curves is None else curves
    by_arm = {rs.arm: rs for rs in sets}
    per_arm: dict[str, pd.DataFrame] = {}
    for arm in comp.arms:
        rs = by_arm.get(arm)
        if rs is not None and rs.requests is not None and not rs.requests.empty:
            per_arm[arm] = category_metrics(rs.requests)
    base = per_arm.get(comp.baseline)
    um = comp.user_metric
    rows = []
    for arm in comp.spec_arms:
        cm = per_arm.get(arm)
        if cm is None or base is None or um not in cm or um not in base:
            continue
        for c in _category_levels(comp, arm):
            a_lv, b_lv = cm[cm["concurrency"] == c], base[base["concurrency"] == c]
            for cat in sorted(set(a_lv["category"]) & set(b_lv["category"])):
                a, b = a_lv[a_lv["category"] == cat], b_lv[b_lv["category"] == cat]
                row: dict[str, Any] = {
                    "arm": arm, "concurrency": int(c), "category": cat,
                    "category_share": float(a["category_share"].mean()),
                    "accept_length": float(a["spec_accept_length"].mean()),
                    "accept_length_baseline": float(b["spec_accept_length"].mean()),
                    "n_repeats": int(min(a["repeat"].nunique(), b["repeat"].nunique())) if "repeat" in a else 1,
                }
                for name in ("user", "aggregate"):
                    col = _category_column(comp, name)
                    av, bv = float(a[col].mean()), float(b[col].mean())
                    lo, hi = _repeat_interval(a[col].tolist(), b[col].tolist())
                    kind, fit_pct = ("none" if math.isnan(lo) else "repeats"), math.nan
                    fit = fits.get((arm, cat, name))
                    curve = fit.curve if fit is not None else None
                    if curve is not None and int(c) in curve.concurrency:
                        at = [int(x) for x in curve.concurrency].index(int(c))
                        f, h = curve.fitted[at], curve.half_width[at]
                        fit_pct, lo, hi = ((math.exp(z) - 1) * 100 for z in (f, f - h, f + h))
                        kind = "band"
                    row.update({f"{name}_baseline": bv, f"{name}_arm": av,
                                f"{name}_delta_pct": (av / bv - 1) * 100 if bv else math.nan,
                                f"{name}_fit_pct": fit_pct, f"{name}_ci_low_pct": lo, f"{name}_ci_high_pct": hi,
                                f"{name}_ci_kind": kind})
                rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _interval_cell(r: dict[str, Any], name: str) -> str:
    """A category row's Δ interval for reading: the fitted curve's band (with the fitted Δ%), a
    repeat interval, or "single run"."""
    lo, hi, kind = r[f"{name}_ci_low_pct"], r[f"{name}_ci_high_pct"], r.get(f"{name}_ci_kind")
    if pd.isna(lo):
        return "single run"
    if kind == "band":
        return f"{_band(lo, hi)} around fitted {_pct_or_dash(r[f'{name}_fit_pct'])}"
    return f"{_band(lo, hi)} (repeats)"


def category_table(comp: Comparison, sets: Sequence[Any], deltas: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`category_deltas` for reading: one row per (arm, level, category), Δ% with its 95 %
    interval (the category curve's band around its fitted Δ%, an interval from repeats, or
    "single run"). Show it with :func:`table` (category names are escaped). ``deltas``:
    :func:`category_deltas` already computed for these sets."""
    d = category_deltas(comp, sets) if deltas is None else deltas
    rows = []
    for r in d.to_dict("records"):
        row: dict[str, Any] = {
            "arm": r["arm"], "concurrency": r["concurrency"], "category": r["category"],
            "share of requests": f"{r['category_share']:.0%}",
            "accept length (arm)": _fmt(r["accept_length"], 2),
        }
        for name, title in (("user", "per-user"), ("aggregate", "aggregate share")):
            unit = "tok/s"
            row[f"{title} baseline ({unit})"] = _fmt(r[f"{name}_baseline"])
            row[f"{title} arm ({unit})"] = _fmt(r[f"{name}_arm"])
            row[f"{title} Δ%"] = _pct_or_dash(r[f"{name}_delta_pct"])
            row[f"{title} Δ 95% interval"] = _interval_cell(r, name)
        rows.append(row)
    return pd.DataFrame(rows)


#: what :func:`_pays` says of a control arm's row: its Δ is the machine's run-to-run noise
NOISE_FLOOR = "noise floor"


def _pays(r: dict[str, Any], controls: Sequence[str] = ()) -> str:
    """'pays', 'does not pay' or 'within noise' for one category row: pays where per-user and
    aggregate Δ are both above 0, does not where either is below. With an interval (the category
    curve's band, else repeats) a Δ counts only where the interval excludes 0, and a row with only
    such uncounted Δs is within noise; without one, the measured Δ% decides. A row of a control arm
    (``controls``: configured like the baseline) is :data:`NOISE_FLOOR`, whatever its Δ: it measures
    the machine, not speculation."""
    if r.get("arm") in controls:
        return NOISE_FLOOR
    signs = []
    for name in ("user", "aggregate"):
        lo, hi, d = r[f"{name}_ci_low_pct"], r[f"{name}_ci_high_pct"], r[f"{name}_delta_pct"]
        if pd.isna(d):
            continue
        if not pd.isna(lo):
            signs.append(1 if lo > 0 else -1 if hi < 0 else 0)
        else:
            signs.append(1 if d > 0 else -1)
    if any(s < 0 for s in signs):
        return "does not pay"
    if signs and all(s > 0 for s in signs):
        return "pays"
    return "within noise"


def _quoted(r: dict[str, Any], name: str) -> float:
    """The Δ% a sentence quotes for a category row: the fitted one where a band judged it, else the measured one."""
    fit = r.get(f"{name}_fit_pct")
    return float(fit) if r.get(f"{name}_ci_kind") == "band" and fit is not None and not pd.isna(fit) \
        else float(r[f"{name}_delta_pct"])


def _quoted_pct(r: dict[str, Any], name: str) -> str:
    """:func:`_quoted` as text (whole %, never "-0%"), "fitted" before it where it is the fitted Δ%."""
    quoted = _quoted(r, name)
    if pd.isna(quoted):  # no successful request of this category on one side: nothing to quote
        return "no measured Δ"
    value = round(quoted) or 0.0
    return ("fitted " if r.get(f"{name}_ci_kind") == "band" else "") + f"{value:+.0f}%"


def category_sentences(comp: Comparison, sets: Sequence[Any], deltas: pd.DataFrame | None = None) -> list[str]:
    """One plain sentence per spec arm and shown level, from :func:`category_deltas`: the categories
    where speculation pays (per-user and aggregate Δ both above 0, by :func:`_pays`) and where it
    does not, best first, with the category of the highest and of the lowest per-user Δ% named.
    Every Δ% is the one that judged its category: the fitted Δ% where its curve's band did (said
    as "fitted"), else the measured one. ``deltas``: as for :func:`category_table`."""
    d = category_deltas(comp, sets) if deltas is None else deltas
    out = []
    for (arm, c), g in d.groupby(["arm", "concurrency"], sort=True):
        g = g.assign(_quoted=[_quoted(r, "user") for r in g.to_dict("records")])
        g = g.sort_values("_quoted", ascending=False, kind="stable")
        recs = g.to_dict("records")
        if arm in comp.controls:  # configured like the baseline: its Δ is the noise floor, never a payoff
            out.append(_control_sentence(str(arm), int(c), recs))
            continue
        verdicts = {r["category"]: _pays(r) for r in recs}

        def named(rs: list[dict[str, Any]]) -> str:
            def one(r: dict[str, Any]) -> str:
                return (f"{md_text(r['category'])} ({_quoted_pct(r, 'user')} per user, "
                        f"{_quoted_pct(r, 'aggregate')} aggregate share)")
            return ", ".join(one(r) for r in rs)

        pays = [r for r in recs if verdicts[r["category"]] == "pays"]
        not_pays = [r for r in recs if verdicts[r["category"]] == "does not pay"]
        noise = [r for r in recs if verdicts[r["category"]] == "within noise"]
        best, worst = recs[0], recs[-1]
        parts = [f"At concurrency {int(c)}, {md_text(arm)} pays"
                 + (f" for {named(pays)}" if pays else " for no category")]
        parts.append(f"it does not for {named(not_pays)}" if not_pays else "it loses on none")
        text = "; ".join(parts)
        if noise:
            text += f"; within noise for {named(noise)}"
        text += (f". Per-user gain is highest for {md_text(best['category'])} ({_quoted_pct(best, 'user')}) and "
                 f"lowest for {md_text(worst['category'])} ({_quoted_pct(worst, 'user')})")
        acc = g.dropna(subset=["accept_length"])
        if len(acc) > 1:
            hi, lo = acc.loc[acc["accept_length"].idxmax()], acc.loc[acc["accept_length"].idxmin()]
            text += (f"; accept length runs from {lo['accept_length']:.2f} ({md_text(lo['category'])}) to "
                     f"{hi['accept_length']:.2f} ({md_text(hi['category'])})")
        single = bool(pd.isna(g["user_ci_low_pct"]).all())
        out.append(text + (" (single run: point estimates, no interval)." if single else "."))
    return out


def _spread(recs: Sequence[dict[str, Any]], name: str) -> str:
    """The smallest and largest Δ% of one figure over a level's category rows, as the sentences quote
    them ('fitted -3% to +5%'), or 'no measured Δ'."""
    rows = [r for r in recs if not pd.isna(_quoted(r, name))]
    if not rows:
        return "no measured Δ"
    lo, hi = min(rows, key=lambda r: _quoted(r, name)), max(rows, key=lambda r: _quoted(r, name))
    a, b = _quoted_pct(lo, name), _quoted_pct(hi, name)
    return a if a == b else f"{a} to {b}"


def _control_sentence(arm: str, c: int, recs: Sequence[dict[str, Any]]) -> str:
    """A control arm's categories at one level: how far they differ from the baseline, said as the
    noise floor it is (the control is the baseline measured again), never as speculation paying."""
    widest = max(recs, key=lambda r: abs(_quoted(r, "user")) if not pd.isna(_quoted(r, "user")) else -1.0)
    return (f"At concurrency {c}, the control arm {md_text(arm)} (configured like the baseline) differs from it by "
            f"{_spread(recs, 'user')} per user and {_spread(recs, 'aggregate')} in aggregate share across the "
            f"categories (widest: {md_text(widest['category'])}, {_quoted_pct(widest, 'user')} per user) — this "
            "machine's run-to-run noise, the floor under every other arm's category Δ, not an effect of speculation.")


def _levels_text(levels: Sequence[int]) -> str:
    return ", ".join(str(int(c)) for c in levels) if len(levels) else "no level"


def category_crossover_sentences(comp: Comparison, crossovers: pd.DataFrame) -> list[str]:
    """One sentence per spec arm and figure from :func:`category_crossovers`: the categories whose
    fitted delta curve credibly crosses 0 (where, between which levels), those with a curve and no
    crossover (where the band lies above and below 0), and those with too few levels for a curve."""
    out: list[str] = []
    if crossovers is None or crossovers.empty:
        return out
    titles = dict(CATEGORY_FIGURES)
    for arm in comp.spec_arms:
        for figure, _ in CATEGORY_FIGURES:
            g = crossovers[(crossovers["arm"] == arm) & (crossovers["figure"] == figure)]
            if g.empty:
                continue
            parts = []
            control = arm in comp.controls
            for r in g[g["status"] == "crossover"].to_dict("records"):
                way = "lower" if r["direction"] == "gain_to_loss" else "higher"
                extra = r["n_crossovers"] - 1
                more = f" (and {extra} more sign change{'s' if extra > 1 else ''} after it)" if extra else ""
                crosses = (f"its fitted curve crosses 0 near **{r['crossover_concurrency']:.0f}**" if control else
                           f"it is credibly {way} than on the baseline above about "
                           f"**{r['crossover_concurrency']:.0f}** concurrent requests (its fitted curve crosses 0")
                parts.append(f"for {md_text(r['category'])} {crosses}"
                             + (" (" if control else " ") + f"between {int(r['c_low'])} and {int(r['c_high'])}){more}")
            none = g[g["status"] == "none"].to_dict("records")
            if none:
                parts.append("no crossover is claimed for " + "; ".join(
                    f"{md_text(r['category'])} (credibly above 0 at {_levels_text(r['above'])}, below at "
                    f"{_levels_text(r['below'])})" for r in none))
            few = g[g["status"] == "too few levels"].to_dict("records")
            if few:
                parts.append(f"too few levels for a curve for {', '.join(md_text(r['category']) for r in few)} "
                             f"(fewer than {MIN_CATEGORY_LEVELS} levels with enough requests of the category on both "
                             "arms), so no crossover is claimed there")
            if control:  # the baseline measured again: what its curves show is noise and drift
                out.append(f"{titles[figure].capitalize()} by category, control arm {md_text(arm)}: " + "; ".join(parts)
                           + " — it is configured like the baseline, so this is the noise floor (run-to-run noise "
                           "and drift), not an effect of speculation.")
                continue
            out.append(f"{titles[figure].capitalize()} by category, {md_text(arm)}: " + "; ".join(parts)
                       + ".")
    return out


def category_crossover_table(comp: Comparison, sets: Sequence[Any],
                             curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> pd.DataFrame:
    """The numbers behind :func:`category_crossover_sentences`: one row per (arm, figure,
    category), the fitted Δ% and its 95 % simultaneous band at each level the category was fitted
    on ("—" elsewhere), and the crossover (or why there is none). Show it with :func:`table`.
    ``curves``: :func:`category_curves` already computed for these sets."""
    curves = category_curves(comp, sets) if curves is None else curves
    crossovers = category_crossovers(comp, sets, curves)
    rows = []
    titles = dict(CATEGORY_FIGURES)
    levels = sorted({int(c) for fit in curves.values() for c in fit.levels})
    for r in crossovers.to_dict("records"):
        fit = curves[(r["arm"], r["category"], r["figure"])]
        row: dict[str, Any] = {"arm": r["arm"], "Δ of": titles[r["figure"]], "category": r["category"]}
        cells = {}
        if fit.curve is not None:
            curve = fit.curve
            for i, c in enumerate(curve.concurrency):
                f, h = curve.fitted[i], curve.half_width[i]
                lo, mid, hi = ((math.exp(z) - 1) * 100 for z in (f - h, f, f + h))
                cells[int(c)] = f"{mid:+.0f}% [{lo:+.0f}, {hi:+.0f}]"
        for c in levels:
            row[f"C={c}"] = cells.get(c, "—")
        if r["status"] == "crossover":
            way = "gain → loss" if r["direction"] == "gain_to_loss" else "loss → gain"
            row["crossover"] = (f"≈{r['crossover_concurrency']:.0f} ({way}, between {int(r['c_low'])} and "
                                f"{int(r['c_high'])})")
        elif r["status"] == "none":
            row["crossover"] = "none claimed"
        else:
            row["crossover"] = f"too few levels ({r['n_levels']})"
        rows.append(row)
    return pd.DataFrame(rows)


def category_markdown(comp: Comparison, sets: Sequence[Any], deltas: pd.DataFrame | None = None,
                      curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> str:
    """The category view's text in one block: a one-line note when the requests carry a single
    category, else :func:`category_intro_markdown`, :func:`category_crossover_markdown` and
    :func:`category_levels_markdown` (the notebook shows each above its table). ``deltas`` /
    ``curves``: :func:`category_deltas` / :func:`category_curves` already computed for these sets."""
    if not has_categories(sets):
        return ("The requests carry a single prompt category (`all`), so there is no per-category view; a "
                "categorised workload (e.g. `workload=builtin`) gives one.")
    fits = category_curves(comp, sets) if curves is None else curves
    d = category_deltas(comp, sets, fits) if deltas is None else deltas
    if d.empty:
        return ("The requests carry several prompt categories, but no speculative arm and the baseline both have "
                "per-request data for them at a shared level, so no per-category Δ can be given.")
    return "\n\n".join([category_intro_markdown(comp), category_crossover_markdown(comp, sets, fits),
                         category_levels_markdown(comp, sets, d)])


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def category_intro_markdown(comp: Comparison) -> str:
    """What every figure of the category view is (the per-user metric, the aggregate share)."""
    return ("Each category's figures are the level metrics over that category's requests alone (the same "
            "definitions, grouped by category). Per-user speed is "
            f"{md_text(_lower_first(metric_info(comp.user_metric).label))}. The aggregate is the category's output tokens ÷ its "
            "own window inside the level — a **share** of the level's throughput, not what the category would get "
            "on its own: it also depends on which requests the category shared the server with, and in what order "
            "they were admitted.")


def category_crossover_markdown(comp: Comparison, sets: Sequence[Any],
                                curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> str:
    """How a category's crossover is decided, then :func:`category_crossover_sentences` as a list."""
    from specsweep.analyze.noise import MIN_REQUESTS

    fits = category_curves(comp, sets) if curves is None else curves
    families = sorted({fit.family for fit in fits.values() if fit.curve is not None})
    family = (f" ({' or '.join(str(f) for f in families)} curves: 2 figures × the fitted categories)"
              if families else "")
    lines = [
        f"Where a category was measured at {MIN_CATEGORY_LEVELS} or more levels with at least {MIN_REQUESTS} of its "
        "requests in "
        "every run on both arms, its Δ% against the baseline is modelled exactly as the verdict's (see "
        "Definitions: the same curve, noise source and 95% simultaneous band), with the band's Bonferroni "
        f"correction taken over every category curve of the arm{family}. A crossover is claimed only between "
        "credible levels of opposite sign. The table gives each fitted Δ% with its band; \"—\" where the "
        "category was not fitted at that level.",
        "",
    ]
    lines += [f"- {s}" for s in category_crossover_sentences(comp, category_crossovers(comp, sets, fits))]
    return "\n".join(lines)


def category_levels_markdown(comp: Comparison, sets: Sequence[Any], deltas: pd.DataFrame | None = None) -> str:
    """What the per-level category table shows, then :func:`category_sentences` as a list."""
    d = category_deltas(comp, sets) if deltas is None else deltas
    lines = [
        "Each category at the lowest level both arms measured and around the aggregate crossover (or at the "
        "highest shared level where there is none). Intervals: the category curve's 95% band around its fitted "
        "Δ% where there is a curve, else 95% t intervals on ln(value) from repeats, else none (one run). A "
        "category pays where its per-user and aggregate-share Δ are both above 0 — with an interval, only where "
        "the interval excludes 0.",
        "",
    ]
    lines += [f"- {s}" for s in category_sentences(comp, sets, d)]
    return "\n".join(lines)
