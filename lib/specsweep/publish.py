"""Build every report the README publishes (``make reports``): the main job.

``python -m specsweep.publish`` regenerates each published report under ``reports/``:

- ``seed-qwen3.5-122b-a10b``: the seed's published table (``data/reference/``), no server needed;
- ``refserver-demo``: the whole pipeline on the embedded default — ``notebooks/sweep.ipynb`` run
  by papermill once per arm (baseline, MTP) against the embedded, simulated reference server
  with the notebook's default parameters (a reduced 256-token output), then the report.

Published reports are generated, never edited by hand. ``--skip-sweeps`` rebuilds the demo report
from the result sets already in ``data/runs/refserver-demo``.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from specsweep.report import REPO_ROOT, build_report, execute_notebook

SWEEP_NOTEBOOK = REPO_ROOT / "notebooks" / "sweep.ipynb"


@dataclass(frozen=True)
class Published:
    """One published report: its name, the result sets behind it, its parameters, and the sweeps
    (arm, extra notebook parameters) that produce its data, if any."""

    name: str
    result_sets: tuple[str, ...]
    title: str
    baseline: str = "baseline"
    profiles: list[dict[str, Any]] | None = field(default=None, hash=False)
    sweeps: tuple[tuple[str, dict[str, Any]], ...] = field(default=(), hash=False)


PUBLISHED: tuple[Published, ...] = (
    Published(
        name="seed-qwen3.5-122b-a10b",
        result_sets=("data/reference/seed-qwen3.5-122b-a10b",),
        title="MTP on Qwen3.5-122B-A10B (SGLang, 4× RTX PRO 6000 Blackwell): the seed benchmark",
    ),
    Published(
        name="refserver-demo",
        result_sets=("data/runs/refserver-demo",),
        title="Demo: baseline vs MTP on specsweep's simulated reference server (Qwen3.5-122B-A10B profile)",
        sweeps=(("baseline", {"label": "Baseline (no speculation)"}), ("mtp", {"label": "MTP (simulated NEXTN)"})),
    ),
)


def run_sweeps(pub: Published, build_dir: Path) -> None:
    """Run ``notebooks/sweep.ipynb`` once per arm into a fresh study folder.

    The kernel's output streams to this terminal as it runs: the sweep's own lines (server,
    each level's tok/s, saved) and its per-level tqdm bar with live tok/s.
    """
    study = REPO_ROOT / pub.result_sets[0]
    if study.exists():
        shutil.rmtree(study)
    study.mkdir(parents=True)
    for arm, params in pub.sweeps:
        t0 = time.perf_counter()
        out = build_dir / f"{pub.name}-sweep-{arm}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        print(f"  sweeping arm {arm} with notebooks/sweep.ipynb:", flush=True)
        execute_notebook(SWEEP_NOTEBOOK, out, {"arm": arm, "out_dir": str(study), **params}, stream=True)
        shown = out.relative_to(REPO_ROOT) if out.is_relative_to(REPO_ROOT) else out
        print(f"  swept arm {arm} ({time.perf_counter() - t0:.0f} s; executed notebook {shown})", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specsweep.publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="build only the named report(s)")
    parser.add_argument("--skip-sweeps", action="store_true", help="reuse result sets already on disk")
    parser.add_argument("--out-dir", default=str(REPO_ROOT / "reports"))
    args = parser.parse_args(argv)
    names = {p.name for p in PUBLISHED}
    unknown = set(args.only or ()) - names
    if unknown:
        parser.error(f"unknown report(s) {', '.join(sorted(unknown))}; published: {', '.join(sorted(names))}")
    out_dir = Path(args.out_dir)
    for pub in PUBLISHED:
        if args.only and pub.name not in args.only:
            continue
        t0 = time.perf_counter()
        print(f"{pub.name}:")
        if pub.sweeps and not args.skip_sweeps:
            run_sweeps(pub, out_dir / "_build")
        path = build_report([REPO_ROOT / p for p in pub.result_sets], pub.name, baseline=pub.baseline,
                            title=pub.title, profiles=pub.profiles, out_dir=out_dir)
        shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        print(f"  wrote {shown} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
