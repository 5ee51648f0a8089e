"""A simulated server that falls behind its profile's schedule is seen, recorded per level and warned about.

The reference server simulates its engine in real time on the CPU it shares with everything else;
on a machine too busy to keep up, its figures measure that machine rather than the profile. Its
``specsweep_refserver_*`` schedule counters (every API surface) are read before and after each
level into ``sim_*`` columns, and the page warns where a level's steps woke late or its clock was
reset. The stall here is real: the server process is stopped (SIGSTOP) for 0.6 s in mid-level.
"""
from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from helpers import write_measured
from specsweep.analyze.compare import compare
from specsweep.markup import markdown_html
from specsweep.measure.probe import counters, parse_metrics
from specsweep.measure.sweep import run_sweep, simulator_schedule_figures
from specsweep.refserver.launch import RefServer
from specsweep.report.warnings import collect_warnings
from specsweep.results.store import load_result_set, load_result_sets
from specsweep.servers import SIM_COUNTERS

SLOW = ["--set", "decode.fixed_ms=60", "--set", "decode.per_token_ms=0.1", "--set", "prefill.fixed_ms=5"]


@pytest.mark.parametrize("surface", ["sglang", "vllm", "llamacpp"])
def test_every_surface_exposes_the_schedule_counters(surface: str) -> None:
    args = [] if surface == "sglang" else ["--api-surface", surface]
    with RefServer("tiny", "mtp", ["--health-delay-s", "0.1", *args]) as srv, httpx.Client(base_url=srv.url) as c:
        def read() -> dict[str, float]:
            return counters(parse_metrics(c.get("/metrics").text, set(SIM_COUNTERS.values())), surface)

        before = read()
        assert set(before) == set(SIM_COUNTERS), before
        model = c.get("/v1/models").json()["data"][0]["id"]
        r = c.post("/v1/completions", json={"model": model, "prompt": "hi", "max_tokens": 16}, timeout=30)
        assert r.status_code == 200, r.text
        after = read()
    figures = simulator_schedule_figures(before, after)
    assert figures["sim_steps"] >= 8  # one prefill and ≥ 7 decode steps (accept length ≤ 2)
    assert 0 <= figures["sim_step_lag_mean_ms"] < 250 and figures["sim_clock_resyncs"] == 0


def test_without_the_counters_or_across_a_restart_there_are_no_figures() -> None:
    assert simulator_schedule_figures({}, {}) == {}  # a real server: no sim_* columns at all
    before = {k: 10.0 for k in SIM_COUNTERS}
    assert simulator_schedule_figures(before, {k: 0.0 for k in SIM_COUNTERS}) == {}  # counters went back
    assert simulator_schedule_figures(before, dict(before)) == {}  # no step ran


def test_a_stalled_simulator_is_recorded_and_warned_about(tmp_path: Path) -> None:
    lines: list[str] = []
    with RefServer("tiny", "mtp", ["--health-delay-s", "0.1", *SLOW]) as srv:
        assert srv.process is not None
        pid = srv.process.pid

        def stall() -> None:  # 0.3 s into the second level: a host that stops the server for 0.6 s
            time.sleep(0.3)
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(0.6)
            finally:
                os.kill(pid, signal.SIGCONT)

        def log(line: str) -> None:
            lines.append(line)
            if line.startswith("C=2 repeat 0:") and "saved" in line:
                threading.Thread(target=stall, daemon=True).start()

        res = run_sweep({"endpoint": srv.url, "concurrency": [2, 4], "input_tokens": 32, "output_tokens": 32,
                         "workload": "random-ids", "out_dir": str(tmp_path / "runs"), "requests_per_level": 8,
                         "warmup_requests": 0, "metrics_interval_s": 0.1, "arm": "baseline"},
                        progress=False, log=log)
    rs = load_result_set(res.run_dir)
    lv = rs.levels.set_index("concurrency")
    assert lv.at[4, "sim_clock_resyncs"] >= 1, lv.filter(like="sim_").to_string()
    assert lv.at[4, "sim_resync_lost_s"] >= 0.3
    # no assertion on the level's mean step lag: a stop that lands while a step sleeps to its target makes
    # that step ~0.6 s late (and the clock resync after it), one that lands while the engine delivers a
    # step's chunks shows only as the resync (its mean lag can stay under a millisecond); the warning reads both
    assert lv.at[2, "sim_steps"] > 0 and lv.at[4, "sim_steps"] > 0
    (line,) = [ln for ln in lines if ln.startswith("C=4 repeat 0:")]
    assert "ms late per step" in line and "clock reset" in line
    (w,) = [w for w in collect_warnings(compare([rs])) if w.kind == "simulator-lag"]
    assert w.changes_verdict and w.severity == "high"
    assert "fell behind its schedule" in w.text and "clock was reset" in w.text
    # the stalled level is named; on a loaded machine the first level may have lagged too, and is then named
    # beside it ("at concurrency 2, 4:")
    named = re.search(r"at concurrency ([\d, ]+):", w.text)
    assert named and 4 in {int(c) for c in named.group(1).split(", ")}, w.text


def _sim(lag_ms: float, resyncs: float = 0.0) -> dict[str, float]:
    return {"sim_steps": 100.0, "sim_step_lag_mean_ms": lag_ms, "sim_step_lag_pct": lag_ms / 20 * 100,
            "sim_late_steps_pct": 50.0 if lag_ms > 1 else 1.0, "sim_clock_resyncs": resyncs,
            "sim_resync_lost_s": 0.4 * resyncs}


@pytest.mark.parametrize("ttft_s, lag_ms, resyncs, kind", [
    (0.02, 0.3, 0, None),           # a busy machine's usual lag: no warning
    (0.02, 3.0, 0, "changes"),      # 3 ms of 20 ms TTFT: more than the 2 % minimum effect
    (2.0, 3.0, 0, "does-not"),      # 3 ms of 2 s: below it
    (2.0, 0.3, 1, "changes"),       # a clock reset: the simulator ran slower than its profile
])
def test_the_warning_weighs_the_lag_against_the_shortest_wait(tmp_path: Path, ttft_s: float, lag_ms: float,
                                                              resyncs: float, kind: str | None) -> None:
    levels = {c: {"tokens": 30, "step_s": 0.01, "ttft_s": ttft_s} for c in (2, 8)}
    arm = "spec <script>alert(1)</script> *x*"
    write_measured(tmp_path / "base", "baseline", levels, level_extra={c: _sim(0.2) for c in (2, 8)})
    write_measured(tmp_path / "spec", arm, levels, level_extra={2: _sim(0.2), 8: _sim(lag_ms, resyncs)})
    found = [w for w in collect_warnings(compare(load_result_sets(tmp_path))) if w.kind == "simulator-lag"]
    if kind is None:
        assert not found
        return
    (w,) = found
    assert w.changes_verdict is (kind == "changes")
    assert "in 1 of 4 measured levels" in w.text and "at concurrency 8:" in w.text
    assert "\\<script>" in w.text and "<script>" not in markdown_html(w.text)  # the arm's name shows as text
    if not resyncs:  # weighed against the wait at 8, the level that lagged
        assert "at concurrency 8, 3.0 ms is" in w.effect or "at concurrency 8, where" in w.effect, w.effect
    assert ("clock was reset" in w.text) is bool(resyncs)


def test_a_level_s_lag_is_weighed_against_that_level_s_waits(tmp_path: Path) -> None:
    """3 ms of lag at 8 clients, whose TTFT is 2 s, does not decide, although TTFT at 2 clients is 20 ms."""
    levels = {2: {"tokens": 30, "step_s": 0.01, "ttft_s": 0.02}, 8: {"tokens": 30, "step_s": 0.01, "ttft_s": 2.0}}
    write_measured(tmp_path / "base", "baseline", levels, level_extra={c: _sim(0.2) for c in (2, 8)})
    write_measured(tmp_path / "spec", "spec", levels, level_extra={2: _sim(0.2), 8: _sim(3.0)})
    (w,) = [w for w in collect_warnings(compare(load_result_sets(tmp_path))) if w.kind == "simulator-lag"]
    assert not w.changes_verdict and w.severity == "low"
    assert "at concurrency 8, where 3.0 ms is" in w.effect, w.effect


def test_the_share_of_a_step_quoted_is_the_worst_lag_s_own(tmp_path: Path) -> None:
    """'up to 3.0 ms late on average (15 % of a step)': the share of the level that lagged 3.0 ms, not the
    largest share of any level (2.0 ms of a 5 ms step, 40 %)."""
    levels = {c: {"tokens": 30, "step_s": 0.01, "ttft_s": 0.5} for c in (2, 8)}
    write_measured(tmp_path / "base", "baseline", levels, level_extra={c: _sim(0.2) for c in (2, 8)})
    write_measured(tmp_path / "spec", "spec", levels, level_extra={2: {**_sim(2.0), "sim_step_lag_pct": 40.0},
                                                                     8: {**_sim(3.0), "sim_step_lag_pct": 15.0}})
    (w,) = [w for w in collect_warnings(compare(load_result_sets(tmp_path))) if w.kind == "simulator-lag"]
    assert "up to 3.0 ms late on average (15 % of a step)" in w.text, w.text
