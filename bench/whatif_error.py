"""What-if error table: how well ``specsweep.analyze.whatif`` predicts what was measured.

1. For every study or result set given (default: the demo study's runs — the seed-calibrated
   reference-server profile, measured by ``make reports`` or
   ``.venv/bin/python -m specsweep.study data/studies/demo.yaml --no-report`` — and the seed's
   level-only table): the leave-one-level-out error of every arm, level by level and summarised
   (mean / worst absolute % on aggregate tok/s, per-user speed, TTFT p50, e2e p50), and the
   cross-arm error of arms that differ only in the cap or the pool (the demo's ``mtp`` → ``mtp-cap128``).
2. ``--refserver``: the ground truth of ``tests/test_whatif_refserver.py`` — untested settings of
   the (slowed) ``tiny`` profile predicted from four measured levels and compared with real sweeps
   over 127.0.0.1 (a few minutes).

    .venv/bin/python bench/whatif_error.py [PATH ...] [--refserver] [--out DIR]

Prints numbers only; nothing is asserted.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze import whatif
from specsweep.analyze.compare import compare
from specsweep.results.store import ResultSet, load_result_set, load_result_sets

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = [ROOT / "data" / "runs" / "studies" / "demo", ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b"]
PROMPT, OUTPUT = 32, 32
#: the tiny profile slowed to 60 ms per forward, so a 2-core machine streams what it simulates
SLOW = ["--set", "decode.fixed_ms=60", "--set", "decode.per_token_ms=0.1", "--set", "prefill.fixed_ms=5"]
POOL = 1600  # tokens: 25 requests of 32 + 32
TRAIN: tuple[list[str], list[int]] = (["--max-running-requests", "128"], [4, 16, 64, 128])
#: name -> (server args, levels, what-if settings)
TRUTHS: dict[str, tuple[list[str], list[int], dict[str, Any]]] = {
    "cap64": (["--max-running-requests", "64"], [96, 128], {"max_running_requests": 64}),
    "cap96": (["--max-running-requests", "96"], [128], {"max_running_requests": 96}),
    "levels": (["--max-running-requests", "128"], [24, 48, 96], {}),
    "accept3": (["--max-running-requests", "128", "--mean-accept-length", "3.0"], [16, 64], {"accept_length": 3.0}),
    "pool": (["--max-running-requests", "128", "--set", f"speculative.max_total_num_tokens={POOL}"], [48, 128],
             {"max_total_num_tokens": POOL}),
}


def sweep(out: Path, name: str, args: list[str], levels: list[int]) -> ResultSet:
    """One real sweep of the slowed ``tiny`` profile with speculation over 127.0.0.1."""
    from specsweep.measure.sweep import run_sweep
    from specsweep.refserver.launch import RefServer

    with RefServer("tiny", "mtp", ["--health-delay-s", "0.2", *SLOW, *args]) as srv:
        res = run_sweep({"endpoint": srv.url, "concurrency": levels, "input_tokens": PROMPT, "output_tokens": OUTPUT,
                         "workload": "random-ids", "out_dir": str(out / name), "metrics_interval_s": 0.05,
                         "arm": name}, progress=False, log=lambda _: None)
    return load_result_set(res.run_dir)


#: ground-truth sweeps run at once (each its own server and client, threads of this process): the slowed
#: server sleeps through most of a step, so two sweeps share a 2-core machine without slowing each other
#: (``bench/whatif_error.py --refserver --parallel 1,2`` prints both side by side)
PARALLEL = 2


def ground_truth(out: Path, parallel: int = PARALLEL) -> dict[str, ResultSet]:
    """The measured arm (``train``) and one real sweep per untested setting (reused where ``out`` has them).

    ``parallel``: how many sweeps run at once (1: one after the other)."""
    from concurrent.futures import ThreadPoolExecutor

    found = {name: sorted((out / name).glob("*/meta.json")) for name in ["train", *TRUTHS]}
    if all(found.values()):
        return {name: load_result_set(paths[-1].parent) for name, paths in found.items()}
    jobs = {"train": TRAIN, **{name: (args, levels) for name, (args, levels, _) in TRUTHS.items()}}
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = {name: pool.submit(sweep, out, name, *job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def truth_errors(sets: dict[str, ResultSet]) -> list[dict[str, Any]]:
    """Every untested setting predicted from ``train`` against its real sweep: error % per figure."""
    train = sets["train"]
    comp = compare([train], baseline="train")
    rows = []
    for name, (_, levels, settings) in TRUTHS.items():
        lv = sets[name].levels.groupby("concurrency").mean(numeric_only=True)
        p = whatif.predict(comp, "train", concurrency=levels, sets=[train], **settings)
        for row in p.to_dict("records"):
            c = int(row["concurrency"])
            rows.append({"case": name, "concurrency": c, "running": row["running_requests"],
                         "refused": row["refused"], "why": row["why"],
                         "aggregate": (row["aggregate_tok_s"] / lv.at[c, "output_tok_s"] - 1) * 100,
                         "user": (row["user_tok_s"] / lv.at[c, "user_tok_s_mean"] - 1) * 100,
                         "in_band": row["aggregate_tok_s_lo"] <= lv.at[c, "output_tok_s"] <= row["aggregate_tok_s_hi"]})
    return rows


def _fmt(x: float) -> str:
    return "   —  " if not np.isfinite(x) else f"{x:+6.1f}"


def print_study(path: Path) -> None:
    sets = load_result_sets(path)
    comp = compare(sets)
    v = whatif.validate(comp, sets)
    print(f"\n== {path} ({', '.join(comp.arms)})")
    print("leave-one-level-out, error % (aggregate / per-user / TTFT p50 / e2e p50):")
    for arm, x in v["arms"].items():
        for r in x["table"].to_dict("records"):
            errs = " ".join(_fmt(r.get(f"{f}_err_pct", np.nan)) for f in whatif.predict.__globals__["FIGURES"])
            print(f"  {arm:12s} C={int(r['concurrency']):4d} n={r['running_requests']:6.1f} "
                  f"{'refused' if r['refused'] else errs}")
    print("summary (mean / worst absolute %):")
    for arm, x in v["arms"].items():
        s = x["summary"]
        print(f"  {arm:12s} {s['predicted']}/{s['levels']} levels  aggregate {s['aggregate_tok_s_mean_abs_pct']:.2f} / "
              f"{s['aggregate_tok_s_worst_abs_pct']:.2f}  per-user {s['user_tok_s_mean_abs_pct']:.2f} / "
              f"{s['user_tok_s_worst_abs_pct']:.2f}  TTFT p50 {s['ttft_p50_s_mean_abs_pct']:.1f} / "
              f"{s['ttft_p50_s_worst_abs_pct']:.1f}  e2e p50 {s['e2e_p50_s_mean_abs_pct']:.1f} / "
              f"{s['e2e_p50_s_worst_abs_pct']:.1f}")
    for p in v["pairs"]:
        print(f"cross-arm: {p['target']} predicted from {p['source']} (differ in {', '.join(p['differs'])}):")
        for r in p["table"].to_dict("records"):
            print(f"  C={int(r['concurrency']):4d} running {r['running_predicted']:.0f} (measured {r['running_measured']:.0f})"
                  f"  aggregate {_fmt(r['aggregate_tok_s_err_pct'])} %  per-user {_fmt(r['user_tok_s_err_pct'])} %")


def print_truth(rows: list[dict[str, Any]], how: str) -> None:
    """The ground-truth error table: each untested setting's error %, then the summary."""
    print(f"\n== reference server (tiny, slowed): untested settings predicted from levels {TRAIN[1]} ({how})")
    for r in rows:
        print(f"  {r['case']:8s} C={r['concurrency']:4d} running {r['running']:.0f}  aggregate {_fmt(r['aggregate'])} %"
              f"  per-user {_fmt(r['user'])} %  {'in band' if r['in_band'] else 'outside band'}"
              f"{'  REFUSED: ' + str(r['why']) if r['refused'] else ''}")
    e = np.abs([[r["aggregate"], r["user"]] for r in rows])
    print(f"  median abs error {np.median(e):.2f} % (aggregate {np.median(e[:, 0]):.2f}, per-user "
          f"{np.median(e[:, 1]):.2f}); worst {e.max():.2f} % (aggregate {e[:, 0].max():.2f}, per-user "
          f"{e[:, 1].max():.2f}); aggregate inside its band {np.mean([r['in_band'] for r in rows]) * 100:.0f} %")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=Path, help="studies or result sets (default: the demo study, the seed)")
    ap.add_argument("--refserver", action="store_true", help="also run the tiny ground-truth sweeps (minutes)")
    ap.add_argument("--parallel", type=lambda v: [int(x) for x in v.split(",")], default=[PARALLEL],
                    help=f"ground-truth sweeps at once; a list (1,2) runs each in turn, side by side (default {PARALLEL})")
    ap.add_argument("--out", type=Path, default=None,
                    help="where the ground-truth sweeps go (default: a temp dir); sweeps already there are reused")
    args = ap.parse_args(argv)
    pd.set_option("display.width", 200)
    for path in args.paths or ([] if args.refserver and args.out else DEFAULTS):
        if not path.exists():
            print(f"\n== {path}: not there (the demo study's runs come from `make reports` or "
                  "`.venv/bin/python -m specsweep.study data/studies/demo.yaml --no-report`)")
            continue
        print_study(path)
    if args.refserver:
        for parallel in args.parallel:
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) if args.out is None else args.out
                if len(args.parallel) > 1:  # each setting measures afresh, never reusing the other's sweeps
                    out = out / f"parallel-{parallel}"
                rows = truth_errors(ground_truth(out, parallel=parallel))
            print_truth(rows, f"{parallel} sweep(s) at once, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
