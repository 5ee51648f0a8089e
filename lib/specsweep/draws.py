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

:func:`verdict_rates` runs :func:`~specsweep.compare.compare` and
:func:`~specsweep.recommend.recommend` (the default profiles) on each draw, in memory, and counts
outcomes. :data:`QUOTED` are the figures the report quotes; the test suite recomputes them.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsweep.compare import compare
from specsweep.recommend import DEFAULT_PROFILES, decide, parse_profile
from specsweep.store import ResultSet

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
    ("none", "repeats"): {"no_difference": 0.96, "any_crossover": 0.0},
    ("none", "averaged"): {"no_difference": 1.0, "any_crossover": 0.0},
    ("better", "repeats"): {"enable": 1.0},
    ("better", "averaged"): {"enable": 1.0},
    ("crossover", "repeats"): {"crossover_4_16": 1.0},
    ("crossover", "averaged"): {"crossover_4_16": 1.0},
}


def _meta(arm: str, repeats: int) -> dict[str, Any]:
    return {"schema_version": 1, "kind": "reference", "run_id": f"draw-{arm}", "arm": arm, "label": arm,
            "complete": True, "level_only": True, "server": {"name": "sglang"},
            "workload": {"kind": "prompt-file", "input_tokens": 1000, "output_tokens": 1000},
            "sweep": {"concurrency": list(LEVELS), "repeats": repeats}}


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
        flat = [d.verdict == "disable" and not (d.judged["outcome"] == "loss").any() for _, d in recs]
        counts["no_difference"] += all(flat)
        cx = comp.crossover("spec", "output_tok_s")
        counts["any_crossover"] += len(cx) > 0
        counts["enable"] += all(d.verdict == "enable" for _, d in recs)
        thr = next(d for p, d in recs if p.objective == "throughput" and not p.min_user_tok_s)
        counts["throughput_enable"] += thr.verdict == "enable"
        counts["crossover_4_16"] += (len(cx) == 1 and 4 <= cx.iloc[0].crossover_concurrency <= 16
                                     and thr.verdict == "enable_up_to" and 4 <= (thr.up_to or 0) <= 16)
    return {k: v / n for k, v in counts.items()}


def measure_quoted(n: int = 500) -> dict[tuple[str, str], dict[str, float]]:
    """Recompute what :data:`QUOTED` should hold (about a minute)."""
    out = {}
    for case, judged in JUDGED.items():
        for form, seed in SEEDS.items():
            rates = verdict_rates(case, form, n=n, seed=seed)
            out[(case, form)] = {k: rates[k] for k in judged}
    return out


if __name__ == "__main__":  # python -m specsweep.draws: print the figures to paste into QUOTED
    import pprint

    pprint.pprint(measure_quoted(), width=120)
