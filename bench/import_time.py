#!/usr/bin/env python3
"""Start-up cost, side by side in one run: what importing the notebook stack costs per process,
with and without specsweep's deferred ``rfc3987_syntax`` (``specsweep.runtime``), and how the seed
report's build compares with the floor of an empty notebook executed and exported the same way.

Prints, as medians of ``--reps`` fresh processes run alternately (seconds):

- ``import specsweep, nbformat, altair, papermill, nbconvert``: deferred (default) vs eager
  (``SPECSWEEP_EAGER_IMPORTS=1``, what every process would pay without the deferral);
- the ten slowest imports by cumulative time (``python -X importtime``) of the eager process, so a
  new costly transitive dependency shows up here first;
- ``empty notebook``: a one-cell notebook (``import specsweep``) built by
  ``specsweep.report.build_report`` (its kernel started early, papermill, the same export, the same
  exit), in a fresh process: the floor;
- ``... its kernel loading the report's modules first``: the same empty notebook, its kernel
  importing :data:`specsweep.notebooks.kernel.KERNEL_PRELOAD` (pandas, altair, scipy's special functions
  and interpolation, specsweep's report modules) before it answers, as the report's kernel does:
  what of the seed report is imports;
- ``seed report``: ``python -m specsweep.report`` on the seed result set, in a fresh process;
  and their ratio (target: seed report ≤ 4 s and ≤ 1.5× the empty notebook).

Run from the repository root: ``.venv/bin/python bench/import_time.py --reps 5``
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STACK = "import specsweep, nbformat, altair, papermill, nbconvert"

EMPTY = """
import sys
from pathlib import Path
from specsweep import report  # first, as python -m specsweep.report does (specsweep.runtime)
import nbformat
out = Path(sys.argv[1])
nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                       "language": "python"}})
nb.cells = [nbformat.v4.new_code_cell("result_sets, baseline, output_name, allow_workload_mismatch = [], '', '', False",
                                      metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell("import specsweep")]
nbformat.write(nb, out / "empty.ipynb")
if sys.argv[2:] == ["imports"]:  # the kernel loads what the report's does before it answers (KERNEL_PRELOAD)
    from specsweep.report import build
    build.REPORT_NOTEBOOK = out / "empty.ipynb"
report.build_report([], "empty", out_dir=out, notebook=out / "empty.ipynb")  # the same build path
import os
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)  # and the same exit as python -m specsweep.report (no interpreter teardown)
"""

def _env(eager: bool) -> dict[str, str]:
    """The environment ``make reports`` gives its processes: Python's bytecode caches kept (the
    Makefile unsets ``PYTHONDONTWRITEBYTECODE`` and compiles lib/ first, see :func:`measure`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPECSWEEP_EAGER_IMPORTS", "PYTHONDONTWRITEBYTECODE")}
    if eager:
        env["SPECSWEEP_EAGER_IMPORTS"] = "1"
    return env


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall s, CPU s of the whole process tree: user + system of every reaped descendant, the
    report's kernel included) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def slowest_imports(n: int = 10) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of the ``n`` slowest top-level imports of the eager stack."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", STACK], cwd=REPO, env=_env(True),
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in err.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(1)) / 1e6, len(m.group(2)), m.group(3)))
    # deepest names are more telling than their importers: keep every row, slowest first
    rows.sort(reverse=True)
    seen: list[tuple[float, str]] = []
    for secs, _depth, name in rows:
        if not any(name == s for _, s in seen):
            seen.append((secs, name))
        if len(seen) >= n:
            break
    return seen


SEED = ["-m", "specsweep.report", "--name", "bench", "--result-set", "data/reference/seed-qwen3.5-122b-a10b"]


def measure(reps: int, cold: bool = True) -> dict[str, dict[str, float]]:
    """Median and minimum wall seconds and median CPU seconds per row, ``reps`` fresh processes
    each, the rows interleaved within each repetition so that load drifts hit them alike.
    ``cold``: also the seed report with an empty specsweep cache (a fresh install's first build)."""
    keys = ["deferred", "eager", "empty", "empty_imports", "seed"] + (["seed_cold"] if cold else [])
    walls: dict[str, list[float]] = {k: [] for k in keys}
    cpus: dict[str, list[float]] = {k: [] for k in keys}
    # as make reports does before it starts (Makefile, target bytecode): lib/ compiled once
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "lib")], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        def add(key: str, got: tuple[float, float]) -> None:
            walls[key].append(got[0])
            cpus[key].append(got[1])

        warm = _env(False)
        warm["SPECSWEEP_CACHE_DIR"] = os.path.join(tmp, "cache")
        _timed([sys.executable, *SEED, "--out-dir", tmp], warm)  # fills the warm cache (not counted)
        for rep in range(reps):
            add("deferred", _timed([sys.executable, "-c", STACK], _env(False)))
            add("eager", _timed([sys.executable, "-c", STACK], _env(True)))
            add("empty", _timed([sys.executable, "-c", EMPTY, tmp], warm))
            add("empty_imports", _timed([sys.executable, "-c", EMPTY, tmp, "imports"], warm))
            add("seed", _timed([sys.executable, *SEED, "--out-dir", tmp], warm))
            if cold:
                fresh = dict(warm, SPECSWEEP_CACHE_DIR=os.path.join(tmp, f"cold{rep}"))
                add("seed_cold", _timed([sys.executable, *SEED, "--out-dir", tmp], fresh))
    return {k: {"wall": statistics.median(walls[k]), "min": min(walls[k]), "cpu": statistics.median(cpus[k])}
            for k in keys}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--no-cold", action="store_true", help="skip the empty-cache (first build) seed row")
    p.add_argument("--json-out", default=None, help="also write the figures here as JSON")
    args = p.parse_args(argv)
    load0 = os.getloadavg()
    med = measure(args.reps, cold=not args.no_cold)
    load = os.getloadavg()
    print(f"start-up cost, median of {args.reps} fresh processes each: wall s (min) and CPU s of the process "
          f"tree; load average {load0[0]:.2f} at start, {load[0]:.2f} at the end")
    rows = [("deferred", f"{STACK}, deferred rfc3987_syntax (default)"),
            ("eager", f"{STACK}, eager (SPECSWEEP_EAGER_IMPORTS=1)"),
            ("empty", "floor: empty notebook, build_report (papermill + export)"),
            ("empty_imports", "the same, its kernel loading the report's modules first (KERNEL_PRELOAD)"),
            ("seed", "seed report, python -m specsweep.report"),
            ("seed_cold", "seed report, empty cache (first build after install)")]
    for key, label in rows:
        if key in med:
            m = med[key]
            print(f"  {label:<76} {m['wall']:6.2f} ({m['min']:.2f})  cpu {m['cpu']:5.2f}")
    ratio = med["seed"]["wall"] / med["empty"]["wall"]
    print(f"  seed report / floor (wall) {ratio:5.2f}x   (target: <= 1.5x, and seed <= 4 s on a quiet 2-core machine)")
    imports = med["empty_imports"]["wall"] / med["empty"]["wall"]
    own_work = med["seed"]["wall"] / med["empty_imports"]["wall"]
    print(f"  floor with the report's modules / floor {imports:5.2f}x; seed report / that {own_work:5.2f}x"
          "   (what loading pandas, altair and specsweep costs, and what the report's own work does)")
    print("slowest imports of the eager stack (cumulative s):")
    for secs, name in slowest_imports():
        print(f"  {secs:6.2f}  {name}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"reps": args.reps, "load": [load0[0], load[0]], "rows": med,
                                                   "ratio": ratio, "imports_ratio": imports,
                                                   "seed_over_imports": own_work}, indent=1))
    return 0

if __name__ == "__main__":
    sys.exit(main())
