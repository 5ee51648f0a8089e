"""specsweep.measure.cpushare: the client's CPU against a real local server's, read from /proc, and the
sweep's level columns; the page's warning line over many synthetic level tables."""
from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsweep.measure import cpushare
from specsweep.measure.cpushare import CpuShare, cpu_share_warning, level_suffix
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.results.columns import METRICS
from specsweep.results.store import load_result_set

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux /proc")

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def _burn(seconds: float) -> None:
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass


def test_stat_fields_split_after_the_names_last_parenthesis_whatever_its_bytes(tmp_path: Path) -> None:
    """A process may name itself with spaces, parentheses and bytes that are not UTF-8; the fields
    after the name are still found (field 4 ppid, 14-15 utime/stime, 22 start ticks), and a missing
    or garbled stat file reads as None, not an error."""
    from specsweep.measure.procstat import stat_fields
    from specsweep.study import guard as serverguard

    rest = b"S 77 " + b" ".join(str(n).encode() for n in range(5, 53))  # fields 3, 4, then 5... as numbers
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "stat").write_bytes(b"4242 (a) b) (\xff\xfe x) " + rest + b"\n")
    fields = stat_fields(4242, tmp_path)
    assert fields is not None and fields[0] == b"S" and int(fields[1]) == 77
    assert (int(fields[11]), int(fields[12]), int(fields[19])) == (14, 15, 22)  # as proc(5) numbers them
    assert stat_fields(4243, tmp_path) is None  # gone
    (tmp_path / "4244").mkdir()
    (tmp_path / "4244" / "stat").write_bytes(b"garbled")
    assert stat_fields(4244, tmp_path) is None
    me = stat_fields(os.getpid())  # the real file: this process's parent and start, as the two readers see them
    assert me is not None and int(me[1]) == os.getppid()
    assert serverguard.start_ticks(os.getpid()) == int(me[19])
    assert cpushare.cpu_seconds(os.getpid()) == pytest.approx((int(me[11]) + int(me[12])) / os.sysconf("SC_CLK_TCK"),
                                                              abs=0.05)


def test_cpu_seconds_follow_the_process_and_its_children() -> None:
    me = cpushare.cpu_seconds(os.getpid())
    assert me is not None and me > 0
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.6) + "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 60
        while (cpushare.cpu_seconds(child.pid) or 0) < 0.6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.6 <= cpushare.cpu_seconds(child.pid) < 5  # what it burnt, as the kernel counts it
        assert child.pid in cpushare.descendants(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert cpushare.cpu_seconds(child.pid) is None  # gone: unreadable, not zero


def test_the_listening_process_is_found_by_its_port_and_nothing_else_is() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert cpushare.listening_pid(port) == os.getpid()
        assert CpuShare.for_url(f"http://127.0.0.1:{port}") is None  # in this process: no line to draw
    assert cpushare.listening_pid(port) is None
    assert CpuShare.for_url("http://192.0.2.7:8000") is None  # another machine
    assert CpuShare.for_url("http://[::1:bad") is None


def test_a_real_server_tree_is_measured_apart_from_the_client(refserver_factory) -> None:
    srv: RefServer = refserver_factory()
    meter = CpuShare.for_url(srv.url)
    assert meter is not None and meter.server_pid == srv.process.pid
    start = meter.read()
    assert srv.process.pid in start.server_pids and os.getpid() not in start.server_pids
    _burn(0.5)  # the client's own work
    # the server's: a request it answers
    import httpx

    httpx.get(srv.url.rstrip("/") + "/health", timeout=10)
    figures = meter.level_figures(start)
    assert figures["client_cpu_s"] >= 0.5
    assert figures["server_cpu_s"] >= 0 and figures["client_cpu_s"] < 10
    if figures["server_cpu_s"] > 0:
        assert figures["client_cpu_share_pct"] == pytest.approx(100 * figures["client_cpu_s"] / figures["server_cpu_s"])
    assert set(figures) <= set(METRICS)  # every column the sweep stores has a definition
    assert METRICS["client_cpu_share_pct"].unit == "%"


def test_the_meters_own_scan_of_proc_is_not_counted_as_the_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each reading scans every process in /proc (longer on a busy machine); the window's
    client CPU is what runs between the two readings, not the readings' own work: with a scan made
    to cost 0.2 s at both ends, an empty window reads well under 0.2 s."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        meter = CpuShare(proc.pid)
        real = cpushare._parents

        def slow_parents() -> dict[int, int]:
            _burn(0.2)
            return real()

        monkeypatch.setattr(cpushare, "_parents", slow_parents)
        start = meter.read()
        figures = meter.level_figures(start)
        assert figures["client_cpu_s"] < 0.05, figures
    finally:
        proc.kill()
        proc.wait()


def test_a_sweep_stores_the_share_per_level_and_prints_it(tmp_path: Path, refserver: RefServer) -> None:
    lines: list[str] = []
    res = run_sweep({"endpoint": refserver.url, "concurrency": [1, 4], "input_tokens": 32, "output_tokens": 40,
                     "workload": "random-ids", "out_dir": str(tmp_path), "arm": "cpu"}, progress=False,
                    log=lines.append)
    lv = load_result_set(res.run_dir).levels
    assert {"client_cpu_share_pct", "client_cpu_s", "server_cpu_s", "server_cpu_cores"} <= set(lv.columns)
    assert (lv["client_cpu_s"] > 0).all() and (lv["server_cpu_s"] > 0).all()
    share = 100 * lv["client_cpu_s"] / lv["server_cpu_s"]
    assert np.allclose(lv["client_cpu_share_pct"], share)
    print(lv[["concurrency", "client_cpu_s", "server_cpu_s", "server_cpu_cores", "client_cpu_share_pct"]])
    saved = [line for line in lines if line.endswith("— saved") or "client CPU" in line]
    assert sum("% of the server's" in line for line in saved) == len(lv)


def test_level_suffix_says_nothing_without_a_figure() -> None:
    assert level_suffix(pd.Series({"client_cpu_share_pct": math.nan})) == ""
    assert level_suffix(pd.Series({"x": 1})) == ""
    assert level_suffix(pd.Series({"client_cpu_share_pct": 0.84})) == ", client CPU 0.8 % of the server's"
    # a CPU engine started by the launcher: what it got of its threads' CPU is said too
    assert level_suffix(pd.Series({"client_cpu_share_pct": 0.84, "server_cpu_got_pct": 61.6})) == (
        ", client CPU 0.8 % of the server's, engine got 62 % of its threads' CPU")


def test_the_warning_names_exactly_the_levels_over_the_threshold() -> None:
    rng = np.random.default_rng(21)
    for case in range(300):
        n = int(rng.integers(1, 12))
        model = case % 3  # shares: lognormal around 1 %, uniform 0-5 %, mostly tiny with spikes
        if model == 0:
            share = rng.lognormal(0.0, 0.8, n)
        elif model == 1:
            share = rng.uniform(0, 5, n)
        else:
            share = np.where(rng.random(n) < 0.2, rng.uniform(2, 40, n), rng.uniform(0, 0.5, n))
        share[rng.random(n) < 0.1] = np.nan
        cores = rng.choice([0.05, 0.3, 0.9, 1.0, 2.0], n)
        lv = pd.DataFrame({"arm": "a", "concurrency": rng.choice([1, 4, 16, 64], n),
                           "client_cpu_share_pct": share, "server_cpu_cores": cores})
        line = cpu_share_warning(lv)
        hot = (share > 2.0) & (cores >= cpushare.CPU_BUSY_CORES)
        if not hot.any():
            assert line is None
        else:
            assert line is not None and f"on {int(hot.sum())} level(s)" in line
            assert f"up to {np.nanmax(share[hot]):.1f} %" in line
    assert cpu_share_warning(pd.DataFrame({"concurrency": [1]})) is None  # older result sets: no column
