"""Build every report the README publishes (``make reports``): the main job.

``python -m specsweep.publish`` regenerates each published report under ``reports/``:

- ``seed-qwen3.5-122b-a10b``: the seed's published table (``data/reference/``), no server needed;
- ``demo``: the demo study ``data/studies/demo.yaml`` run from scratch by :mod:`specsweep.study.runner`
  — every arm (baseline, MTP, MTP with ``--max-running-requests 128``) swept by
  ``notebooks/sweep.ipynb`` on the embedded, simulated reference server (seed profile), each
  arm's and each level's progress on the terminal — then its report;
- ``demo-categories``: the category demo ``data/studies/demo-categories.yaml``, run the same way —
  baseline and MTP on the same simulated server with the built-in categorised prompt set — whose
  report shows the "By prompt category" view (per-category crossovers, acceptance and Δ%).

The two studies are measured first, side by side (each runs its sweeps at once: the study files'
``repeats`` and ``parallel``), then the reports are built one after another, so no report build
competes with a measurement for the CPU. Published reports are generated, never edited by hand. ``--skip-sweeps`` resumes each study's last
run in its out dir (``data/runs/studies/<name>``) instead of starting over: complete arms are not
measured again, so only the report is rebuilt.

The pages go to ``reports/fresh/`` (git-ignored), beside the committed ones in ``reports/``, which a
run never touches: a fresh checkout stays clean, and every run compares with the committed pages'
decisions, not with an earlier run of this machine. ``--out-dir reports`` replaces the committed
pages (what a maintainer does to publish a change), after the same comparison.

Each report's decision table (:mod:`specsweep.decide.decisions`: per profile the decision class, the arm
chosen, the arms tied with it and the crossover's bracket) goes to ``<out-dir>/decisions.json``; before that,
the new table is compared with the committed ``reports/decisions.json`` (the committed pages' decisions),
every difference printed, and a difference fails the run (exit 1, the pages written all the same). ``--decisions`` only
prints the tables of the data already measured (study out dirs) and compares them with that file
(exit 1 on a difference).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsweep.decide import decisions
from specsweep.decide.decisions import DECISIONS_FILE, read_decisions, write_decisions
from specsweep.decide.flip import RESAMPLES, table_with_flips
from specsweep.errors import RunError, SpecsweepError, exit_status
from specsweep.paths import REPO_ROOT
from specsweep.report import build_report
from specsweep.report.carried import read_carried
from specsweep.results.outpath import writable_dir
from specsweep.results.study_record import STUDY_FILE
from specsweep.study.file import load_study
from specsweep.study.runner import run_study
from specsweep.study.stop import request_stop, sigterm_as_interrupt


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


def _runs_dir(pub: Published) -> tuple[Any, Path]:
    assert pub.study is not None
    study = load_study(REPO_ROOT / pub.study)
    runs = study.default_out_dir()
    return study, runs if runs.is_absolute() else REPO_ROOT / runs


#: studies measured at the same time by default: one. Each study already runs its own ``parallel``
#: sweeps, and the simulated servers share the CPU with their clients: on a small machine the two
#: demo studies at once put the simulator behind its schedule (``sim_step_lag_mean_ms``), enough to
#: hide the category demo's latency losses and change its decision (bench/parallel_arms.py measures
#: such contention)
STUDIES_AT_ONCE: int = 1


def measure_studies(pubs: Sequence[Published], *, skip_sweeps: bool = False, at_once: int = STUDIES_AT_ONCE) -> None:
    """Measure every study of ``pubs``, ``at_once`` of them at the same time (one thread each; each
    study runs its own ``parallel`` sweeps in worker processes), from scratch (``--fresh``: a
    previous run's folders are deleted) unless ``skip_sweeps`` (resume the last run: complete arms
    are not measured again). No report is built here, so no report build competes with a
    measurement for the CPU."""
    if at_once < 1:
        raise ValueError(f"at_once={at_once}: at least one study must be measured at a time")
    def one(pub: Published) -> None:
        study, runs = _runs_dir(pub)
        run_study(study, out_dir=runs, fresh=not skip_sweeps, resume=skip_sweeps and (runs / STUDY_FILE).is_file(),
                  report=False, log=lambda line: print(f"{pub.name}: {line}", flush=True))

    studies = [p for p in pubs if p.study]
    if not studies:
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(at_once, len(studies)), thread_name_prefix="study") as pool:
        futures = [pool.submit(one, p) for p in studies]
        try:
            for future in futures:
                future.result()
        except KeyboardInterrupt:  # only this thread sees it: the study threads are told, and stop their workers
            for future in futures:
                future.cancel()
            request_stop()
            concurrent.futures.wait(futures)
            raise


def publish_study(pub: Published, out_dir: Path) -> Path:
    """Build the report of ``pub.study`` from its measured run (:func:`measure_studies`): the
    study is resumed, so complete arms are not measured again (a failed one is retried), then
    merged and reported as ``<out_dir>/<study name>.html``. Raises :class:`~specsweep.errors.RunError`
    naming the study file and why when no report could be built (no complete baseline, or the build failed)."""
    study, runs = _runs_dir(pub)
    result = run_study(study, out_dir=runs, report_dir=out_dir, resume=(runs / STUDY_FILE).is_file())
    if result.report is None:
        why = result.report_error or "see the log above"
        raise RunError(f"{pub.study}: no report ({why}; see {runs / STUDY_FILE})")
    return result.report


def _inputs(pub: Published) -> tuple[list[Path], str, list[dict[str, Any]] | None]:
    """The result sets a published report compares (a study's merged arms), its baseline and profiles."""
    if pub.study is None:
        return [REPO_ROOT / p for p in pub.result_sets], pub.baseline, pub.profiles
    study, runs = _runs_dir(pub)
    sets = [runs / a.name for a in study.arms if (runs / a.name / "meta.json").is_file()]
    profiles = [p.model_dump() for p in study.spec.profiles] if study.spec.profiles is not None else None
    return sets, study.baseline, profiles


#: resampled reruns behind each published row's flip chance (:mod:`specsweep.decide.flip`)
FLIP_RESAMPLES: int = RESAMPLES


def decision_tables(pubs: Sequence[Published]) -> dict[str, list[decisions.DecisionRow]]:
    """Each published report's decision table from the data measured now (see :mod:`specsweep.decide.decisions`)."""
    out = {}
    for pub in pubs:
        sets, baseline, profiles = _inputs(pub)
        # each row with its flip chance, as the page prints it (a statistic: never part of the comparison)
        out[pub.name] = table_with_flips(sets, baseline, profiles, resamples=FLIP_RESAMPLES)
    return out


def built_table(pub: Published, page: Path) -> dict[str, list[decisions.DecisionRow]]:
    """The decision table of a report just built as ``page``: the rows its notebook printed, flip
    chances included (:mod:`specsweep.report.carried`: resampled once, with the page); decided here
    only where the build kept none."""
    rows = read_carried(page)
    return {pub.name: rows} if rows is not None else decision_tables([pub])


#: where ``make reports`` writes its pages: beside the committed ones, git-ignored
FRESH_DIR = REPO_ROOT / "reports" / "fresh"
#: the committed pages' decisions, which every run compares with and only ``--out-dir reports`` replaces
COMMITTED_DECISIONS = REPO_ROOT / "reports" / DECISIONS_FILE


def record_decisions(path: Path, tables: dict[str, list[decisions.DecisionRow]], *,
                     against: Path | None = None) -> list[str]:
    """Compare ``tables`` with the decisions in ``against`` (default: ``path`` itself, which this then
    replaces), print the table and every difference, then save them into ``path`` (its other
    reports' entries kept); returns the differences."""
    against = path if against is None else against
    saved = read_decisions(against)
    both = [k for k in tables if k in saved]
    diff = decisions.differences({k: saved[k] for k in both}, {k: tables[k] for k in both})
    print(decisions.markdown_table(tables), flush=True)
    if not both:
        print(f"decisions: no earlier table of {', '.join(tables)} in {path} to compare with", flush=True)
    elif diff:
        print(f"decisions: DIFFERENT from {_shown(against)}:\n  " + "\n  ".join(diff), flush=True)
    else:
        print(f"decisions: the same as in {_shown(against)}", flush=True)
    if against.resolve() != path.resolve():
        print(f"  (this run's pages and decisions are in {_shown(path.parent)}; {_shown(against)} is left as committed)",
              flush=True)
    write_decisions(path, {**read_decisions(path), **tables})
    return diff


def _shown(path: Path) -> Path:
    """``path`` relative to the repository root where it lies inside it."""
    return path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path


def _publish(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specsweep.publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="build only the named report(s)")
    parser.add_argument("--skip-sweeps", action="store_true", help="resume the last study run (complete arms are not measured again) instead of starting over")
    parser.add_argument("--out-dir", default=str(FRESH_DIR),
                        help=f"where the pages go (default: {_shown(FRESH_DIR)}, git-ignored; 'reports' replaces the "
                        "committed pages)")
    parser.add_argument("--studies-at-once", type=int, default=STUDIES_AT_ONCE, metavar="N",
                        help=f"measure N studies at the same time (default {STUDIES_AT_ONCE}: each runs its own parallel "
                        "sweeps, and more at once put the simulated servers behind their schedule on a small machine)")
    parser.add_argument("--decisions", action="store_true", help="measure and build nothing: print the decision tables "
                        f"of the data measured now and compare them with {_shown(COMMITTED_DECISIONS)} (exit 1 on a difference)")
    args = parser.parse_args(argv)
    if args.studies_at_once < 1:
        parser.error(f"--studies-at-once {args.studies_at_once}: must be at least 1")
    names = {p.name for p in PUBLISHED}
    unknown = set(args.only or ()) - names
    if unknown:
        parser.error(f"unknown report(s) {', '.join(sorted(unknown))}; published: {', '.join(sorted(names))}")
    out_dir = Path(args.out_dir) if args.decisions else writable_dir(args.out_dir, "--out-dir")
    chosen = [p for p in PUBLISHED if not args.only or p.name in args.only]
    if args.decisions:
        tables = decision_tables(chosen)
        saved = read_decisions(COMMITTED_DECISIONS)
        print(decisions.markdown_table(tables))
        missing = [k for k in tables if k not in saved]
        if missing:
            print(f"no earlier table of {', '.join(missing)} in {COMMITTED_DECISIONS} to compare with")
        both = [k for k in tables if k in saved]
        diff = decisions.differences({k: saved[k] for k in both}, {k: tables[k] for k in both})
        print("\n".join([f"different from {COMMITTED_DECISIONS}:", *diff]) if diff
              else f"the same decisions as {COMMITTED_DECISIONS}")
        return 1 if diff else 0
    start = time.perf_counter()
    measure_studies(chosen, skip_sweeps=args.skip_sweeps, at_once=args.studies_at_once)
    if any(p.study for p in chosen):
        print(f"measured every study in {time.perf_counter() - start:.0f} s", flush=True)
    changed: list[str] = []
    for pub in chosen:
        t0 = time.perf_counter()
        print(f"{pub.name}:", flush=True)
        if pub.study:
            path = publish_study(pub, out_dir)
        else:
            path = build_report([REPO_ROOT / p for p in pub.result_sets], pub.name, baseline=pub.baseline,
                                title=pub.title, profiles=pub.profiles, out_dir=out_dir)
        print(f"  wrote {_shown(path)} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.0f} s)", flush=True)
        changed += record_decisions(out_dir / DECISIONS_FILE, built_table(pub, path), against=COMMITTED_DECISIONS)
    print(f"published {len(chosen)} report(s) in {time.perf_counter() - start:.0f} s", flush=True)
    if changed:  # a change of class, arm, tie set or range fails the run: the pages' decisions moved
        print(f"decisions: {len(changed)} changed from the committed ones (listed above)", flush=True)
    return 1 if changed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specsweep.publish``; exit status 0 done, 1 a study or report failed (or, with
    ``--decisions``, a decision differs), 2 bad input (:func:`specsweep.errors.exit_status`)."""
    try:
        with sigterm_as_interrupt():  # a supervisor's kill stops the studies' workers and keeps their levels
            return _publish(argv)
    except SpecsweepError as exc:
        print(f"python -m specsweep.publish: {exc}", file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt as exc:  # each study's log said what is kept and how to resume
        print("python -m specsweep.publish: interrupted", file=sys.stderr)
        return exit_status(exc)


if __name__ == "__main__":
    from specsweep.runtime import configure_process

    configure_process()
    sys.exit(main())
