"""One (arm, repeat) of a study: its server started, swept with ``notebooks/sweep.ipynb``, stopped.

:func:`run_arm` is the unit every study backend runs — the local one (serially, or ``parallel``
arms at once in worker processes: :mod:`specsweep.study.parallel`) and the Ray one
(:mod:`specsweep.study.ray_backend`) — so this module imports neither :mod:`specsweep.study.runner` nor a
backend. It also holds what one arm needs around the sweep: the ``serve`` arm's server process
(:class:`ServerProcess`, started through :mod:`specsweep.study.guard`), the redaction of its
secrets (:class:`Redactor`), the leftovers of a killed runner (:func:`clear_leftover`) and the
run folders of an (arm, repeat) (:func:`arm_dir`, :func:`complete_run`). See
:mod:`specsweep.study.runner` for the steps and folders.
"""
from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil

from specsweep.errors import RunError
from specsweep.measure.tls import verify_for
from specsweep.notebooks.execute import execute_notebook
from specsweep.notebooks.kernel import SWEEP_PRELOAD
from specsweep.paths import SWEEP_NOTEBOOK
from specsweep.results import provenance
from specsweep.results.redact import redact_text
from specsweep.results.study_record import ArmOutcome
from specsweep.study import guard as serverguard
from specsweep.study.file import SECRET_NAME, Arm, Study, endpoint_of, free_port, secret_argv_values
from specsweep.study.pid_file import PID_FILE, GuardEnd, PidRecord, read_pid_file

RUNS = "_runs"
LOG_TAIL_LINES = 40

# ---------------------------------------------------------------------------------------- secrets


#: ``user:password@`` right after a URL's ``scheme://``. Looked for from the ``://`` back (a lookbehind
#: of one word character), not with ``(\w+://)`` in front: that form tried every start inside a run
#: of word characters and backtracked over the rest of it, so its time grew with the square of the
#: run, and a long run of hex digits in a notebook's output or a log stalled the redaction. The
#: matches, and so the text written, are the same.
_URL_CREDENTIALS = re.compile(r"(?<=\w://)[^/\s:@]+:[^/\s@]+@")


class Redactor:
    """Replaces secret values (API keys, tokens) with ``***`` in text before it is written."""

    def __init__(self, secrets: Sequence[str]) -> None:
        # values shorter than 6 characters ('true', '1') would blank common words, and are no real secret
        self.secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    @classmethod
    def for_arm(cls, arm: Arm, environ: dict[str, str] | None = None) -> Redactor:
        """Secrets of one arm: secret-named variables of the environment and the arm's ``env``
        (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``…), and argv values after such flags."""
        environ = dict(os.environ if environ is None else environ)
        secrets = [v for k, v in environ.items() if SECRET_NAME.search(k)]
        if arm.serve is not None:
            secrets += [v for k, v in arm.serve.env.items() if SECRET_NAME.search(k)]
            secrets += secret_argv_values(arm.serve.argv)
        return cls(secrets)

    def __call__(self, text: str) -> str:
        text = redact_text(text, self.secrets, mask="***")  # each secret, its encodings, its fragments at a cut
        # credentials inside URLs (scheme://user:password@host)
        return _URL_CREDENTIALS.sub("***:***@", text)


# ----------------------------------------------------------------------------------- the server


class ServerError(RunError, RuntimeError):
    """A ``serve`` arm's server failed to start or died; ``log_tail`` holds its last lines."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


#: how often a serve arm's server is started when another process takes the port picked for it
PORT_RACE_STARTS = 3
#: what servers print when their port is taken (Python, uvicorn, Go, Rust, llama.cpp, C errno text)
_PORT_TAKEN = ("address already in use", "address in use", "eaddrinuse", "errno 98", "os error 98",
               "couldn't bind http server socket")


class ServerProcess:
    """A ``serve`` arm's server, started through the guard (:mod:`specsweep.study.guard`): in a
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
        self._unstarted()

    def _unstarted(self) -> None:
        """The state of one start, as before any (a start on another port begins from it again)."""
        #: the guard process (its exit status is the server's; see :attr:`final`)
        self.process: subprocess.Popen[bytes] | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._reader: threading.Thread | None = None
        self.port: int | None = None
        self.ready_url = self.spec.ready_url
        self.endpoint = self.spec.endpoint or endpoint_of(self.spec.ready_url)
        #: the pid file's ``final`` entry once the guard exited (server status, who stopped it, what remained)
        self.final: GuardEnd | None = None
        #: why the server's log could not be written (its output is then read and dropped), or None
        self.log_error: str | None = None

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
        """Copy the server's output into its log, redacted, until it ends. It never stops reading
        before then: a server whose output pipe fills (64 KiB nobody reads) blocks in its next write,
        and one blocked there ignores SIGTERM until SIGKILL (its writing thread holds a lock the
        shutdown needs). A log that can no longer be written (a full disk) is said once, and the
        output is read on and dropped."""
        try:
            for raw in stream:
                line = self.redact(raw.decode("utf-8", errors="replace"))
                self.tail.append(line.rstrip("\n"))
                if self.log_error is None:
                    try:
                        log.write(line)
                        log.flush()
                    except OSError as exc:
                        self.log_error = f"{exc.strerror or exc}"
                        self.tail.append(f"# specsweep: {self.log_path} could not be written ({self.log_error}); "
                                         "the server's output is read on and dropped")
        finally:
            with contextlib.suppress(OSError):
                log.close()

    def lost_port_race(self) -> bool:
        """Whether the server, started on a port this runner picked, exited because another process
        bound that port first (the pick and the server's bind are a moment apart, and other runners
        or tests on this host pick ports too): a fresh port then starts it."""
        if self.port is None or self.alive():
            return False
        said = self.log_tail().lower()
        return any(m in said for m in _PORT_TAKEN)

    def log_tail(self) -> str:
        """The server's last lines (redacted)."""
        return "\n".join(self.tail)

    def record(self) -> PidRecord:
        """The pid file as the guard last wrote it (an empty record before it did)."""
        return read_pid_file(self.pid_file) or PidRecord()

    @property
    def server_pid(self) -> int | None:
        """The server's own pid (the guard's child), once the guard recorded it."""
        server = self.record().server
        return int(server["pid"]) if server is not None else None

    def alive(self) -> bool:
        """Whether the server this runner started still runs (the guard exits when it exits)."""
        if self.process is None or self.process.poll() is not None:
            return False
        server = self.record().server
        return server is None or serverguard.same_process(server)

    @property
    def returncode(self) -> int | None:
        """The server's exit status (negative: killed by that signal); None while it runs."""
        if self.process is None or self.process.poll() is None:
            return None
        final = self.final or self.record().final
        status = final.server_status if final is not None else None
        return status if status is not None else self.process.returncode

    def _exited_error(self) -> ServerError:
        """The error for a server gone before it was ready. Its guard exits once it has cleaned up
        after the server; should it not within the stop bound, :meth:`stop` ends it (never a wait
        without end) and the error says so."""
        if self.process is not None:
            bound_s = self.spec.stop_grace_s + GUARD_EXIT_S
            try:
                self.process.wait(timeout=bound_s)
            except subprocess.TimeoutExpired:
                server = self.record().server or {}
                self.stop()
                return ServerError(f"arm {self.arm.name}: the server this study started "
                                   f"({serverguard.describe(server)}) no longer looked like the process it "
                                   f"started, yet its guard still ran it {bound_s:g} s "
                                   "later; the study stopped it (status "
                                   f"{self.returncode}) before it was ready ({self.ready_url})", self.log_tail())
        self._drain()
        final = self.record().final
        if final is not None and final.error:
            return ServerError(f"arm {self.arm.name}: {final.error} (check 'serve.argv' and 'serve.cwd')",
                               self.log_tail())
        return ServerError(f"arm {self.arm.name}: the server exited with status {self.returncode} before it was "
                           f"ready ({self.ready_url})", self.log_tail())

    def start_ready(self, log: Callable[[str], None] = print) -> None:
        """:meth:`start`, then :meth:`wait_ready`. A server that lost its picked port to another process
        (see :meth:`lost_port_race`) is started again on another, up to ``PORT_RACE_STARTS`` times in
        all; each start keeps its own log (``…-start2.log`` …), and ``log`` says why it started again."""
        first = self.log_path
        for attempt in range(1, PORT_RACE_STARTS + 1):
            self.start()
            try:
                self.wait_ready()
                return
            except ServerError:
                if attempt == PORT_RACE_STARTS or not self.lost_port_race():
                    raise
            self.stop()
            log(f"arm {self.arm.name}: port {self.port} was taken by another process between the pick and the "
                f"server's bind (its log: {self.log_path.name}); starting it again on another port")
            self._unstarted()
            self.log_path = first.with_name(f"{first.stem}-start{attempt + 1}{first.suffix}")

    def wait_ready(self, poll_s: float = 0.5) -> None:
        """Wait until GET ``ready_url`` answers 2xx *and* the server this runner started still runs
        and (on this host, where visible) holds the port; raise :class:`ServerError` with the log
        tail if it exits first, another process answers, or ``start_timeout_s`` passes."""
        deadline = time.monotonic() + self.spec.start_timeout_s
        with httpx.Client(timeout=5.0, trust_env=False, verify=verify_for(self.ready_url)) as client:
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
                proc.wait(timeout=self.spec.stop_grace_s + GUARD_EXIT_S)
            except subprocess.TimeoutExpired:  # the guard hangs: kill the recorded tree from here
                left = serverguard.leftovers(self.pid_file)
                proc.kill()
                proc.wait()
                if left is not None:
                    serverguard.kill_leftovers(left, grace_s=1.0)
        self._drain()
        self.final = self.record().final
        left = serverguard.leftovers(self.pid_file)
        if left is None or not left.alive:
            self.pid_file.unlink(missing_ok=True)
        return self.returncode

    def stop_problem(self) -> str | None:
        """Why the arm must count as failed after :meth:`stop` (None: a clean stop): the server
        exited before the study stopped it, or exited with a non-zero status when stopped (death
        by the SIGTERM the study sent, or by SIGKILL after ``stop_grace_s``, counts as a stop)."""
        final = self.final or GuardEnd()
        status = self.returncode
        if self.process is None:
            return None
        if final.stopped_by is None:
            return (f"the server exited by itself (status {status}) before the study stopped it: what was measured "
                    "may not have been this server")
        if status in (0, -signal.SIGTERM) or (status == -signal.SIGKILL and final.killed_after_grace):
            return None
        return f"the server exited with status {status} when stopped (a server that stops cleanly exits 0)"

    def remained(self) -> list[dict[str, Any]]:
        """Processes of the server's tree that outlived its leader at stop (all killed unless said)."""
        return list(self.final.remained) if self.final is not None else []


#: how the runner starts the guard: by file location, so it works from any ``serve.cwd``
_GUARD_BOOT = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
               "from specsweep.study.guard import main; sys.exit(main())")
#: seconds, beyond ``stop_grace_s``, that the runner waits for the guard to exit once it should
#: (its server stopped or gone: the guard then kills what the server left, which its own bounds
#: hold to one second after SIGTERM plus ``guard.VANISH_S``)
GUARD_EXIT_S = 15.0


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
        server = left.record.server or {}
        raise ServerError(f"{pid_file} was written by a runner on host {left.other_host} (server pid "
                          f"{server.get('pid', '?')}); this host cannot check that it is gone: stop it there, "
                          "then delete the file and resume")
    runner = left.record.runner
    if runner is not None and runner.get("pid") != os.getpid() and serverguard.same_process(runner) \
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
            server.start_ready(log)
            from specsweep.measure.probe import ProbeError, probe

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
            execute_notebook(notebook, executed, params, cwd=os.getcwd(), log_output=True, save_each_cell=True,
                             preload=SWEEP_PRELOAD, secrets=redact.secrets)
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
    final = server.final or GuardEnd()
    if final.killed_after_grace:
        log(f"arm {outcome.arm}: the server did not exit within stop_grace_s = {server.spec.stop_grace_s:g} s of "
            f"SIGTERM and was killed with SIGKILL; {final.kill_cause or 'what it was doing is not known'}"
            + (f"; its log could not be written ({server.log_error})" if server.log_error else ""))
    still = {x.get("pid") for x in final.still_alive}
    for e in final.outside_group:
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


