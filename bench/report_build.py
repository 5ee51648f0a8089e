#!/usr/bin/env python3
"""Where the time goes when a report is built: process start, kernel, each notebook cell, export.

Builds a report the way ``python -m specsweep.report`` does (papermill runs
``notebooks/report.ipynb``, nbconvert exports it), ``--reps`` times, and prints per phase the
median wall seconds:

- ``cli total``: ``python -m specsweep.report …`` as a fresh process (what a user waits for);
- ``import specsweep.report``: importing the library in a fresh interpreter;
- ``papermill``: kernel start + every cell (``kernel + overhead`` = papermill − Σ cells);
- one row per code cell (papermill's own per-cell timing; the first line of the cell names it);
- ``export``: nbconvert HTML export.

Run from the repository root::

    .venv/bin/python bench/report_build.py                       # the seed report, 3 repetitions
    .venv/bin/python bench/report_build.py --result-set data/runs/studies/demo/baseline --result-set data/runs/studies/demo/mtp --reps 1
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _timed_process(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure(result_sets: list[str], reps: int) -> dict[str, list[float]]:
    """Seconds per phase, one value per repetition."""
    import papermill as pm

    from specsweep.paths import REPORT_NOTEBOOK
    from specsweep.report.build import export_html

    phases: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for _ in range(reps):
            cli = [sys.executable, "-m", "specsweep.report", "--name", "bench", "--out-dir", str(out / "cli")]
            for rs in result_sets:
                cli += ["--result-set", rs]
            phases["cli total"].append(_timed_process(cli))
            phases["import specsweep.report"].append(
                _timed_process([sys.executable, "-c", "import specsweep.report"]))
            params = {"result_sets": result_sets, "baseline": "baseline", "output_name": "bench",
                      "allow_workload_mismatch": False}
            t0 = time.perf_counter()
            nb = pm.execute_notebook(str(REPORT_NOTEBOOK), str(out / "bench.ipynb"), parameters=params,
                                     cwd=str(REPO), kernel_name="python3", progress_bar=False, log_output=False)
            t1 = time.perf_counter()
            export_html(out / "bench.ipynb", out / "bench.html")
            t2 = time.perf_counter()
            cells = 0.0
            for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
                took = float(cell.metadata.get("papermill", {}).get("duration") or 0.0)
                cells += took
                first = (cell.source.splitlines() or [""])[0][:60]
                phases[f"  cell {i:2d}: {first}"].append(took)
            phases["papermill"].append(t1 - t0)
            phases["  kernel + overhead"].append(t1 - t0 - cells)
            phases["export"].append(t2 - t1)
    return phases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--result-set", action="append", dest="result_sets",
                   help="result-set folder (repeatable; default: the seed reference data)")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    result_sets = args.result_sets or ["data/reference/seed-qwen3.5-122b-a10b"]
    phases = measure(result_sets, args.reps)
    print(f"report build, {', '.join(result_sets)}: median of {args.reps} (seconds)")
    order = ["cli total", "import specsweep.report", "papermill", "  kernel + overhead"]
    order += sorted(k for k in phases if k.startswith("  cell")) + ["export"]
    for name in order:
        values = phases[name]
        print(f"{name:<70} {statistics.median(values):7.2f}   (min {min(values):.2f}, max {max(values):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
