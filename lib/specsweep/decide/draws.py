"""How often the verdicts are right: fresh synthetic arm pairs drawn from a stated noise model.

The noise model (:func:`draw_pair`): seven levels, concurrency 1, 2, 4, …, 64. The baseline's
aggregate output tok/s is 110 × C^0.8 and its per-request tok/s 110 × C^−0.25 (a seed-like
shape: per-request speed crosses 60 tok/s between 8 and 16). The arm is the baseline times a
true ratio r(C) on both figures. Every run of every arm, level and figure is multiplied by an
independent log-normal factor exp(σ·ε), ε ~ N(0, 1), σ = 3 % (run-to-run noise). Each level is
run 3 times; the *averaged* form publishes one row per level, the mean of its 3 runs, as a
published table would. 1,000 output tokens per request.

Cases: ``none`` r = 1; ``better`` r = 1.10; ``crossover`` r = 1 − 0.10 × (log2 C − 3), i.e.
+10 % at 4, 0 at 8, −10 % at 16 (and +30 % at 1, −30 % at 64).

:func:`verdict_rates` runs :func:`~specsweep.analyze.compare.compare` and
:func:`~specsweep.decide.recommend` (the default profiles) on each draw, in memory, and counts
outcomes. :data:`QUOTED` are the figures the report quotes; the test suite recomputes them.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.compare import compare
from specsweep.decide import DEFAULT_PROFILES, decide, parse_profile
from specsweep.decide.judge import carried_by_one
from specsweep.decide.verdicts import DecisionKind, Verdict
from specsweep.results.meta import Meta
from specsweep.results.store import ResultSet

LEVELS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
NOISE_SIGMA: float = 0.03
REPEATS: int = 3
CASES: dict[str, Any] = {
    "none": lambda c: 1.0,
    "better": lambda c: 1.10,
    "crossover": lambda c: 1.0 - 0.10 * (math.log2(c) - 3),
}
MODEL_TEXT: str = (
    "levels 1, 2, 4, …, 64; baseline aggregate 110 × C^0.8 tok/s and per-request 110 × C^−0.25 tok/s; the arm is "
    "the baseline times a true ratio; every run of every figure carries independent log-normal noise of 3%; "
    "3 runs per level, given either as 3 rows or as one averaged row per level (as a published table); 1,000 output "
    "tokens; the three default profiles.")
CASE_TEXT: dict[str, str] = {
    "none": "no difference (ratio 1)",
    "better": "always better (+10%)",
    "crossover": "crossover at 8 (+10% at 4, −10% at 16; −10% per doubling)",
}
FORM_TEXT: dict[str, str] = {"repeats": "3 runs per level", "averaged": "one averaged row per level"}
RESULT_TEXT: dict[str, str] = {
    "no_difference": "every profile: no measurable difference",
    "any_crossover": "a crossover claimed",
    "enable": "every profile: enable",
    "crossover_4_16": "one crossover, between 4 and 16, and enable up to it",
}
#: which results each case is judged on
JUDGED: dict[str, tuple[str, ...]] = {
    "none": ("no_difference", "any_crossover"),
    "better": ("enable",),
    "crossover": ("crossover_4_16",),
}
#: figures the report quotes: verdict_rates(case, form, n=500, seed=SEEDS[form]) for the JUDGED
#: results; tests/test_verdict_draws.py recomputes every one and fails if any differs
SEEDS: dict[str, int] = {"repeats": 0, "averaged": 1}
QUOTED: dict[tuple[str, str], dict[str, float]] = {
    ("none", "repeats"): {"no_difference": 0.982, "any_crossover": 0.0},
    ("none", "averaged"): {"no_difference": 1.0, "any_crossover": 0.0},
    ("better", "repeats"): {"enable": 1.0},
    ("better", "averaged"): {"enable": 1.0},
    ("crossover", "repeats"): {"crossover_4_16": 1.0},
    ("crossover", "averaged"): {"crossover_4_16": 1.0},
}


def _meta(arm: str, repeats: int) -> Meta:
    return Meta.model_validate({
        "schema_version": 1, "kind": "reference", "run_id": f"draw-{arm}", "arm": arm, "label": arm,
        "complete": True, "level_only": True, "server": {"name": "sglang"},
        "workload": {"kind": "prompt-file", "input_tokens": 1000, "output_tokens": 1000},
        "sweep": {"concurrency": list(LEVELS), "repeats": repeats}})


def draw_pair(case: str, form: str, rng: np.random.Generator) -> list[ResultSet]:
    """One baseline and one arm (``form``: 'repeats' or 'averaged') from the noise model above."""
    c = np.array(LEVELS, float)
    base_agg, base_user = 110.0 * c ** 0.8, 110.0 * c ** -0.25
    ratio = np.array([CASES[case](x) for x in LEVELS])
    sets = []
    for arm, r in (("baseline", np.ones_like(ratio)), ("spec", ratio)):
        noise = np.exp(NOISE_SIGMA * rng.standard_normal((2, len(LEVELS), REPEATS)))
        agg = (base_agg * r)[:, None] * noise[0]
        user = (base_user * r)[:, None] * noise[1]
        if form == "averaged":
            agg, user, reps = agg.mean(axis=1, keepdims=True), user.mean(axis=1, keepdims=True), 1
        else:
            reps = REPEATS
        rows = [{"run_id": f"draw-{arm}", "arm": arm, "concurrency": int(lv), "repeat": j,
                 "output_tok_s": float(agg[i, j]), "request_tok_s_mean": float(user[i, j])}
                for i, lv in enumerate(LEVELS) for j in range(reps)]
        sets.append(ResultSet(Path("."), _meta(arm, reps), pd.DataFrame(rows)))
    return sets


def verdict_rates(case: str, form: str, n: int = 500, seed: int = 0) -> dict[str, float]:
    """Fractions of ``n`` draws with each outcome, over the default profiles.

    ``no_difference``: every profile says no measurable difference (verdict disable, no loss
    level); ``any_crossover``: an aggregate crossover is claimed; ``enable``: every profile says
    enable; ``throughput_enable``: the throughput profile does; ``crossover_4_16``: exactly one
    aggregate crossover, placed between 4 and 16, and the throughput profile says enable up to a
    point in that range.
    """
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(("no_difference", "any_crossover", "enable", "throughput_enable", "crossover_4_16"), 0)
    for _ in range(n):
        comp = compare(draw_pair(case, form, rng), n_boot=0)
        recs = [(parse_profile(p), decide(comp, p)) for p in DEFAULT_PROFILES]
        flat = [d.decision == DecisionKind.NO_DIFFERENCE for _, d in recs]
        counts["no_difference"] += all(flat)
        cx = comp.crossover("spec", "output_tok_s")
        counts["any_crossover"] += len(cx) > 0
        counts["enable"] += all(d.verdict == Verdict.ENABLE for _, d in recs)
        thr = next(d for p, d in recs if p.objective == "throughput" and not p.min_user_tok_s)
        counts["throughput_enable"] += thr.verdict == Verdict.ENABLE
        counts["crossover_4_16"] += (len(cx) == 1 and 4 <= cx.iloc[0].crossover_concurrency <= 16
                                     and thr.verdict == Verdict.ENABLE_UP_TO and 4 <= (thr.up_to or 0) <= 16)
    return {k: v / n for k, v in counts.items()}


def measure_quoted(n: int = 500) -> dict[tuple[str, str], dict[str, float]]:
    """Recompute what :data:`QUOTED` should hold (about a minute)."""
    out = {}
    for case, judged in JUDGED.items():
        for form, seed in SEEDS.items():
            rates = verdict_rates(case, form, n=n, seed=seed)
            out[(case, form)] = {k: rates[k] for k in judged}
    return out




# ------------------------------------------------------------------------ harder cases
#
# A second generator, for the cases an operator meets on real machines: noise larger than the
# assumption, drift between arms measured back to back, a control arm, noise that grows with
# concurrency, a crossover between the levels of the seed's grid. It builds whole studies in time
# order (every run has a start time) and never calls the code it judges.
#
# Model: levels GRID (1, 2, …, 128) or the seed's grid SEED_GRID; the baseline's per-request tok/s
# is 120 ÷ (1 + C/20)^0.6 and its aggregate C × that × 0.97; the arm is the baseline times a true
# ratio on the aggregate (``agg``) and on per-request speed (``user``). Every run of every figure
# carries log-normal noise exp(σ(C)·ε), the two figures of one run correlated (ρ = 0.5). Runs are
# measured in time order: the baseline's levels (its repeats back to back), then each arm's, then
# the sentinel runs; a run lasts one minute; drift multiplies every figure by
# exp(−drift × t ÷ T) where T is one arm's sweep (``drift`` = 0.04: the machine is 4 % slower by
# the time the next arm starts).

GRID: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
SEED_GRID: tuple[int, ...] = (1, 4, 16, 32, 64, 128)
RUN_S: float = 60.0


def _ratio_none(c: np.ndarray) -> np.ndarray:
    return np.ones_like(c)


def _crossover_24(c: np.ndarray) -> np.ndarray:
    """+10 % per halving below 24, −10 % per doubling above (ln scale): +46 % at 1, −24 % at 128."""
    return np.exp(-0.10 * (np.log2(c) - np.log2(24.0)))


def _curved_24(c: np.ndarray) -> np.ndarray:
    """A delta that bends down with load (ln ratio quadratic in log2 C): 0 at 24, +6 % at 16, −5 % at 32,
    +27 % at 1 and −28 % at 128; a straight line in log2 C through it crosses 0 too early."""
    x = np.log2(c)
    b = math.log(1.06) / (math.log2(24.0) ** 2 - 16.0)
    return np.exp(b * (math.log2(24.0) ** 2 - x * x))


def _edge_loss_high(c: np.ndarray) -> np.ndarray:
    """+6.7 % up to 64, −10 % at 128: the right answer is 'enable up to X', 64 < X < 128."""
    return np.where(c >= 128, 0.90, 1.067)


def _edge_loss_low(c: np.ndarray) -> np.ndarray:
    """−10 % at 1, +6.7 % from 2: the right answer is 'enable from X', 1 < X < 2."""
    return np.where(c <= 1, 0.90, 1.067)


def _stall_32(c: np.ndarray) -> np.ndarray:
    """No difference, but every run of level 32 stalled (−30 %): a pause that hit one whole level."""
    return np.where(c == 32, 0.70, 1.0)


#: case -> (levels, repeats, noise σ(C) as a function, aggregate ratio, per-user ratio, drift,
#: sentinel levels, control arm)
HARD_CASES: dict[str, dict[str, Any]] = {
    "nominal_none": dict(levels=GRID, repeats=3, sigma=lambda c: 0.03 + 0 * c, agg=_ratio_none, user=_ratio_none),
    "nominal_plus4": dict(levels=GRID, repeats=3, sigma=lambda c: 0.03 + 0 * c,
                          agg=lambda c: 1.04 + 0 * c, user=lambda c: 1.04 + 0 * c),
    "noise_2x_one_run": dict(levels=GRID, repeats=1, sigma=lambda c: 0.06 + 0 * c, agg=_ratio_none, user=_ratio_none),
    "drift_no_sentinel": dict(levels=GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c, agg=_ratio_none,
                              user=_ratio_none, drift=0.04),
    "drift_sentinel": dict(levels=GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c, agg=_ratio_none, user=_ratio_none,
                           drift=0.04, sentinel=(1, 128)),
    "drift_control": dict(levels=GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c, agg=_ratio_none, user=_ratio_none,
                          drift=0.04, control=True),
    "drift_control_between": dict(levels=GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c, agg=_ratio_none,
                                  user=_ratio_none, drift=0.04, control=True, control_between=True),
        "control_noise_only": dict(levels=GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c, agg=_ratio_none,
                               user=_ratio_none, control=True),
    "growing_noise": dict(levels=GRID, repeats=3, sigma=lambda c: 0.01 * 8 ** (np.log2(c) / 7), agg=_ratio_none,
                          user=_ratio_none),
    "latency_crossover_24": dict(levels=SEED_GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c, agg=_crossover_24,
                                 user=lambda c: _crossover_24(c) * 1.15),
    "latency_crossover_24_3runs": dict(levels=SEED_GRID, repeats=3, sigma=lambda c: 0.03 + 0 * c,
                                       agg=_crossover_24, user=lambda c: _crossover_24(c) * 1.15),
    "curved_24_one_run": dict(levels=GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c, agg=_curved_24,
                              user=_curved_24),
    "plus6_one_run": dict(levels=GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c,
                          agg=lambda c: 1.06 + 0 * c, user=lambda c: 1.06 + 0 * c),
    "edge_loss_high": dict(levels=GRID, repeats=3, sigma=lambda c: 0.03 + 0 * c, agg=_edge_loss_high,
                           user=lambda c: 1.25 + 0 * c),
    "edge_loss_high_one_run": dict(levels=GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c, agg=_edge_loss_high,
                                   user=lambda c: 1.25 + 0 * c),
    "edge_loss_low": dict(levels=GRID, repeats=3, sigma=lambda c: 0.03 + 0 * c, agg=_edge_loss_low,
                          user=lambda c: 1.25 + 0 * c),
    "stalled_level": dict(levels=GRID, repeats=3, sigma=lambda c: 0.03 + 0 * c, agg=_stall_32, user=_stall_32),
    "nominal_none_one_run": dict(levels=GRID, repeats=1, sigma=lambda c: 0.03 + 0 * c, agg=_ratio_none,
                                 user=_ratio_none),
}
HARD_CASE_TEXT: dict[str, str] = {
    "nominal_none": "no difference, 3% noise, 3 runs per level",
    "nominal_plus4": "+4% everywhere, 3% noise, 3 runs per level",
    "noise_2x_one_run": "no difference, noise 6% (twice the assumption), one run per level",
    "drift_no_sentinel": "no difference, machine 4% slower per arm, one run per level, no sentinel",
    "drift_sentinel": "no difference, machine 4% slower per arm, one run per level, baseline re-measured at 1 and 128",
    "drift_control": "no difference, machine 4% slower per arm, one run per level, a control arm measured last",
    "drift_control_between": "no difference, machine 4% slower per arm, one run per level, a control arm measured "
                             "between the baseline and the candidate",
        "control_noise_only": "no difference, a control arm that differs by noise alone, one run per level",
    "growing_noise": "no difference, noise growing from 1% at C=1 to 8% at C=128, 3 runs per level",
    "latency_crossover_24": "crossover at 24 on levels 1, 4, 16, 32, 64, 128 (per-user +15% more), one run per level",
    "latency_crossover_24_3runs": "crossover at 24 on levels 1, 4, 16, 32, 64, 128 (per-user +15% more), 3 runs",
    "curved_24_one_run": "a bending delta crossing 0 at 24 on levels 1, 2, …, 128 (+6% at 16, −5% at 32), one run",
    "plus6_one_run": "+6% everywhere, 3% noise, one run per level",
    "edge_loss_high": "aggregate +6.7% up to 64, −10% at 128 (per-user +25%), 3 runs per level",
    "edge_loss_high_one_run": "aggregate +6.7% up to 64, −10% at 128 (per-user +25%), one run per level",
    "edge_loss_low": "aggregate −10% at 1, +6.7% from 2 (per-user +25%), 3 runs per level",
    "stalled_level": "no difference but level 32 stalled in the arm (−30% in all 3 runs), 3 runs per level",
    "nominal_none_one_run": "no difference, 3% noise (the assumption exactly), one run per level",
}
HARD_MODEL_TEXT: str = (
    "levels 1, 2, 4, …, 128 (or the seed's 1, 4, 16, 32, 64, 128); baseline per-request 120 ÷ (1 + C/20)^0.6 tok/s, "
    "aggregate C × that × 0.97; the arm is the baseline times a true ratio on each figure; log-normal noise on every "
    "run, a run's two figures correlated (ρ = 0.5); runs in time order (the baseline's levels, then each arm's — a "
    "control arm last, or in one case between the baseline and the arm — then any sentinel), a run a minute; drift: every figure × exp(−0.04 × t ÷ one arm's sweep time); the three default "
    "profiles.")


def _hard_meta(arm: str, repeats: int, control: bool) -> Meta:
    meta = _meta(arm, repeats)
    meta.sweep.concurrency = None
    if control:
        meta.control = True
    return meta


def draw_study(case: str | dict[str, Any], rng: np.random.Generator) -> list[ResultSet]:
    """One study of ``case`` (a name in :data:`HARD_CASES`, or a spec of the same form): baseline,
    'spec' and, with a control, 'control'."""
    spec = HARD_CASES[case] if isinstance(case, str) else case
    levels = np.array(spec["levels"], float)
    reps = int(spec["repeats"])
    k = len(levels)
    sigma = np.asarray(spec["sigma"](levels), float)
    user0 = 120.0 / (1 + levels / 20) ** 0.6
    agg0 = levels * user0 * 0.97
    arms = [("baseline", np.ones(k), np.ones(k), False), ("spec", spec["agg"](levels), spec["user"](levels), False)]
    if spec.get("control"):
        # measured last, or (``control_between``) between the baseline and the candidate
        arms.insert(1 if spec.get("control_between") else 2, ("control", np.ones(k), np.ones(k), True))
    sweep_runs = k * reps
    drift = float(spec.get("drift", 0.0))
    t0 = pd.Timestamp(1_767_225_600, unit="s", tz="UTC")  # an arbitrary origin; only differences matter
    sets = []
    clock = 0
    sentinel_rows: list[dict[str, Any]] = []
    per_arm: dict[str, list[dict[str, Any]]] = {}
    for arm, r_agg, r_user, _ in arms:
        e = rng.standard_normal((2, k, reps))
        e[1] = 0.5 * e[0] + math.sqrt(1 - 0.25) * e[1]
        t = clock + np.arange(sweep_runs).reshape(k, reps)
        slow = np.exp(-drift * t / sweep_runs)
        agg = (agg0 * r_agg)[:, None] * np.exp(sigma[:, None] * e[0]) * slow
        user = (user0 * r_user)[:, None] * np.exp(sigma[:, None] * e[1]) * slow
        clock += sweep_runs
        per_arm[arm] = [{"run_id": f"draw-{arm}", "arm": arm, "concurrency": int(lv), "repeat": j,
                         "output_tok_s": float(agg[i, j]), "request_tok_s_mean": float(user[i, j]),
                         "started_utc": (t0 + pd.Timedelta(seconds=RUN_S * float(t[i, j]))).isoformat()}
                        for i, lv in enumerate(levels) for j in range(reps)]
    for lv in spec.get("sentinel", ()):
        i = list(spec["levels"]).index(lv)
        e = rng.standard_normal(2)
        e[1] = 0.5 * e[0] + math.sqrt(0.75) * e[1]
        slow_now = math.exp(-drift * clock / sweep_runs)
        sentinel_rows.append({"run_id": "draw-baseline-sentinel", "arm": "baseline", "concurrency": int(lv),
                              "repeat": reps, "sentinel": True,
                              "output_tok_s": float(agg0[i] * math.exp(sigma[i] * e[0]) * slow_now),
                              "request_tok_s_mean": float(user0[i] * math.exp(sigma[i] * e[1]) * slow_now),
                              "started_utc": (t0 + pd.Timedelta(seconds=RUN_S * clock)).isoformat()})
        clock += 1
    for arm, _, _, control in arms:
        rows = per_arm[arm] + (sentinel_rows if arm == "baseline" else [])
        sets.append(ResultSet(Path("."), _hard_meta(arm, reps, control), pd.DataFrame(rows)))
    return sets


def true_wait_longer(case: str) -> dict[int, int]:
    """{level: +1 where the arm's true Little's-law wait is longer, −1 shorter, 0 equal} of a case."""
    spec = HARD_CASES[case]
    c = np.array(spec["levels"], float)
    r = spec["agg"](c)
    return {int(x): (1 if v < 1 - 1e-9 else -1 if v > 1 + 1e-9 else 0) for x, v in zip(c, r)}


def flat_of(d: Any) -> bool:
    """Whether a decision says no measurable difference."""
    return bool(d.decision == DecisionKind.NO_DIFFERENCE)


def _wrong_sign(thr: Any, agg: Any) -> bool:
    """Whether the throughput decision calls a level a gain where the true aggregate ratio is below 1, or the reverse."""
    truth = agg(thr.judged["concurrency"].to_numpy(float))
    return bool(any((o == "gain" and r < 1 - 1e-9) or (o == "loss" and r > 1 + 1e-9)
                    for o, r in zip(thr.judged["outcome"], truth)))


def _edge_right(thr: Any, agg: Any, levels: Any) -> bool:
    """Whether an edge loss is found: 'enable up to X' between the last two levels (loss at the top),
    'enable from X' between the first two (loss at the bottom), or 'not established' (the end level
    unresolved); False for any other decision or where no end level loses."""
    ends = np.array([levels[0], levels[-1]], float)
    r = agg(ends)
    if r[1] < 1:
        found = thr.verdict == Verdict.ENABLE_UP_TO and levels[-2] <= (thr.up_to or 0) <= levels[-1]
    elif r[0] < 1:
        found = thr.verdict == Verdict.ENABLE_FROM and levels[0] <= (thr.from_c or 0) <= levels[1]
    else:
        return False
    return bool(found or thr.decision == DecisionKind.NOT_ESTABLISHED)


def hard_rates(case: str, n: int = 200, seed: int = 0) -> dict[str, float]:
    """Fractions of ``n`` draws of ``case`` with each outcome (keys as :data:`HARD_RESULT_TEXT`)."""
    rng = np.random.default_rng(seed)
    names = [p["name"] for p in DEFAULT_PROFILES]
    keys = ["no_difference", "any_crossover", "drift_named", "drift_caveat", "control_chosen", "throughput_enable",
            "latency_wrong_sign", "latency_disagrees", "crossover_16_32", "noise_replaced", "edge_wrong_sign", "edge_right", "one_level_flagged",
            ] + [f"false_claim:{nm}" for nm in names]
    counts = dict.fromkeys(keys, 0)
    truth = true_wait_longer(case)
    spec = HARD_CASES[case]
    from specsweep.decide.caveats import drift_sentences

    for _ in range(n):
        comp = compare(draw_study(case, rng), n_boot=0)
        decs = [(parse_profile(p), decide(comp, p)) for p in DEFAULT_PROFILES]
        flat = [d.decision == DecisionKind.NO_DIFFERENCE for _, d in decs]
        counts["no_difference"] += all(flat)
        for (p, _), f in zip(decs, flat):
            counts[f"false_claim:{p.name}"] += not f
        cx = comp.crossover("spec", "output_tok_s")
        thr = next(d for p, d in decs if p.objective == "throughput" and not p.min_user_tok_s)
        counts["any_crossover"] += len(cx) > 0
        counts["crossover_16_32"] += bool(len(cx) == 1 and 16 <= cx.iloc[0].crossover_concurrency <= 32
                                      and thr.verdict == Verdict.ENABLE_UP_TO and 16 <= (thr.up_to or 0) <= 32)
        counts["one_level_flagged"] += all(carried_by_one(d.judged) is not None for _, d in decs if not flat_of(d))
        counts["edge_wrong_sign"] += _wrong_sign(thr, spec["agg"])
        counts["edge_right"] += _edge_right(thr, spec["agg"], spec["levels"])
        curve = comp.curve("spec", "output_tok_s")
        counts["noise_replaced"] += curve is not None and "so it is used" in curve.noise
        counts["drift_named"] += comp.drift is not None and comp.drift.credible()
        counts["control_chosen"] += any(d.arm in comp.controls for _, d in decs)
        lat = next(d for p, d in decs if p.objective == "latency")
        counts["throughput_enable"] += thr.verdict == Verdict.ENABLE
        wrong = any((o == "gain" and truth[int(c)] > 0) or (o == "loss" and truth[int(c)] < 0)
                    for c, o in zip(lat.judged["concurrency"], lat.judged["outcome"]))
        counts["latency_wrong_sign"] += wrong
        both = lat.verdict == thr.verdict == Verdict.ENABLE_UP_TO
        counts["latency_disagrees"] += both and abs(math.log2((lat.up_to or 1) / (thr.up_to or 1))) > 1e-6
        counts["drift_caveat"] += any("no sentinel run" in c for c in drift_sentences(comp))
    return {k: v / n for k, v in counts.items()}


HARD_RESULT_TEXT: dict[str, str] = {
    "no_difference": "every profile: no measurable difference",
    "any_crossover": "a crossover claimed",
    "throughput_enable": "batch throughput: enable",
    "drift_named": "the drift is named (credible)",
    "drift_caveat": "the no-sentinel caveat is shown",
    "control_chosen": "the control arm recommended",
    "latency_wrong_sign": "latency: a level of the wrong sign",
    "latency_disagrees": "latency and throughput disagree on “up to”",
    "crossover_16_32": "one crossover, between 16 and 32, and enable up to it",
    "noise_replaced": "the band widened to the levels' scatter (larger than the assumption)",
    "edge_wrong_sign": "batch throughput: a level of the wrong sign",
    "edge_right": "batch throughput: the edge loss found, or called not established",
    "one_level_flagged": "every verdict resting on one level is flagged as such",
}
#: which results each hard case is quoted on (the report's table; tests/test_verdict_draws_hard.py)
HARD_JUDGED: dict[str, tuple[str, ...]] = {
    "nominal_none": ("no_difference",),
    "nominal_plus4": ("throughput_enable",),
    "noise_2x_one_run": ("no_difference", "any_crossover"),
    "drift_no_sentinel": ("no_difference", "drift_caveat"),
    "drift_sentinel": ("no_difference", "drift_named"),
    "drift_control": ("no_difference", "control_chosen"),
    "control_noise_only": ("no_difference", "control_chosen"),
    "growing_noise": ("no_difference",),
    "latency_crossover_24": ("latency_wrong_sign", "latency_disagrees", "any_crossover"),
    "latency_crossover_24_3runs": ("latency_wrong_sign", "latency_disagrees", "any_crossover"),
    "curved_24_one_run": ("crossover_16_32",),
    "plus6_one_run": ("throughput_enable",),
    "nominal_none_one_run": ("no_difference", "noise_replaced"),
    "edge_loss_high": ("edge_wrong_sign", "edge_right"),
    "edge_loss_low": ("edge_wrong_sign", "edge_right"),
    "edge_loss_high_one_run": ("edge_wrong_sign",),
    "drift_control_between": ("no_difference", "control_chosen"),
    "stalled_level": ("one_level_flagged",),
}
HARD_N: int = 200
#: hard_rates(case, n=HARD_N, seed=0) for the HARD_JUDGED results (python -m specsweep.decide.draws hard)
HARD_QUOTED: dict[str, dict[str, float]] = {
    "nominal_none": {"no_difference": 0.985},
    "nominal_plus4": {"throughput_enable": 0.825},
    "noise_2x_one_run": {"no_difference": 0.965, "any_crossover": 0.01},
    "drift_no_sentinel": {"no_difference": 0.635, "drift_caveat": 1.0},
    "drift_sentinel": {"no_difference": 1.0, "drift_named": 0.465},
    "drift_control": {"no_difference": 0.99, "control_chosen": 0.0},
    "control_noise_only": {"no_difference": 0.99, "control_chosen": 0.0},
    "growing_noise": {"no_difference": 0.99},
    "latency_crossover_24": {"latency_wrong_sign": 0.0, "latency_disagrees": 0.0, "any_crossover": 1.0},
    "latency_crossover_24_3runs": {"latency_wrong_sign": 0.0, "latency_disagrees": 0.0, "any_crossover": 1.0},
    "curved_24_one_run": {"crossover_16_32": 0.95},
    "plus6_one_run": {"throughput_enable": 0.52},
    "nominal_none_one_run": {"no_difference": 1.0, "noise_replaced": 0.435},
    "edge_loss_high": {"edge_wrong_sign": 0.0, "edge_right": 0.93},
    "edge_loss_low": {"edge_wrong_sign": 0.0, "edge_right": 0.95},
    "edge_loss_high_one_run": {"edge_wrong_sign": 0.005},
    "drift_control_between": {"no_difference": 0.99, "control_chosen": 0.0},
    "stalled_level": {"one_level_flagged": 0.98},
}


def measure_hard(n: int = HARD_N) -> dict[str, dict[str, float]]:
    """Recompute what :data:`HARD_QUOTED` should hold (a few minutes)."""
    return {case: {k: hard_rates(case, n=n, seed=0)[k] for k in judged} for case, judged in HARD_JUDGED.items()}


if __name__ == "__main__":  # python -m specsweep.decide.draws [hard]: print the figures to paste into QUOTED / HARD_QUOTED
    import pprint
    import sys

    pprint.pprint(measure_hard() if sys.argv[1:] == ["hard"] else measure_quoted(), width=120)
