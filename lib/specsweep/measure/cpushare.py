"""The client's CPU as a share of a local server's, over one level (Linux ``/proc``, no psutil).

On a CPU engine (llama.cpp on a laptop) every cycle the client spends is taken from the server it
measures. :class:`CpuShare` finds the server by its listening port (the process holding the
``127.0.0.1:PORT`` socket, from ``/proc/net/tcp`` and ``/proc/<pid>/fd``), so it works for servers
a study started under its guard (``specsweep.study.guard``), embedded ones and ones started by hand,
and reads at the start and end of a level:

- the client's CPU seconds: user + system time (``/proc/<pid>/stat`` fields 14–15, all threads) of
  this process and its descendants (load-generator worker processes), the server's tree excluded;
- the server's CPU seconds: the same for the listening process and its descendants (taken again
  at every level, so that workers a server starts later count).

The readings' own work (a scan of every process in ``/proc``) stays out of the level: this
process's CPU and the clock are read after the scan when a level starts and before it when the
level ends (:meth:`CpuShare.read`).

A process that exits during the level loses its CPU from both figures (``/proc`` keeps no record
of it). Figures are None where they cannot be read: not Linux, a server on another machine or
another user's server (its sockets are not ours to read).

``client_cpu_share_pct`` = 100 × client CPU s ÷ server CPU s over the level (%).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from specsweep.measure.procstat import PROC, stat_fields

#: the page warns where the client took more than this share of a CPU-busy server's CPU (%)
WARN_SHARE_PCT = 2.0
#: a server counts as computing on the CPU when its tree used at least this many cores
CPU_BUSY_CORES = 0.5
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_LOCAL = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process, all its threads (None when it is gone or unreadable)."""
    fields = stat_fields(pid, PROC)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 (utime), 15 (stime)


def _parents() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if entry.name.isdigit() and (fields := stat_fields(entry.name, PROC)) is not None:
            out[int(entry.name)] = int(fields[1])  # field 4 (ppid)
    return out


def descendants(root: int, parents: dict[int, int] | None = None) -> set[int]:
    """``root`` and every live process below it."""
    parents = _parents() if parents is None else parents
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = {root}, [root]
    while todo:
        for kid in children.get(todo.pop(), []):
            if kid not in tree:
                tree.add(kid)
                todo.append(kid)
    return tree


def listening_pid(port: int) -> int | None:
    """The process holding the listening TCP socket on ``port`` (IPv4 or IPv6), else None."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    found: list[int] = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(entry / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(entry / "fd" / fd) in inodes:
                    found.append(int(entry.name))
                    break
            except OSError:
                continue
    if not found:
        return None
    # a pre-forked server shares the socket with its workers: the topmost holder is the server
    parents = _parents()
    top = [p for p in found if parents.get(p) not in found]
    return min(top or found)


def _tree_cpu(pids: set[int]) -> float:
    return sum(s for s in (cpu_seconds(p) for p in pids) if s is not None)


@dataclass(frozen=True)
class Reading:
    """CPU seconds of both sides at one instant, and which server processes were read."""

    client_s: float
    server_s: float
    server_pids: frozenset[int]
    wall_s: float


class CpuShare:
    """Measure the client's CPU against a local server's, per level.

    ``CpuShare.for_url(base_url)`` is None when the server is not on this machine or not found;
    otherwise ``start = meter.read()`` before a level and ``meter.level_figures(start)`` after it.
    """

    def __init__(self, server_pid: int, client_pid: int | None = None) -> None:
        self.server_pid = server_pid
        self.client_pid = os.getpid() if client_pid is None else client_pid

    @classmethod
    def for_url(cls, base_url: str) -> CpuShare | None:
        """A meter for the server at ``base_url`` when it listens on this machine, else None."""
        try:
            parts = urlsplit(base_url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return None
        if (parts.hostname or "") not in _LOCAL or not PROC.is_dir():
            return None
        pid = listening_pid(port)
        if pid is None or pid == os.getpid():  # a server in this very process: no line between the two
            return None
        return cls(pid)

    def read(self, *, end: bool = False) -> Reading:
        """The client's and the server's CPU now. This process's own CPU and the clock are read last
        in a reading that opens a window and first in one that closes it (``end``), so the meter's
        own work (a scan of every process in /proc: about 2 ms of CPU with 66 processes, more on a
        busy machine) is never counted as the client's."""
        import time

        in_process = self.client_pid == os.getpid()  # this process at full resolution (ticks are 10 ms)

        def mark() -> tuple[float, float]:
            return (time.process_time() if in_process else 0.0), time.monotonic()

        if end:
            own_self, clock = mark()
        parents = _parents()
        server = descendants(self.server_pid, parents) if self.server_pid in parents else set()
        client = descendants(self.client_pid, parents) - server
        server_s = _tree_cpu(server)
        others = _tree_cpu(client - {self.client_pid} if in_process else client)  # the rest from /proc
        if not end:
            own_self, clock = mark()
        return Reading(own_self + others, server_s, frozenset(server), clock)

    def level_figures(self, start: Reading) -> dict[str, float]:
        """The level's columns from ``start`` to now: ``client_cpu_s``, ``server_cpu_s`` (CPU s),
        ``server_cpu_cores`` (server CPU s ÷ wall s) and ``client_cpu_share_pct`` (%); NaN where
        the server used no CPU that could be read."""
        end = self.read(end=True)
        # the server's processes as they were at the start and are now (a worker started mid-level counts
        # from zero; one that exited is lost, /proc keeps no record of it)
        pids = start.server_pids | end.server_pids
        server_now = _tree_cpu(set(pids))
        server_then = start.server_s
        server = max(0.0, server_now - server_then) if pids else math.nan
        client = max(0.0, end.client_s - start.client_s)
        wall = end.wall_s - start.wall_s
        return {
            "client_cpu_s": client,
            "server_cpu_s": server,
            "server_cpu_cores": server / wall if wall > 0 and not math.isnan(server) else math.nan,
            "client_cpu_share_pct": 100.0 * client / server if server and server > 0 else math.nan,
        }


def _figure(row: Any, key: str) -> float:
    raw = row.get(key) if hasattr(row, "get") else None
    try:
        return math.nan if raw is None else float(raw)
    except (TypeError, ValueError):
        return math.nan


def level_suffix(row: Any) -> str:
    """``", client CPU 0.8 % of the server's"`` for a level line (and, for a CPU engine,
    ``", engine got 62 % of its threads' CPU"``), or "" without the figures."""
    share, got = _figure(row, "client_cpu_share_pct"), _figure(row, "server_cpu_got_pct")
    return ("" if math.isnan(share) else f", client CPU {share:.1f} % of the server's") + (
        "" if math.isnan(got) else f", engine got {got:.0f} % of its threads' CPU")


def cpu_share_warning(levels: Any, threshold_pct: float = WARN_SHARE_PCT) -> str | None:
    """The page's warning line (Markdown, figures only, no user strings) where the client's CPU was
    more than ``threshold_pct`` of a CPU-busy server's (≥ :data:`CPU_BUSY_CORES` cores) on some
    level, else None. ``levels``: the result sets' level rows (a DataFrame with ``arm``,
    ``concurrency``, ``client_cpu_share_pct`` and ``server_cpu_cores``)."""
    import pandas as pd

    if not isinstance(levels, pd.DataFrame) or "client_cpu_share_pct" not in levels:
        return None
    share = pd.to_numeric(levels["client_cpu_share_pct"], errors="coerce")
    busy = pd.to_numeric(levels.get("server_cpu_cores", pd.Series(math.nan, index=levels.index)), errors="coerce")
    hot = levels[(share > threshold_pct) & (busy >= CPU_BUSY_CORES)]
    if hot.empty:
        return None
    worst = pd.to_numeric(hot["client_cpu_share_pct"], errors="coerce").max()
    n_levels = len(hot)
    conc = sorted({int(c) for c in hot["concurrency"]}) if "concurrency" in hot else []
    where = f" (concurrency {', '.join(str(c) for c in conc)})" if conc else ""
    return (f"**The client used more than {threshold_pct:g} % of the server's CPU** on {n_levels} level(s){where}, "
            f"up to {worst:.1f} %: on a CPU engine those cycles are taken from the server being measured, so its "
            "figures there may be a little low. Measure from another machine, or with fewer streams per client.")
