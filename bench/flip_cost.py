"""What a flip chance costs: milliseconds per simulated rerun on the reference data.

For each reference data set (seed and real llama.cpp), the flip chance of the default profiles
(:func:`specsweep.decide.flip.flip_chances`, the comparison made once beforehand, as the report
makes it) timed over ``--resamples`` reruns, best of ``--rounds``; prints ms per resample, the
seconds a report's default :data:`~specsweep.decide.flip.RESAMPLES` cost, the metrics a rerun fits
against the comparison's, and the chances themselves.

    PYTHONPATH=lib .venv/bin/python bench/flip_cost.py [--resamples 20] [--rounds 2]

Prints numbers only. Run it on two checkouts to compare them (it imports nothing newer than
``flip_chances``).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from specsweep.analyze.compare import compare
from specsweep.decide.flip import RESAMPLES, flip_chances
from specsweep.results.store import load_result_sets

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = [ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b", ROOT / "data" / "reference" / "real-llamacpp-smollm2"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resamples", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"flip chance, default profiles, {args.resamples} resamples, best of {args.rounds}:")
    for path in REFERENCE:
        sets = load_result_sets([path])
        comp = compare(sets, allow_workload_mismatch=True)
        flip_chances(sets, comp=comp, resamples=1)  # first-call imports and caches out of the figure
        best = float("inf")
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            chances = flip_chances(sets, comp=comp, resamples=args.resamples)
            best = min(best, time.perf_counter() - t0)
        ms = best / args.resamples * 1000
        print(f"  {path.name}: {ms:.0f} ms per resample ({ms * RESAMPLES / 1000:.1f} s for {RESAMPLES}); "
              f"{len({m for _, m in comp.curves})} metrics compared; "
              + ", ".join(f"{k}: {v.text()}" for k, v in chances.items()))


if __name__ == "__main__":
    main()
