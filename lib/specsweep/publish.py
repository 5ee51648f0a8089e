"""Build every report the README publishes (``make reports``): the main job.

``python -m specsweep.publish`` regenerates each published report under ``reports/``:

- ``seed-qwen3.5-122b-a10b``: the seed's published table (``data/reference/``), no server needed;
- ``demo``: the demo study ``data/studies/demo.yaml`` run from scratch by :mod:`specsweep.study`
  — every arm (baseline, MTP, MTP with ``--max-running-requests 128``) swept by
  ``notebooks/sweep.ipynb`` on the embedded, simulated reference server (seed profile), each
  arm's and each level's progress on the terminal — then its report;
- ``demo-categories``: the category demo ``data/studies/demo-categories.yaml``, run the same way —
  baseline and MTP on the same simulated server with the built-in categorised prompt set — whose
  report shows the "By prompt category" view (per-category crossovers, acceptance and Δ%).

Published reports are generated, never edited by hand. ``--skip-sweeps`` resumes each study's last
run in its out dir (``data/runs/studies/<name>``) instead of starting over: complete arms are not
measured again, so only the report is rebuilt.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from specsweep.report import REPO_ROOT, build_report
from specsweep.study import run_study
from specsweep.study_file import load_study


@dataclass(frozen=True)
class Published:
    """One published report: either fixed result sets (``result_sets``, ``title``, ``baseline``,
    ``profiles``) or a study file (``study``, relative to the repository root) whose run measures
    the data and names, titles and parameterises the report."""

    name: str
    result_sets: tuple[str, ...] = ()
    title: str = ""
    baseline: str = "baseline"
    profiles: list[dict[str, Any]] | None = field(default=None, hash=False)
    study: str | None = None


PUBLISHED: tuple[Published, ...] = (
    Published(
        name="seed-qwen3.5-122b-a10b",
        result_sets=("data/reference/seed-qwen3.5-122b-a10b",),
        title="MTP on Qwen3.5-122B-A10B (SGLang, 4× RTX PRO 6000 Blackwell): the seed benchmark",
    ),
    Published(name="demo", study="data/studies/demo.yaml"),
    Published(name="demo-categories", study="data/studies/demo-categories.yaml"),
)


def publish_study(pub: Published, out_dir: Path, *, skip_sweeps: bool = False) -> Path:
    """Run ``pub.study`` from scratch (``--fresh``: a previous run's folders are deleted) and
    return its report, ``<out_dir>/<study name>.html``. ``skip_sweeps``: resume the last run
    instead (complete arms are not measured again), so only the report is rebuilt. Raises
    ``RuntimeError`` naming the study file when no report could be built (no complete baseline)."""
    assert pub.study is not None
    study = load_study(REPO_ROOT / pub.study)
    runs = study.default_out_dir()
    runs = runs if runs.is_absolute() else REPO_ROOT / runs
    result = run_study(study, out_dir=runs, report_dir=out_dir, fresh=not skip_sweeps,
                       resume=skip_sweeps and (runs / "study.json").is_file())
    if result.report is None:
        raise RuntimeError(f"{pub.study}: no report (the baseline arm has no complete run; see {runs / 'study.json'})")
    return result.report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specsweep.publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="build only the named report(s)")
    parser.add_argument("--skip-sweeps", action="store_true", help="resume the last study run (complete arms are not measured again) instead of starting over")
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
        print(f"{pub.name}:", flush=True)
        if pub.study:
            path = publish_study(pub, out_dir, skip_sweeps=args.skip_sweeps)
        else:
            path = build_report([REPO_ROOT / p for p in pub.result_sets], pub.name, baseline=pub.baseline,
                                title=pub.title, profiles=pub.profiles, out_dir=out_dir)
        shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        print(f"  wrote {shown} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
