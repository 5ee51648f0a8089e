"""Calibration over a real socket: the seed profile measured by specsweep's own sweep.

Starts the reference server with the seed profile (``qwen3.5-122b-a10b-4x-rtxpro6000``) for each
arm (baseline: ``--spec off``; MTP: ``--spec mtp``, cap 48 as SGLang), measures it with
``specsweep.measure.sweep.run_sweep`` at the seed's workload (1000-token random-ID prompts, 1000 output
tokens with ignore_eos) and levels (1, 4, 16, 32, 64, 128) — the same client, metrics and store a
user gets — and prints seed vs simulated side by side with pass/fail against the targets:
aggregate tok/s within ±20 % of the seed at every level for both arms, MTP ahead at 1–16 and
behind at 64 and 128, crossover between 32 and 64, baseline per-user speed at C=1 within ±10 % of
110 tok/s. Takes about 10 minutes (real time: it is a simulated GPU, not a fast-forward).

    .venv/bin/python bench/seed_calibration_socket.py [--out-dir DIR] [--output-tokens 1000]
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

from specsweep.analyze.compare import compare
from specsweep.measure.sweep import run_sweep
from specsweep.paths import REPO_ROOT
from specsweep.results.store import load_result_set, load_result_sets

SEED = REPO_ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=None, help="keep the two result sets here (default: a temp dir)")
    p.add_argument("--output-tokens", type=int, default=1000)
    p.add_argument("--input-tokens", type=int, default=1000)
    args = p.parse_args(argv)
    out = Path(args.out_dir or tempfile.mkdtemp(prefix="specsweep-calibration-"))
    seed = {rs.arm: rs.levels.set_index("concurrency") for rs in load_result_sets(SEED)}
    levels = sorted(int(c) for c in seed["baseline"].index)
    runs = {}
    for arm in ("baseline", "mtp"):
        t0 = time.perf_counter()
        res = run_sweep({"arm": arm, "concurrency": levels, "input_tokens": args.input_tokens,
                         "output_tokens": args.output_tokens, "out_dir": str(out)}, progress=False,
                        log=lambda line: print("  " + line, flush=True))
        runs[arm] = res.run_dir
        print(f"{arm}: {time.perf_counter() - t0:.0f} s, {res.run_dir}", flush=True)
    sim = {arm: load_result_set(d).levels.set_index("concurrency") for arm, d in runs.items()}
    comp = compare([load_result_set(d) for d in runs.values()])

    print(f"\nseed vs simulated (reference server, seed profile, {args.input_tokens} in / {args.output_tokens} out, "
          f"closed loop, requests per level max(4, 2C), measured by specsweep.measure.sweep over HTTP/SSE)")
    head = (f"{'C':>4} | {'seed base':>9} {'sim base':>9} {'Δ':>6} | {'seed MTP':>9} {'sim MTP':>9} {'Δ':>6} | "
            f"{'seed MTP/base':>13} {'sim MTP/base':>12} | {'sim user base':>13} {'sim user MTP':>12} | "
            f"{'running base':>12} {'running MTP':>11}")
    print(head)
    print("-" * len(head))
    ok = True
    for c in levels:
        sb, sm = seed["baseline"].at[c, "output_tok_s"], seed["mtp"].at[c, "output_tok_s"]
        vb, vm = sim["baseline"].at[c, "output_tok_s"], sim["mtp"].at[c, "output_tok_s"]
        db, dm = vb / sb - 1, vm / sm - 1
        good = abs(db) <= 0.2 and abs(dm) <= 0.2
        ok &= good
        rb = sim["baseline"].get("server_running_max", {}).get(c, math.nan) if "server_running_max" in sim["baseline"] else math.nan
        rm = sim["mtp"].get("server_running_max", {}).get(c, math.nan) if "server_running_max" in sim["mtp"] else math.nan
        print(f"{c:>4} | {sb:>9,.1f} {vb:>9,.1f} {db:>+6.1%} | {sm:>9,.1f} {vm:>9,.1f} {dm:>+6.1%} | "
              f"{sm / sb - 1:>+13.1%} {vm / vb - 1:>+12.1%} | {sim['baseline'].at[c, 'user_tok_s_mean']:>13.1f} "
              f"{sim['mtp'].at[c, 'user_tok_s_mean']:>12.1f} | {rb:>12.0f} {rm:>11.0f}" + ("" if good else "  ✗ ±20%"))
    d = comp.delta("mtp", "output_tok_s").set_index("concurrency")["delta_pct"]
    ahead = all(d[c] > 0 for c in levels if c <= 16)
    behind = all(d[c] < 0 for c in levels if c >= 64)
    cx = comp.crossover("mtp")
    cross = len(cx) == 1 and 32 <= cx.iloc[0].crossover_concurrency <= 64
    user1 = sim["baseline"].at[1, "user_tok_s_mean"]
    checks = {
        "aggregate within ±20% of the seed at every level, both arms": ok,
        "MTP ahead at 1–16": ahead,
        "MTP behind at 64 and 128": behind,
        f"one crossover, between 32 and 64 (at {cx.iloc[0].crossover_concurrency:.1f})" if len(cx) else "a crossover": cross,
        f"baseline per-user speed at C=1 within ±10% of 110 tok/s ({user1:.1f})": abs(user1 / 110 - 1) <= 0.10,
    }
    print()
    for name, passed in checks.items():
        print(f"  {'PASS' if passed else 'FAIL'}  {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
