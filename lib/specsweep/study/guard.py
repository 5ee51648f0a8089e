"""Keep a study's ``serve`` server from outliving the runner: the guard process and its pid file.

The study runner starts a ``serve`` arm's command through a small guard process::

    python -m specsweep.study.guard --pid-file F --runner-pid P --grace-s G -- ARGV...

The guard (its own session, so a signal to the runner's terminal group does not reach it):

- makes itself a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``), so a process the server
  starts in a session of its own, whose parent then exits, is re-parented to the guard and stays
  in the guard's process tree instead of escaping to init;
- asks for ``SIGTERM`` when the runner dies (``PR_SET_PDEATHSIG``) and also polls its parent
  every ``POLL_S`` seconds, so ``kill -9`` of the runner stops the server within about a second;
- starts the server in a session of its own with ``PR_SET_PDEATHSIG = SIGKILL`` (if the guard
  itself is killed, the kernel kills the server);
- records the pid file ``F`` (JSON): runner, guard, server and every process of the server's tree,
  each as pid + start time (``psutil`` ``create_time``, seconds since the epoch, and on Linux the
  start in clock ticks since boot with the boot's id, which no step of the system clock moves) so a
  later run can tell a leftover process from an unrelated one that reuses its pid; rewritten when
  the tree changes (looked at every ``TREE_S`` seconds);
- on ``SIGTERM`` (the runner's stop, or the runner's death) sends ``SIGTERM`` to the server's
  process group and every process of its tree, ``SIGKILL`` after ``--grace-s`` seconds, then kills
  whatever of the tree remains (processes in sessions of their own) and records them as
  ``remained`` in the pid file's ``final`` entry;
- exits when the server exits (after killing what the server left behind), with its status.

The pid file is a :class:`~specsweep.study.pid_file.PidRecord`; its ``final`` entry
(:class:`~specsweep.study.pid_file.GuardEnd`) says how the server ended. :func:`leftovers` and
:func:`kill_leftovers` read a pid file a killed runner left behind. Linux gets every protection;
elsewhere the guard still polls its parent.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from specsweep.measure.procstat import stat_fields
from specsweep.study.pid_file import GuardEnd, PidRecord, read_pid_file, write_pid_file

#: seconds between checks that the runner and the server still run (two cheap system calls)
POLL_S = 0.1
#: seconds between recordings of the server's process tree in the pid file (a scan of every process,
#: which takes CPU from the server being measured, so it is rare). Orphans are adopted by the guard
#: (subreaper), so the tree is complete again at stop whatever this interval missed.
TREE_S = 2.0
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: seconds to wait for killed processes to vanish
VANISH_S = 5.0
#: seconds a line for the server's log may wait for room in a full pipe before it is dropped
SAY_WAIT_S = 0.5


def _prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` on Linux; False elsewhere or when it fails."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent() -> None:
    """preexec_fn of the server: the kernel sends SIGKILL when the guard dies."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


#: Linux's id of the running boot: a random UUID the kernel makes at each boot
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
#: seconds two epoch start times of one process may differ by when both carry start ticks that agree
#: but no boot id says they are of the same boot: the epoch time is the kernel's boot time (``btime``,
#: whole seconds, moved by every step of the system clock) plus the ticks, so it moves while the
#: process runs; within this bound an earlier boot's process with the same ticks is still ruled out
SAME_EPOCH_WITH_TICKS_S = 10.0
#: the same, where ticks are not known (not Linux, or a pid file from before they were recorded)
SAME_EPOCH_S = 2.0


_boot_id: list[str] = []  # this boot's id once read (a boot outlives every process in it)


def boot_id() -> str | None:
    """This boot's id (:data:`BOOT_ID_FILE`); None where there is none (not Linux) or it could
    not be read this time (read again at the next call)."""
    if not _boot_id:
        try:
            text = BOOT_ID_FILE.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not text:
            return None
        _boot_id.append(text)
    return _boot_id[0]


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22): unlike
    a start time in seconds since the epoch it never moves, whatever the system clock does. None
    where there is no ``/proc`` or the process is gone."""
    fields = stat_fields(int(pid))
    try:
        return int(fields[19]) if fields is not None else None  # field 22 (starttime)
    except (ValueError, IndexError):
        return None


def identity(pid: int) -> dict[str, Any] | None:
    """pid, start time (s since the epoch; on Linux also ``start_ticks`` and ``boot_id``, see
    :func:`start_ticks`) and name; None if gone. (No command line: it may hold a secret, and the
    pid file lives in the study's folder.)"""
    ticks = start_ticks(pid)
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            if p.status() == psutil.STATUS_ZOMBIE:
                return None
            entry: dict[str, Any] = {"pid": pid, "create_time": p.create_time(), "name": p.name()}
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    if start_ticks(pid) != ticks:  # gone, or the pid reused, between the two reads: not one process
        return None
    if ticks is not None:
        entry["start_ticks"] = ticks
        if (boot := boot_id()) is not None:
            entry["boot_id"] = boot
    return entry


def same_process(entry: dict[str, Any]) -> bool:
    """Whether the process of a pid-file entry still runs: same pid *and* same start (a reused pid
    belongs to another process), not a zombie. Where the entry and the process both have start
    ticks (Linux), they must be equal, and the boot the same: by its id where both sides know it
    (then no step of the system clock, however large, matters), else by epoch start times within
    :data:`SAME_EPOCH_WITH_TICKS_S`. Otherwise (an entry from before ticks were recorded, no
    ``/proc``) the epoch start times must agree within :data:`SAME_EPOCH_S`."""
    try:
        pid = int(entry["pid"])
        p = psutil.Process(pid)
        recorded = entry.get("start_ticks")
        ticks = start_ticks(pid) if recorded is not None else None

        def epoch_gap() -> float:
            return abs(p.create_time() - float(entry["create_time"]))

        if ticks is None:
            same = epoch_gap() < SAME_EPOCH_S
        elif entry.get("boot_id") is not None and (boot := boot_id()) is not None:
            same = ticks == int(recorded) and entry["boot_id"] == boot  # type: ignore[arg-type]
        else:
            same = ticks == int(recorded) and epoch_gap() < SAME_EPOCH_WITH_TICKS_S  # type: ignore[arg-type]
        return same and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, KeyError, TypeError, ValueError):
        return False


def describe(entry: dict[str, Any]) -> str:
    """'pid N (name)' for a log line."""
    return f"pid {entry.get('pid')} ({entry.get('name', '?')})"


def signal_all(entries: Sequence[dict[str, Any]], sig: int) -> None:
    """Send ``sig`` to each entry that is still that same process."""
    for e in entries:
        if same_process(e):
            try:
                os.kill(int(e["pid"]), sig)
            except (ProcessLookupError, PermissionError):
                pass


def wait_gone(entries: Sequence[dict[str, Any]], within_s: float) -> list[dict[str, Any]]:
    """Poll until every entry's process is gone or ``within_s`` passes; the ones still alive."""
    deadline = time.monotonic() + within_s
    while True:
        alive = [e for e in entries if same_process(e)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


# --------------------------------------------------------------------------------- the guard


class _Guard:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pid_file = Path(args.pid_file)
        self.me = psutil.Process()
        self.server: subprocess.Popen[bytes] | None = None
        self.server_entry: dict[str, Any] | None = None
        self.tree: dict[int, dict[str, Any]] = {}
        self.stop_reason: str | None = None
        self.record = PidRecord()

    def runner_gone(self) -> bool:
        return os.getppid() != self.args.runner_pid

    def on_term(self, signum: int, frame: Any) -> None:  # noqa: ARG002 - signal handler signature
        if self.stop_reason is None:
            self.stop_reason = "runner gone" if self.runner_gone() else "runner"

    def refresh(self) -> None:
        """Record every descendant (adopted orphans included), reap adopted zombies, rewrite the pid file on change."""
        changed = False
        try:
            kids = self.me.children(recursive=True)
        except psutil.Error:
            kids = []
        for kid in kids:
            if self.server is not None and kid.pid != self.server.pid:
                try:
                    if kid.status() == psutil.STATUS_ZOMBIE and kid.ppid() == self.me.pid:
                        os.waitpid(kid.pid, os.WNOHANG)  # an adopted orphan that exited
                        continue
                except (psutil.Error, ChildProcessError):
                    continue
            if kid.pid not in self.tree or not same_process(self.tree[kid.pid]):
                entry = identity(kid.pid)
                if entry is not None:
                    self.tree[kid.pid] = entry
                    changed = True
        for pid in [p for p, e in self.tree.items() if not same_process(e)]:
            del self.tree[pid]
            changed = True
        if changed:
            self.save()

    def save(self) -> None:
        self.record.tree = list(self.tree.values())
        write_pid_file(self.pid_file, self.record)

    def stop_tree(self) -> GuardEnd:
        """SIGTERM the server's group and tree, SIGKILL after the grace, kill what remains."""
        assert self.server is not None
        killed_after_grace, kill_cause = False, None
        self.refresh()
        outside = [e for e in self.tree.values() if e["pid"] != self.server.pid and _pgid(e["pid"]) not in
                   (None, self.server.pid)]
        for e in outside:
            _say(f"{describe(e)} runs outside the server's process group (a session of its own); "
                 "stopping it with the server's tree")
        if self.server.poll() is None:
            _killpg(self.server.pid, signal.SIGTERM)
            signal_all(list(self.tree.values()), signal.SIGTERM)
            deadline = time.monotonic() + self.args.grace_s
            while self.server.poll() is None and time.monotonic() < deadline:
                time.sleep(POLL_S / 2)
            if self.server.poll() is None:
                killed_after_grace = True
                kill_cause = stuck_cause(self.server.pid)
                _say(f"the server did not exit within {self.args.grace_s:g} s of SIGTERM: SIGKILL; {kill_cause}")
                _killpg(self.server.pid, signal.SIGKILL)
                self.server.kill()
        status = self.server.wait()
        self.refresh()
        remained = [e for e in self.tree.values() if same_process(e)]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            _killpg(self.server.pid, sig)
            signal_all(remained, sig)
            if not wait_gone(remained, 1.0 if sig == signal.SIGTERM else VANISH_S):
                break
            self.refresh()
        self.reap()
        still = [e for e in remained if same_process(e)]
        for e in remained:
            _say(f"{describe(e)} of the server's tree outlived the server; " + ("could not kill it" if e in still
                                                                               else "killed"))
        return GuardEnd(server_status=status, stopped_by=self.stop_reason, killed_after_grace=killed_after_grace,
                        kill_cause=kill_cause,
                        outside_group=outside, remained=remained,
                        still_alive=still + [e for e in outside if same_process(e) and e not in still])

    def reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def run(self) -> int:
        args = self.args
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the runner, which stops us
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        self.record = PidRecord(arm=args.arm, host=socket.gethostname(), runner=identity(args.runner_pid),
                                guard=identity(os.getpid()))
        if self.runner_gone():  # the runner died before PR_SET_PDEATHSIG took effect
            self.record.final = GuardEnd(error="the runner was gone before the server started")
            self.save()
            return 1
        try:
            self.server = subprocess.Popen(args.argv, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                           start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as exc:
            _say(f"could not start: {exc}")
            self.record.final = GuardEnd(error=f"could not start {args.argv[0]!r}: {exc}")
            self.save()
            return 127
        self.server_entry = identity(self.server.pid) or {"pid": self.server.pid, "create_time": None}
        self.tree[self.server.pid] = self.server_entry
        self.record.server = self.server_entry
        self.save()
        next_refresh = 0.0
        while self.stop_reason is None and self.server.poll() is None:
            if self.runner_gone():
                self.stop_reason = "runner gone"
                break
            if time.monotonic() >= next_refresh:  # a scan of /proc: rare, not to load the measured machine
                self.refresh()
                next_refresh = time.monotonic() + TREE_S
            time.sleep(POLL_S)
        final = self.stop_tree()
        self.record.final = final
        self.save()
        status = final.server_status
        assert status is not None  # the server was started and waited for
        return status if status >= 0 else 128 - status


#: what a thread's kernel wait channel (``/proc/PID/task/TID/wchan``) says it waits for, by a word in it
_WAITS = {"pipe_write": "writing to a full pipe (its output: nothing read it, so the write never ends)",
          "pipe_read": "reading a pipe", "futex": "a lock or condition", "accept": "a new connection",
          "poll": "input (poll/select)", "epoll": "input (epoll)", "sock": "a socket", "tcp": "a socket"}


def stuck_cause(pid: int) -> str:
    """What process ``pid`` is doing, for the log of a stop that needed SIGKILL: where its threads wait
    (Linux ``wchan``; a thread blocked writing a full pipe is named first) and its open TCP connections."""
    waits: dict[str, int] = {}
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            chan = (task / "wchan").read_text().strip() or "running"
        except OSError:
            continue
        what = next((text for word, text in _WAITS.items() if word in chan), chan)
        waits[what] = waits.get(what, 0) + 1
    first = sorted(waits, key=lambda w: (not w.startswith("writing to a full pipe"), -waits[w]))
    parts = [f"its threads waited for: {', '.join(f'{w} ({waits[w]})' for w in first)}"] if waits else []
    try:
        conns = [c for c in psutil.Process(pid).net_connections(kind="tcp") if c.status == psutil.CONN_ESTABLISHED]
        parts.append(f"{len(conns)} client connection(s) still open")
    except (psutil.Error, OSError):
        pass
    return "; ".join(parts) or "its state could not be read"


def _say(text: str) -> None:
    """A line for the server's log (the runner's pipe); nothing when the runner is gone (no reader) or
    the pipe stays full for :data:`SAY_WAIT_S` (a line shorter than ``PIPE_BUF`` then never blocks)."""
    line = f"# specsweep guard: {text}\n"[:select.PIPE_BUF]
    try:
        if select.select([], [sys.stdout], [], SAY_WAIT_S)[1]:
            sys.stdout.write(line)
            sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ------------------------------------------------------------------------- after a killed runner


@dataclass
class Leftover:
    """What a pid file from an earlier run says is still running (each verified by its start time)."""

    path: Path
    record: PidRecord
    alive: list[dict[str, Any]]
    other_host: str | None = None


def leftovers(pid_file: Path) -> Leftover | None:
    """The processes of ``pid_file`` that still run (guard, server, its tree); None if no pid file."""
    record = read_pid_file(pid_file)
    if record is None:
        return None if not pid_file.exists() else Leftover(pid_file, PidRecord(), [])
    if record.host and record.host != socket.gethostname():
        return Leftover(pid_file, record, [], other_host=record.host)
    seen: dict[int, dict[str, Any]] = {}
    for e in record.processes():
        if same_process(e):
            seen[int(e["pid"])] = e
    return Leftover(pid_file, record, list(seen.values()))


def kill_leftovers(left: Leftover, grace_s: float = 5.0) -> list[dict[str, Any]]:
    """SIGTERM the leftover processes (and the server's group), SIGKILL after ``grace_s``; the ones
    that could not be killed (another user's process, say)."""
    server = left.record.server
    if server is not None and same_process(server):
        _killpg(int(server["pid"]), signal.SIGTERM)
    signal_all(left.alive, signal.SIGTERM)
    alive = wait_gone(left.alive, grace_s)
    if server is not None and same_process(server):
        _killpg(int(server["pid"]), signal.SIGKILL)
    signal_all(alive, signal.SIGKILL)
    return wait_gone(alive, VANISH_S)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specsweep.study.guard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pid-file", required=True)
    parser.add_argument("--runner-pid", type=int, required=True)
    parser.add_argument("--grace-s", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--arm", default="")
    parser.add_argument("argv", nargs="+", help="the server's command (after --)")
    return _Guard(parser.parse_args(argv)).run()


if __name__ == "__main__":
    from specsweep.runtime import configure_process

    configure_process(arrow=False)
    sys.exit(main())
