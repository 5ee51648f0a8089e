"""The warnings at the top of a report: one per line, ranked, each saying whether it changes the verdict.

:func:`collect_warnings` gathers what the data carry — token counts from SSE chunks, workloads
compared although they differ (``--allow-workload-mismatch``), the warnings each arm's meta.json
recorded (grouped: the same warning at several levels or arms is one line), a synthetic workload —
and says of each whether it can change the verdict, comparing the warning's own number with the
figure it could distort:

- late timestamps (event-loop lag, a busy client): the lag in ms against the shortest median time
  to first token (else end-to-end time) measured at the level that lagged (a late chunk delays that
  level's waits; any level's where the warning names none); it changes the verdict where the lag
  is more than the smallest minimum effect of the profiles (% of that time);
- a client that kept fewer requests in flight than the level names: the shortfall (%) against the
  minimum effect;
- a reference server that fell behind its profile's schedule (``sim_*`` level columns): its mean
  step lag, judged as a late timestamp against the shortest median wait at the same level; a clock
  resync (the simulator ran slower than its profile) can change the verdict;
- token counts from SSE chunks, workloads that differ, a failed prefix-cache flush, outputs shorter
  than asked: they change what the figures measure, so they can change the verdict;
- a client-bound peer tool (its own warning, or its median TTFT above :data:`~specsweep.analyze.
  client_bound.TTFT_RATIO` times every other tool's at a level): its figures there describe the
  client, so it can change the verdict;
- anything else recorded: not assessed (counted as able to change the verdict, ranked after the
  assessed ones).

Ranking: warnings that change the verdict first, then by severity (``high``, ``medium``, ``low``),
then in the order found. :func:`warnings_markdown` renders them as a Markdown list; every string
from a result set is escaped.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from specsweep.analyze.client_bound import CLIENT_BOUND, client_bound_levels, client_bound_sentence
from specsweep.analyze.compare import Comparison
from specsweep.analyze.metrics import SIM_LAG_WARN_MS
from specsweep.analyze.workload_match import workload_differences
from specsweep.decide.profiles import SYNTHETIC_KINDS
from specsweep.markup import md_text

Severity = Literal["high", "medium", "low"]
SEVERITY_RANK: dict[str, int] = {"high": 0, "medium": 1, "low": 2}
#: the minimum effect (%) used where no profile is given (the profiles' default)
DEFAULT_MIN_EFFECT_PCT: float = 2.0
_LEVEL = re.compile(r"^C=(\d+) repeat (\d+): (.*)$", re.DOTALL)
_LAG = re.compile(r"event-loop lag p99 ([0-9.]+) ms")
_CORES = re.compile(r"the client used ([0-9.]+) of a core per worker")
_IN_FLIGHT = re.compile(r"mean in flight ([0-9.]+) of (\d+)")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True)
class PageWarning:
    """One warning of the page. ``text``: what happened (Markdown, escaped); ``effect``: whether and why
    it changes the verdict, with the number it was compared against; ``kind``: a short id."""

    severity: Severity
    text: str
    changes_verdict: bool
    effect: str
    kind: str
    #: False where no rule assessed the warning (``changes_verdict`` is then the cautious True)
    assessed: bool = True

    def markdown(self) -> str:
        """The warning as one Markdown line: ⚠, the text, then its effect in italics."""
        return f"⚠ {self.text} *{self.effect}*"


def _names(comp: Comparison, arms: Sequence[str]) -> str:
    return ", ".join(f"**{md_text(a)}**" for a in dict.fromkeys(arms))


def _min_effect(recs: Sequence[Any] | None) -> float:
    effects = [float(r.profile.min_effect_pct) for r in recs or () if getattr(r, "profile", None) is not None]
    return min(effects) if effects else DEFAULT_MIN_EFFECT_PCT


def shortest_wait(comp: Comparison, concurrency: int | None = None) -> tuple[float, str] | None:
    """(seconds, what) of the shortest median wait any arm measured at any level (``concurrency``:
    at that level only) — TTFT p50, else e2e p50, else the Little's-law mean — the figure a late
    timestamp distorts most; None without one."""
    lv = comp.levels if concurrency is None else comp.levels[comp.levels["concurrency"] == concurrency]
    for col, name in (("ttft_p50_s", "median time to first token"), ("e2e_p50_s", "median end-to-end time"),
                      ("e2e_mean_est_s", "mean request time (Little's law)")):
        if col in lv:
            v = pd.to_numeric(lv[col], errors="coerce")
            v = v[v > 0]
            if len(v):
                i = v.idxmin()
                row = lv.loc[i]
                return float(v[i]), (f"the shortest {name} measured ({float(v[i]) * 1e3:.0f} ms, "
                                     f"{md_text(row['arm'])} at {int(row['concurrency'])})")
    return None


def _weighed_lag(comp: Comparison, lags: Sequence[tuple[int | None, float]], min_effect: float,
                 name: str = "") -> tuple[bool, str, float]:
    """(changes the verdict, effect, the lag it names in ms) of late timestamps: ``lags`` (concurrency,
    ms) each weighed against the shortest median wait measured at its own level (a late chunk delays
    the waits of the level it belongs to), else (no level, or none measured there) at any level; the
    largest share decides. ``name`` says what the lag is ('its event-loop lag p99': '… (2.0 ms)')."""
    weighed = []
    for c, lag_ms in lags:
        here = shortest_wait(comp, c) if c is not None else None
        wait = here or shortest_wait(comp)
        if wait is not None and math.isfinite(lag_ms):
            weighed.append((lag_ms / 1e3 / wait[0] * 100, c if here else None, lag_ms, wait))
    if not weighed:
        lag_ms = max((x for _, x in lags if math.isfinite(x)), default=0.0)
        return False, (f"Does not change the verdict: no measured wait is judged on these data, and aggregate "
                       f"throughput does not depend on timestamps ({_lag_text(lag_ms, name)})."), lag_ms
    share, c, lag_ms, wait = max(weighed, key=lambda w: w[0])
    lag = _lag_text(lag_ms, name)
    if c is None:
        if share > min_effect:
            return True, (f"Can change the verdict: {lag} is {share:.1f}% of {wait[1]}, more than the "
                          f"{min_effect:g}% minimum effect, so the latency figures may be off by a deciding "
                          "amount."), lag_ms
        return False, (f"Does not change the verdict: {lag} is {share:.1f}% of {wait[1]}, below the "
                       f"{min_effect:g}% minimum effect; aggregate throughput does not depend on timestamps."), lag_ms
    if share > min_effect:
        return True, (f"Can change the verdict: at concurrency {c}, {lag} is {share:.1f}% of {wait[1]}, "
                      f"more than the {min_effect:g}% minimum effect, so the latency figures there may be off by a "
                      "deciding amount."), lag_ms
    return False, (f"Does not change the verdict: the largest share is at concurrency {c}, where {lag} is "
                   f"{share:.1f}% of {wait[1]}, below the {min_effect:g}% minimum effect; aggregate throughput does "
                   "not depend on timestamps."), lag_ms


def _lag_text(lag_ms: float, name: str) -> str:
    """'2.0 ms', or with a name 'its event-loop lag p99 (2.0 ms)'."""
    return f"{name} ({lag_ms:.1f} ms)" if name else f"{lag_ms:.1f} ms"


def _run_levels(comp: Comparison) -> pd.DataFrame:
    """Every run's own level rows (one per arm, repeat and concurrency), else the comparison's levels."""
    frames = [f.assign(arm=a) if "arm" not in f else f
              for a, f in (getattr(comp, "raw_levels", None) or {}).items() if f is not None and not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else comp.levels


def _simulator_lag(comp: Comparison, lv: pd.DataFrame, min_effect: float) -> PageWarning | None:
    """The reference server fell behind its profile's schedule on some level (``sim_*`` columns of
    ``lv``, every run's level rows): a clock resync there (it ran slower than its profile: can change
    the verdict), or steps that woke on average more than :data:`SIM_LAG_WARN_MS` late (assessed as a
    late timestamp of that size)."""
    if "sim_step_lag_mean_ms" not in lv:
        return None

    def column(name: str, missing: float) -> pd.Series:
        return pd.to_numeric(lv[name], errors="coerce") if name in lv else pd.Series(missing, index=lv.index)

    lag, resyncs = column("sim_step_lag_mean_ms", math.nan), column("sim_clock_resyncs", 0.0).fillna(0)
    hot_rows = (lag > SIM_LAG_WARN_MS) | (resyncs > 0)
    hot = lv[hot_rows]
    if hot.empty:
        return None
    hot_lag = lag[hot_rows]
    worst = float(hot_lag.max())
    # the share of a step of that same level (the parenthesis reads as the worst lag's)
    share = float(column("sim_step_lag_pct", math.nan)[hot_lag.idxmax()]) if hot_lag.notna().any() else math.nan
    n_resync = int(resyncs[hot_rows].sum())
    lost = float(column("sim_resync_lost_s", 0.0).fillna(0)[hot_rows].sum())
    conc = sorted({int(c) for c in hot["concurrency"]})
    runs = int(lag.notna().sum())
    text = (f"**The simulated server fell behind its schedule** in {len(hot)} of {runs} measured levels (each arm, "
            f"repeat and concurrency counted once) of {_names(comp, list(hot['arm']))}, at concurrency "
            f"{', '.join(str(c) for c in conc)}: its steps woke up to "
            f"{worst:.1f} ms late on average" + (f" ({share:.0f} % of a step)" if math.isfinite(share) else "")
            + (f", and its clock was reset {n_resync} time(s), dropping {lost:.2f} s of schedule" if n_resync else "")
            + ". Those figures measure this machine's CPU as well as the profile: rerun on a quieter machine, or "
            "with fewer arms at once.")
    if n_resync:
        return PageWarning("high", text, True, "Can change the verdict: where the clock was reset the simulated "
                           "server ran slower than its profile, so its throughput there is the machine's, not the "
                           "configuration's.", "simulator-lag")
    per_level = hot_lag.groupby(hot["concurrency"]).max()
    changes, effect, _ = _weighed_lag(comp, [(int(c), float(x)) for c, x in per_level.items()], min_effect)
    return PageWarning("high" if changes else "low", text, changes, effect, "simulator-lag")


def _level_lag_ms(comp: Comparison, where: Sequence[tuple[str, int | None]]) -> float | None:
    """The largest client event-loop lag p99 (ms) recorded in the levels named (arm, concurrency)."""
    lv = comp.levels
    if "client_loop_lag_p99_s" not in lv:
        return None
    vals = [float(v) for a, c in where for v in lv.loc[(lv["arm"] == a) & ((c is None) | (lv["concurrency"] == c)),
                                                      "client_loop_lag_p99_s"] if pd.notna(v)]
    return max(vals) * 1e3 if vals else None


def _recorded(comp: Comparison, min_effect: float) -> list[PageWarning]:
    """The arms' meta.json warnings, grouped by their text with the level and numbers left out."""
    groups: dict[str, list[tuple[str, int | None, int | None, str]]] = {}
    for arm, text in comp.warnings:
        m = _LEVEL.match(text)
        c, r, body = (int(m.group(1)), int(m.group(2)), m.group(3)) if m else (None, None, text)
        key = _NUMBER.sub("#", body) if m else body
        groups.setdefault(key, []).append((arm, c, r, body))
    out = []
    for key, items in groups.items():
        arms = [a for a, _, _, _ in items]
        levels = sorted({c for _, c, _, _ in items if c is not None})
        first = items[0][3]
        where = "its meta.json" if len(set(arms)) == 1 else "each one's meta.json"
        at = f" at concurrency {', '.join(map(str, levels))}" if levels else ""
        lags = [(c, float(x.group(1))) for _, c, _, b in items if (x := _LAG.search(b))]
        if lags:
            lag = max(x for _, x in lags)
            body = (f"event-loop lag p99 up to {lag:.1f} ms in {len(items)} run{'s' if len(items) > 1 else ''}"
                    f"{at}: chunk timestamps can be late by that much")
            changes, effect, _ = _weighed_lag(comp, lags, min_effect)
            out.append(PageWarning("medium" if changes else "low", f"{_names(comp, arms)} (recorded in {where}): "
                                   f"{md_text(body)}", changes, effect, "timestamps"))
            continue
        if _CORES.search(first):
            per_level = [(c, ms) for a, c, _, _ in items if (ms := _level_lag_ms(comp, [(a, c)])) is not None]
            if per_level:
                changes, effect, _ = _weighed_lag(comp, per_level, min_effect, "its event-loop lag p99")
            else:
                changes, effect = True, ("Can change the verdict: a busy client stamps chunks late, and these data "
                                         "record no event-loop lag to bound by how much.")
            out.append(PageWarning("medium", f"{_names(comp, arms)} (recorded in {where}){md_text(at)}: "
                                   f"{md_text(first)}", changes, effect, "timestamps"))
            continue
        flights = [(float(x.group(1)), int(x.group(2))) for *_, b in items if (x := _IN_FLIGHT.search(b))]
        if flights:
            short = max((1 - f / c) * 100 for f, c in flights)
            changes = short > min_effect
            verb = "Can change" if changes else "Does not change"
            rel = "more" if changes else "not more"
            effect = (f"{verb} the verdict: the client kept up to {short:.0f}% fewer requests in flight than the "
                      f"level names, {rel} than the {min_effect:g}% minimum effect, so those levels measured a lower "
                      "concurrency than their label.")
            out.append(PageWarning("high" if changes else "low", f"{_names(comp, arms)} (recorded in {where}){at}: "
                                   f"{md_text(first)}", changes, effect, "in-flight"))
            continue
        text = f"{_names(comp, arms)} (recorded in {where}){md_text(at) if len(items) > 1 else ''}: {md_text(first)}"
        low = first.lower()
        if CLIENT_BOUND in low:
            out.append(PageWarning("high", text, True, _CLIENT_EFFECT, "client-bound"))
        elif "counted from chunks" in low:
            out.append(PageWarning("high", text, True, "Changes the verdict: token-based figures of chunk-counted arms "
                                   "are not trusted, so no throughput verdict is given for them.", "chunks"))
        elif "tokenize" in low:
            out.append(PageWarning("low", text, False, "Does not change the verdict: the server's own tokenizer "
                                   "counts the tokens exactly.", "tokenizer"))
        elif "prefix-cache flush failed" in low:
            out.append(PageWarning("high", text, True, "Can change the verdict: prompts cached from an earlier level "
                                   "skip prefill there, which favours whichever arm ran second.", "cache"))
        elif "ignore_eos" in low or "requested tokens" in low:
            out.append(PageWarning("high", text, True, "Can change the verdict: outputs shorter than asked change "
                                   "the work per request between arms.", "short-outputs"))
        elif "impossible" in low:
            out.append(PageWarning("medium", text, False, "Does not change the verdict: requests with impossible "
                                   "counts are error rows, counted as failures and never measured.", "counts"))
        else:
            out.append(PageWarning("medium", text, True, "Not assessed: specsweep has no rule for this warning, so it "
                                   "may change the verdict; check it against the figures.", "other", assessed=False))
    return out


_CLIENT_EFFECT = ("Can change the verdict: a client that fell behind lowers that arm's throughput and raises its "
                  "waits, so its deltas there measure the client, not the configuration.")


def _client_bound(comp: Comparison) -> list[PageWarning]:
    """One warning per imported arm whose median TTFT stands far above every other tool's at a level
    (:func:`~specsweep.analyze.client_bound.client_bound_levels`)."""
    by_arm: dict[str, list] = {}
    for found in client_bound_levels(comp.levels, comp.metas):
        by_arm.setdefault(found.arm, []).append(found)
    return [PageWarning("high", f"{_names(comp, [arm])}: {md_text(client_bound_sentence(found))}.", True,
                        _CLIENT_EFFECT, "client-bound") for arm, found in by_arm.items()]


def workload_caveat(comp: Comparison) -> str | None:
    """A caveat when any arm's workload is synthetic (:data:`~specsweep.decide.profiles.SYNTHETIC_KINDS`:
    random token IDs, random text, fixed token IDs), else None: speculation's gain follows acceptance, and acceptance
    on synthetic content is not that of real traffic."""
    kinds = sorted({m.workload.kind for m in comp.metas.values()} & SYNTHETIC_KINDS)
    if not kinds:
        return None
    return (f"⚠ The workload is {' and '.join(kinds)}: synthetic content, on which a drafter's acceptance (and so "
            "speculation's gain) is not representative of real traffic. These numbers bound capacity; measure a "
            "prompt set like your traffic (e.g. `workload=builtin`, or your own file) before deciding.")


def collect_warnings(comp: Comparison, recs: Sequence[Any] | None = None,
                     include_workload_caveat: bool = True) -> list[PageWarning]:
    """Every warning of the page, ranked (see the module docstring). ``recs``: the page's recommendations
    (their profiles' smallest ``min_effect_pct`` is the bar; default 2 %)."""
    min_effect = _min_effect(recs)
    out: list[PageWarning] = []
    for arm, where in comp.chunk_counted.items():
        out.append(PageWarning(
            "high", f"**{md_text(arm)}**: token counts came from SSE chunks ({md_text(where)}), not from "
            "the server's own counts, because the server reported none. Under speculation one chunk carries several "
            "tokens, so its aggregate throughput, per-user speed and acceptance are not trusted: no throughput or "
            "acceptance verdict is given for it.", True,
            "Changes the verdict: the throughput and per-user verdicts are withheld for it.", "chunks"))
    base = comp.metas[comp.baseline].workload
    for arm in comp.spec_arms:
        diffs = workload_differences(comp.metas[arm].workload, base)
        if diffs:
            out.append(PageWarning(
                "high", f"**{md_text(arm)}** and the baseline were measured with different "
                f"workloads ({md_text('; '.join(diffs))}) and compared anyway (`--allow-workload-mismatch`).", True,
                "Can change the verdict: its deltas mix the configuration's effect with the workload's, so they "
                "are not the configuration's alone.", "workload-mismatch"))
    out += _recorded(comp, min_effect)
    out += _client_bound(comp)
    runs = _run_levels(comp)
    sim = _simulator_lag(comp, runs, min_effect)
    if sim is not None:
        out.append(sim)
    from specsweep.measure.cpushare import cpu_share_warning

    cpu = cpu_share_warning(runs)
    if cpu:
        out.append(PageWarning(
            "medium", cpu, False,
            "Not assessed against the verdict: both arms lose the same share where it is alike; compare the "
            "arms' shares in the full data before trusting a small difference.", "client-cpu", assessed=False))
    if include_workload_caveat:
        caveat = workload_caveat(comp)
        if caveat:
            out.append(PageWarning("low", caveat.removeprefix("⚠ "), False,
                                   "Does not change the verdict on these data; it limits what they say about your "
                                   "traffic.", "synthetic-workload"))
    order = {id(w): i for i, w in enumerate(out)}
    return sorted(out, key=lambda w: (not w.changes_verdict, not w.assessed, SEVERITY_RANK[w.severity], order[id(w)]))


def warnings_markdown(warnings: Sequence[PageWarning]) -> str:
    """The warnings as a Markdown list, one per line, in their order ('' when there are none)."""
    return "\n".join(f"- {w.markdown()}" for w in warnings)


def top_warnings(comp: Comparison) -> list[str]:
    """The warnings of :func:`collect_warnings` (without the synthetic-workload caveat, which the verdict
    adds itself), ranked, as Markdown lines."""
    return [w.markdown() for w in collect_warnings(comp, include_workload_caveat=False)]
