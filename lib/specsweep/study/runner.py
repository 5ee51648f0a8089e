"""Run a study: every arm's server started, swept with ``notebooks/sweep.ipynb``, stopped; then the report.

``python -m specsweep.study FILE [--out-dir D] [--report-dir R] [--resume | --fresh] [--dry-run] [--no-report]``
(or ``notebooks/study.ipynb``) reads a study file (:mod:`specsweep.study.file`) and, for each
(repeat, arm) in the study's interleaved order (forward on even repeats, reversed on odd ones):

1. ``serve`` arms: refuses the arm if its URL already answers (naming the process that holds the
   port), then starts the argument list (never a shell) through a guard process
   (:mod:`specsweep.study.guard`) in a session of its own, with the arm's environment and working
   directory, its stdout+stderr streamed through a redactor into ``server.log``; the guard kills
   the server and its whole process tree (children in sessions of their own included) when the
   runner dies, even by ``kill -9``, and records their pids and start times in ``server.pid.json``.
   Waits until ``ready_url`` answers 2xx (≤ ``start_timeout_s``) while the started server still
   runs and (where visible) holds the port, and the server answers specsweep's probe.
   ``embedded`` arms: the sweep notebook starts the reference server (its own watchdog).
   ``endpoint`` arms: the server is already running.
2. Runs ``notebooks/sweep.ipynb`` with papermill (its output logged live) with the shared sweep
   parameters, ``repeats=1``, prompt seed ``seed + repeat`` and ``flush_cache`` on unless the
   study says otherwise: the sweep empties the server's prefix cache before each level where it
   offers a route (SGLang ``/flush_cache``, vLLM ``/reset_prefix_cache``), so arms are measured alike.
3. Stops the server: SIGTERM to its process group and tree, SIGKILL after ``stop_grace_s``, then
   whatever of its tree remains (logged). A server that exited before the stop, or with a non-zero
   status when stopped, fails the arm: its run moves to ``_rejected/`` and is measured again on resume.
4. Keeps the executed sweep notebook (``sweep.ipynb``) and the server's log (``server.log``; for
   ``embedded`` arms the sweep writes it), secrets redacted, in the run folder.

A server that fails to start or dies mid-arm is recorded with the tail of its log and the other
arms still run. Then each arm's repeats are merged into one result set (``repeat`` = the study's
repeat; each level keeps its ``started_utc`` and ``meta.json`` lists the runs in time order) and
``notebooks/report.ipynb`` is exported to ``<report_dir>/<name>.html``; a missing arm is named in
the report's title and in ``study.json``. Output agreement with the baseline (identical outputs
per level, :mod:`specsweep.analyze.agreement`) goes to ``<out_dir>/agreement.csv``.

Folders::

    <out_dir>/study.json              the plan and every (arm, repeat) outcome, rewritten after each
    <out_dir>/<arm>/                  the arm's merged result set (what the report reads)
    <out_dir>/_runs/<arm>/r<k>/<run_id>/   each sweep run, with sweep.ipynb and server.log

A runner holds a lock on ``<out_dir>/.specsweep-study.lock``: a second runner on the same folder
is refused, naming the first. Before measuring, the processes that pid files of a killed runner
name are stopped, each verified by its start time (a reused pid is never touched).

``--resume`` skips (arm, repeat) pairs whose run is complete (its ``meta.json``), continues an
incomplete run from its finished levels, and retries failed ones. Without it an ``out_dir`` that
already holds a study is refused; ``--fresh`` deletes that study first (``make reports`` uses it).
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from specsweep.analyze.agreement import output_agreement
from specsweep.errors import FAILED, OK, SpecsweepError, exit_status
from specsweep.report import build_report

# what a report says about a study lives in study_page (a report's kernel loads only that); re-exported here
from specsweep.report.study_page import cap_markdown, run_order, study_markdown  # noqa: F401
from specsweep.results import provenance
from specsweep.results.meta import StudyMeta
from specsweep.results.outpath import writable_dir
from specsweep.results.store import (
    exclusive_lock,
    holder_text,
    load_result_set,
    write_frame,
    write_meta,
)
from specsweep.results.study_record import (
    STUDY_FILE,
    ArmOutcome,
    PlannedSweep,
    StudyRecord,
    read_study_record,
    write_study_record,
)
from specsweep.study.adaptive_record import ADAPTIVE_FILE
from specsweep.study.adaptive_record import summary as adaptive_summary

# the per-arm machinery lives in study_arm (shared with the Ray and parallel backends); re-exported here
from specsweep.study.arm import (  # noqa: F401
    LOG_TAIL_LINES,
    RUNS,
    SWEEP_NOTEBOOK,
    Redactor,
    ServerError,
    ServerProcess,
    arm_dir,
    clear_leftover,
    complete_run,
    port_holder,
    run_arm,
)
from specsweep.study.file import DEFAULT_MAX_ARMS, HARD_MAX_ARMS, ORDER_TEXT, Arm, Slot, Study, StudyError, load_study
from specsweep.study.pid_file import PID_FILE
from specsweep.study.stop import sigterm_as_interrupt

Backend = Literal["local", "ray"]


# ------------------------------------------------------------------------------------ the study


@dataclass
class StudyResult:
    """What a study run produced."""

    study: Study
    out_dir: Path
    outcomes: list[ArmOutcome] = field(default_factory=list)
    result_sets: list[Path] = field(default_factory=list)
    report: Path | None = None
    #: why no report was built (one line), where none was
    report_error: str | None = None
    missing: list[str] = field(default_factory=list)
    #: output agreement of each speculative arm with the baseline (see :mod:`specsweep.analyze.agreement`)
    agreement: pd.DataFrame | None = None

    @property
    def ok(self) -> bool:
        return all(o.status != "failed" for o in self.outcomes) and not self.missing

    def table(self) -> pd.DataFrame:
        """One row per (arm, repeat) in run order: status, run folder, times, error."""
        rows = [{"#": o.position, "arm": o.arm, "repeat": o.repeat, "status": o.status,
                 "started (UTC)": o.started_utc, "finished (UTC)": o.finished_utc,
                 "run folder": o.run_dir, "error": o.error} for o in self.outcomes]
        return pd.DataFrame(rows)


def _write_status(out: Path, study: Study, outcomes: list[ArmOutcome], *, missing_arms: list[str] | None = None,
                  interrupted: str | None = None) -> None:
    """Rewrite ``<out>/study.json``: the plan, ``outcomes`` so far, the fingerprint a resume must match."""
    record = StudyRecord(study=study.name, title=study.title, file=str(study.path) if study.path else None,
                         baseline=study.baseline, repeats=study.spec.repeats,
                         plan=[PlannedSweep(i, r, a.name) for i, (r, a) in enumerate(study.plan(), 1)],
                         fingerprint=study.fingerprint(), outcomes=list(outcomes), missing_arms=missing_arms,
                         interrupted=interrupted)
    write_study_record(out, record)


def assemble_arm(study: Study, arm: Arm, out_dir: Path, missing: Sequence[str] = ()) -> Path | None:
    """Merge an arm's complete repeats into ``<out_dir>/<arm>/`` (repeat = the study's repeat index).

    Levels keep their ``started_utc`` and ``run_id``; ``meta.json`` gains ``study.runs`` (each
    repeat's run, seed, and position in the study's time order). None if no repeat is complete.
    """
    runs = {r: complete_run(out_dir, arm.name, r) for r in study.run_indices(arm)}
    found = {r: p for r, p in runs.items() if p is not None}
    if not found:
        return None
    sets = {r: load_result_set(p) for r, p in found.items()}
    slots = {r: study.slot(arm, r) for r in found}
    has_sentinel = any(s.sentinel for s in slots.values())
    target = out_dir / arm.name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for stem in ("levels", "requests", "server_metrics"):
        # a sentinel run gets a repeat number past the study's repeats (it pairs with no other arm's run)
        frames = [getattr(rs, stem).assign(repeat=study.spec.repeats + r if slots[r].sentinel else slots[r].repeat,
                                           **({"sentinel": slots[r].sentinel} if has_sentinel else {}))
                  for r, rs in sets.items() if getattr(rs, stem) is not None]
        if frames:
            write_frame(target, stem, pd.concat(frames, ignore_index=True))
    first = sets[min(sets)]
    meta = first.meta.model_copy(deep=True)
    order = {(a.name, r): i for i, (r, a) in enumerate(study.plan(), 1)}
    meta.run_id = f"{study.name}-{arm.name}"
    meta.complete = len(found) == len(runs)
    meta.started_utc = min(rs.meta.started_utc or "" for rs in sets.values())
    meta.finished_utc = max(rs.meta.finished_utc or "" for rs in sets.values())
    meta.warnings = sorted({w for rs in sets.values() for w in rs.meta.warnings})
    meta.sweep.repeats = len({s.repeat for s in slots.values() if not s.sentinel})
    meta.sweep.seed = study.spec.sweep.get("seed", 0)
    if slots and any(s.levels is not None for s in slots.values()):
        meta.sweep.concurrency = sorted({int(c) for s in slots.values() if not s.sentinel
                                         for c in (s.levels or meta.sweep.concurrency or [])})
    if study.is_control(arm):
        meta.control = True
    adaptive = adaptive_summary(out_dir) if study.spec.adaptive is not None else None
    meta.study = StudyMeta.model_validate({
        **({"adaptive": adaptive} if adaptive is not None else {}),
        "name": study.name, "title": study.title, "notes": study.spec.notes, "repeats": study.spec.repeats,
        "order": ORDER_TEXT[study.spec.order] + (f"; up to {study.spec.parallel} sweeps at once, each in a worker "
                                                  "process" if study.spec.parallel > 1 else ""),
        "sentinel": study.spec.sentinel.model_dump() if study.spec.sentinel is not None else None,
        "missing_repeats": sorted({study.slot(arm, r).repeat for r, p in runs.items()
                                   if p is None and not study.slot(arm, r).sentinel}),
        "missing_arms": list(missing),
        "runs": sorted(({"repeat": slots[r].repeat, "run": r, "sentinel": slots[r].sentinel,
                         "levels": _levels(slots[r]),
                         "run_id": rs.run_id, "run_dir": str(found[r]), "position": order[(arm.name, r)],
                         "seed": rs.meta.workload.seed, "started_utc": rs.meta.started_utc,
                         "finished_utc": rs.meta.finished_utc} for r, rs in sets.items()),
                        key=lambda d: d["position"]),
    })
    write_meta(target, meta)
    return target


STUDY_LOCK = ".specsweep-study.lock"


def _levels(slot: Slot) -> list[int] | None:
    """The concurrency levels ``slot`` measures, as study.json lists them (None: all)."""
    return list(slot.levels) if slot.levels is not None else None


@contextlib.contextmanager
def lock_study_folder(out: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<out>/.specsweep-study.lock`` while a runner uses the study
    folder, as sweeps lock their run folders (both through :func:`specsweep.results.store.exclusive_lock`):
    a second runner on the same folder gets a :class:`StudyError` naming the holder (pid, host,
    since). The kernel drops the lock however the holder exits. A file system without ``flock``:
    used unlocked."""
    def busy(holder: dict[str, Any]) -> Exception:
        return StudyError(f"{out}: another study runner is using this folder ({holder_text(holder)}); wait for it "
                          "to finish or stop it (then --resume), or choose another --out-dir")

    out.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(out / STUDY_LOCK, busy):
        yield


def clear_leftovers(out: Path, log: Callable[[str], None] = print) -> list[str]:
    """Before a study runs in ``out``: stop every server that pid files of a killed runner name
    (:func:`clear_leftover`); the problems that remain (the arm will then refuse to start)."""
    problems = []
    for pid_file in sorted((out / RUNS).glob(f"*/r*/{PID_FILE}")):
        try:
            clear_leftover(pid_file, log)
        except ServerError as exc:
            problems.append(str(exc))
            log(f"⚠ {exc}")
    return problems


def _study_folder_guarded(fn: Callable[..., StudyResult]) -> Callable[..., StudyResult]:
    """Run :func:`run_study` holding the study folder's lock, after stopping what a killed runner left."""
    @functools.wraps(fn)
    def wrapper(study: Study, *, out_dir: str | Path | None = None, dry_run: bool = False,
                log: Callable[[str], None] = print, **kw: Any) -> StudyResult:
        if dry_run:
            return fn(study, out_dir=out_dir, dry_run=dry_run, log=log, **kw)
        out = writable_dir(Path(out_dir) if out_dir else study.default_out_dir(), "the study's out dir (--out-dir)")
        if kw.get("report", True):
            writable_dir(kw.get("report_dir") or study.spec.report_dir, "the study's report dir (--report-dir)",
                         create=False)  # made only when there is a report to write
        with lock_study_folder(out):
            clear_leftovers(out, log)
            try:
                return fn(study, out_dir=out_dir, dry_run=dry_run, log=log, **kw)
            except KeyboardInterrupt:
                _tell_how_to_resume(study, out)
                raise
    return wrapper


def resume_hint(study: Study, out: Path) -> str:
    """What to run to continue an interrupted study, from the command line and as a notebook."""
    file = shlex.quote(str(study.path)) if study.path else "STUDY.yaml"
    folder = shlex.quote(str(out))
    return (f"specsweep study {study.name} interrupted: its finished sweeps in {out} are kept and the servers it "
            f"started are stopped. To continue, run: python -m specsweep.study {file} --out-dir {folder} --resume "
            f"(notebook: papermill notebooks/study.ipynb OUT.ipynb -p study_file {file} -p out_dir {folder} "
            "-p resume True)")


def _tell_how_to_resume(study: Study, out: Path) -> None:
    """After Ctrl-C inside a Jupyter kernel (``notebooks/study.ipynb`` under papermill), the cell's
    output reaches only the output notebook: say on the terminal (the kernel's own stderr) how to
    continue, now and once more when the kernel exits, after the kernel's and papermill's own
    shutdown messages (papermill's final ``Aborted!`` still follows)."""
    terminal = sys.__stderr__
    if "ipykernel" not in sys.modules or terminal is None or terminal is sys.stderr:
        return
    hint = resume_hint(study, out)

    def say() -> None:
        try:
            terminal.write(f"\n{hint}\n")
            terminal.flush()
        except (OSError, ValueError):
            pass
    say()
    atexit.register(say)


@_study_folder_guarded
def run_study(study: Study, *, out_dir: str | Path | None = None, report_dir: str | Path | None = None,
              resume: bool = False, dry_run: bool = False, report: bool = True, backend: Backend = "local",
              fresh: bool = False, log: Callable[[str], None] = print) -> StudyResult:
    """Run every (repeat, arm) of ``study`` in its interleaved order, merge, and build the report.

    ``out_dir``: default the study's (``data/runs/studies/<name>``); ``report_dir``: default the
    study's ``report_dir`` (``reports``). ``dry_run`` only logs the plan. ``fresh`` deletes the
    study a previous run left in ``out_dir`` (its study.json, run and arm folders) and starts over.
    """
    out = Path(out_dir) if out_dir else study.default_out_dir()
    reports = Path(report_dir) if report_dir else Path(study.spec.report_dir)
    result = StudyResult(study=study, out_dir=out)
    if backend not in ("local", "ray"):
        raise StudyError(f"backend {backend!r}: use 'local' (arms one after another here) or 'ray' (arms as Ray tasks)")
    if backend == "ray" and study.spec.adaptive is not None:
        raise StudyError("backend 'ray': an adaptive study chooses each measurement from the last one; run it with "
                         "the local backend (or remove its 'adaptive' block)")
    if dry_run:
        log(study.dry_run(out, reports))
        return result
    _prepare_out_dir(study, out, fresh=fresh, resume=resume, log=log)
    _measure_plan(study, result, backend=backend, resume=resume, log=log)
    _merge_arms(study, result, log=log)
    if report:
        _report_study(study, result, reports, log=log)
    log(_study_summary(result))
    for line in failure_summary(result):
        log(line)
    return result


def _prepare_out_dir(study: Study, out: Path, *, fresh: bool, resume: bool, log: Callable[[str], None]) -> None:
    """Make ``out`` ready for ``study``: with ``fresh``, delete the study a previous run left there;
    refuse a folder that holds a study unless ``resume``, and a resume the recorded study's
    fingerprint does not allow (:class:`StudyError`, saying what to do)."""
    status = out / STUDY_FILE
    if fresh and status.exists():
        if resume:
            raise StudyError("fresh and resume contradict each other: fresh starts over, resume continues")
        old = read_study_record(out)
        for name in {o.arm for o in (old.outcomes if old is not None else [])} | {RUNS}:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
        status.unlink()
        (out / "agreement.csv").unlink(missing_ok=True)
        (out / ADAPTIVE_FILE).unlink(missing_ok=True)
        log(f"fresh: removed the previous study in {out}")
    if status.exists() and not resume:
        raise StudyError(f"{out} already holds a study (study.json); pass --resume (resume=True) to continue it, "
                         "or choose another --out-dir")
    if status.exists():
        old = read_study_record(out)
        if old is None:
            raise StudyError(f"{status}: cannot be read as a study record (not a JSON object); delete it or choose "
                             "another --out-dir")
        problems = study.resume_conflicts(old.fingerprint)
        if problems:
            raise StudyError(f"{status}: cannot resume with {study.path or 'this study'}: {'; '.join(problems)}. "
                             "Restore the study file, rename the changed arm(s), or choose another --out-dir")
    out.mkdir(parents=True, exist_ok=True)


def _measure_plan(study: Study, result: StudyResult, *, backend: Backend, resume: bool,
                 log: Callable[[str], None]) -> None:
    """Run every (repeat, arm) of the plan with ``backend`` (serially here, ``parallel`` worker
    processes, or Ray tasks), adding each outcome to ``result`` and to ``study.json`` as it comes;
    after Ctrl-C, ``study.json`` says when, and the interrupt propagates."""
    out, plan = result.out_dir, study.plan()
    log(f"study {study.name}: {len(study.arms)} arm(s) × {study.spec.repeats} repeat(s) = {len(plan)} sweep(s) → {out}"
        + (f" (up to {study.spec.parallel} at once)" if study.spec.parallel > 1 and backend == "local" else ""))

    def done(outcome: ArmOutcome) -> None:
        result.outcomes.append(outcome)
        _write_status(out, study, sorted(result.outcomes, key=lambda o: o.position))

    try:
        if backend == "ray":
            from specsweep.study.ray_backend import run_on_ray

            run_on_ray(study, out, resume=resume, log=log, on_outcome=done)
        elif study.spec.adaptive is not None:  # level by level, each choice recorded (serially: it waits on each)
            from specsweep.study.adaptive_run import run_adaptive

            run_adaptive(study, out, resume=resume, log=log, on_outcome=done, assemble=assemble_arm)
        elif study.spec.parallel > 1:
            from specsweep.study.parallel import run_parallel

            run_parallel(study, out, workers=study.spec.parallel, resume=resume, log=log, on_outcome=done)
        else:
            for i, (repeat, arm) in enumerate(plan, 1):
                log(f"[{i}/{len(plan)}] arm {arm.name}, repeat {repeat}")
                done(run_arm(study, arm, repeat, out, position=i, resume=resume, log=log))
    except KeyboardInterrupt:
        _write_status(out, study, sorted(result.outcomes, key=lambda o: o.position),
                      interrupted=provenance.utc_now())
        log(f"interrupted: finished arms are kept; continue with --resume (out_dir {out})")
        raise
    result.outcomes.sort(key=lambda o: o.position)


def _merge_arms(study: Study, result: StudyResult, *, log: Callable[[str], None]) -> None:
    """Merge each arm with a complete run into ``<out_dir>/<arm>/`` (:func:`assemble_arm`), name
    the others in ``result.missing`` and ``study.json``, and write the output agreement with the
    baseline to ``agreement.csv`` (a warning per flagged level)."""
    out = result.out_dir
    result.missing = [a.name for a in study.arms
                      if all(complete_run(out, a.name, r) is None for r in study.run_indices(a))]
    for arm in study.arms:
        if arm.name not in result.missing:
            merged = assemble_arm(study, arm, out, result.missing)
            assert merged is not None
            result.result_sets.append(merged)
    _write_status(out, study, result.outcomes, missing_arms=result.missing)
    if result.result_sets:
        result.agreement = output_agreement([load_result_set(p) for p in result.result_sets], study.baseline)
        result.agreement.to_csv(out / "agreement.csv", index=False)
        for row in result.agreement[result.agreement["flagged"]].itertuples():
            log(f"⚠ arm {row.arm}, C={row.concurrency}: {row.identical} of {row.pairs} outputs identical to the "
                "baseline at temperature 0 (see agreement.csv)")


def _report_study(study: Study, result: StudyResult, reports: Path, *, log: Callable[[str], None]) -> None:
    """Build ``<reports>/<name>.html`` from the merged arms into ``result.report``, its title naming
    any missing arm; log why there is none when the baseline or every other arm lacks a complete
    run, or the build fails (the measured data are kept either way)."""
    failed = _every_request_failed(result.result_sets, log)
    sets = [p for p in result.result_sets if p.name not in failed]
    ran = [a.name for a in study.arms if a.name not in result.missing and a.name not in failed]
    if study.baseline in result.missing or study.baseline in failed:
        result.report_error = (f"the baseline arm {study.baseline!r} has "
                               + ("no successful request" if study.baseline in failed else "no complete run"))
        log(f"no report: {result.report_error}")
        return
    if len(ran) < 2:
        result.report_error = (f"only the baseline arm {study.baseline!r} has a complete run with successful "
                               "requests, and a report compares it with at least one other arm")
        log(f"no report: {result.report_error}")
        return
    title = _report_title(study, result, failed)
    log(f"building the report {study.name} from {len(sets)} arm(s)"
        + (f" ({', '.join(ran)}; without {', '.join([*result.missing, *failed])})"
           if result.missing or failed else ""))
    profiles = [p.model_dump() for p in study.spec.profiles] if study.spec.profiles is not None else None
    try:
        result.report = build_report(sets, study.name, baseline=study.baseline, title=title,
                                     profiles=profiles, out_dir=reports)
        log(f"wrote {result.report}")
    except Exception as exc:  # noqa: BLE001 - the measured data are kept; say why the page is missing
        result.report_error = f"building it from {', '.join(ran)} failed: {_first_line(exc)}"
        log(f"no report: {result.report_error} (the result sets are "
            f"kept in {result.out_dir}; rebuild with python -m specsweep.report --result-set DIR ... once fixed)")


def _every_request_failed(result_sets: Sequence[Path], log: Callable[[str], None]) -> dict[str, str]:
    """{arm: the server's first error} of each merged arm whose every measured request failed (it was
    measured — 100 % errors — but has no speed to compare), each said in the log."""
    failed = {}
    for path in result_sets:
        rs = load_result_set(path)
        if rs.requests is None or rs.levels.empty or "n_ok" not in rs.levels or rs.levels["n_ok"].sum() > 0:
            continue
        first = next(iter(rs.requests["error"].dropna()), None) if "error" in rs.requests else None
        failed[path.name] = str(first) if first is not None else "no tokens"
        log(f"arm {path.name}: measured, but every request failed (100 % errors; the server said: "
            f"{failed[path.name]}); it is left out of the comparison")
    return failed


def _report_title(study: Study, result: StudyResult, failed: dict[str, str]) -> str:
    """The study's title, naming the arms left out: missing (no complete run) or with 100 % errors."""
    title = study.title
    if result.missing:
        status = result.out_dir / STUDY_FILE
        shown = os.path.relpath(status) if status.resolve().is_relative_to(Path.cwd()) else status
        title += f" — missing arm(s): {', '.join(result.missing)} (no complete run; see {shown})"
    for arm, why in failed.items():  # the page shows the title as text (escaped): the server's words are safe
        title += f" — arm {arm}: 100 % errors (every request failed; the server said: {why})"
    return title


def _study_summary(result: StudyResult) -> str:
    """The study's closing line: how many of its sweeps completed, and which failed."""
    planned = len(result.study.plan())
    failed = [o for o in result.outcomes if o.status == "failed"]
    return (f"study {result.study.name}: {planned - len(failed)} of {planned} sweep(s) complete"
            + (f"; failed: {', '.join(f'{o.arm} r{o.repeat}' for o in failed)}" if failed else ""))


def _first_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message (a notebook's error
    names the failing cell's exception; its traceback stays in the executed notebook)."""
    text = str(exc).strip()
    for name in ("evalue", "ename"):
        if getattr(exc, name, None):  # papermill's PapermillExecutionError: the cell's own exception
            text = f"{getattr(exc, 'ename', '')}: {getattr(exc, 'evalue', '')}".strip(": ")
            break
    return text.splitlines()[0] if text else type(exc).__name__


def failure_summary(result: StudyResult) -> list[str]:
    """The last lines a study prints: each failed (arm, repeat) plainly — its error and where its log
    is — and which arms the report left out; nothing when every sweep completed."""
    failed = [o for o in result.outcomes if o.status == "failed"]
    if not failed:
        return []
    lines = [f"FAILED: {len(failed)} sweep(s) did not complete:"]
    for o in failed:
        where = o.server_log or o.notebook or o.run_dir
        lines.append(f"  arm {o.arm} repeat {o.repeat}: {o.error}" + (f" (log: {where})" if where else ""))
    if result.missing:
        lines.append(f"  arm(s) with no complete run, left out of the report: {', '.join(result.missing)}; "
                     "fix them and run the study again with --resume")
    return lines


def main(argv: Sequence[str] | None = None, prog: str = "python -m specsweep.study") -> int:
    """CLI; exit status 0 all complete, 1 some arm failed or is missing, 2 a bad study file. ``prog``: the
    command as typed (``specsweep study``), which its help names."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="study file (YAML), e.g. data/studies/demo.yaml")
    parser.add_argument("--out-dir", default=None, help="result sets go here (default: the study's out_dir or data/runs/studies/<name>)")
    parser.add_argument("--report-dir", default=None, help="the report goes here as <name>.html (default: the study's report_dir, reports)")
    parser.add_argument("--resume", action="store_true", help="continue a study: complete arms/repeats are not measured again")
    parser.add_argument("--dry-run", action="store_true", help="print every arm and command in run order; start nothing")
    parser.add_argument("--fresh", action="store_true", help="delete the study a previous run left in the out dir and start over")
    parser.add_argument("--no-report", action="store_true", help="measure and merge only")
    parser.add_argument("--allow-large-grid", action="store_true",
                        help=f"accept a study of more than max_arms arms (default {DEFAULT_MAX_ARMS}) up to {HARD_MAX_ARMS}")
    parser.add_argument("--backend", default="local", choices=["local", "ray"],
                        help="local: arms one after another on this machine; ray: arms as Ray tasks (pip install -e '.[ray]')")
    args = parser.parse_args(argv)
    try:
        study = load_study(args.study, allow_large_grid=args.allow_large_grid)
        with sigterm_as_interrupt():  # a supervisor's kill stops the workers and keeps their levels, as Ctrl-C does
            result = run_study(study, out_dir=args.out_dir, report_dir=args.report_dir, resume=args.resume,
                               dry_run=args.dry_run, report=not args.no_report, backend=args.backend, fresh=args.fresh)
    except SpecsweepError as exc:  # a bad study file is an InputError (2); a server or run error (1)
        print(f"error: {exc}", file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt as exc:  # the log said what is kept and how to resume
        print(f"{prog}: interrupted", file=sys.stderr)
        return exit_status(exc)
    return OK if result.ok or args.dry_run else FAILED
