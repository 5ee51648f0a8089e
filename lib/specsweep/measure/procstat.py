"""A process's ``/proc/<pid>/stat`` (Linux), split into fields: the one parser that
:mod:`specsweep.measure.cpushare` (CPU seconds, parent pids) and :mod:`specsweep.study.guard` (start ticks)
share. Standard library only: the server guard imports it at start.

The second field is the process's name in parentheses, which may itself hold spaces, parentheses
and bytes that are not UTF-8; the fields are therefore split after the *last* ``)`` of the raw bytes.
"""
from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def stat_fields(pid: int | str, proc: Path = PROC) -> list[bytes] | None:
    """Fields 3 onwards of ``/proc/<pid>/stat`` (``proc(5)`` field *n* is item *n* − 3: state, ppid,
    …, utime at 11, stime at 12, starttime at 19); None where the process is gone, there is no
    ``/proc`` or the file is not a stat line."""
    try:
        raw = (proc / str(pid) / "stat").read_bytes()
        return raw[raw.rindex(b")") + 2:].split()
    except (OSError, ValueError):
        return None
