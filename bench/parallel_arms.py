"""Parallel arms against serial ones: the same study measured both ways, figures side by side.

    .venv/bin/python bench/parallel_arms.py [--levels 4,32,128] [--parallel 0] [--input-tokens 1300]
                                            [--output-tokens 256] [--arms baseline,mtp,mtp-cap128]

Runs one study on the embedded reference server (the demo's seed profile and workload, reduced
levels) twice: ``parallel: 1`` (arms one after another, the serial local backend) and
``parallel: N`` (every arm at once in worker processes; N = the number of arms unless given), and
prints per arm and level: aggregate tok/s and per-user tok/s of both runs and their Δ %, the
virtual-time simulator's figure for the same level (``specsweep.refserver.model``: what a host
with no contention would measure), and the client's event-loop lag p99 (ms, the loadgen's
``client_loop_lag_p99_s``: about how late a chunk's timestamp can be). It then says whether every
Δ lies within the noise of two single runs (√2 × the report's assumed per-run noise, 3 %) and
whether the lag p99 at the highest level is ≤ 2 ms. Wall times of both runs and the load average
before and after are printed too: quote them with the figures.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from specsweep.refserver.model import simulate_closed_loop
from specsweep.refserver.profiles import load_profile
from specsweep.results.store import load_result_set
from specsweep.study.file import load_study
from specsweep.study.runner import run_study

PROFILE = "qwen3.5-122b-a10b-4x-rtxpro6000"
ASSUMED_NOISE_PCT = 3.0
ARMS = {"baseline": {"profile": PROFILE, "spec": "off"},
        "mtp": {"profile": PROFILE, "spec": "mtp"},
        "mtp-cap128": {"profile": PROFILE, "spec": "mtp", "args": ["--max-running-requests", "128"]}}


def study_file(folder: Path, arms: list[str], levels: list[int], inp: int, out: int, parallel: int) -> Path:
    doc = {"title": f"parallel_arms bench (parallel {parallel})", "name": f"bench-p{parallel}", "baseline": "baseline",
           "parallel": parallel, "sweep": {"concurrency": levels, "input_tokens": inp, "output_tokens": out, "seed": 0},
           "arms": [{"name": a, "embedded": ARMS[a]} for a in arms]}
    path = folder / f"bench-p{parallel}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def measure(folder: Path, path: Path) -> tuple[dict[str, pd.DataFrame], float]:
    t0 = time.perf_counter()
    result = run_study(load_study(path), out_dir=folder / path.stem, report=False, log=lambda line: None)
    wall = time.perf_counter() - t0
    failed = [o for o in result.outcomes if o.status == "failed"]
    if failed:
        sys.exit(f"{path.stem}: {', '.join(f'{o.arm}: {o.error}' for o in failed)}")
    return {p.name: load_result_set(p).levels.set_index("concurrency") for p in result.result_sets}, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="4,32,128")
    ap.add_argument("--arms", default="baseline,mtp,mtp-cap128")
    ap.add_argument("--parallel", type=int, default=0, help="workers of the parallel run (0: one per arm)")
    ap.add_argument("--input-tokens", type=int, default=1300)
    ap.add_argument("--output-tokens", type=int, default=256)
    args = ap.parse_args()
    levels = [int(c) for c in args.levels.split(",")]
    arms = args.arms.split(",")
    workers = args.parallel or len(arms)
    profile = load_profile(PROFILE)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="specsweep-parallel-bench-") as tmp:
        folder = Path(tmp)
        serial, t_serial = measure(folder, study_file(folder, arms, levels, args.input_tokens, args.output_tokens, 1))
        par, t_par = measure(folder, study_file(folder, arms, levels, args.input_tokens, args.output_tokens, workers))
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"wall: serial {t_serial:.0f} s, parallel ({workers} at once) {t_par:.0f} s "
          f"({t_serial / t_par:.2f}x faster)\n")
    noise = math.sqrt(2) * ASSUMED_NOISE_PCT
    rows, worst, lag_top = [], 0.0, 0.0
    for arm in arms:
        e = ARMS[arm]
        cap = int(e["args"][1]) if e.get("args") else None
        for c in levels:
            s, p = serial[arm].loc[c], par[arm].loc[c]
            sim = simulate_closed_loop(profile, e["spec"], c, max(4, 2 * c), args.input_tokens, args.output_tokens,
                                       seed=0, max_running_requests=cap)
            d_agg = (p["output_tok_s"] / s["output_tok_s"] - 1) * 100
            d_user = (p["user_tok_s_mean"] / s["user_tok_s_mean"] - 1) * 100
            worst = max(worst, abs(d_agg), abs(d_user))
            if c == max(levels):
                lag_top = max(lag_top, p["client_loop_lag_p99_s"] * 1e3, s["client_loop_lag_p99_s"] * 1e3)
            rows.append({"arm": arm, "C": c, "agg serial": round(s["output_tok_s"], 1),
                         "agg parallel": round(p["output_tok_s"], 1), "Δ agg %": round(d_agg, 1),
                         "agg model": round(sim.output_tok_s, 1), "user serial": round(s["user_tok_s_mean"], 1),
                         "user parallel": round(p["user_tok_s_mean"], 1), "Δ user %": round(d_user, 1),
                         "lag p99 ms serial": round(s["client_loop_lag_p99_s"] * 1e3, 2),
                         "lag p99 ms parallel": round(p["client_loop_lag_p99_s"] * 1e3, 2)})
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(pd.DataFrame(rows).to_string(index=False))
    print(f"\nlargest |Δ| parallel vs serial: {worst:.1f} % (noise of two single runs: ±{noise:.1f} %): "
          + ("within noise" if worst <= noise else "NOT within noise"))
    print(f"client loop lag p99 at {max(levels)} streams: {lag_top:.2f} ms (goal ≤ 2 ms): "
          + ("met" if lag_top <= 2.0 else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
