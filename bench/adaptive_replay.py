"""How much device time the adaptive policy saves, and whether it decides as the full grid does.

Replays recorded full-grid studies through :mod:`specsweep.study.adaptive` with
:func:`specsweep.study.replay.replay` — every measurement the policy chooses is answered with the
recorded run and costs that run's measured window (a minute per run for the synthetic studies) —
and prints one row per case: studies replayed, how often the adaptive decision matches the full
grid's (class, arm, tie set, bracket; every default profile), the median and worst share of the
full grid's measurement time used, and how many studies reached a decision the full grid
contradicts with a credible band at some level.

Studies: the synthetic ones of :mod:`specsweep.decide.draws` (``HARD_CASES``: no effect, +4 %, +6 %,
crossovers in the middle and at both edges, drift with and without sentinel or control, a stalled
level, noise twice the assumption or growing with load; one or three runs per level), ``--draws``
of each; and every recorded study folder given (default: ``data/reference/real-llamacpp-smollm2``
and, where measured, ``data/runs/studies/*``), read only.

Each study's full-grid decision also gets its own flip chance (:func:`specsweep.decide.flip.flip_chances`,
``--flip-resamples`` reruns; the largest over the profiles): a full grid that a rerun would decide
otherwise in 10 % or more of reruns is itself near a coin flip, and the match rate is printed both
raw and on the *confident* studies (full-grid flip chance below 10 %). ``--flip-cache FILE`` keeps
those figures between runs (they depend on the study, not on the policy).

    .venv/bin/python bench/adaptive_replay.py [STUDY_DIR ...] [--draws 5] [--coarse 4] [--target-flip 0.05]
        [--flip-resamples 100] [--flip-cache FILE] [--no-recorded]

Prints numbers only; nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from specsweep.decide import DEFAULT_PROFILES, parse_profile
from specsweep.decide.draws import HARD_CASES, draw_study
from specsweep.decide.flip import flip_chances
from specsweep.results.store import load_result_sets
from specsweep.study.adaptive import COARSE_LEVELS, TARGET_FLIP
from specsweep.study.replay import Recorded, Replayed, replay

ROOT = Path(__file__).resolve().parents[1]
#: a full grid whose own flip chance is below this is confident: a mismatch there is the policy's
CONFIDENT: float = 0.10
RECORDED = [ROOT / "data" / "reference" / "real-llamacpp-smollm2", *sorted((ROOT / "data" / "runs" / "studies").glob("*"))]


def _row(name: str, runs: list[Replayed], seconds: float) -> str:
    frac = [r.fraction for r in runs]
    match = sum(r.matches for r in runs) / len(runs)
    return (f"| {name} | {len(runs)} | {match:.0%} | {statistics.median(frac):.0%} | {max(frac):.0%} | "
            f"{sum(r.contradicts for r in runs)} | {statistics.mean(len(r.steps) for r in runs):.1f} | "
            f"{', '.join(sorted({r.stop.reason for r in runs}))} | {seconds:.0f} |")


def _full_flip(key: str, sets: list, resamples: int, cache: dict[str, float]) -> float:
    """The largest flip chance over the profiles of the full grid ``sets`` (cached under ``key``)."""
    if key not in cache:
        try:
            chances = flip_chances(sets, DEFAULT_PROFILES, resamples=resamples)
        except ArithmeticError as exc:  # a resampled rerun the comparison cannot fit: no estimate, not confident
            print(f"{key}: no full-grid flip chance ({type(exc).__name__}: {exc})", file=sys.stderr)
            return float("nan")
        cache[key] = max(c.chance for c in chances.values())
    return cache[key]


def _summary(label: str, runs: list[Replayed], flips: dict[int, float]) -> str:
    frac = [r.fraction for r in runs]
    sure = [r for r in runs if flips.get(id(r), 1.0) < CONFIDENT]  # NaN (no estimate) is not confident
    sure_text = (f"{sum(r.matches for r in sure) / len(sure):.1%} of {len(sure)} confident"
                 if sure else "no confident study")
    return (f"{label}: {len(runs)} studies, match {sum(r.matches for r in runs) / len(runs):.1%} raw, {sure_text} "
            f"(full-grid flip chance < {CONFIDENT:.0%}), median time {statistics.median(frac):.0%}, "
            f"{sum(r.contradicts for r in runs)} contradicted")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="*", type=Path, help="recorded full-grid study folders (read only)")
    parser.add_argument("--draws", type=int, default=5, help="synthetic studies per case (0: none)")
    parser.add_argument("--cases", default=",".join(HARD_CASES), help="synthetic cases, comma-separated")
    parser.add_argument("--coarse", type=int, default=COARSE_LEVELS, help="levels of the coarse design")
    parser.add_argument("--target-flip", type=float, default=TARGET_FLIP, help="settled at this flip probability")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--flip-resamples", type=int, default=100, help="reruns per full-grid flip chance (0: none)")
    parser.add_argument("--flip-cache", type=Path, help="JSON file keeping the full grids' flip chances between runs")
    parser.add_argument("--no-recorded", action="store_true", help="synthetic studies only")
    args = parser.parse_args(argv)
    profiles = [parse_profile(p) for p in DEFAULT_PROFILES]
    kw = {"coarse": args.coarse, "target_flip": args.target_flip}
    print(f"coarse design {args.coarse} levels, settled at summed flip probability ≤ {args.target_flip:.0%}\n")
    print("| study | n | match | median time | worst time | contradicted | steps | stopped | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    every: list[Replayed] = []
    grids: dict[int, int] = {}  # id of a synthetic replay -> runs per level of its full grid
    flips: dict[int, float] = {}  # id of a replay -> its full grid's flip chance
    cache: dict[str, float] = json.loads(args.flip_cache.read_text()) if args.flip_cache and args.flip_cache.is_file() else {}
    for case in [c for c in args.cases.split(",") if c] if args.draws else []:
        rng = np.random.default_rng(args.seed)
        t0 = time.perf_counter()
        runs = []
        for i in range(args.draws):
            sets = draw_study(case, rng)
            runs.append(replay(Recorded.of(sets), profiles, name=case, **kw))
            if args.flip_resamples:
                flips[id(runs[-1])] = _full_flip(f"{case}#{args.seed}#{i}", sets, args.flip_resamples, cache)
        every += runs
        grids.update({id(r): int(HARD_CASES[case]["repeats"]) for r in runs})
        print(_row(case, runs, time.perf_counter() - t0), flush=True)
    recorded = [] if args.no_recorded else args.studies or [p for p in RECORDED if (p / "study.json").is_file()]
    for folder in recorded:
        t0 = time.perf_counter()
        sets = load_result_sets([str(folder)])
        run = replay(Recorded.of(sets), profiles, name=folder.name, n_boot=400, **kw)  # as the page compares
        every.append(run)
        if args.flip_resamples:
            flips[id(run)] = _full_flip(str(folder.resolve()), sets, args.flip_resamples, cache)
        print(_row(f"recorded: {folder.name}", [run], time.perf_counter() - t0), flush=True)
        for full, ad in zip(run.full, run.adaptive):
            print(f"|   {full.profile} | | full: {full.text()} ({full.arm_text()}) | adaptive: {ad.text()} "
                  f"({ad.arm_text()}) | | | | | |")
    if args.flip_cache:
        args.flip_cache.write_text(json.dumps(cache, indent=0, sort_keys=True))
    if every:
        print("\n" + _summary(f"all {len(every)} studies", every, flips))
        for reps in sorted(set(grids.values())):
            print("  " + _summary(f"synthetic grids of {reps} run(s) per level",
                                  [r for r in every if grids.get(id(r)) == reps], flips))
    return 0


if __name__ == "__main__":
    sys.exit(main())
