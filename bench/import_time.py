#!/usr/bin/env python3
"""Start-up cost, side by side in one run: what importing the notebook stack costs per process,
with and without specsweep's deferred ``rfc3987_syntax`` (``specsweep.startup``), and how the seed
report's build compares with the floor of an empty notebook executed and exported the same way.

Prints, as medians of ``--reps`` fresh processes run alternately (seconds):

- ``import specsweep, nbformat, altair, papermill, nbconvert``: deferred (default) vs eager
  (``SPECSWEEP_EAGER_IMPORTS=1``, what every process paid before);
- the ten slowest imports by cumulative time (``python -X importtime``) of the eager process, so a
  new costly transitive dependency shows up here first;
- ``empty notebook``: a one-cell notebook (``import specsweep``) run by papermill through
  ``specsweep.report.execute_notebook`` and exported by ``report.export_html``, in a fresh process;
- ``seed report``: ``python -m specsweep.report`` on the seed result set, in a fresh process;
  and their ratio (issue 21's goal: seed report ≤ 4 s and ≤ 1.5× the empty notebook).

Run from the repository root: ``.venv/bin/python bench/import_time.py --reps 5``
"""
from __future__ import annotations

import argparse
import os
import re
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
import nbformat
from specsweep import report
out = Path(sys.argv[1])
nb = nbformat.v4.new_notebook()
nb.cells = [nbformat.v4.new_code_cell("parameters = None", metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell("import specsweep")]
nbformat.write(nb, out / "empty.ipynb")
report.execute_notebook(out / "empty.ipynb", out / "empty-out.ipynb", {})
report.export_html(out / "empty-out.ipynb", out / "empty.html")
"""


def _env(eager: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SPECSWEEP_EAGER_IMPORTS"}
    if eager:
        env["SPECSWEEP_EAGER_IMPORTS"] = "1"
    return env


def _timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    figures: dict[str, list[float]] = {k: [] for k in ("deferred", "eager", "empty", "seed")}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.reps):
            figures["deferred"].append(_timed([sys.executable, "-c", STACK], _env(False)))
            figures["eager"].append(_timed([sys.executable, "-c", STACK], _env(True)))
            figures["empty"].append(_timed([sys.executable, "-c", EMPTY, tmp]))
            figures["seed"].append(_timed([sys.executable, "-m", "specsweep.report", "--name", "bench",
                                           "--out-dir", tmp, "--result-set",
                                           "data/reference/seed-qwen3.5-122b-a10b"]))
    med = {k: statistics.median(v) for k, v in figures.items()}
    load = os.getloadavg()
    print(f"start-up cost, median of {args.reps} fresh processes each (s); load average {load[0]:.2f} {load[1]:.2f}")
    print(f"  {STACK}:")
    print(f"    deferred rfc3987_syntax (default)   {med['deferred']:6.2f}   (min {min(figures['deferred']):.2f})")
    print(f"    eager (SPECSWEEP_EAGER_IMPORTS=1)    {med['eager']:6.2f}   (min {min(figures['eager']):.2f})")
    print(f"  empty notebook, papermill + export     {med['empty']:6.2f}   (min {min(figures['empty']):.2f})")
    print(f"  seed report, python -m specsweep.report {med['seed']:5.2f}   (min {min(figures['seed']):.2f})")
    print(f"  seed report / empty notebook            {med['seed'] / med['empty']:5.2f}x   (goal <= 1.5x, and <= 4 s)")
    print("slowest imports of the eager stack (cumulative s):")
    for secs, name in slowest_imports():
        print(f"  {secs:6.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
