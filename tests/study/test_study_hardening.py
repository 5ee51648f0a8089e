"""Study runner hardening: the runner never measures a server it did not start, leaves no server
behind however it ends, and bad study files get a named error.

Every server here is a real process on 127.0.0.1: the reference server, wrapped by a small
Python script that also starts a grandchild in a session of its own whose parent exits at once
(a double fork: it escapes the server's process group and process tree). The runner is run as a
subprocess and killed with SIGKILL. Nothing here asserts a duration: processes are polled until
gone within a generous bound.
"""
from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from specsweep.refserver.launch import RefServer
from specsweep.study.file import (
    DEFAULT_MAX_ARMS,
    HARD_MAX_ARMS,
    MAX_DEPTH,
    MAX_STUDY_BYTES,
    StudyError,
    free_port,
    load_study,
    parse_study,
)
from specsweep.study.pid_file import PID_FILE
from specsweep.study.runner import (
    Redactor,
    ServerError,
    ServerProcess,
    complete_run,
    lock_study_folder,
    main,
    run_arm,
    run_study,
)

PY = sys.executable
#: a server wrapper: a double-forked grandchild in its own session, then the reference server as a child;
#: argv: PORT [HEALTH_DELAY_S [STATUS_ON_SIGTERM]]
WRAPPER = r'''
import os, signal, subprocess, sys, time
port = sys.argv[1]
delay = sys.argv[2] if len(sys.argv) > 2 else "0.2"
status = int(sys.argv[3]) if len(sys.argv) > 3 else 0
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        time.sleep(600)
        os._exit(0)
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
print("escaped", int(os.read(r, 64)), flush=True)
server = subprocess.Popen([sys.executable, "-m", "specsweep.refserver", "--profile", "tiny", "--port", port,
                           "--health-delay-s", delay])
print("refserver", server.pid, flush=True)
# SIGTERM blocked (after the server started, which must not inherit the mask) and taken with sigtimedwait:
# a handler could run too late, after the loop saw the server, stopped by the same group SIGTERM, gone
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
while signal.sigtimedwait({signal.SIGTERM}, 0.05) is None:
    if server.poll() is not None:  # gone: stopped with the group (our SIGTERM is then pending) or by itself
        if signal.sigtimedwait({signal.SIGTERM}, 0) is None:
            sys.exit(server.returncode)
        break
server.terminate()
server.wait()
sys.exit(status)
'''


def _gone(pid: int, within_s: float = 30.0) -> bool:
    """Poll until ``pid`` no longer runs (a zombie counts as gone); False after ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def _pids(text: str, what: str) -> list[int]:
    return [int(p) for p in re.findall(rf"^{what} (\d+)$", text, re.M)]


def _study(tmp_path: Path, argv: list[str], *, sweep: dict | None = None, ready_port: str = "{port}",
           **serve: object) -> Path:
    doc = {"title": "Hardening", "name": "h", "baseline": "baseline",
           "sweep": sweep or {"concurrency": [1, 2], "input_tokens": 32, "output_tokens": 16},
           "arms": [{"name": "baseline", "serve": {"argv": argv, "ready_url": f"http://127.0.0.1:{ready_port}/health",
                                                   "start_timeout_s": 60, "stop_grace_s": 5, **serve}}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _wrapper(tmp_path: Path) -> Path:
    script = tmp_path / "wrapper.py"
    script.write_text(WRAPPER)
    return script


# ------------------------------------------------------------------------- no orphan, ever


@pytest.mark.slow
@pytest.mark.parametrize("when", ["starting", "measuring"])
def test_kill_9_of_the_runner_takes_its_server_and_escaped_children_and_resume_starts_afresh(
        tmp_path: Path, when: str) -> None:
    delay = "4" if when == "starting" else "0.2"  # 'starting': killed while the server is not yet ready
    path = _study(tmp_path, [PY, str(_wrapper(tmp_path)), "{port}", delay],
                  sweep={"concurrency": [1, 2, 4], "input_tokens": 64, "output_tokens": 64, "requests_per_level": 24})
    out = tmp_path / "out"
    cmd = [PY, "-m", "specsweep.study", str(path), "--out-dir", str(out), "--no-report"]
    runner = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(runner.stdout), daemon=True).start()  # type: ignore[arg-type]
    folder = out / "_runs" / "baseline" / "r0"
    deadline = time.monotonic() + 120
    pids: dict[str, int] = {}
    while time.monotonic() < deadline and runner.poll() is None:
        logs = "".join(p.read_text() for p in folder.glob("server-*.log")) if folder.is_dir() else ""
        record = json.loads((folder / PID_FILE).read_text()) if (folder / PID_FILE).is_file() else {}
        if _pids(logs, "escaped") and _pids(logs, "refserver") and record.get("server"):
            pids = {"escaped": _pids(logs, "escaped")[0], "refserver": _pids(logs, "refserver")[0],
                    "wrapper": record["server"]["pid"], "guard": record["guard"]["pid"]}
            if when == "starting" or any("server ready at" in line for line in lines):
                break
        time.sleep(0.1)
    assert pids and runner.poll() is None, "".join(lines)
    if when == "measuring":
        assert any("server ready at" in line for line in lines)
    else:
        assert not any("server ready at" in line for line in lines)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    for name, pid in pids.items():
        assert _gone(pid), f"the {name} (pid {pid}) outlived the runner killed with SIGKILL"

    # --resume measures a server it starts itself: the new run's log names a new reference server
    again = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stdout + again.stderr
    run = complete_run(out, "baseline", 0)
    assert run is not None and not (folder / PID_FILE).exists()
    new = _pids((run / "server.log").read_text(), "refserver")
    assert new and new[-1] != pids["refserver"]
    status = json.loads((out / "study.json").read_text())
    assert [o["status"] for o in status["outcomes"]] == ["complete"]


def test_a_port_that_answers_before_the_server_starts_refuses_the_arm_naming_the_holder(tmp_path: Path) -> None:
    # an orphan from an earlier run (here: a reference server this test started) holds the arm's fixed port
    port = free_port()
    with RefServer("tiny", "off", ["--health-delay-s", "0.2", "--port", str(port)]) as orphan:
        assert orphan.process is not None
        path = _study(tmp_path, [PY, "-m", "specsweep.refserver", "--profile", "tiny", "--port", str(port)],
                      ready_port=str(port))
        study = load_study(path)
        logged: list[str] = []
        result = run_study(study, out_dir=tmp_path / "out", report=False, log=logged.append)
        (outcome,) = result.outcomes
        assert outcome.status == "failed" and not result.ok
        assert f"already answers before its server was started (held by pid {orphan.process.pid} (" in outcome.error
        assert complete_run(tmp_path / "out", "baseline", 0) is None
        assert not list((tmp_path / "out" / "_runs").rglob("levels.parquet")), "the orphan was measured"


def test_readiness_requires_the_started_server_to_hold_the_port(tmp_path: Path) -> None:
    # our server runs (it never listens); another process starts answering on its port after it started
    port = free_port()
    study = load_study(_study(tmp_path, [PY, "-c", "import time; time.sleep(60)"], ready_port=str(port)))
    server = ServerProcess(study.arms[0], tmp_path / "server.log", Redactor([]), tmp_path / PID_FILE)
    server.start()
    try:
        with RefServer("tiny", "off", ["--health-delay-s", "0", "--port", str(port)]) as other:
            assert other.process is not None
            with pytest.raises(ServerError, match=rf"is answered by pid {other.process.pid} \(.*not by the server "
                                                  "this study started"):
                server.wait_ready(poll_s=0.1)
    finally:
        server.stop()
    assert not (tmp_path / PID_FILE).exists()


DAEMONIZING = r'''
import os, sys
port = sys.argv[1]
r, w = os.pipe()
gone_r, gone_w = os.pipe()  # the launcher holds gone_w: the daemon reads EOF once the launcher has exited
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(gone_w)
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        while os.read(gone_r, 1):
            pass
        os.execv(sys.executable, [sys.executable, "-m", "specsweep.refserver", "--profile", "tiny", "--port", port])
    os._exit(0)
os.close(w)
os.close(gone_r)
print("daemon", int(os.read(r, 64)), flush=True)
print("the launcher exits; its daemon serves the port from now on", flush=True)
'''


def test_a_server_whose_started_process_exits_is_never_measured_and_leaves_nothing(tmp_path: Path) -> None:
    # the started process hands the port to a daemon in a session of its own and exits 0
    script = tmp_path / "daemonizing.py"
    script.write_text(DAEMONIZING)
    study = load_study(_study(tmp_path, [PY, str(script), "{port}"]))
    outcome = run_arm(study, study.arms[0], 0, tmp_path / "out", log=lambda s: None)
    assert outcome.status == "failed", outcome
    log = Path(outcome.server_log).read_text()
    (daemon,) = _pids(log, "daemon")
    # the daemon serves only once the launcher has exited, so the runner always sees the exit first
    # (it checks its own server before each health poll) and refuses whatever answers afterwards;
    # a foreign server answering while the started one runs is refused by the test above
    assert "exited with status 0 before it was ready" in outcome.error, outcome.error
    assert not list((tmp_path / "out").rglob("levels.parquet"))
    assert _gone(daemon), "the daemon the server started outlived the arm"
    assert f"pid {daemon} (" in log and "of the server's tree outlived the server; killed" in log, log


@pytest.mark.slow
@pytest.mark.parametrize("status", [0, 3])
def test_children_in_their_own_session_die_at_stop_and_a_bad_exit_fails_the_arm(tmp_path: Path, status: int) -> None:
    study = load_study(_study(tmp_path, [PY, str(_wrapper(tmp_path)), "{port}", "0.2", str(status)]))
    logged: list[str] = []
    out = tmp_path / "out"
    outcome = run_arm(study, study.arms[0], 0, out, log=logged.append)
    text = Path(outcome.server_log).read_text()
    escaped = _pids(text, "escaped")[0]
    assert _gone(escaped), "a process the server started in a session of its own outlived the arm"
    assert any(f"pid {escaped} (" in line and "ran outside its process group (a session of its own); stopped with "
               "the tree" in line for line in logged), logged
    assert not (out / "_runs" / "baseline" / "r0" / PID_FILE).exists()
    if status == 0:
        assert outcome.status == "complete", outcome.error
        assert complete_run(out, "baseline", 0) is not None
    else:
        assert outcome.status == "failed"
        assert "the server exited with status 3 when stopped" in outcome.error
        assert "/_rejected/" in outcome.run_dir and (Path(outcome.run_dir) / "meta.json").is_file()
        assert complete_run(out, "baseline", 0) is None  # --resume measures it again


def test_a_port_taken_between_its_pick_and_the_servers_bind_starts_the_server_again_on_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # another process (a parallel runner, a test) binds the picked port before the server does; the real
    # reference server then fails to bind, and the arm must not fail for it
    from specsweep.study import arm as study_arm

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))  # bound, not listening: nothing answers there, yet no server can bind it
    picks = [int(taken.getsockname()[1])]
    real_free_port = study_arm.free_port
    monkeypatch.setattr(study_arm, "free_port", lambda **kw: picks.pop() if picks else real_free_port(**kw))
    study = load_study(_study(tmp_path, [PY, "-m", "specsweep.refserver", "--profile", "tiny", "--port", "{port}"],
                              sweep={"concurrency": [1], "input_tokens": 32, "output_tokens": 8}))
    logged: list[str] = []
    try:
        outcome = run_arm(study, study.arms[0], 0, tmp_path / "out", log=logged.append)
    finally:
        taken.close()
    assert outcome.status == "complete", (outcome.error, logged)
    said = [line for line in logged if "was taken by another process" in line]
    assert len(said) == 1 and "starting it again on another port" in said[0], logged
    folder = tmp_path / "out" / "_runs" / "baseline" / "r0"
    (failed_start,) = folder.glob("server-*.log")  # kept in the arm's folder; the measured start's log is the run's
    assert "address already in use" in failed_start.read_text().lower() and "start2" not in failed_start.name
    assert Path(outcome.server_log) == Path(outcome.run_dir) / "server.log"
    assert "# port " in Path(outcome.server_log).read_text() and complete_run(tmp_path / "out", "baseline", 0)


def test_a_server_that_fails_for_another_reason_is_not_started_again(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import sys\nprint('model file not found', flush=True)\nsys.exit(4)\n")
    study = load_study(_study(tmp_path, [PY, str(script), "{port}"]))
    logged: list[str] = []
    outcome = run_arm(study, study.arms[0], 0, tmp_path / "out", log=logged.append)
    assert outcome.status == "failed" and "exited with status 4 before it was ready" in outcome.error
    assert not any("was taken by another process" in line for line in logged)
    assert len(list((tmp_path / "out" / "_runs" / "baseline" / "r0").glob("server-*.log"))) == 1


def test_a_pid_file_left_by_a_killed_runner_is_checked_by_start_time_and_cleaned(tmp_path: Path) -> None:
    leftover = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        entry = {"pid": leftover.pid, "create_time": psutil.Process(leftover.pid).create_time(), "name": "python"}
        reused = {"pid": os.getpid(), "create_time": 1.0, "name": "python"}  # this pid now belongs to another process
        out = tmp_path / "out"
        folder = out / "_runs" / "baseline" / "r0"
        folder.mkdir(parents=True)
        (folder / PID_FILE).write_text(json.dumps({
            "arm": "baseline", "host": socket.gethostname(), "runner": {"pid": 1, "create_time": 1.0},
            "guard": None, "server": entry, "tree": [entry, reused], "final": None}))
        study = load_study(_study(tmp_path, [PY, "-c", "import sys; sys.exit(3)"]))
        logged: list[str] = []
        run_study(study, out_dir=out, report=False, log=logged.append)
        assert leftover.wait(timeout=30) == -signal.SIGTERM
        assert any(f"a server from an earlier run still runs (pid {leftover.pid} (python)): stopping it" in line
                   for line in logged), logged
        assert not (folder / PID_FILE).exists()
    finally:
        leftover.kill()
        leftover.wait()


LINUX_PROC = pytest.mark.skipif(not (Path("/proc/self/stat").is_file() and Path("/proc/sys/kernel/random/boot_id").is_file()),
                                reason="start ticks and the boot id need Linux's /proc")

#: a study worker's runner watch in a process where every start time in seconds since the epoch
#: reads STEP_S seconds later than when the runner's identity was recorded (as after a step of the
#: system clock, which moves the kernel's boot time they are derived from);
#: argv: the runner's identity (JSON) recorded before the step, STEP_S
STEPPED_WATCH = r"""
import json, signal, sys
import psutil
real = psutil.Process.create_time
psutil.Process.create_time = lambda self: real(self) + float(sys.argv[2])
from specsweep.study.parallel import _watch_runner
def interrupted(signum, frame):
    print("interrupted", flush=True)
    sys.exit(3)
signal.signal(signal.SIGINT, interrupted)
print("watching", flush=True)
_watch_runner(json.loads(sys.argv[1]))
"""


@LINUX_PROC
@pytest.mark.parametrize("step_s", [1.0, -1.0, 4.0, 3600.0])
def test_a_step_of_the_system_clock_leaves_a_running_process_the_same_one(monkeypatch: pytest.MonkeyPatch,
                                                                         step_s: float) -> None:
    # CI lost two tests to a one-second step of the kernel's boot time (whole seconds in /proc/stat,
    # moved by a step of the clock): each start time read after it was a second off, so a study
    # worker took its runner for gone (and interrupted its sweep), and the runner took its starting
    # server for gone (and waited on its guard without end)
    from specsweep.study import guard as serverguard

    me = serverguard.identity(os.getpid())
    assert me is not None and me["start_ticks"] == serverguard.start_ticks(os.getpid())
    assert me["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    no_boot_id = {k: v for k, v in me.items() if k != "boot_id"}
    old_style = {k: v for k, v in no_boot_id.items() if k != "start_ticks"}  # a pid file from before ticks
    real = psutil.Process.create_time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) + step_s)  # as after the step
    assert abs(psutil.Process(os.getpid()).create_time() - me["create_time"] - step_s) < 0.01  # the step is seen
    assert serverguard.same_process(me)  # ticks and boot id: any step
    assert serverguard.same_process(no_boot_id) == (abs(step_s) < serverguard.SAME_EPOCH_WITH_TICKS_S)
    assert serverguard.same_process(old_style) == (abs(step_s) < serverguard.SAME_EPOCH_S)
    # a reused pid (another start) and a process of another boot (same ticks) are not it
    assert not serverguard.same_process({**me, "start_ticks": me["start_ticks"] + 1})
    assert not serverguard.same_process({**me, "boot_id": "00000000-0000-4000-8000-000000000000"})
    assert not serverguard.same_process({**no_boot_id, "create_time": me["create_time"] - 3600})


def test_the_boot_id_is_read_again_after_a_failed_read_and_an_identity_never_mixes_two_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specsweep.study import guard as serverguard

    monkeypatch.setattr(serverguard, "_boot_id", [])
    monkeypatch.setattr(serverguard, "BOOT_ID_FILE", tmp_path / "missing")
    assert serverguard.boot_id() is None  # a failed read is not kept
    (tmp_path / "boot_id").write_text("3a2552bf-50b8-4956-af51-520c507bd650\n")
    monkeypatch.setattr(serverguard, "BOOT_ID_FILE", tmp_path / "boot_id")
    assert serverguard.boot_id() == "3a2552bf-50b8-4956-af51-520c507bd650"
    # the pid reused between the start-ticks read and psutil's: no identity, rather than a mixed one
    ticks = iter([100, 200])
    monkeypatch.setattr(serverguard, "start_ticks", lambda pid: next(ticks))
    assert serverguard.identity(os.getpid()) is None


@LINUX_PROC
@pytest.mark.slow
def test_a_study_worker_keeps_measuring_through_a_clock_step_and_stops_once_its_runner_is_gone() -> None:
    from specsweep.study import guard as serverguard

    runner = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"])
    watch: subprocess.Popen[str] | None = None
    try:
        entry = serverguard.identity(runner.pid)
        watch = subprocess.Popen([PY, "-c", STEPPED_WATCH, json.dumps(entry), "1"], stdout=subprocess.PIPE,
                                 text=True)
        assert watch.stdout is not None and watch.stdout.readline() == "watching\n"
        time.sleep(2.0)  # four looks at the runner, each after the step
        assert watch.poll() is None, f"the worker took its running runner for gone: {watch.stdout.read()}"
        runner.kill()
        runner.wait()
        assert watch.wait(timeout=30) == 3 and watch.stdout.read() == "interrupted\n"
    finally:
        for proc in (runner, watch):
            if proc is not None:
                proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()


def test_a_server_taken_for_gone_before_ready_never_leaves_the_runner_waiting_on_its_guard(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # whatever makes the runner take its server for gone while the guard still runs it, the runner
    # waits for the guard a bounded time, then stops it and says so (not 'exited before it was ready')
    from specsweep.study import arm as study_arm
    from specsweep.study import guard as serverguard

    study = load_study(_study(tmp_path, [PY, "-c", "import time; time.sleep(60)"], stop_grace_s=1))
    server = ServerProcess(study.arms[0], tmp_path / "server.log", Redactor([]), tmp_path / PID_FILE)
    server.start()
    try:
        deadline = time.monotonic() + 30
        while server.server_pid is None and time.monotonic() < deadline:
            time.sleep(0.05)
        sleeper = server.record().server
        assert sleeper is not None
        monkeypatch.setattr(study_arm, "GUARD_EXIT_S", 0.5)
        monkeypatch.setattr(serverguard, "same_process", lambda entry: False)
        with pytest.raises(ServerError, match=rf"the server this study started \(pid {sleeper['pid']} \(python.*\) no "
                                              "longer looked like the process it started, yet its guard still ran it "
                                              r"1\.5 s later; the study stopped it \(status -?\d+\) before it was ready"):
            server.wait_ready(poll_s=0.1)
        monkeypatch.undo()
        assert server.process is not None and server.process.poll() is not None
        assert _gone(sleeper["pid"])
    finally:
        server.stop()


def test_a_pid_file_from_another_host_refuses_the_arm_naming_the_pid(tmp_path: Path) -> None:
    folder = tmp_path / "out" / "_runs" / "baseline" / "r0"
    folder.mkdir(parents=True)
    (folder / PID_FILE).write_text(json.dumps({"host": "gpu-node-7", "server": {"pid": 4242, "create_time": 1.0}}))
    study = load_study(_study(tmp_path, [PY, "-c", "import time; time.sleep(60)"]))
    outcome = run_arm(study, study.arms[0], 0, tmp_path / "out", log=lambda s: None)
    assert outcome.status == "failed"
    assert "written by a runner on host gpu-node-7 (server pid 4242)" in outcome.error
    assert (folder / PID_FILE).exists()


# ------------------------------------------------------------------------------------- ports


def _free_pair_below_the_ephemeral_range() -> int:
    """A port p with p and p + 1 both free, below the kernel's ephemeral range, so that no other
    test's outgoing connection (the kernel hands those ports from that range, 32768-60999 on Linux)
    can take p + 1 between the check and its use; CI once lost this test to such a connection."""
    try:
        first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, first_ephemeral - 1)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    pytest.fail("no two adjacent free ports below the ephemeral range on 127.0.0.1")


def test_port_range_confines_the_port_placeholder(tmp_path: Path) -> None:
    with socket.socket() as held:
        port = _free_pair_below_the_ephemeral_range()
        held.bind(("127.0.0.1", port))
        # the only other port of the range is picked, whatever the random start
        low, high = port, port + 1
        other = high
        assert {free_port(port_range=(low, high)) for _ in range(20)} == {other}
        with pytest.raises(OSError, match=rf"no free port in port_range \[{port}, {port}\]"):
            free_port(port_range=(port, port))
    lo = _free_pair_below_the_ephemeral_range()
    doc = yaml.safe_load(_study(tmp_path, [PY, "-m", "specsweep.refserver", "--profile", "tiny", "--port", "{port}",
                                           "--health-delay-s", "0"]).read_text())
    doc["port_range"] = [lo, lo]
    study = parse_study(yaml.safe_dump(doc))
    assert study.arms[0].port_range == (lo, lo)
    server = ServerProcess(study.arms[0], tmp_path / "server.log", Redactor([]))
    server.start()
    try:
        server.wait_ready(poll_s=0.1)
        assert server.port == lo and server.endpoint == f"http://127.0.0.1:{lo}"
    finally:
        assert server.stop() in (0, -signal.SIGTERM) and server.stop_problem() is None
    doc["arms"][0]["port_range"] = [2000, 1000]
    with pytest.raises(StudyError, match=r"line \d+: key 'arms.0.port_range': give \[low, high\]"):
        parse_study(yaml.safe_dump(doc, sort_keys=False), "s.yaml")


# ----------------------------------------------------------------------------------- locking


def test_a_second_runner_on_the_same_folder_is_refused_naming_the_first(tmp_path: Path) -> None:
    path = _study(tmp_path, [PY, "-c", "import sys; sys.exit(3)"])
    out = tmp_path / "out"
    with lock_study_folder(out):
        second = subprocess.run([PY, "-m", "specsweep.study", str(path), "--out-dir", str(out), "--no-report"],
                                capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"another study runner is using this folder (pid {os.getpid()} on host" in second.stderr
    assert "Traceback" not in second.stderr and not (out / "study.json").exists()
    # the lock goes with its holder: now the folder is free
    result = run_study(load_study(path), out_dir=out, report=False, log=lambda s: None)
    assert [o.status for o in result.outcomes] == ["failed"] and (out / "study.json").is_file()


# -------------------------------------------------------------------------------- grid limit


def _grid_study(a: int, b: int, **top: object) -> str:
    return yaml.safe_dump({"title": "G", "baseline": "baseline", "repeats": 2, **top,
                           "sweep": {"concurrency": [1, 4], "input_tokens": 32, "output_tokens": 100},
                           "arms": [{"name": "baseline", "endpoint": "http://127.0.0.1:1"},
                                    {"name": "g", "grid": {"a": list(range(a)), "b": list(range(b))},
                                     "endpoint": "http://127.0.0.1:{a}{b}"}]}, sort_keys=False)


def test_a_grid_beyond_the_limit_is_refused_with_its_size_and_duration_before_expanding() -> None:
    with pytest.raises(StudyError) as err:
        parse_study(_grid_study(100, 100), "big.yaml")
    msg = str(err.value)
    assert "big.yaml line 14: key 'arms.1.grid': the study expands to 10,001 arms" in msg
    assert "(arm 1 alone: 100 a × 100 b = 10,000)" in msg and f"limit of {DEFAULT_MAX_ARMS}" in msg
    # 20,002 sweeps; per sweep ⌈(4+1)/1⌉ + ⌈(8+4)/4⌉ = 8 rounds of 100 tokens at 100 tok/s = 8 s → 44 hours
    assert "20,002 sweeps and 340,034 requests: about 44 hours" in msg
    assert "set max_arms: 10001 in the study (or pass --allow-large-grid)" in msg
    assert len(parse_study(_grid_study(100, 100, max_arms=10_001)).arms) == 10_001
    assert len(parse_study(_grid_study(100, 100), allow_large_grid=True).arms) == 10_001
    # a million arms: refused at once, whatever is allowed
    with pytest.raises(StudyError, match=rf"1,000,001 arms .* more than the limit of {HARD_MAX_ARMS:,}.*split it"):
        parse_study(_grid_study(1000, 1000), allow_large_grid=True)


def test_the_cli_takes_allow_large_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(_grid_study(20, 20))
    assert main([str(path), "--dry-run"]) == 2
    assert "the study expands to 401 arms" in capsys.readouterr().err
    assert main([str(path), "--dry-run", "--allow-large-grid"]) == 0


# --------------------------------------------------------------------------- bad study files


GOOD = "title: T\nbaseline: baseline\narms:\n  - name: baseline\n    endpoint: http://127.0.0.1:1\n"


@pytest.mark.parametrize("data, expected", [
    (GOOD.encode() + b"notes: caf\xe9\n", r"s.yaml line 6: byte 0xe9 at column 11 is not UTF-8 text"),
    ((GOOD + "notes: " + "[" * 20_000 + "]" * 20_000 + "\n").encode(),
     rf"s.yaml line 6: nested more than {MAX_DEPTH} levels deep"),
    (GOOD.encode() + b"notes: '" + b"x" * (MAX_STUDY_BYTES + 10) + b"'\n", r"s.yaml: larger than a study file may be"),
    ((GOOD + "title: again\n").encode(), r"s.yaml line 6: key 'title' appears twice in one mapping \(first at line 1\)"),
    (GOOD.replace("    endpoint", "    name: other\n    endpoint").encode(),
     r"s.yaml line 5: key 'arms.0.name' appears twice in one mapping \(first at line 4\)"),
    ((GOOD + "notes: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"n{i}: &a{i} [{', '.join(['*a' if i == 0 else f'*a{i - 1}'] * 10)}]\n" for i in range(8))).encode(),
     r"s.yaml line \d+: the file expands to more than 200,000 values"),
])
def test_bad_study_files_name_the_file_and_line_and_never_escape_as_tracebacks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, expected: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(data)
    with pytest.raises(StudyError, match=expected):
        load_study(path)
    assert main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert re.search(expected, err) and "Traceback" not in err


# -------------------------------------------------------------------- Ctrl-C under papermill


@pytest.mark.slow
def test_ctrl_c_under_papermill_ends_with_how_to_resume(tmp_path: Path) -> None:
    from specsweep.paths import REPO_ROOT

    # a server that takes a minute to get ready: the study is interrupted while it waits
    path = _study(tmp_path, [PY, "-m", "specsweep.refserver", "--profile", "tiny", "--port", "{port}",
                             "--health-delay-s", "120"], start_timeout_s=300)
    out = tmp_path / "out"
    cmd = [PY, "-m", "papermill", str(REPO_ROOT / "notebooks" / "study.ipynb"), str(tmp_path / "out.ipynb"),
           "-p", "study_file", str(path), "-p", "out_dir", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    pid_file = out / "_runs" / "baseline" / "r0" / PID_FILE
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None and not (
            pid_file.is_file() and json.loads(pid_file.read_text()).get("server")):
        time.sleep(0.1)
    server = json.loads(pid_file.read_text())["server"]["pid"]
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    text, _ = proc.communicate(timeout=180)
    assert proc.returncode != 0
    assert _gone(server)
    hint = (f"To continue, run: python -m specsweep.study {path} --out-dir {out} --resume (notebook: papermill "
            f"notebooks/study.ipynb OUT.ipynb -p study_file {path} -p out_dir {out} -p resume True)")
    assert hint in text, text[-3000:]
    # after the hint the study prints nothing: no KeyboardInterrupt traceback, no frame of our code. What may
    # follow is papermill's own: it and the kernel stop on the same SIGINT, so its client may log "Kernel died
    # while waiting for execute reply." and asyncio may print that client's DeadKernelError or the ZMQError of
    # a channel closed under its reader ("Task exception was never retrieved"), its stdout and stderr
    # interleaved in any order (each order seen in CI runs). Exactly those, and nothing else, may come after.
    lines = [ln for ln in text.replace("\r", "\n").splitlines()
             if ln.strip() and not ln.startswith("Executing") and ln.strip() != "Aborted!"]
    last = max(i for i, ln in enumerate(lines) if hint in ln)
    after = lines[last + 1:]
    # no line names specsweep, except through the paths of the Python papermill runs on (a checkout in a
    # folder named specsweep puts that name into every frame of papermill's own traceback)
    def outside_python(ln: str) -> str:
        return ln.replace(sys.prefix, "<env>").replace(sys.base_prefix, "<python>")

    assert not any("KeyboardInterrupt" in ln or "specsweep" in outside_python(ln) for ln in after), after
    raised = [ln.split(":")[0] for ln in after if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", ln)]
    assert set(raised) <= {"nbclient.exceptions.DeadKernelError", "zmq.error.ZMQError"}, after
    own = [ln for ln in after if not (
        ln.startswith(("Kernel died while waiting for execute reply", "Task exception was never retrieved",
                       "future: <Task", "Traceback (most recent call last)", "  File ", "    ",
                       "nbclient.exceptions.DeadKernelError", "zmq.error.ZMQError"))
        or ln.startswith(("The above exception", "During handling of the above exception")))]
    assert own == [], after
