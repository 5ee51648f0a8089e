"""Crash safety, resume and secrets of the sweep, against real reference servers over 127.0.0.1."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from helpers import ROOT, base_meta, in_progress
from specsweep.measure.config import ConfigError, parse_config
from specsweep.measure.sweep import SweepAborted, SweepInterrupted, _find_resume_dir, damaged_levels, run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.results.meta import Meta
from specsweep.results.store import RunLocked, SchemaError, load_result_set, lock_run, write_meta

KEY = "canary-7d1e0b5a2f"


def quiet(_: str) -> None:
    pass


def small(tmp_path: Path, url: str, **kw) -> dict:
    return {"endpoint": url, "concurrency": [1, 3], "input_tokens": 32, "output_tokens": 40, "workload": "random-ids",
            "out_dir": str(tmp_path), "metrics_interval_s": 0.05, **kw}


def dead_endpoint() -> str:
    """A URL on which nothing listens: a test that fails before contacting the server never notices."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def every_byte(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


# ------------------------------------------------------------------------------ 2: the API key


def test_a_server_that_echoes_the_key_gets_it_written_nowhere(tmp_path: Path, refserver_factory,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECSWEEP_API_KEY", KEY)
    srv = refserver_factory(args=["--fault-error-rate", "0.4", "--fault-echo-auth", "--seed", "3"])
    lines: list[str] = []
    res = run_sweep(small(tmp_path, srv.url, arm="echo", concurrency=[2], requests_per_level=12),
                    progress=False, log=lines.append)
    rs = load_result_set(res.run_dir)
    errors = rs.requests["error"].dropna()
    assert len(errors) > 0  # the server did quote the key back ...
    assert errors.str.contains(r"Incorrect API key provided: \[redacted SPECSWEEP_API_KEY\]").all()
    assert KEY.encode() not in every_byte(res.run_dir)  # ... and no file holds it
    assert not any(KEY in line for line in lines) and not any(KEY in w for w in res.warnings)

    # an error that quotes it (here the preflight's) shows the mask, not the key, in its message and causes
    dead = refserver_factory(args=["--fault-error-rate", "1.0", "--fault-echo-auth"])
    with pytest.raises(Exception) as err:
        run_sweep(small(tmp_path / "dead", dead.url, arm="dead"), progress=False, log=lines.append)
    assert "Incorrect API key provided: [redacted" in str(err.value)
    chain, exc = [], err.value
    while exc is not None:
        chain.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    assert not any(KEY in text for text in chain)


# ------------------------------------------------------------------------ 6: damaged levels, resume


def test_damaged_levels_rule() -> None:
    levels = pd.DataFrame({"concurrency": [1, 2, 4, 8], "repeat": 0, "error_rate": [0.0, 0.5, 0.25, 0.05]})
    assert damaged_levels(levels) == {(2, 0): "50% of its requests failed",
                                      (4, 0): "25% of its requests failed, the run's other levels 5%"}
    flaky = pd.DataFrame({"concurrency": [1, 2, 4], "repeat": 0, "error_rate": [0.25, 0.3, 0.2]})
    assert damaged_levels(flaky) == {}  # a steadily flaky server: its errors are a property, not damage


def test_a_crash_leaves_damaged_levels_that_resume_measures_again(tmp_path: Path, refserver_factory) -> None:
    """The server fails half its requests, then dies: the damaged levels are re-measured, the old rows kept."""
    flaky = refserver_factory(args=["--fault-error-rate", "0.5", "--seed", "11"])
    params = small(tmp_path, flaky.url, arm="crash", concurrency=[1, 2, 4], requests_per_level=4, warmup_requests=0)

    def log(line: str) -> None:
        if line.startswith("C=2 repeat 0:") and line.endswith("saved"):
            flaky.stop()  # the server dies right after the second level

    with pytest.raises(SweepAborted):
        run_sweep(params, progress=False, log=log)
    run_dir = next(tmp_path.glob("*-crash"))
    before = load_result_set(run_dir)
    assert before.meta.complete is False
    damaged = set(damaged_levels(before.levels))
    assert damaged, "seed 11 should damage a level; pick another seed"
    stopped = before.meta.failed["level"]
    expected = damaged | {tuple(stopped)} if tuple(stopped) in set(map(tuple, before.levels[["concurrency", "repeat"]].values)) else damaged

    healthy = refserver_factory()
    lines: list[str] = []
    res = run_sweep({**params, "endpoint": healthy.url, "resume": "latest"}, progress=False, log=lines.append)
    after = load_result_set(res.run_dir)
    assert res.complete and sorted(after.levels["concurrency"]) == [1, 2, 4]
    assert after.levels["error_rate"].eq(0).all()  # every level now measured on a working server
    assert set(map(tuple, after.superseded_levels[["concurrency", "repeat"]].values.tolist())) == expected
    assert len(after.superseded_requests) == 4 * len(expected)
    assert sorted(map(tuple, after.meta.rerun_levels)) == sorted(expected | {tuple(stopped)})
    for c, r in damaged:
        assert any(line.startswith(f"C={c} repeat {r}: measured again") for line in lines)


# ------------------------------------------------------------------------- 7: abort on evidence only


def test_a_flaky_server_at_c1_does_not_abort_the_sweep(tmp_path: Path, refserver_factory) -> None:
    """One failed warm-up request (or one all-failed small level) is no evidence that the server is gone."""
    srv = refserver_factory(args=["--fault-error-rate", "0.5", "--seed", "2"])
    res = run_sweep(small(tmp_path, srv.url, arm="flaky", concurrency=[1], repeats=8, requests_per_level=4),
                    progress=False, log=quiet)
    assert res.complete and len(res.levels) == 8
    assert 0 < res.levels["error_rate"].mean() < 1


# ---------------------------------------------------------------------- 8: no folder without preflight


def test_a_failed_preflight_leaves_no_run_folder(tmp_path: Path, refserver_factory) -> None:
    srv = refserver_factory(args=["--fault-error-rate", "1.0"])
    with pytest.raises(Exception, match=r"preflight request .* failed"):
        run_sweep(small(tmp_path, srv.url, arm="nope"), progress=False, log=quiet)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------- 9 and 14: a hard kill leaves no server and loses no rerun record


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(p) for p in (task / "children").read_text().split()]
    return out


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in state


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_of_the_sweep_stops_the_embedded_server_and_resume_knows_the_level(tmp_path: Path) -> None:
    params = dict(embedded_profile="tiny", concurrency=[1, 2], input_tokens=32, output_tokens=400,
                  requests_per_level=4, out_dir=str(tmp_path))
    script = textwrap.dedent(f"""
        from specsweep.measure.sweep import run_sweep
        run_sweep({params!r}, progress=False)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("*-baseline/levels.parquet")) or in_progress(tmp_path) != [2, 0]:
            assert proc.poll() is None and time.monotonic() < deadline, "the sweep never began its second level"
            time.sleep(0.02)
        servers = _children(proc.pid)
        assert servers, "no embedded server process found"
        proc.send_signal(signal.SIGKILL)  # no handler, no finally: the hardest stop there is
        proc.wait()
        deadline = time.monotonic() + 15
        while not all(_gone(pid) for pid in servers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in servers), "the embedded server outlived the killed sweep"
    finally:
        if proc.poll() is None:
            proc.kill()
    run_dir = next(tmp_path.glob("*-baseline"))
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["complete"] is False and meta["in_progress"] == [2, 0]
    res = run_sweep({**params, "resume": "latest"}, progress=False, log=quiet)
    assert res.complete and [2, 0] in res.meta.rerun_levels and res.meta.in_progress is None


# ------------------------------------------------------------------------------ 10: resume latest


def test_resume_latest_matches_the_arm_exactly(tmp_path: Path) -> None:
    for stamp, arm in (("20260101T000000Z", "mtp"), ("20260102T000000Z", "eagle-mtp")):
        folder = tmp_path / f"{stamp}-{arm}"
        folder.mkdir()
        write_meta(folder, Meta.model_validate(base_meta(arm, kind="run", level_only=False, complete=False,
                                                         run_id=f"{stamp}-{arm}", started_utc=stamp)))
    (tmp_path / "junk-mtp").mkdir()
    (tmp_path / "junk-mtp" / "meta.json").write_text("{broken")
    skipped: list[str] = []
    found = _find_resume_dir(parse_config({"arm": "mtp", "resume": "latest", "out_dir": str(tmp_path)}), skipped.append)
    assert found.name == "20260101T000000Z-mtp"
    assert any("junk-mtp" in s and "not valid JSON" in s for s in skipped)


# ------------------------------------------------------------- 11: bad files fail before any server


def _finished_run(tmp_path: Path, url: str, **kw) -> tuple[dict, Path]:
    params = small(tmp_path, url, arm="r", concurrency=[1, 2], **kw)
    res = run_sweep(params, progress=False, log=quiet)
    return params, res.run_dir


def test_corrupt_files_on_resume_are_named_before_any_server_is_contacted(tmp_path: Path, refserver: RefServer) -> None:
    params, run_dir = _finished_run(tmp_path, refserver.url)
    dead = {**params, "endpoint": dead_endpoint(), "resume": str(run_dir)}
    good_levels = (run_dir / "levels.parquet").read_bytes()
    (run_dir / "levels.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(SchemaError, match=r"levels.parquet: cannot be read as Parquet"):
        run_sweep(dead, progress=False, log=quiet)
    (run_dir / "levels.parquet").write_bytes(good_levels)
    (run_dir / "meta.json").write_text("{ half a file")
    with pytest.raises(SchemaError, match=r"meta.json: not valid JSON"):
        run_sweep(dead, progress=False, log=quiet)


def test_unusable_out_dir_fails_before_the_embedded_server_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    lines: list[str] = []
    with pytest.raises(ConfigError, match=r"parameter 'out_dir': .*file: exists and is not a folder"):
        run_sweep({"embedded_profile": "tiny", "out_dir": str(blocker)}, progress=False, log=lines.append)
    with pytest.raises(ConfigError, match=r"parameter 'out_dir': .*sub: cannot write there"):
        run_sweep({"embedded_profile": "tiny", "out_dir": str(blocker / "sub")}, progress=False, log=lines.append)
    assert lines == []  # no server was started, nothing was contacted


def test_a_non_utf8_prompt_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "prompts.txt"
    bad.write_bytes(b"caf\xe9 au lait\n")
    with pytest.raises(ValueError, match=r"prompts.txt:1: not UTF-8 text .* save the file as UTF-8"):
        run_sweep(small(tmp_path, dead_endpoint(), workload=str(bad)), progress=False, log=quiet)


# ------------------------------------------------------------------------------------ 13: the lock


def test_a_second_sweep_on_a_locked_run_says_who_holds_it(tmp_path: Path, refserver: RefServer) -> None:
    params, run_dir = _finished_run(tmp_path, refserver.url)
    with lock_run(run_dir):  # another sweep is writing it
        with pytest.raises(RunLocked, match=rf"another sweep is writing this run folder \(pid {os.getpid()} on host "):
            run_sweep({**params, "endpoint": dead_endpoint(), "resume": str(run_dir)}, progress=False, log=quiet)


# ------------------------------------------------------------------------------- 14: resume details


def test_resuming_a_complete_run_keeps_it_and_changes_are_recorded_or_refused(tmp_path: Path, refserver: RefServer) -> None:
    params, run_dir = _finished_run(tmp_path, refserver.url)
    first = load_result_set(run_dir).meta
    time.sleep(1.1)  # finished_utc has one-second resolution: a rewrite would show
    lines: list[str] = []
    res = run_sweep({**params, "resume": str(run_dir), "label": "MTP, 3 steps"}, progress=False, log=lines.append)
    assert res.meta.finished_utc == first.finished_utc
    assert any("nothing to measure" in line for line in lines)
    assert res.meta.label == "MTP, 3 steps"
    change = res.meta.changes_on_resume[0]
    assert (change["parameter"], change["old"], change["new"]) == ("label", "r", "MTP, 3 steps")
    with pytest.raises(ConfigError, match=r"request_timeout_s 600.0 vs 30.0"):
        run_sweep({**params, "resume": str(run_dir), "request_timeout_s": 30.0}, progress=False, log=quiet)


def test_ctrl_c_says_how_to_resume(tmp_path: Path, refserver: RefServer) -> None:
    import threading

    stop = threading.Event()

    def log(line: str) -> None:
        if "saved" in line:
            stop.set()

    with pytest.raises(SweepInterrupted) as err:
        run_sweep(small(tmp_path, refserver.url, arm="stopped", concurrency=[1, 2]), progress=False, log=log, stop=stop)
    run_dir = next(tmp_path.glob("*-stopped"))
    assert isinstance(err.value, KeyboardInterrupt)
    assert f"1 finished level(s) are saved in {run_dir}" in str(err.value)
    assert f"-p resume {run_dir}" in str(err.value)
    assert err.value._render_traceback_() == [f"SweepInterrupted: {err.value}"]  # what a notebook shows


def test_ctrl_c_right_after_a_level_was_saved_does_not_measure_it_again(tmp_path: Path, refserver: RefServer) -> None:
    def log(line: str) -> None:
        if line.startswith("C=1 repeat 0:") and line.endswith("saved"):
            raise KeyboardInterrupt  # Ctrl-C lands just after the level's rows were written

    params = small(tmp_path, refserver.url, arm="late", concurrency=[1, 2])
    with pytest.raises(SweepInterrupted):
        run_sweep(params, progress=False, log=log)
    run_dir = next(tmp_path.glob("*-late"))
    assert load_result_set(run_dir).meta.interrupted["level"] is None
    res = run_sweep({**params, "resume": str(run_dir)}, progress=False, log=quiet)
    rs = load_result_set(res.run_dir)
    assert res.complete and not rs.meta.rerun_levels
    assert rs.superseded_levels is None or rs.superseded_levels.empty
