#!/usr/bin/env python3
"""The project's benchmarks in one run and one table, each row beside its target.

Client cost beside the plain-aiohttp reference, memory per level, report build time, start-up.

Runs, each in fresh processes (server pinned to ``--server-core``, client to ``--client-core``):

1. ``bench/client_overhead.py`` on ``u-k1-c64`` (64 streams, 1 token per chunk, unpaced) and
   ``p20-k1-c256`` (256 streams paced at 20 ms) for ``ref-aiohttp-any`` (plain aiohttp
   ``iter_any`` + split + ``json``, as vLLM's bench client) and specsweep's default client, variants
   interleaved within each repeat, medians of ``--reps``;
2. ``bench/level_memory.py``: peak resident memory of one level per size (1,000 and 10,000
   requests × 2,000 tokens by default) while it is measured and parsed, and while it is summarised
   and stored as a sweep does, spilling raw reads (the default); the smallest size also holding
   every read until the level ends (no spilling);
3. ``bench/report_build.py``: ``python -m specsweep.report`` on the seed result set;
4. ``bench/import_time.py`` (the seed report beside the floor of an empty notebook built
   the same way, warm and first build); with ``--test-suite`` the wall time of ``make test``
   (``--test-beside``: with a CPU-bound process beside it); with ``--cpu-share``
   ``bench/cpu_share.py`` (the client's CPU as a share of llama.cpp's per level); with ``--reports``
   ``make reports``' pipeline (``python -m specsweep.publish``) in a scratch worktree of HEAD, its
   wall time and whether its decisions are the committed pages'.

Figures:

- ``all-in µs/token``: client CPU per output token in the steady window (psutil, whole client
  process) plus, for specsweep, the CPU it spends parsing after the level (``LevelResult.parse_cpu_s``
  per token); the reference parses inline, so its figure is already all-in;
- ``all-in cores`` (paced): in-loop cores plus parse CPU per token × the window's tok/s;
- ``lag p99``: client receive time − server write time per chunk (ms), joined by request id;
- ``tokens``: tokens counted ÷ tokens the server sent (1.000 = exact);
- ``other cores``: CPU used by everything else on the machine during the window (shared machine).

Run from the repository root (it takes minutes)::

    .venv/bin/python bench/run_all.py
    .venv/bin/python bench/run_all.py --reps 1 --mem-sizes 1000x2000 --skip-report   # quicker; no memory verdict (no 10,000-request level)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from client_overhead import busy_cpu_s  # noqa: E402 - a sibling script, found through HERE

REPO = HERE.parent
SPECSWEEP = "ss:aiohttp:raw:uvloop:w1"
REFERENCE = "ref-aiohttp-any"
#: the targets the table's rows are judged against (µs, cores, ms, MiB, tokens, seconds)
GOAL_US_PER_TOKEN = 7.4
GOAL_PACED_CORES = 0.34
GOAL_LAG_P99_MS = 4.0
GOAL_LEVEL_MIB = 500.0
GOAL_LEVEL_TOKENS = 10_000 * 2_000
GOAL_REPORT_S = 10.0


def _run(argv: list[str], timeout: float) -> str:
    t0 = time.perf_counter()
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    print(f"# {Path(argv[1]).name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout


def client_rows(reps: int, server_core: str, client_core: str, max_other: float) -> list[dict[str, Any]]:
    """Every repeat's row of client_overhead for both scenarios and both clients."""
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "rows.json")
        _run([sys.executable, str(HERE / "client_overhead.py"), "--scenarios", "u-k1-c64", "p20-k1-c256",
              "--clients", REFERENCE, SPECSWEEP, "--reps", str(reps), "--server-core", server_core,
              "--client-core", client_core, "--max-other", str(max_other), "--quiet-wait-s", "10",
              "--json-out", js], timeout=3600)
        return json.loads(Path(js).read_text())


def _med(rows: list[dict[str, Any]], key: str) -> float:
    vals = [float(r[key]) for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else float("nan")


def client_figures(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    """(scenario, client) → median figures, all-in cost included."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key in {(r["scenario"], r["client"]) for r in rows}:
        rs = [r for r in rows if (r["scenario"], r["client"]) == key]
        loop_us = _med(rs, "cpu_s_per_1k") * 1e3
        parse_us = _med(rs, "parse_s_per_1k") * 1e3 if key[1] != REFERENCE else 0.0
        tok_s = _med(rs, "tok_s")
        out[key] = {"loop_us": loop_us, "parse_us": parse_us, "all_in_us": loop_us + parse_us,
                    "cores": _med(rs, "cores"), "all_in_cores": _med(rs, "cores") + parse_us * 1e-6 * tok_s,
                    "tok_s": tok_s, "lag_p50_ms": _med(rs, "lag_p50_ms"), "lag_p99_ms": _med(rs, "lag_p99_ms"),
                    "tokens": _med(rs, "tokens_ratio"), "other": _med(rs, "foreign_cores"), "n": len(rs)}
    return out


def memory_rows(sizes: list[str], modes: list[str], server_core: str, client_core: str) -> list[dict[str, Any]]:
    """bench/level_memory.py's rows for every size in every mode."""
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "mem.json")
        _run([sys.executable, str(HERE / "level_memory.py"), "--sizes", *sizes, "--modes", *modes,
              "--server-core", server_core, "--client-core", client_core, "--json-out", js], timeout=3600)
        return json.loads(Path(js).read_text())


def report_seconds(reps: int) -> dict[str, float]:
    """Median seconds of ``python -m specsweep.report`` and of its phases (bench/report_build.py)."""
    text = _run([sys.executable, str(HERE / "report_build.py"), "--reps", str(reps)], timeout=1800)
    got: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.rsplit("(min", 1)[0].split()
        if len(parts) >= 2 and parts[0] in {"cli", "papermill", "export"}:
            got[parts[0]] = float(parts[-1])
    return got


def startup_figures(reps: int) -> dict[str, Any]:
    """bench/import_time.py's figures: the seed report beside the floor (an empty notebook built
    the same way), warm cache and first build, wall and CPU seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "startup.json")
        _run([sys.executable, str(HERE / "import_time.py"), "--reps", str(reps), "--json-out", js], timeout=3600)
        return json.loads(Path(js).read_text())


def test_suite_seconds(beside: bool) -> dict[str, Any]:
    """Wall seconds of ``make test``, alone or with one CPU-bound process beside it
    (``beside``), and whether it passed."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if beside else None
    try:
        t0 = time.perf_counter()
        done = subprocess.run(["make", "test"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace")
        seconds = time.perf_counter() - t0
        lines = done.stdout.splitlines()
        # what failed, and pytest's closing line (e.g. "1 failed, 868 passed in 713.71s"), kept in the JSON
        failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
        summary = next((ln.strip("= ") for ln in reversed(lines) if " in " in ln and ("passed" in ln or "failed" in ln)), "")
        return {"seconds": seconds, "passed": done.returncode == 0, "beside": beside, "summary": summary,
                "failed": failed}
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def reports_seconds() -> dict[str, Any]:
    """Wall and busy CPU seconds of ``make reports``' pipeline (``python -m specsweep.publish``: every
    demo study measured afresh, every report built) in a scratch worktree of HEAD, so the checkout's
    pages stay as committed, and whether its decisions were those of the committed
    ``reports/decisions.json``. The worktree's ``lib`` comes first on ``PYTHONPATH``, so its paths
    (data/, reports/) are the ones written; set-up is not counted (the checkout's .venv is used)."""
    tmp = tempfile.mkdtemp(prefix="specsweep-reports-")
    tree = os.path.join(tmp, "tree")
    subprocess.run(["git", "worktree", "add", "--detach", tree, "HEAD"], cwd=REPO, check=True, capture_output=True)
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(tree, "lib"), os.environ.get("PYTHONPATH", "")])}
        # as make reports runs it (Makefile, target bytecode): bytecode caches kept, lib/ compiled first (timed)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        busy0, t0 = busy_cpu_s(), time.perf_counter()
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "lib")], check=True,
                       stdout=subprocess.DEVNULL)
        done = subprocess.run([sys.executable, "-m", "specsweep.publish"], cwd=tree, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace")
        seconds, busy = time.perf_counter() - t0, busy_cpu_s() - busy0
        lines = done.stdout.splitlines()
        verdict = next((ln for ln in lines if ln.startswith("decisions: ")), "decisions: not printed")
        return {"seconds": seconds, "busy_cpu_s": busy, "passed": done.returncode == 0,
                "same_decisions": verdict.startswith("decisions: the same as"), "decisions": verdict,
                "tail": lines[-15:] if done.returncode else []}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=REPO, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def cpu_share_figures() -> dict[str, Any]:
    """bench/cpu_share.py: the client's CPU as a share of llama.cpp's per level."""
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "share.json")
        _run([sys.executable, str(HERE / "cpu_share.py"), "--floor", "--json-out", js], timeout=1800)
        doc = json.loads(Path(js).read_text())
        # the default read path, and the same levels read by plain aiohttp (the floor) in the same run
        return {**doc["tapped"], "floor": doc.get("plain aiohttp (floor)")}


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repeats of each client run (medians)")
    ap.add_argument("--mem-sizes", nargs="*", default=["1000x2000", "10000x2000"], help="REQUESTSxTOKENS")
    ap.add_argument("--mem-hold-sizes", nargs="*", default=["1000x2000"],
                    help="sizes also measured holding every raw read (no spill)")
    ap.add_argument("--report-reps", type=int, default=1)
    ap.add_argument("--server-core", default="0")
    ap.add_argument("--client-core", default="1")
    ap.add_argument("--max-other", type=float, default=0.6,
                    help="redo a client run (up to 3 times) when others used more cores than this")
    ap.add_argument("--skip-client", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-report", action="store_true")
    ap.add_argument("--startup-reps", type=int, default=3, help="repeats of the start-up figures (bench/import_time.py)")
    ap.add_argument("--skip-startup", action="store_true")
    ap.add_argument("--test-suite", action="store_true",
                    help="also time `make test`, which takes minutes (target: ≤ 5 min; with --test-beside, beside a CPU hog)")
    ap.add_argument("--test-beside", action="store_true")
    ap.add_argument("--cpu-share", action="store_true",
                    help="also measure the client's CPU share of llama.cpp's (target: ≤ 2 %%; needs the [llamacpp] extra)")
    ap.add_argument("--reports", action="store_true",
                    help="also time make reports' pipeline in a scratch worktree, which takes minutes "
                         "(target: ≤ 6 min and the same decisions)")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)

    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    print(f"# bench/run_all.py {stamp}; {os.cpu_count()} CPUs ({platform.machine()}), Python "
          f"{platform.python_version()}; load average {load:.2f} at start; server core {args.server_core}, "
          f"client core {args.client_core}; client medians of {args.reps}")
    lines = ["| measure | specsweep | plain aiohttp (same run) | target | met |", "|---|---:|---:|---:|---|"]
    dump: dict[str, Any] = {"stamp": stamp, "cpus": os.cpu_count()}
    if not args.skip_client:
        rows = client_rows(args.reps, args.server_core, args.client_core, args.max_other)
        fig = client_figures(rows)
        dump["client"] = {f"{s}|{c}": v for (s, c), v in fig.items()}
        ss, ref = fig[("u-k1-c64", SPECSWEEP)], fig[("u-k1-c64", REFERENCE)]
        lines.append(f"| K1·C64 unpaced: all-in CPU µs/token (loop + parse) | {ss['all_in_us']:.2f} "
                     f"({ss['loop_us']:.2f} + {ss['parse_us']:.2f}) | {ref['all_in_us']:.2f} | ≤ {GOAL_US_PER_TOKEN} | "
                     f"{_yes(ss['all_in_us'] <= GOAL_US_PER_TOKEN)} |")
        lines.append(f"| K1·C64: specsweep ÷ reference all-in CPU per token | "
                     f"{ss['all_in_us'] / ref['all_in_us']:.2f} | 1.00 | < 1 | {_yes(ss['all_in_us'] < ref['all_in_us'])} |")
        lines.append(f"| K1·C64: tok/s (tokens counted ÷ sent) | {ss['tok_s']:,.0f} ({ss['tokens']:.3f}) | "
                     f"{ref['tok_s']:,.0f} ({ref['tokens']:.3f}) | exact | {_yes(ss['tokens'] == 1.0)} |")
        ps, pr = fig[("p20-k1-c256", SPECSWEEP)], fig[("p20-k1-c256", REFERENCE)]
        lines.append(f"| 256 streams × 20 ms: all-in cores | {ps['all_in_cores']:.3f} | {pr['all_in_cores']:.3f} | "
                     f"≤ {GOAL_PACED_CORES} | {_yes(ps['all_in_cores'] <= GOAL_PACED_CORES)} |")
        lines.append(f"| 256 × 20 ms: lag p50 / p99 ms | {ps['lag_p50_ms']:.2f} / {ps['lag_p99_ms']:.2f} | "
                     f"{pr['lag_p50_ms']:.2f} / {pr['lag_p99_ms']:.2f} | p99 ≤ {GOAL_LAG_P99_MS} | "
                     f"{_yes(ps['lag_p99_ms'] <= GOAL_LAG_P99_MS)} |")
        lines.append(f"| 256 × 20 ms: tokens counted ÷ sent | {ps['tokens']:.3f} | {pr['tokens']:.3f} | 1.000 | "
                     f"{_yes(ps['tokens'] == 1.0)} |")
        other = max(v["other"] for v in fig.values())
        lines.append(f"| other processes' cores during the client windows (max of medians) | {other:.2f} | | | |")
    if not args.skip_memory:
        mem = memory_rows(args.mem_sizes, ["spill"], args.server_core, args.client_core)
        if args.mem_hold_sizes:
            mem += memory_rows(args.mem_hold_sizes, ["hold"], args.server_core, args.client_core)
        dump["memory"] = mem
        for r in mem:
            # the goal: a 10,000 × 2,000-token level, spilling, under 500 MB at its peak (measuring or storing),
            # judged for the whole process (the sweep's imports included) and for the level's own share
            goal = r["mode"] == "spill" and r["tokens_sent"] >= GOAL_LEVEL_TOKENS
            own = (r["level_peak_mib"] - r["base_mib"], r["store_peak_mib"] - r["base_mib"])
            target = f"≤ {GOAL_LEVEL_MIB:.0f}" if goal else ""
            met = (f"process {_yes(r['peak_mib'] <= GOAL_LEVEL_MIB)}, own {_yes(max(own) <= GOAL_LEVEL_MIB)}; "
                   if goal else "")
            lines.append(f"| level {r['n']:,} × {r['tokens']:,} tokens, {r['mode']}: peak RSS MB measuring and "
                         f"parsing / summarising and storing; (the level's own: − base {r['base_mib']:.0f}) | "
                         f"{r['level_peak_mib']:.0f} / {r['store_peak_mib']:.0f} ({own[0]:.0f} / {own[1]:.0f}) | | "
                         f"{target} | {met}exact counts: {_yes(r['exact'])} |")
        if not any(r["mode"] == "spill" and r["tokens_sent"] >= GOAL_LEVEL_TOKENS for r in mem):
            lines.append("| 10,000 × 2,000 level not measured (see --mem-sizes) | | | "
                         f"≤ {GOAL_LEVEL_MIB:.0f} | **no verdict** |")
        spill = [r for r in mem if r["mode"] == "spill" and r["chunks"]]
        if spill:
            big = max(spill, key=lambda r: r["chunks"])
            lines.append(f"| parsed records: bytes per token-carrying chunk (1 token per chunk; 12 with "
                         f"several) | {big['bytes_per_chunk']:.1f} | | | |")
    if not args.skip_report:
        rep = report_seconds(args.report_reps)
        dump["report"] = rep
        cli = rep.get("cli", float("nan"))
        lines.append(f"| seed report build, `python -m specsweep.report` s (papermill {rep.get('papermill', float('nan')):.1f}, "
                     f"export {rep.get('export', float('nan')):.1f}) | {cli:.1f} | | < {GOAL_REPORT_S:.0f} | "
                     f"{_yes(cli < GOAL_REPORT_S)} |")
    if not args.skip_startup:
        st = startup_figures(args.startup_reps)
        dump["startup"] = st
        r = st["rows"]
        lines.append(f"| seed report, `python -m specsweep.report`, wall s (CPU s) | {r['seed']['wall']:.2f} "
                     f"({r['seed']['cpu']:.2f}) | | ≤ 4 | {_yes(r['seed']['wall'] <= 4.0)} |")
        lines.append(f"| floor: empty notebook built the same way, wall s (CPU s); seed ÷ floor | "
                     f"{r['empty']['wall']:.2f} ({r['empty']['cpu']:.2f}); {st['ratio']:.2f}× | | ≤ 1.5× | "
                     f"{_yes(st['ratio'] <= 1.5)} |")
        if "seed_over_imports" in st:
            lines.append(f"| the floor, its kernel loading the report's modules first (pandas, altair, specsweep, scipy), "
                         f"wall s (CPU s); seed ÷ that | {r['empty_imports']['wall']:.2f} ({r['empty_imports']['cpu']:.2f}); "
                         f"{st['seed_over_imports']:.2f}× | | | |")
        if "seed_cold" in r:
            lines.append(f"| seed report, first build after install (empty cache), wall s (CPU s) | "
                         f"{r['seed_cold']['wall']:.2f} ({r['seed_cold']['cpu']:.2f}) | | | |")
    if args.reports:
        rp = reports_seconds()
        dump["reports"] = rp
        lines.append(f"| `make reports` without set-up (every demo measured afresh, every page built), wall min "
                     f"(busy CPU s); decisions | {rp['seconds'] / 60:.1f} ({rp['busy_cpu_s']:.0f}); "
                     f"{'the same as committed' if rp['same_decisions'] else '**' + rp['decisions'] + '**'}"
                     f"{'' if rp['passed'] else ', **failed**'} | | ≤ 6, the same | "
                     f"{_yes(rp['passed'] and rp['same_decisions'] and rp['seconds'] <= 360)} |")
    if args.test_suite:
        ts = test_suite_seconds(args.test_beside)
        dump["test_suite"] = ts
        lines.append(f"| `make test` wall min{' (a CPU hog beside it)' if ts['beside'] else ''} | "
                     f"{ts['seconds'] / 60:.1f}, {'passed' if ts['passed'] else '**failed**'} ({ts['summary']}) | | ≤ 5 | "
                     f"{_yes(ts['passed'] and ts['seconds'] <= 300)} |")
    if args.cpu_share:
        cs = cpu_share_figures()
        dump["cpu_share"] = cs
        per = ", ".join(f"C{r['concurrency']:.0f} {r['client_cpu_share_pct']:.2f}" for r in cs["rows"])
        floor = cs.get("floor") or {"rows": []}
        per_floor = ", ".join(f"C{r['concurrency']:.0f} {r['client_cpu_share_pct']:.2f}" for r in floor["rows"])
        lines.append(f"| client CPU ÷ llama.cpp's, % per level (real-llamacpp baseline; reference: the same "
                     f"levels read by plain aiohttp, `--floor`) | {per} | {per_floor} | ≤ 2 | "
                     f"{_yes(cs['worst_pct'] <= 2.0)} |")
    print("\n".join(lines))
    for line in dump.get("test_suite", {}).get("failed", []):
        print(f"# make test: {line}")
    for line in dump.get("reports", {}).get("tail", []):
        print(f"# make reports: {line}")
    print(f"# load average {os.getloadavg()[0]:.2f} at the end (the machine is shared: figures are noisy; "
          "compare specsweep with the reference of the same run)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(dump, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
