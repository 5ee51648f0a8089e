"""The local backend with ``parallel: N``: up to N (arm, repeat) sweeps at once, each in a worker process.

Each worker is a process forked from a ``forkserver`` that imported the sweep machinery once
(``spawn`` where there is none), and runs :func:`specsweep.study.arm.run_arm` —
the same per-arm function as the serial local backend and the Ray backend — straight into the
study's ``out_dir`` (no copy: the folders are the serial ones). Its log lines come back over a
pipe and are shown prefixed ``[arm rK]``; papermill's live sweep output goes to the terminal
prefixed ``[study: arm rK]``. Sweeps start in the study's plan order as workers free up, so with N at least
the number of sweeps every arm and repeat is measured at the same time (which pairs them against
a drifting machine better than any order), and the servers must not share a port: embedded arms
each start their reference server on a free port, ``serve`` arms need ``{port}`` (the study file
refuses ``parallel`` otherwise), within ``port_range`` where given.

Fault tolerance is that of the serial backend, per worker: a failed arm is an outcome and the
others go on; a worker that dies without reporting (killed, out of memory) is recorded as failed
with its exit status, its finished levels kept in its run folder so ``--resume`` continues it.
Ctrl-C reaches every worker (one process group), each stops its server; the runner waits for
them, then raises. SIGTERM does the same where the entry point takes it as Ctrl-C
(:func:`specsweep.study.stop.sigterm_as_interrupt`), and so does a stop asked from another thread
(:func:`specsweep.study.stop.request_stop`: ``publish`` measures each study in a thread, which never sees
the main thread's interrupt). A worker whose runner is gone (``kill -9``) interrupts itself the same way.
"""
from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specsweep.results.study_record import ArmOutcome
from specsweep.study import guard as serverguard
from specsweep.study.arm import arm_dir, complete_run, run_arm
from specsweep.study.file import Arm, Study
from specsweep.study.stop import stop_event

#: seconds the runner waits for interrupted workers to stop their servers before killing them
STOP_WAIT_S = 60.0


#: what a ``forkserver`` imports once, so that each worker starts with them loaded (no import per worker)
PRELOAD = ["specsweep.study.arm", "papermill", "nbclient", "jupyter_client"]


def _context() -> multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext:
    """``forkserver`` where the platform has it (a clean single-threaded process that imported
    :data:`PRELOAD` once forks each worker: cheap, and safe beside the runner's threads), else ``spawn``."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


def _watch_runner(runner: dict[str, Any]) -> None:
    """In a worker: interrupt the main thread (as Ctrl-C would) once the runner (its
    :func:`~specsweep.study.guard.identity`, so a reused pid does not count, nor a step of the
    system clock, which moves a start time in seconds since the epoch) is gone."""
    while serverguard.same_process(runner):
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGINT)


def _worker(study: Study, arm: Arm, repeat: int, out_dir: str, position: int, resume: bool,
            conn: multiprocessing.connection.Connection, runner: dict[str, Any]) -> None:
    """A worker process: run one (arm, repeat), send its log lines and then its outcome to the runner."""
    threading.Thread(target=_watch_runner, args=(runner,), daemon=True, name="runner-watch").start()
    tag = f"[{arm.name} r{repeat}] "

    def log(line: str) -> None:
        conn.send(("log", "\n".join(tag + part for part in str(line).split("\n"))))

    from specsweep.study.arm import _papermill_logging

    _papermill_logging()
    for handler in logging.getLogger("papermill").handlers:
        if getattr(handler, "_specsweep", False):
            handler.setFormatter(logging.Formatter(f"    [{study.name}: {arm.name} r{repeat}] %(message)s"))
    try:
        outcome = run_arm(study, arm, repeat, Path(out_dir), position=position, resume=resume, log=log)
    except KeyboardInterrupt:
        try:
            conn.send(("interrupted", None))
        except OSError:  # the runner is gone (its watch interrupted us): nobody to tell
            pass
        raise SystemExit(130) from None
    conn.send(("done", asdict(outcome)))
    conn.close()


def run_parallel(study: Study, out_dir: Path, *, workers: int, resume: bool, log: Callable[[str], None],
                 on_outcome: Callable[[ArmOutcome], None] = lambda outcome: None) -> list[ArmOutcome]:
    """Run the study's plan with up to ``workers`` sweeps at once (see the module doc);
    ``on_outcome`` sees each outcome as it arrives; returns the outcomes in plan order."""
    out_dir = Path(out_dir).resolve()
    runner = serverguard.identity(os.getpid())
    if runner is None:  # cannot happen: this process runs
        raise RuntimeError("the study runner could not read its own process identity")
    outcomes: list[ArmOutcome] = []

    def record(outcome: ArmOutcome) -> None:
        outcomes.append(outcome)
        on_outcome(outcome)

    todo = _skip_complete(study, out_dir, resume=resume, log=log, on_outcome=record)
    pool = _Workers(study, out_dir, size=workers, resume=resume, runner=runner, log=log)
    with stop_event() as stop:
        try:
            _measure(pool, todo, stop, record)
        except BaseException:  # Ctrl-C, SIGTERM (stop.sigterm_as_interrupt), a stop asked from another thread
            # (stop.request_stop) or a fault of the runner itself: the workers stop their servers first
            _stop_workers(pool.running, log)
            raise
    return sorted(outcomes, key=lambda o: o.position)


def _measure(pool: _Workers, todo: list[tuple[int, int, Arm]], stop: threading.Event,
             record: Callable[[ArmOutcome], None]) -> None:
    """Start the sweeps of ``todo`` as workers free up and ``record`` each outcome, until all are done;
    :class:`KeyboardInterrupt` once ``stop`` is set (checked at least once a second)."""
    while todo or pool.running:
        if stop.is_set():
            raise KeyboardInterrupt("the study was asked to stop")
        while todo and len(pool.running) < pool.size:
            pool.start(*todo.pop(0))
        for outcome in pool.finished(timeout_s=1.0):
            record(outcome)


def _skip_complete(study: Study, out_dir: Path, *, resume: bool, log: Callable[[str], None],
                   on_outcome: Callable[[ArmOutcome], None]) -> list[tuple[int, int, Arm]]:
    """The (position, repeat, arm) of the plan to measure; with ``resume``, each one already
    complete is left out and reported to ``on_outcome`` as ``skipped``."""
    todo: list[tuple[int, int, Arm]] = []
    for position, (repeat, arm) in enumerate(study.plan(), 1):
        if resume and (done := complete_run(out_dir, arm.name, repeat)) is not None:
            log(f"arm {arm.name} repeat {repeat}: already complete ({done}), not measured again")
            on_outcome(ArmOutcome(arm=arm.name, repeat=repeat, position=position, status="skipped", run_dir=str(done)))
        else:
            todo.append((position, repeat, arm))
    return todo


#: a running worker: its process, and the (position, repeat, arm) it measures
_Running = tuple[Any, int, int, Arm]


class _Workers:
    """The worker processes running now (at most ``size``), each with the pipe its log lines and
    outcome come back on."""

    def __init__(self, study: Study, out_dir: Path, *, size: int, resume: bool, runner: dict[str, Any],
                 log: Callable[[str], None]) -> None:
        self.study, self.out_dir, self.size, self.resume, self.runner, self.log = study, out_dir, size, resume, runner, log
        self.ctx = _context()
        self.running: dict[multiprocessing.connection.Connection, _Running] = {}

    def start(self, position: int, repeat: int, arm: Arm) -> None:
        """Start a worker measuring (arm, repeat)."""
        receive, send = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_worker, name=f"specsweep-{arm.name}-r{repeat}",
                                args=(self.study, arm, repeat, str(self.out_dir), position, self.resume, send,
                                      self.runner))
        proc.start()
        send.close()
        self.running[receive] = (proc, position, repeat, arm)
        self.log(f"[{position}/{len(self.study.plan())}] arm {arm.name}, repeat {repeat}: started in worker pid "
                 f"{proc.pid} ({len(self.running)} of at most {self.size} at once)")

    def finished(self, timeout_s: float) -> list[ArmOutcome]:
        """Wait up to ``timeout_s`` for workers to send or exit; pass on their log lines, and return
        the outcomes of those that are done (or gone)."""
        ready = multiprocessing.connection.wait([*self.running, *(p.sentinel for p, *_ in self.running.values())],
                                                timeout=timeout_s)
        outcomes = []
        for conn in [c for c in list(self.running) if c in ready or self.running[c][0].sentinel in ready]:
            outcome = self._read(conn)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _read(self, conn: multiprocessing.connection.Connection) -> ArmOutcome | None:
        """Read what a worker sent; once it is done (or gone), its outcome (None while it runs)."""
        proc, position, repeat, arm = self.running[conn]
        result = _receive(conn, self.log, arm, repeat, position)
        if result is None and proc.is_alive():
            return None
        proc.join()
        del self.running[conn]
        conn.close()
        if result is None:
            result = ArmOutcome(arm=arm.name, repeat=repeat, position=position, status="failed",
                                error=f"arm {arm.name} repeat {repeat}: its worker process exited with status "
                                      f"{proc.exitcode} before reporting; the levels it finished are kept in "
                                      f"{arm_dir(self.out_dir, arm.name, repeat)} (--resume continues them)")
        self.log(f"arm {arm.name} repeat {repeat}: {result.status}" + (f" — {result.error}" if result.error else ""))
        return result


def _receive(conn: multiprocessing.connection.Connection, log: Callable[[str], None], arm: Arm, repeat: int,
             position: int) -> ArmOutcome | None:
    """Pass on the log lines waiting on ``conn``; the outcome among them, if any."""
    result: ArmOutcome | None = None
    try:
        while conn.poll():
            kind, payload = conn.recv()
            if kind == "log":
                log(payload)
            elif kind == "done":
                result = ArmOutcome(**payload)
            elif kind == "interrupted":
                result = ArmOutcome(arm=arm.name, repeat=repeat, position=position, status="failed",
                                    error=f"arm {arm.name} repeat {repeat}: interrupted (SIGINT); the levels it "
                                          "finished are kept (--resume continues them)")
    except (EOFError, OSError):
        pass
    return result


def _stop_workers(running: dict[Any, _Running], log: Callable[[str], None]) -> None:
    """After Ctrl-C or a fault of the runner: let each worker stop its server (SIGINT, as the terminal sends), kill the slow ones."""
    for proc, *_ in running.values():
        if proc.is_alive():
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_WAIT_S
    for proc, _, repeat, arm in running.values():
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            log(f"arm {arm.name} repeat {repeat}: its worker did not stop within {STOP_WAIT_S:g} s; killing it")
            proc.kill()
            proc.join()
