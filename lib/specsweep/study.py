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
import collections
import contextlib
import functools
import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence
from urllib.parse import urlsplit

import httpx
import pandas as pd
import psutil

from specsweep import provenance, serverguard
from specsweep.agreement import agreement_markdown, first_difference_example, output_agreement
from specsweep.markup import md_text
from specsweep.redact import kernel_manager_with_secrets
from specsweep.report import REPO_ROOT, build_report, kernel_manager_class
from specsweep.store import (ResultSet, atomic_write_bytes, exclusive_lock, holder_text, load_result_set, write_frame,
                             write_meta)
from specsweep.study_file import (DEFAULT_MAX_ARMS, HARD_MAX_ARMS, ORDER_TEXT, SECRET_NAME, Arm, Study, StudyError,
                                  endpoint_of, free_port, load_study, secret_argv_values)

SWEEP_NOTEBOOK = REPO_ROOT / "notebooks" / "sweep.ipynb"
RUNS = "_runs"
LOG_TAIL_LINES = 40
Backend = Literal["local", "ray"]


# ---------------------------------------------------------------------------------------- secrets


class Redactor:
    """Replaces secret values (API keys, tokens) with ``***`` in text before it is written."""

    def __init__(self, secrets: Sequence[str]) -> None:
        # values shorter than 6 characters ('true', '1') would blank common words, and are no real secret
        self.secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    @classmethod
    def for_arm(cls, arm: Arm, environ: dict[str, str] | None = None) -> "Redactor":
        """Secrets of one arm: secret-named variables of the environment and the arm's ``env``
        (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``…), and argv values after such flags."""
        environ = dict(os.environ if environ is None else environ)
        secrets = [v for k, v in environ.items() if SECRET_NAME.search(k)]
        if arm.serve is not None:
            secrets += [v for k, v in arm.serve.env.items() if SECRET_NAME.search(k)]
            secrets += secret_argv_values(arm.serve.argv)
        return cls(secrets)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        # credentials inside URLs (scheme://user:password@host)
        return re.sub(r"(\w+://)[^/\s:@]+:[^/\s@]+@", r"\1***:***@", text)


# ----------------------------------------------------------------------------------- the server


class ServerError(RuntimeError):
    """A ``serve`` arm's server failed to start or died; ``log_tail`` holds its last lines."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


class ServerProcess:
    """A ``serve`` arm's server, started through the guard (:mod:`specsweep.serverguard`): in a
    session of its own, killed with its whole process tree when the runner dies or stops it,
    its output redacted into a log and its pids (with start times) in ``server.pid.json``.

    ``argv``, ``env`` values, ``ready_url`` and ``endpoint`` may hold ``{port}``: a free port is
    picked at :meth:`start` (within the arm's or study's ``port_range`` when given).
    """

    def __init__(self, arm: Arm, log_path: Path, redact: Redactor, pid_file: Path | None = None) -> None:
        if arm.serve is None:
            raise ValueError(f"arm {arm.name!r} has no 'serve' section")
        self.arm = arm
        self.spec = arm.serve
        self.log_path = log_path
        self.pid_file = pid_file or log_path.parent / PID_FILE
        self.redact = redact
        #: the guard process (its exit status is the server's; see :attr:`final`)
        self.process: subprocess.Popen[bytes] | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._reader: threading.Thread | None = None
        self.port: int | None = None
        self.ready_url = self.spec.ready_url
        self.endpoint = self.spec.endpoint or endpoint_of(self.spec.ready_url)
        #: the pid file's ``final`` entry once the guard exited (server status, who stopped it, what remained)
        self.final: dict[str, Any] | None = None

    def _sub(self, text: str) -> str:
        return text.replace("{port}", str(self.port))

    def start(self) -> None:
        """Refuse a port that already answers (naming its holder), then start the guard, which
        starts the server; output goes to the log, redacted."""
        s = self.spec
        uses_port = any("{port}" in t for t in [*s.argv, *s.env.values(), s.ready_url, s.endpoint or ""])
        try:
            self.port = free_port(port_range=self.arm.port_range) if uses_port else None
        except OSError as exc:
            raise ServerError(f"arm {self.arm.name}: {exc}") from exc
        argv = [self._sub(a) for a in s.argv]
        env = {**os.environ, **{k: self._sub(v) for k, v in s.env.items()}, "PYTHONUNBUFFERED": "1"}
        self.ready_url, self.endpoint = self._sub(self.ready_url), self._sub(self.endpoint)
        for url in dict.fromkeys([self.ready_url, self.endpoint]):
            holder = port_holder(url)
            if holder:
                raise ServerError(f"arm {self.arm.name}: {url} already answers before its server was started "
                                  f"(held by {holder}); this study measures only servers it starts: stop that "
                                  "process or give the arm another port")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.unlink(missing_ok=True)
        log = self.log_path.open("w", encoding="utf-8")
        log.write(self.redact(f"# {provenance.utc_now()} specsweep study: arm {self.arm.name}: "
                              f"{self.arm.describe()}\n# port {self.port}\n"))
        log.flush()
        guard = [sys.executable, "-c", _GUARD_BOOT, "--pid-file", str(self.pid_file.resolve()),
                 "--runner-pid", str(os.getpid()), "--grace-s", repr(float(s.stop_grace_s)), "--arm", self.arm.name,
                 "--", *argv]
        try:
            self.process = subprocess.Popen(guard, cwd=s.cwd, env=env, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        except OSError as exc:
            log.write(f"# could not start: {exc}\n")
            log.close()
            raise ServerError(f"arm {self.arm.name}: could not start {argv[0]!r}: {exc} "
                              "(check 'serve.argv' and 'serve.cwd')") from exc
        self._reader = threading.Thread(target=self._pump, args=(self.process.stdout, log), daemon=True,
                                        name=f"serve-log-{self.arm.name}")
        self._reader.start()

    def _pump(self, stream: Any, log: Any) -> None:
        with log:
            for raw in stream:
                line = self.redact(raw.decode("utf-8", errors="replace"))
                self.tail.append(line.rstrip("\n"))
                log.write(line)
                log.flush()

    def log_tail(self) -> str:
        """The server's last lines (redacted)."""
        return "\n".join(self.tail)

    def record(self) -> dict[str, Any]:
        """The pid file as the guard last wrote it (empty before it did)."""
        return serverguard.read_json(self.pid_file) or {}

    @property
    def server_pid(self) -> int | None:
        """The server's own pid (the guard's child), once the guard recorded it."""
        server = self.record().get("server")
        return int(server["pid"]) if isinstance(server, dict) else None

    def alive(self) -> bool:
        """Whether the server this runner started still runs (the guard exits when it exits)."""
        if self.process is None or self.process.poll() is not None:
            return False
        server = self.record().get("server")
        return not isinstance(server, dict) or serverguard.same_process(server)

    @property
    def returncode(self) -> int | None:
        """The server's exit status (negative: killed by that signal); None while it runs."""
        if self.process is None or self.process.poll() is None:
            return None
        final = self.final or self.record().get("final") or {}
        status = final.get("server_status")
        return int(status) if status is not None else self.process.returncode

    def _exited_error(self) -> ServerError:
        self.process.wait() if self.process else None
        self._drain()
        final = self.record().get("final") or {}
        if final.get("error"):
            return ServerError(f"arm {self.arm.name}: {final['error']} (check 'serve.argv' and 'serve.cwd')",
                               self.log_tail())
        return ServerError(f"arm {self.arm.name}: the server exited with status {self.returncode} before it was "
                           f"ready ({self.ready_url})", self.log_tail())

    def wait_ready(self, poll_s: float = 0.5) -> None:
        """Wait until GET ``ready_url`` answers 2xx *and* the server this runner started still runs
        and (on this host, where visible) holds the port; raise :class:`ServerError` with the log
        tail if it exits first, another process answers, or ``start_timeout_s`` passes."""
        deadline = time.monotonic() + self.spec.start_timeout_s
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while True:
                if not self.alive():
                    raise self._exited_error()
                try:
                    answered = client.get(self.ready_url).is_success
                except httpx.HTTPError:
                    answered = False
                if answered:
                    if not self.alive():  # it answered, but our server is gone: someone else answered
                        raise self._exited_error()
                    if self.server_pid is not None:
                        foreign = self._foreign_listener()
                        if foreign:
                            raise ServerError(f"arm {self.arm.name}: {self.ready_url} is answered by {foreign}, "
                                              "not by the server this study started; stop that process",
                                              self.log_tail())
                        return
                if time.monotonic() > deadline:
                    raise ServerError(f"arm {self.arm.name}: {self.ready_url} did not answer 2xx within "
                                      f"{self.spec.start_timeout_s:g} s (raise serve.start_timeout_s if the "
                                      "server needs longer to load)", self.log_tail())
                time.sleep(poll_s)

    def _foreign_listener(self) -> str | None:
        """A listener on the endpoint's port outside the started server's own process tree (its
        pid and descendants; not an orphan it left to the guard): None when none is visible."""
        pid = self.server_pid
        try:
            ours = {pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))}
        except psutil.Error:
            return None
        pids = _listener_pids(self.endpoint)
        others = [pid for pid in pids if pid is not None and pid not in ours]
        return _named(others) if others and not any(pid in ours for pid in pids) else None

    def _drain(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=5)

    def stop(self) -> int | None:
        """Ask the guard to stop the server (SIGTERM to its group and tree, SIGKILL after
        ``stop_grace_s``, then whatever of its tree remains); returns the server's status.
        :attr:`final` then says who stopped it and what remained; the pid file is removed once
        nothing of the server runs."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=self.spec.stop_grace_s + 15)
            except subprocess.TimeoutExpired:  # the guard hangs: kill the recorded tree from here
                left = serverguard.leftovers(self.pid_file)
                proc.kill()
                proc.wait()
                if left is not None:
                    serverguard.kill_leftovers(left, grace_s=1.0)
        self._drain()
        self.final = self.record().get("final") or {}
        left = serverguard.leftovers(self.pid_file)
        if left is None or not left.alive:
            self.pid_file.unlink(missing_ok=True)
        return self.returncode

    def stop_problem(self) -> str | None:
        """Why the arm must count as failed after :meth:`stop` (None: a clean stop): the server
        exited before the study stopped it, or exited with a non-zero status when stopped (death
        by the SIGTERM the study sent, or by SIGKILL after ``stop_grace_s``, counts as a stop)."""
        final = self.final or {}
        status = self.returncode
        if self.process is None:
            return None
        if final.get("stopped_by") is None:
            return (f"the server exited by itself (status {status}) before the study stopped it: what was measured "
                    "may not have been this server")
        if status in (0, -signal.SIGTERM) or (status == -signal.SIGKILL and final.get("killed_after_grace")):
            return None
        return f"the server exited with status {status} when stopped (a server that stops cleanly exits 0)"

    def remained(self) -> list[dict[str, Any]]:
        """Processes of the server's tree that outlived its leader at stop (all killed unless said)."""
        return list((self.final or {}).get("remained") or [])


#: how the runner starts the guard: by file location, so it works from any ``serve.cwd``
_GUARD_BOOT = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r}); "
               "from specsweep.serverguard import main; sys.exit(main())")
PID_FILE = "server.pid.json"


def _host_port(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname or "127.0.0.1", port)


def _listener_pids(url: str) -> list[int | None]:
    """Pids listening on the URL's port on this host (None for a socket this user cannot attribute)."""
    hp = _host_port(url)
    if hp is None:
        return []
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    return [c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == hp[1]]


def _named(pids: Sequence[int]) -> str:
    named = []
    for pid in dict.fromkeys(pids):
        entry = serverguard.identity(pid)
        named.append(serverguard.describe(entry) if entry else f"pid {pid}")
    return ", ".join(named)


def port_holder(url: str) -> str | None:
    """Who answers on the URL's host and port already (None: nothing accepts a connection there):
    'pid N (name)' from the listening sockets where this user may see them, else 'something'."""
    hp = _host_port(url)
    if hp is None:
        return None
    try:
        with socket.create_connection(hp, timeout=1.0):
            pass
    except OSError:
        return None
    pids = [p for p in _listener_pids(url) if p is not None]
    return _named(pids) if pids else "something (a process this user cannot see)"


def clear_leftover(pid_file: Path, log: Callable[[str], None] = print) -> None:
    """Handle the pid file a killed runner left: stop the processes it names that still run (each
    checked by its start time, so a reused pid is never touched) and remove it; raise
    :class:`ServerError` naming the pid where that is impossible (another host, another user)."""
    left = serverguard.leftovers(pid_file)
    if left is None:
        return
    if left.other_host:
        server = left.doc.get("server") or {}
        raise ServerError(f"{pid_file} was written by a runner on host {left.other_host} (server pid "
                          f"{server.get('pid', '?')}); this host cannot check that it is gone: stop it there, "
                          "then delete the file and resume")
    runner = left.doc.get("runner")
    if isinstance(runner, dict) and runner.get("pid") != os.getpid() and serverguard.same_process(runner) \
            and any(e.get("pid") != runner.get("pid") for e in left.alive):
        raise ServerError(f"{pid_file}: its server is still run by another study runner "
                          f"({serverguard.describe(runner)}); wait for it or stop it, then resume")
    if left.alive:
        log(f"{pid_file}: a server from an earlier run still runs "
            f"({', '.join(serverguard.describe(e) for e in left.alive)}): stopping it")
        still = serverguard.kill_leftovers(left)
        if still:
            raise ServerError(f"{pid_file}: could not stop {', '.join(serverguard.describe(e) for e in still)} left by "
                              "an earlier run; stop it, then resume")
        log(f"{pid_file}: stopped {', '.join(serverguard.describe(e) for e in left.alive)}")
    pid_file.unlink(missing_ok=True)


# -------------------------------------------------------------------------------------- one arm


@dataclass
class ArmOutcome:
    """What happened to one (arm, repeat): ``complete``, ``skipped`` (already complete) or ``failed``."""

    arm: str
    repeat: int
    position: int
    status: Literal["complete", "skipped", "failed"]
    run_dir: str | None = None
    started_utc: str | None = None
    finished_utc: str | None = None
    error: str | None = None
    log_tail: str | None = None
    server_log: str | None = None
    notebook: str | None = None
    resumed: bool = False


def arm_dir(out_dir: Path, arm: str, repeat: int) -> Path:
    """Folder of one (arm, repeat)'s sweep runs."""
    return out_dir / RUNS / arm / f"r{repeat}"


def _runs_of(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    runs = []
    for meta_path in sorted(folder.glob("*/meta.json")):
        try:
            runs.append((meta_path.parent, json.loads(meta_path.read_text())))
        except (OSError, json.JSONDecodeError):
            continue
    return runs


def complete_run(out_dir: Path, arm: str, repeat: int) -> Path | None:
    """The newest complete run of (arm, repeat), or None."""
    done = [p for p, m in _runs_of(arm_dir(out_dir, arm, repeat)) if m.get("complete")]
    return done[-1] if done else None


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler that writes to whatever ``sys.stderr`` is when a record is emitted, not the stream
    it was created with (which a test harness or a host application may since have replaced)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ assigns it; the property ignores it
        pass


def _papermill_logging() -> None:
    """Show papermill's live cell output (the sweep's per-level progress) on stderr, once."""
    logger = logging.getLogger("papermill")
    if not any(getattr(h, "_specsweep", False) for h in logger.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("    %(message)s"))
        handler._specsweep = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def run_arm(study: Study, arm: Arm, repeat: int, out_dir: Path, *, position: int = 0, resume: bool = False,
            log: Callable[[str], None] = print, notebook: Path = SWEEP_NOTEBOOK) -> ArmOutcome:
    """Measure one (arm, repeat): start its server, sweep it with the sweep notebook, stop it.

    Never raises for a server or sweep failure (the outcome says ``failed``, with the log tail);
    Ctrl-C stops the server and propagates. This is the unit a distributed backend runs.
    """
    import papermill as pm

    out_dir = Path(out_dir).resolve()
    folder = arm_dir(out_dir, arm.name, repeat)
    folder.mkdir(parents=True, exist_ok=True)
    outcome = ArmOutcome(arm=arm.name, repeat=repeat, position=position, status="failed",
                         started_utc=provenance.utc_now())
    if resume and (done := complete_run(out_dir, arm.name, repeat)) is not None:
        outcome.status, outcome.run_dir, outcome.finished_utc = "skipped", str(done), provenance.utc_now()
        log(f"arm {arm.name} repeat {repeat}: already complete ({done}), not measured again")
        return outcome
    stamp = provenance.utc_stamp()
    params = study.sweep_parameters(arm, repeat)
    params["out_dir"] = str(folder)
    incomplete = [p for p, m in _runs_of(folder) if not m.get("complete") and (p / "levels.parquet").is_file()]
    if resume and incomplete:
        params["resume"] = str(incomplete[-1])
        outcome.resumed = True
    before = {p for p, _ in _runs_of(folder)}
    redact = Redactor.for_arm(arm)
    executed = folder / f"sweep-{stamp}.ipynb"
    server: ServerProcess | None = None
    log(redact(f"arm {arm.name} repeat {repeat}: {arm.describe()}"))
    try:
        if arm.kind == "serve":
            clear_leftover(folder / PID_FILE, log)
            server = ServerProcess(arm, folder / f"server-{stamp}.log", redact, folder / PID_FILE)
            outcome.server_log = str(server.log_path)
            server.start()
            server.wait_ready()
            from specsweep.probe import ProbeError, probe

            try:
                probe(server.endpoint, str(study.spec.sweep.get("api", "auto")), str(study.spec.sweep.get("model", "auto")))
            except ProbeError as exc:
                raise ServerError(f"arm {arm.name}: the server is up but does not answer specsweep's probe: {exc}",
                                  server.log_tail()) from exc
            params["endpoint"] = server.endpoint
            log(f"arm {arm.name}: server ready at {server.endpoint} (pid {server.server_pid})")
        elif arm.kind == "endpoint":
            params["endpoint"] = arm.endpoint
        _papermill_logging()
        try:
            pm.execute_notebook(str(notebook), str(executed), parameters=params, cwd=os.getcwd(),
                                kernel_name="python3", progress_bar=False, log_output=True,
                                kernel_manager_class=kernel_manager_with_secrets(kernel_manager_class(),
                                                                                 redact.secrets))
        except pm.PapermillExecutionError as exc:
            died = server is not None and not server.alive()
            why = (f"the server died mid-arm (status {server.process.returncode if server and server.process else '?'})"
                   if died else "the sweep failed")
            raise ServerError(f"arm {arm.name} repeat {repeat}: {why}: {exc.ename}: {exc.evalue}",
                              server.log_tail() if server else _notebook_tail(executed)) from exc
        outcome.status = "complete"
    except ServerError as exc:
        outcome.error, outcome.log_tail = redact(str(exc)), redact(exc.log_tail)
        log(f"arm {arm.name} repeat {repeat}: FAILED — {outcome.error}"
            + (f"\n--- last lines of its log ---\n{outcome.log_tail}" if outcome.log_tail else ""))
    finally:
        stop_problem = _stop_server(server, outcome, log) if server is not None else None
        outcome.finished_utc = provenance.utc_now()
        _keep_beside(outcome, folder, before, executed, server, redact, params.get("resume"))
        if stop_problem is not None:
            _reject_run(outcome, folder, redact(stop_problem), server, log)
    return outcome


def _stop_server(server: ServerProcess, outcome: ArmOutcome, log: Callable[[str], None]) -> str | None:
    """Stop a serve arm's server and say what remained of its tree; the reason the arm fails
    (a server that exited before the stop or with a non-zero status), None after a clean stop."""
    rc = server.stop()
    log(f"arm {outcome.arm}: server stopped (status {rc})")
    final = server.final or {}
    still = {x.get("pid") for x in final.get("still_alive") or []}
    for e in final.get("outside_group") or []:
        log(f"arm {outcome.arm}: {serverguard.describe(e)} of the server's process tree ran outside its process group "
            "(a session of its own); " + ("it could not be killed: stop it by hand" if e.get("pid") in still
                                          else "stopped with the tree"))
    for e in server.remained():
        log(f"arm {outcome.arm}: {serverguard.describe(e)} of the server's process tree outlived the server "
            + ("and could not be killed: stop it by hand" if e.get("pid") in still else "at stop; killed"))
    problem = server.stop_problem()
    return problem if problem is not None and outcome.status == "complete" else None


def _reject_run(outcome: ArmOutcome, folder: Path, problem: str, server: ServerProcess | None,
                log: Callable[[str], None]) -> None:
    """Fail an (arm, repeat) whose sweep finished but whose server did not stop cleanly: its run
    folder moves to ``<folder>/_rejected/`` (kept, never merged) and --resume measures it again."""
    outcome.status, outcome.error = "failed", f"arm {outcome.arm} repeat {outcome.repeat}: {problem}"
    outcome.log_tail = server.redact(server.log_tail()) if server is not None else None
    run = Path(outcome.run_dir) if outcome.run_dir else None
    if run is not None and run.is_dir() and run.parent == folder:
        target = folder / "_rejected" / run.name
        target.parent.mkdir(exist_ok=True)
        os.replace(run, target)
        for attr in ("run_dir", "notebook", "server_log"):
            value = getattr(outcome, attr)
            if value and Path(value).is_relative_to(run):
                setattr(outcome, attr, str(target / Path(value).relative_to(run)))
    log(f"arm {outcome.arm} repeat {outcome.repeat}: FAILED — {outcome.error}; its run is kept in "
        f"{outcome.run_dir} and not merged (--resume measures it again)")


def _notebook_tail(executed: Path) -> str:
    """The last stream lines of an executed notebook (what the sweep printed before failing)."""
    try:
        import nbformat

        nb = nbformat.read(str(executed), as_version=4)
    except Exception:  # noqa: BLE001 - the notebook may not exist when papermill failed early
        return ""
    lines = [line for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
             if o.get("output_type") == "stream" for line in o.get("text", "").splitlines()]
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _keep_beside(outcome: ArmOutcome, folder: Path, before: set[Path], executed: Path,
                 server: ServerProcess | None, redact: Redactor, resumed: str | None) -> None:
    """Move the executed notebook and the server log into the run folder, secrets redacted (an
    embedded arm's log is already there, written by the sweep: redacted with the arm's secrets)."""
    new = [p for p, _ in _runs_of(folder) if p not in before]
    run_dir = Path(resumed) if resumed else (new[-1] if new else None)
    outcome.run_dir = str(run_dir) if run_dir else None
    target = run_dir or folder
    for src, name in ((executed, "sweep.ipynb"), (server.log_path if server else None, "server.log")):
        if src is None or not src.is_file():
            continue
        dst = target / name
        if dst.exists() or target == folder:
            dst = target / src.name  # a resumed run keeps each attempt's files
        dst.write_text(redact(src.read_text(encoding="utf-8", errors="replace")), encoding="utf-8")
        if dst != src:
            src.unlink()
        if name == "sweep.ipynb":
            outcome.notebook = str(dst)
        else:
            outcome.server_log = str(dst)
    embedded_log = run_dir / "server.log" if run_dir is not None and server is None else None
    if embedded_log is not None and embedded_log.is_file():  # the sweep kept the embedded server's log there
        embedded_log.write_text(redact(embedded_log.read_text(encoding="utf-8", errors="replace")), encoding="utf-8")
        outcome.server_log = str(embedded_log)


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
        "order": ORDER_TEXT[study.spec.order],
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
    log(f"study {study.name}: {len(study.arms)} arm(s) × {study.spec.repeats} repeat(s) = {len(plan)} sweep(s) → {out}")
    def done(outcome: ArmOutcome) -> None:
        result.outcomes.append(outcome)
        _write_status(status, study, sorted(result.outcomes, key=lambda o: o.position))

    try:
        if backend == "ray":
            from specsweep.study_ray import run_on_ray

            run_on_ray(study, out, resume=resume, log=log, on_outcome=done)
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
