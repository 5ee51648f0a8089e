"""server.pid.json: the guard's typed record of a serve arm's processes, written and read only through its two functions."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from specsweep.study import guard as serverguard
from specsweep.study.pid_file import PID_FILE, GuardEnd, PidRecord, read_pid_file, write_pid_file

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def test_the_record_round_trips_with_the_keys_the_guard_has_always_written(tmp_path: Path) -> None:
    me = {"pid": os.getpid(), "create_time": 1.5, "name": "python"}
    record = PidRecord(arm="mtp", host="here", runner=me, guard=me, server=me, tree=[me],
                       final=GuardEnd(server_status=-15, stopped_by="runner", remained=[me]))
    write_pid_file(tmp_path / PID_FILE, record)
    doc = json.loads((tmp_path / PID_FILE).read_text())
    assert list(doc) == ["arm", "host", "runner", "guard", "server", "tree", "final"]
    assert doc["final"] == {"server_status": -15, "stopped_by": "runner", "killed_after_grace": False,
                            "outside_group": [], "remained": [me], "still_alive": [], "error": None,
                            "kill_cause": None}
    assert read_pid_file(tmp_path / PID_FILE) == record
    assert [p.name for p in tmp_path.iterdir()] == [PID_FILE]  # no temporary file left beside it


def test_an_older_or_damaged_file_reads_with_the_models_defaults(tmp_path: Path) -> None:
    """A file naming only a host and a server (as a runner on another machine may leave it), a
    ``final`` with only an error, entries of the wrong type: the model's defaults fill in."""
    path = tmp_path / PID_FILE
    assert read_pid_file(path) is None
    for broken in ("{", "[]", ""):
        path.write_text(broken)
        assert read_pid_file(path) is None
    path.write_text(json.dumps({"host": "gpu-node-7", "server": {"pid": 4242, "create_time": 1.0}}))
    assert read_pid_file(path) == PidRecord(host="gpu-node-7", server={"pid": 4242, "create_time": 1.0})
    path.write_text(json.dumps({"arm": 3, "guard": "x", "tree": [{"pid": 1}, 7], "final": {"error": "could not start"}}))
    record = read_pid_file(path)
    assert record == PidRecord(tree=[{"pid": 1}], final=GuardEnd(error="could not start"))
    assert record.processes() == [{"pid": 1}]


def test_leftovers_of_a_damaged_file_name_nothing_and_of_another_host_name_the_host(tmp_path: Path) -> None:
    path = tmp_path / PID_FILE
    assert serverguard.leftovers(path) is None
    path.write_text("{")
    left = serverguard.leftovers(path)
    assert left is not None and left.record == PidRecord() and left.alive == [] and left.other_host is None
    other = "not-" + socket.gethostname()
    path.write_text(json.dumps({"host": other, "server": {"pid": os.getpid(), "create_time": 1.0}}))
    left = serverguard.leftovers(path)
    assert left is not None and left.other_host == other and left.alive == []
