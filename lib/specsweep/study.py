"""Run a study: every arm's server started, swept with ``notebooks/sweep.ipynb``, stopped; then the report.

``python -m specsweep.study FILE [--out-dir D] [--report-dir R] [--resume | --fresh] [--dry-run] [--no-report]``
(or ``notebooks/study.ipynb``) reads a study file (:mod:`specsweep.study_file`) and, for each
(repeat, arm) in the study's interleaved order (forward on even repeats, reversed on odd ones):

1. ``serve`` arms: refuses the arm if its URL already answers (naming the process that holds the
   port), then starts the argument list (never a shell) through a guard process
   (:mod:`specsweep.serverguard`) in a session of its own, with the arm's environment and working
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
per level, :mod:`specsweep.agreement`) goes to ``<out_dir>/agreement.csv``.

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
import json
import os
import shlex
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

import pandas as pd

from specsweep import provenance
from specsweep.agreement import agreement_markdown, first_difference_example, output_agreement
from specsweep.markup import md_text
from specsweep.report import build_report
from specsweep.store import (ResultSet, atomic_write_bytes, exclusive_lock, holder_text, load_result_set, write_frame,
                             write_meta)
from specsweep.study_file import DEFAULT_MAX_ARMS, HARD_MAX_ARMS, ORDER_TEXT, Arm, Study, StudyError, load_study
# the per-arm machinery lives in study_arm (shared with the Ray and parallel backends); re-exported here
from specsweep.study_arm import (LOG_TAIL_LINES, PID_FILE, RUNS, SWEEP_NOTEBOOK, ArmOutcome, Redactor,  # noqa: F401
                                 ServerError, ServerProcess, arm_dir, clear_leftover, complete_run, port_holder,
                                 run_arm)

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
    missing: list[str] = field(default_factory=list)
    #: output agreement of each speculative arm with the baseline (see :mod:`specsweep.agreement`)
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


def _write_status(path: Path, study: Study, outcomes: list[ArmOutcome], **extra: Any) -> None:
    doc = {"study": study.name, "title": study.title, "file": str(study.path) if study.path else None,
           "baseline": study.baseline, "repeats": study.spec.repeats,
           "plan": [{"position": i, "repeat": r, "arm": a.name} for i, (r, a) in enumerate(study.plan(), 1)],
           "fingerprint": study.fingerprint(), "outcomes": [asdict(o) for o in outcomes], **extra}
    atomic_write_bytes(path, (json.dumps(doc, indent=2) + "\n").encode())


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
    meta = json.loads(json.dumps(first.meta))
    order = {(a.name, r): i for i, (r, a) in enumerate(study.plan(), 1)}
    meta.update(
        run_id=f"{study.name}-{arm.name}", complete=len(found) == len(runs),
        started_utc=min(rs.meta.get("started_utc") or "" for rs in sets.values()),
        finished_utc=max(rs.meta.get("finished_utc") or "" for rs in sets.values()),
        warnings=sorted({w for rs in sets.values() for w in rs.meta.get("warnings", [])}),
    )
    meta["sweep"] = {**meta.get("sweep", {}), "repeats": len({s.repeat for s in slots.values() if not s.sentinel}),
                     "seed": study.spec.sweep.get("seed", 0)}
    if slots and any(s.levels is not None for s in slots.values()):
        meta["sweep"]["concurrency"] = sorted({int(c) for s in slots.values() if not s.sentinel
                                               for c in (s.levels or meta["sweep"].get("concurrency") or [])})
    if study.is_control(arm):
        meta["control"] = True
    meta["study"] = {
        "name": study.name, "title": study.title, "notes": study.spec.notes, "repeats": study.spec.repeats,
        "order": ORDER_TEXT[study.spec.order] + (f"; up to {study.spec.parallel} sweeps at once, each in a worker "
                                                  "process" if study.spec.parallel > 1 else ""),
        "sentinel": study.spec.sentinel.model_dump() if study.spec.sentinel is not None else None,
        "missing_repeats": sorted({study.slot(arm, r).repeat for r, p in runs.items()
                                   if p is None and not study.slot(arm, r).sentinel}),
        "missing_arms": list(missing),
        "runs": sorted(({"repeat": slots[r].repeat, "run": r, "sentinel": slots[r].sentinel,
                         "levels": list(slots[r].levels) if slots[r].levels is not None else None,
                         "run_id": rs.run_id, "run_dir": str(found[r]), "position": order[(arm.name, r)],
                         "seed": rs.meta.get("workload", {}).get("seed"), "started_utc": rs.meta.get("started_utc"),
                         "finished_utc": rs.meta.get("finished_utc")} for r, rs in sets.items()),
                        key=lambda d: d["position"]),
    }
    write_meta(target, meta)
    return target


def run_order(sets: Sequence[ResultSet]) -> pd.DataFrame:
    """Every run of a study's result sets in time order: position, arm, repeat, seed, start and end (UTC).

    Empty for result sets that were not measured by a study (no ``study`` block in meta.json).
    """
    rows = [{"#": run["position"], "arm": rs.arm,
             "repeat": f"{run['repeat']} (sentinel)" if run.get("sentinel") else run["repeat"],
             "levels": ", ".join(map(str, run["levels"])) if run.get("levels") else "all",
             "prompt seed": run.get("seed"),
             "started (UTC)": run.get("started_utc"), "finished (UTC)": run.get("finished_utc")}
            for rs in sets for run in rs.meta.get("study", {}).get("runs", [])]
    return pd.DataFrame(rows).sort_values("#").reset_index(drop=True) if rows else pd.DataFrame()


#: server settings that must be equal for two arms to differ only in their running-request cap
_SAME_BUT_CAP = ("name", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens", "max_total_num_tokens", "tp_size")


def _running(rs: ResultSet) -> pd.DataFrame:
    """Per concurrency: mean aggregate tok/s and the most requests the server ran at once (its gauge)."""
    lv = rs.levels
    if lv is None or "server_running_max" not in lv or "output_tok_s" not in lv:
        return pd.DataFrame(columns=["output_tok_s", "server_running_max"])
    return lv.groupby("concurrency").agg(output_tok_s=("output_tok_s", "mean"),
                                         server_running_max=("server_running_max", "max"))


def cap_markdown(sets: Sequence[ResultSet]) -> str:
    """What the running-request cap did, from the data: for each arm whose server reports a cap,
    the levels offering more requests than it ever ran at once, and whether the cap or something
    else (the KV pool: ⌊pool tokens ÷ (input + output tokens)⌋ requests fit) held it there; for
    each pair of arms whose servers differ only in the cap, the aggregate tok/s Δ % of the higher
    cap at the levels above the lower one. Empty when no arm reports a cap and running gauge."""
    lines: list[str] = []
    info = {rs.arm: (rs, rs.meta.get("server") or {}, _running(rs)) for rs in sets}
    for arm, (rs, srv, run) in info.items():
        cap = srv.get("max_running_requests")
        if not cap or run.empty:
            continue
        # a level whose gauge read 0 throughout (refreshed only every N decode steps, it can miss a
        # short level) says nothing about what ran: it is not counted as held below the offer
        held = run[(run["server_running_max"] > 0) & (run.index > run["server_running_max"])]
        if held.empty:
            continue
        most = int(held["server_running_max"].max())
        levels = ", ".join(f"C={c}" for c in held.index)
        if most >= cap:
            lines.append(f"- *{md_text(arm)}*: at {levels} the server ran at most {most} requests at once — its cap "
                         f"of {cap} binds.")
            continue
        why = ""
        pool, wl = srv.get("max_total_num_tokens"), rs.meta.get("workload") or {}
        per = (wl.get("input_tokens") or 0) + (wl.get("output_tokens") or 0)
        if pool and per:
            why = (f": its KV pool of {pool:,} tokens holds about {pool // per} requests of {per:,} tokens "
                   f"({wl.get('input_tokens')} in + {wl.get('output_tokens')} out), so the pool binds before the cap")
        lines.append(f"- *{md_text(arm)}*: at {levels} the server ran at most {most} requests at once (its "
                     f"running-requests gauge), below its cap of {cap}{why}.")
    arms = list(info.items())
    for i, (lo_arm, (_, lo_srv, lo_run)) in enumerate(arms):
        for hi_arm, (_, hi_srv, hi_run) in arms[i + 1:] + arms[:i]:
            lo_cap, hi_cap = lo_srv.get("max_running_requests"), hi_srv.get("max_running_requests")
            if not (lo_cap and hi_cap and hi_cap > lo_cap) or lo_run.empty or hi_run.empty \
                    or any(lo_srv.get(k) != hi_srv.get(k) for k in _SAME_BUT_CAP):
                continue
            both = lo_run.add_suffix("_lo").join(hi_run.add_suffix("_hi"), how="inner")
            both = both[both.index > lo_cap]
            if both.empty:
                continue
            deltas = ", ".join(f"{(r.output_tok_s_hi / r.output_tok_s_lo - 1) * 100:+.1f} % at C={c} (ran ≤ "
                               f"{int(r.server_running_max_hi)} vs ≤ {int(r.server_running_max_lo)})"
                               for c, r in both.iterrows())
            same = (both["server_running_max_hi"] <= both["server_running_max_lo"]).all()
            lines.append(f"- Raising the cap from {lo_cap} (*{md_text(lo_arm)}*) to {hi_cap} (*{md_text(hi_arm)}*) "
                         f"changed aggregate tok/s by {deltas}."
                         + (" The higher cap let no more requests run at once, so here it cannot recover throughput."
                            if same else ""))
    if not lines:
        return ""
    return ("**Running-request caps** (levels that offered more requests than the server ever ran at once):\n\n"
            + "\n".join(lines))


def study_markdown(sets: Sequence[ResultSet], baseline: str = "baseline") -> str:
    """What a report says about the study behind its result sets: missing arms, how the runs were
    ordered, the study's notes (its own Markdown), what the running-request caps did
    (:func:`cap_markdown`), output agreement. Empty when no result set came from a study. Names are escaped."""
    studies = [rs.meta["study"] for rs in sets if isinstance(rs.meta.get("study"), dict)]
    if not studies:
        return ""
    info = studies[0]
    lines = [f"These arms were measured by the study *{md_text(info.get('name'))}* with {info.get('repeats')} "
             f"repeat(s), each repeat of each arm a separate run with its own prompt seed (shared by all arms), in "
             f"an interleaved order ({md_text(info.get('order'))}) so that a slow drift of the machine weighs on "
             "every arm alike."]
    missing = sorted({m for s in studies for m in s.get("missing_arms", [])})
    if missing:
        lines.append(f"\n**Missing arm(s): {', '.join(md_text(m) for m in missing)}** — no complete run (the server "
                     "failed to start or died; the study's `study.json` has the tail of its log).")
    partial = [(rs.arm, rs.meta["study"]["missing_repeats"]) for rs in sets
               if rs.meta.get("study", {}).get("missing_repeats")]
    for arm, reps in partial:
        lines.append(f"\n⚠ Arm *{md_text(arm)}* lacks repeat(s) {', '.join(map(str, reps))}.")
    if info.get("notes"):
        lines.append("\n" + str(info["notes"]).strip())
    caps = cap_markdown(sets)
    if caps:
        lines.append("\n" + caps)
    lines.append("\n**Output agreement with the baseline** (same prompts, temperature 0):\n")
    table = output_agreement(sets, baseline)
    lines.append(agreement_markdown(table, baseline))
    for arm in table.loc[table["flagged"], "arm"].drop_duplicates() if not table.empty else []:
        ex = first_difference_example(sets, str(arm), baseline)
        if ex is not None:
            lines.append(f"\n  Earliest difference of *{md_text(arm)}* (C={ex['concurrency']}, repeat {ex['repeat']}, "
                         f"prompt {ex['prompt_id']}, character {ex['position']}), the text around it "
                         "(▌ marks the first difference, ↵ a line end):\n\n"
                         f"  - baseline: “{_excerpt(str(ex['baseline']), int(ex['offset']))}”\n"
                         f"  - {md_text(arm)}: “{_excerpt(str(ex['arm']), int(ex['offset']))}”")
    return "\n".join(lines)


def _excerpt(text: str, mark: int) -> str:
    """Server text for one line of Markdown, ▌ at character ``mark``: line ends shown as ↵, Markdown
    syntax escaped."""
    def line(part: str) -> str:
        return md_text(part.replace("\r", "").replace("\n", "↵"))
    return line(text[:mark]) + "▌" + line(text[mark:])


STUDY_LOCK = ".specsweep-study.lock"


@contextlib.contextmanager
def lock_study_folder(out: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<out>/.specsweep-study.lock`` while a runner uses the study
    folder, as sweeps lock their run folders (both through :func:`specsweep.store.exclusive_lock`):
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


def _study_folder_guarded(fn: Callable[..., "StudyResult"]) -> Callable[..., "StudyResult"]:
    """Run :func:`run_study` holding the study folder's lock, after stopping what a killed runner left."""
    @functools.wraps(fn)
    def wrapper(study: Study, *, out_dir: str | Path | None = None, dry_run: bool = False,
                log: Callable[[str], None] = print, **kw: Any) -> StudyResult:
        if dry_run:
            return fn(study, out_dir=out_dir, dry_run=dry_run, log=log, **kw)
        out = Path(out_dir) if out_dir else study.default_out_dir()
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
    if "ipykernel" not in sys.modules or sys.__stderr__ is None or sys.__stderr__ is sys.stderr:
        return
    hint = resume_hint(study, out)

    def say() -> None:
        try:
            sys.__stderr__.write(f"\n{hint}\n")
            sys.__stderr__.flush()
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
    if dry_run:
        log(study.dry_run(out, reports))
        return result
    status = out / "study.json"
    if fresh and status.exists():
        if resume:
            raise StudyError("fresh and resume contradict each other: fresh starts over, resume continues")
        old = json.loads(status.read_text())
        for name in {o["arm"] for o in old.get("outcomes", [])} | {RUNS}:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
        status.unlink()
        (out / "agreement.csv").unlink(missing_ok=True)
        log(f"fresh: removed the previous study in {out}")
    if status.exists() and not resume:
        raise StudyError(f"{out} already holds a study (study.json); pass --resume (resume=True) to continue it, "
                         "or choose another --out-dir")
    if status.exists():
        problems = study.resume_conflicts(json.loads(status.read_text()).get("fingerprint", {}))
        if problems:
            raise StudyError(f"{status}: cannot resume with {study.path or 'this study'}: {'; '.join(problems)}. "
                             "Restore the study file, rename the changed arm(s), or choose another --out-dir")
    out.mkdir(parents=True, exist_ok=True)
    plan = study.plan()
    log(f"study {study.name}: {len(study.arms)} arm(s) × {study.spec.repeats} repeat(s) = {len(plan)} sweep(s) → {out}"
        + (f" (up to {study.spec.parallel} at once)" if study.spec.parallel > 1 and backend == "local" else ""))
    def done(outcome: ArmOutcome) -> None:
        result.outcomes.append(outcome)
        _write_status(status, study, sorted(result.outcomes, key=lambda o: o.position))

    try:
        if backend == "ray":
            from specsweep.study_ray import run_on_ray

            run_on_ray(study, out, resume=resume, log=log, on_outcome=done)
        elif study.spec.parallel > 1:
            from specsweep.study_parallel import run_parallel

            run_parallel(study, out, workers=study.spec.parallel, resume=resume, log=log, on_outcome=done)
        else:
            for i, (repeat, arm) in enumerate(plan, 1):
                log(f"[{i}/{len(plan)}] arm {arm.name}, repeat {repeat}")
                done(run_arm(study, arm, repeat, out, position=i, resume=resume, log=log))
    except KeyboardInterrupt:
        _write_status(status, study, sorted(result.outcomes, key=lambda o: o.position),
                      interrupted=provenance.utc_now())
        log(f"interrupted: finished arms are kept; continue with --resume (out_dir {out})")
        raise
    result.outcomes.sort(key=lambda o: o.position)
    result.missing = [a.name for a in study.arms
                      if all(complete_run(out, a.name, r) is None for r in study.run_indices(a))]
    for arm in study.arms:
        if arm.name not in result.missing:
            merged = assemble_arm(study, arm, out, result.missing)
            assert merged is not None
            result.result_sets.append(merged)
    failed = [o for o in result.outcomes if o.status == "failed"]
    _write_status(status, study, result.outcomes, missing_arms=result.missing)
    if result.result_sets:
        result.agreement = output_agreement([load_result_set(p) for p in result.result_sets], study.baseline)
        result.agreement.to_csv(out / "agreement.csv", index=False)
        for row in result.agreement[result.agreement["flagged"]].itertuples():
            log(f"⚠ arm {row.arm}, C={row.concurrency}: {row.identical} of {row.pairs} outputs identical to the "
                "baseline at temperature 0 (see agreement.csv)")
    if report:
        ran = [a.name for a in study.arms if a.name not in result.missing]
        if study.baseline in result.missing:
            log(f"no report: the baseline arm {study.baseline!r} has no complete run")
        elif len(ran) < 2:
            log(f"no report: only the baseline arm {study.baseline!r} has a complete run, and a report compares it "
                "with at least one other arm")
        else:
            title = study.title
            if result.missing:
                shown = os.path.relpath(status) if status.resolve().is_relative_to(Path.cwd()) else status
                title += f" — missing arm(s): {', '.join(result.missing)} (no complete run; see {shown})"
            log(f"building the report {study.name} from {len(result.result_sets)} arm(s)"
                + (f" ({', '.join(ran)}; without {', '.join(result.missing)})" if result.missing else ""))
            try:
                result.report = build_report(result.result_sets, study.name, baseline=study.baseline, title=title,
                                             profiles=[p.model_dump() for p in study.spec.profiles]
                                             if study.spec.profiles is not None else None,
                                             out_dir=reports)
                log(f"wrote {result.report}")
            except Exception as exc:  # noqa: BLE001 - the measured data are kept; say why the page is missing
                log(f"no report: building it from {', '.join(ran)} failed: {_first_line(exc)} (the result sets are "
                    f"kept in {out}; rebuild with python -m specsweep.report --result-set DIR ... once fixed)")
    log(f"study {study.name}: {len(plan) - len(failed)} of {len(plan)} sweep(s) complete"
        + (f"; failed: {', '.join(f'{o.arm} r{o.repeat}' for o in failed)}" if failed else ""))
    for line in failure_summary(result):
        log(line)
    return result


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


def main(argv: Sequence[str] | None = None) -> int:
    """CLI; exit status 0 all complete, 1 some arm failed or is missing, 2 a bad study file."""
    parser = argparse.ArgumentParser(prog="python -m specsweep.study", description=__doc__.split("\n\n")[0])
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
        result = run_study(study, out_dir=args.out_dir, report_dir=args.report_dir, resume=args.resume,
                           dry_run=args.dry_run, report=not args.no_report, backend=args.backend, fresh=args.fresh)
    except StudyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result.ok or args.dry_run else 1


if __name__ == "__main__":
    sys.exit(main())
