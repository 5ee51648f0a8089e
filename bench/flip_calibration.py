"""Flip-chance calibration and cost: predicted flip chances against the flips of fresh reruns.

Over ``--studies`` synthetic studies spread over the truths of :mod:`specsweep.decide.flip_draws`
(several noise models; true effects near and far from a decision threshold), each study's flip
chance (``--resamples`` simulated reruns) is set beside the share of ``--reruns`` fresh studies of
the same truth whose decision flipped (class or arm, per default profile). Prints the mean
predicted and observed rates overall, per bin of the prediction and per truth, for the estimator
('curve') and, with ``--runs``, for the run-level bootstrap it replaced; then the cost of one flip
chance on the reference data (seconds per study).

    .venv/bin/python bench/flip_calibration.py [--studies 210] [--resamples 100] [--reruns 5] [--runs]

Prints numbers only; nothing is asserted (tests/decide/test_flip.py checks a smaller draw).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from specsweep.decide.flip import RESAMPLES, flip_chances
from specsweep.decide.flip_draws import calibration, summarise
from specsweep.results.store import load_result_sets

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = [ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b", ROOT / "data" / "reference" / "real-llamacpp-smollm2"]


def _table(method: str, studies: int, resamples: int, reruns: int) -> None:
    t0 = time.perf_counter()
    points = calibration(studies, resamples, reruns, seed=0, method=method)  # type: ignore[arg-type]
    print(f"\nmethod {method!r}: {studies} studies × 3 profiles, {resamples} resamples, {reruns} reruns each "
          f"({time.perf_counter() - t0:.0f} s)")
    print(f"{'':34} {'n':>4} {'predicted':>10} {'observed':>9} {'gap':>7}")
    for s in summarise(points):
        print(f"{s.label:34} {s.n:4d} {s.predicted * 100:9.1f}% {s.observed * 100:8.1f}% {s.gap * 100:+6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=210)
    parser.add_argument("--resamples", type=int, default=100)
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--runs", action="store_true", help="also the run-level bootstrap (method 'runs')")
    parser.add_argument("--cost-only", action="store_true")
    args = parser.parse_args()
    if not args.cost_only:
        for method in ("curve", "runs") if args.runs else ("curve",):
            _table(method, args.studies, args.resamples, args.reruns)
    print("\ncost of one flip chance (all default profiles):")
    for path in REFERENCE:
        if not path.exists():
            continue
        sets = load_result_sets([path])
        t0 = time.perf_counter()
        chances = flip_chances(sets, resamples=RESAMPLES)
        dt = time.perf_counter() - t0
        print(f"  {path.name}: {dt:.1f} s for {RESAMPLES} resamples ({dt / RESAMPLES * 1000:.0f} ms each); "
              + ", ".join(f"{k}: {v.text()}" for k, v in chances.items()))


if __name__ == "__main__":
    main()
