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

    .venv/bin/python bench/adaptive_replay.py [STUDY_DIR ...] [--draws 5] [--coarse 4] [--target-flip 0.05]

Prints numbers only; nothing is asserted.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from specsweep.decide import DEFAULT_PROFILES, parse_profile
from specsweep.decide.draws import HARD_CASES, draw_study
from specsweep.results.store import load_result_sets
from specsweep.study.adaptive import COARSE_LEVELS, TARGET_FLIP
from specsweep.study.replay import Recorded, Replayed, replay

ROOT = Path(__file__).resolve().parents[1]
RECORDED = [ROOT / "data" / "reference" / "real-llamacpp-smollm2", *sorted((ROOT / "data" / "runs" / "studies").glob("*"))]


def _row(name: str, runs: list[Replayed], seconds: float) -> str:
    frac = [r.fraction for r in runs]
    match = sum(r.matches for r in runs) / len(runs)
    return (f"| {name} | {len(runs)} | {match:.0%} | {statistics.median(frac):.0%} | {max(frac):.0%} | "
            f"{sum(r.contradicts for r in runs)} | {statistics.mean(len(r.steps) for r in runs):.1f} | "
            f"{', '.join(sorted({r.stop.reason for r in runs}))} | {seconds:.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="*", type=Path, help="recorded full-grid study folders (read only)")
    parser.add_argument("--draws", type=int, default=5, help="synthetic studies per case (0: none)")
    parser.add_argument("--cases", default=",".join(HARD_CASES), help="synthetic cases, comma-separated")
    parser.add_argument("--coarse", type=int, default=COARSE_LEVELS, help="levels of the coarse design")
    parser.add_argument("--target-flip", type=float, default=TARGET_FLIP, help="settled at this flip probability")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    profiles = [parse_profile(p) for p in DEFAULT_PROFILES]
    kw = {"coarse": args.coarse, "target_flip": args.target_flip}
    print(f"coarse design {args.coarse} levels, settled at summed flip probability ≤ {args.target_flip:.0%}\n")
    print("| study | n | match | median time | worst time | contradicted | steps | stopped | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    every: list[Replayed] = []
    grids: dict[int, int] = {}  # id of a synthetic replay -> runs per level of its full grid
    for case in [c for c in args.cases.split(",") if c] if args.draws else []:
        rng = np.random.default_rng(args.seed)
        t0 = time.perf_counter()
        runs = [replay(Recorded.of(draw_study(case, rng)), profiles, name=case, **kw) for _ in range(args.draws)]
        every += runs
        grids.update({id(r): int(HARD_CASES[case]["repeats"]) for r in runs})
        print(_row(case, runs, time.perf_counter() - t0), flush=True)
    for folder in args.studies or [p for p in RECORDED if (p / "study.json").is_file()]:
        t0 = time.perf_counter()
        sets = load_result_sets([str(folder)])
        run = replay(Recorded.of(sets), profiles, name=folder.name, n_boot=400, **kw)  # as the page compares
        every.append(run)
        print(_row(f"recorded: {folder.name}", [run], time.perf_counter() - t0), flush=True)
        for full, ad in zip(run.full, run.adaptive):
            print(f"|   {full.profile} | | full: {full.text()} ({full.arm_text()}) | adaptive: {ad.text()} "
                  f"({ad.arm_text()}) | | | | | |")
    if every:
        frac = [r.fraction for r in every]
        print(f"\nall {len(every)} studies: decisions match the full grid's in {sum(r.matches for r in every) / len(every):.1%}, "
              f"median time {statistics.median(frac):.0%} of the full grid's, "
              f"{sum(r.contradicts for r in every)} contradicted by the full grid's credible bands")
        for reps in sorted(set(grids.values())):
            part = [r for r in every if grids.get(id(r)) == reps]
            print(f"  synthetic grids of {reps} run(s) per level: {len(part)} studies, match "
                  f"{sum(r.matches for r in part) / len(part):.1%}, median time "
                  f"{statistics.median(r.fraction for r in part):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
