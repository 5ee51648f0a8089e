#!/usr/bin/env python3
"""Per-level stopping against the reference server: requests used and margin achieved per level,
against a fixed count.

Starts one reference server (``tiny`` profile by default, ``--spec mtp``: acceptance varies per
request, so requests differ) and runs two sweeps of the same levels on it:

- ``fixed``: ``requests_per_level`` = ``--fixed`` × C (the count a user would pick to be safe);
- ``stop``: ``target_moe_pct`` = ``--target`` with the same fixed count as the maximum
  (``max_requests_per_level``) and the default minimum (max(4, 2 × C)).

Per level it prints the requests each sweep sent, the throughput margin each achieved (``moe_pct``:
the 95 % half-width relative to the throughput per slot), the level's wall time, and the stopping
sweep's ``stop_reason``; then the totals and the share of requests and time the rule saved. The
figures move with the machine's load (the server is simulated in real time).

Run from the repository root::

    .venv/bin/python bench/level_stopping.py
    .venv/bin/python bench/level_stopping.py --levels 1 4 16 --target 3 --fixed 32 --output-tokens 64
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from specsweep.measure.sweep import run_sweep  # noqa: E402
from specsweep.refserver.launch import RefServer  # noqa: E402
from specsweep.results.store import load_result_set  # noqa: E402


def _sweep(url: str, out: str, arm: str, args: argparse.Namespace, **extra: Any) -> Any:
    params = {"endpoint": url, "arm": arm, "concurrency": args.levels, "input_tokens": 32,
              "output_tokens": args.output_tokens, "workload": "random-ids", "out_dir": out, **extra}
    res = run_sweep(params, progress=False, log=lambda _: None)
    return load_result_set(res.run_dir).levels.set_index("concurrency")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--target", type=float, default=5.0, help="target_moe_pct of the stopping sweep (%%)")
    ap.add_argument("--fixed", type=int, default=32, help="fixed count per slot: requests_per_level = this x C "
                    "(and the stopping sweep's maximum)")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--spec", default="mtp")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as out, RefServer(args.profile, args.spec, ["--health-delay-s", "0.2"]) as srv:
        assert srv.url is not None
        fixed, stop = [], []
        for c in args.levels:  # one level per sweep: each its own fixed count
            fixed.append(_sweep(srv.url, out, f"fixed-c{c}", args, concurrency=[c], requests_per_level=args.fixed * c))
            stop.append(_sweep(srv.url, out, f"stop-c{c}", args, concurrency=[c], target_moe_pct=args.target,
                               max_requests_per_level=args.fixed * c))
    print(f"reference server {args.profile} --spec {args.spec}, {args.output_tokens} output tokens; fixed count "
          f"{args.fixed} x C; stopping at ±{args.target:g} % (maximum the fixed count)")
    print(f"{'C':>4} {'fixed n':>8} {'fixed ±%':>9} {'fixed s':>8} {'stop n':>7} {'stop ±%':>8} {'stop s':>7}  stop reason")
    totals = [0, 0, 0.0, 0.0]
    for c, f, s in zip(args.levels, fixed, stop):
        fr, sr = f.loc[c], s.loc[c]
        print(f"{c:>4} {int(fr['n_requests']):>8} {fr['moe_pct']:>9.1f} {fr['window_s']:>8.1f} "
              f"{int(sr['n_requests']):>7} {sr['moe_pct']:>8.1f} {sr['window_s']:>7.1f}  {sr['stop_reason']}")
        totals[0] += int(fr["n_requests"])
        totals[1] += int(sr["n_requests"])
        totals[2] += float(fr["window_s"])
        totals[3] += float(sr["window_s"])
    print(f"total: fixed {totals[0]} requests in {totals[2]:.1f} s, stopping {totals[1]} in {totals[3]:.1f} s "
          f"({100 * (1 - totals[1] / totals[0]):.0f} % fewer requests, {100 * (1 - totals[3] / totals[2]):.0f} % less "
          "measured time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
