"""``server.pid.json``: what the guard of a ``serve`` arm's server records, and the only code that reads or writes it.

The guard (:mod:`specsweep.study.guard`) writes the record when it starts the server, again when
the server's process tree changes and once more when the server has ended; the runner
(:mod:`specsweep.study.arm`) reads it to check on its server, and reads one a killed runner left
behind to stop what still runs. Each process is an identity entry as
:func:`specsweep.study.guard.identity` makes it (``pid``, ``create_time``, ``name``; on Linux also
``start_ticks`` and ``boot_id``): a plain dict, the form in which it also travels between
processes. The defaults a file written by an older specsweep lacks live in :class:`PidRecord` and
:class:`GuardEnd`.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: the pid file's name, in the folder of one (arm, repeat)
PID_FILE = "server.pid.json"

#: one process: its identity entry (see the module docstring)
Process = dict[str, Any]


def _processes(value: Any) -> list[Process]:
    return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def _process(value: Any) -> Process | None:
    return value if isinstance(value, dict) else None


@dataclass
class GuardEnd:
    """How the guarded server ended (the record's ``final`` entry).

    ``server_status``: its exit status (negative: killed by that signal; None when it never
    started); ``stopped_by``: ``"runner"``, ``"runner gone"`` or None when it exited by itself;
    ``killed_after_grace``: SIGKILL was needed; ``outside_group``: processes of its tree in a
    session or group of their own (stopped with the tree); ``remained``: processes of the tree
    alive after the server's leader exited (all killed); ``still_alive``: what could not be
    killed; ``error``: why the server could not be started; ``kill_cause``: with
    ``killed_after_grace``, what the server was doing when SIGKILL was sent (where its threads
    waited, its open connections).
    """

    server_status: int | None = None
    stopped_by: str | None = None
    killed_after_grace: bool = False
    outside_group: list[Process] = field(default_factory=list)
    remained: list[Process] = field(default_factory=list)
    still_alive: list[Process] = field(default_factory=list)
    error: str | None = None
    kill_cause: str | None = None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> GuardEnd:
        status, stopped_by, error = doc.get("server_status"), doc.get("stopped_by"), doc.get("error")
        cause = doc.get("kill_cause")
        return cls(server_status=status if isinstance(status, int) else None,
                   stopped_by=stopped_by if isinstance(stopped_by, str) else None,
                   killed_after_grace=doc.get("killed_after_grace") is True,
                   outside_group=_processes(doc.get("outside_group")), remained=_processes(doc.get("remained")),
                   still_alive=_processes(doc.get("still_alive")), error=error if isinstance(error, str) else None,
                   kill_cause=cause if isinstance(cause, str) else None)


@dataclass
class PidRecord:
    """What the pid file holds: the arm, the host, the runner, the guard, the server and every
    process of its tree (each verified by its start time before anything is done to it), and how
    it ended (``final``, None while the server runs)."""

    arm: str = ""
    host: str | None = None
    runner: Process | None = None
    guard: Process | None = None
    server: Process | None = None
    tree: list[Process] = field(default_factory=list)
    final: GuardEnd | None = None

    def processes(self) -> list[Process]:
        """The guard, the server and its tree: what a leftover record may name as still running."""
        return [e for e in (self.guard, self.server, *self.tree) if e is not None]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PidRecord:
        """The record of a parsed pid file: a field of the wrong type (or absent) takes its default."""
        arm, host, final = doc.get("arm"), doc.get("host"), doc.get("final")
        return cls(arm=arm if isinstance(arm, str) else "", host=str(host) if host else None,
                   runner=_process(doc.get("runner")), guard=_process(doc.get("guard")),
                   server=_process(doc.get("server")), tree=_processes(doc.get("tree")),
                   final=GuardEnd.from_json(final) if isinstance(final, dict) else None)


def read_pid_file(path: Path) -> PidRecord | None:
    """The record in ``path``; None when it is missing or not a JSON object (half written, damaged)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return PidRecord.from_json(doc) if isinstance(doc, dict) else None


def write_pid_file(path: Path, record: PidRecord) -> None:
    """Write ``record`` to ``path`` atomically (a reader never sees half a file). No fsync: the
    guard rewrites it while the server is measured, and a file lost with the machine names only
    processes that are gone with it."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(record), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
