"""Start the reference server as a subprocess: ``RefServer`` (tests, the sweep's embedded default).

::

    from specsweep.refserver.launch import RefServer

    with RefServer(profile="tiny", spec="mtp", args=["--seed", "3"]) as srv:
        httpx.post(srv.url + "/generate", json={...})

``RefServer`` runs ``sys.executable -m specsweep.refserver --profile P --spec S --host 127.0.0.1
--port 0 --parent-pid PID *args`` in a new process group, waits for the ready line
``specsweep refserver ready: http://127.0.0.1:PORT`` on its stdout (``READY_PREFIX``), and
exposes ``.url``. The server gets ``--parent-pid`` of this process and exits within about half
a second once this process is gone, so even a SIGKILL of the sweep leaves no server behind. Leaving the block sends SIGTERM to the group and waits, then SIGKILL after
``stop_timeout_s``. If the process exits (or ``ready_timeout_s`` passes) before the ready line,
``RefServerError`` is raised with the server's stderr. The server's stderr (its log) goes to a
temporary file deleted at stop, or to ``log_path``, which is kept.
"""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from specsweep.errors import RunError
from specsweep.refserver import READY_PREFIX

__all__ = ["READY_PREFIX", "RefServer", "RefServerError"]


class RefServerError(RunError, RuntimeError):
    """The server did not start (its stderr is in the message and in ``.stderr``)."""

    def __init__(self, message: str, stderr: str = "", returncode: int | None = None) -> None:
        super().__init__(message + (f"\n--- server stderr ---\n{stderr.rstrip()}" if stderr else ""))
        self.stderr = stderr
        self.returncode = returncode


class RefServer:
    """A reference-server subprocess; use as a context manager (or ``start()``/``stop()``)."""

    def __init__(self, profile: str = "tiny", spec: str = "off", args: Sequence[str] = (),
                 ready_timeout_s: float = 30.0, *, host: str = "127.0.0.1",
                 stop_timeout_s: float = 10.0, python: str | None = None,
                 env: dict[str, str] | None = None, cpu: int | None = None,
                 log_path: str | Path | None = None) -> None:
        self.profile = profile
        self.spec = spec
        self.args = list(args)
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.host = host
        self.python = python or sys.executable
        self.env = env
        self.cpu = cpu
        #: where the server's stderr goes and stays after stop (None: a temporary file, deleted)
        self.log_path = Path(log_path) if log_path is not None else None
        self.url: str | None = None
        self.process: subprocess.Popen[str] | None = None
        self.returncode: int | None = None
        self._stderr_file: IO[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.stdout_lines: list[str] = []
        self._final_stderr: str | None = None

    @property
    def command(self) -> list[str]:
        """The command line that starts the server."""
        cmd = [self.python, "-m", "specsweep.refserver", "--profile", self.profile,
               "--spec", self.spec, "--host", self.host, "--port", "0",
               "--parent-pid", str(os.getpid()), *self.args]
        if self.cpu is not None:
            cmd = ["taskset", "-c", str(self.cpu), *cmd]
        return cmd

    @property
    def port(self) -> int:
        """The bound port (after start)."""
        if self.url is None:
            raise RefServerError("server not started")
        return int(self.url.rsplit(":", 1)[1])

    def stderr_text(self) -> str:
        """What the server wrote on stderr so far (kept after the server stopped)."""
        if self._final_stderr is not None:
            return self._final_stderr
        if self._stderr_file is None:
            return ""
        try:
            return Path(self._stderr_file.name).read_text(errors="replace")
        except OSError:
            return ""

    def _reader(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.stdout_lines.append(line.rstrip("\n"))
            self._lines.put(line)
        self._lines.put(None)

    def start(self) -> str:
        """Start the process and wait for its ready line; returns the URL."""
        if self.process is not None:
            raise RefServerError("already started")
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._stderr_file = open(self.log_path, "w+", encoding="utf-8")  # noqa: SIM115 - closed at stop
        else:
            self._stderr_file = tempfile.NamedTemporaryFile("w+", prefix="refserver-", suffix=".err", delete=False)
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=self._stderr_file, stdin=subprocess.DEVNULL,
            text=True, bufsize=1, env=env, start_new_session=True)
        threading.Thread(target=self._reader, args=(self.process.stdout,), daemon=True,
                         name="refserver-stdout").start()
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise RefServerError(f"the server printed no ready line within "
                                     f"{self.ready_timeout_s} s", self.stderr_text())
            try:
                line = self._lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if line is None:  # stdout closed: the process is gone
                rc = self.process.wait()
                self.returncode = rc
                err = self.stderr_text()
                self._cleanup_files()
                self.process = None
                raise RefServerError(f"the server exited with status {rc} before it was ready",
                                     err, rc)
            if line.startswith(READY_PREFIX):
                self.url = line[len(READY_PREFIX):].strip()
                return self.url

    def stop(self) -> int | None:
        """SIGTERM the process group, wait, SIGKILL after ``stop_timeout_s``; returns the status."""
        proc = self.process
        if proc is None:
            return self.returncode
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        self.returncode = proc.returncode
        self.process = None
        self._cleanup_files()
        return self.returncode

    def _cleanup_files(self) -> None:
        if self._stderr_file is not None:
            self._final_stderr = self.stderr_text()
            try:
                self._stderr_file.close()
                if self.log_path is None:
                    os.unlink(self._stderr_file.name)
            except OSError:
                pass
            self._stderr_file = None

    def __enter__(self) -> RefServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
