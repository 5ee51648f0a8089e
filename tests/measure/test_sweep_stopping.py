"""Per-level stopping end to end against the reference server: a level that reaches its target
margin stops before its maximum and says so; one that cannot reach it sends the maximum and says so."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from specsweep.measure.config import ConfigError, parse_config
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.results.columns import level_column
from specsweep.results.store import load_result_set


def quiet(_: str) -> None:
    pass


def params(tmp_path: Path, url: str, **kw: object) -> dict:
    return {"endpoint": url, "concurrency": [2], "input_tokens": 16, "output_tokens": 20, "workload": "random-ids",
            "out_dir": str(tmp_path), "metrics_interval_s": 0.05, "warmup_requests": 0, **kw}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_level_that_reaches_its_margin_stops_before_the_maximum(tmp_path: Path, refserver_mtp: RefServer,
                                                                  workers: int) -> None:
    lines: list[str] = []
    res = run_sweep(params(tmp_path, refserver_mtp.url, arm=f"stop{workers}", target_moe_pct=25,
                           max_requests_per_level=400, client_workers=workers), progress=False, log=lines.append)
    rs = load_result_set(res.run_dir)
    row = rs.levels.iloc[0]
    n = int(row["n_requests"])
    assert 8 <= n < 400 and len(rs.requests) == n  # at least 4 x C before any margin; drained, never cut off
    assert row["stop_reason"].startswith("margin reached (±") and row["stop_reason"].endswith(" requests)")
    decided_at = int(row["stop_reason"].split("after ")[1].split(" ")[0])
    assert decided_at <= n <= decided_at + 400 // 4  # the requests sent before the rule was next asked
    assert math.isfinite(row["moe_pct"]) and row["moe_pct"] <= 25 * 1.5
    assert rs.requests["error"].isna().all()
    assert res.meta.sweep.target_moe_pct == 25 and res.meta.sweep.max_requests_per_level == {"2": 400}
    assert any("stopped on margin reached" in line for line in lines)


def test_a_level_that_cannot_reach_its_margin_sends_the_maximum(tmp_path: Path, refserver_mtp: RefServer) -> None:
    res = run_sweep(params(tmp_path, refserver_mtp.url, arm="most", target_moe_pct=0.001, max_requests_per_level=12),
                    progress=False, log=quiet)
    row = load_result_set(res.run_dir).levels.iloc[0]
    assert int(row["n_requests"]) == 12
    assert row["stop_reason"] == f"max requests (±{row['moe_pct']:.1f} %)"


def test_without_a_target_a_level_sends_its_fixed_count_and_says_so(tmp_path: Path, refserver: RefServer) -> None:
    res = run_sweep(params(tmp_path, refserver.url, arm="fixed", requests_per_level=10), progress=False, log=quiet)
    row = load_result_set(res.run_dir).levels.iloc[0]
    assert int(row["n_requests"]) == 10 and row["stop_reason"] == "fixed count"
    assert math.isfinite(row["moe_pct"])  # 10 requests at C=2: more than 4 x C, so a margin is stated
    assert res.meta.sweep.target_moe_pct is None


def test_a_result_set_from_before_stopping_reads_as_a_fixed_count() -> None:
    import pandas as pd

    old = pd.DataFrame({"concurrency": [1, 4]})
    assert list(level_column(old, "stop_reason")) == ["fixed count"] * 2
    assert level_column(old, "moe_pct").isna().all()


@pytest.mark.parametrize(("given", "says"), [
    ({"target_moe_pct": 0}, "parameter 'target_moe_pct'"),
    ({"target_moe_pct": "five"}, "parameter 'target_moe_pct'"),
    ({"max_requests_per_level": 50}, "parameter 'max_requests_per_level': applies only with target_moe_pct"),
    ({"target_moe_pct": 5, "max_requests_per_level": 6}, "parameter 'max_requests_per_level': 6 is below"),
])
def test_bad_stopping_parameters_fail_in_one_line_naming_them(given: dict, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"concurrency": [1, 4], **given})
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_auto_maximum_leaves_room_for_a_margin() -> None:
    cfg = parse_config({"concurrency": [1, 64], "target_moe_pct": 5})
    assert [cfg.max_requests_for(c) for c in (1, 64)] == [16, 640]
    assert parse_config({"concurrency": [1, 64]}).max_requests_for(64) == 128  # no target: the fixed count


def _study(sweep: dict) -> str:
    import yaml

    return yaml.safe_dump({"title": "T", "sweep": {"concurrency": [1, 4], **sweep},
                           "arms": [{"name": "baseline", "embedded": {"profile": "tiny"}}]}, sort_keys=False)


def test_a_study_passes_the_stopping_keys_to_every_sweep_and_refuses_bad_ones() -> None:
    from specsweep.study.file import StudyError, parse_study

    study = parse_study(_study({"target_moe_pct": 5, "max_requests_per_level": 100}))
    arm = study.arms[0]
    given = study.sweep_parameters(arm, 0)
    assert given["target_moe_pct"] == 5 and given["max_requests_per_level"] == 100
    with pytest.raises(StudyError, match="target_moe_pct"):
        parse_study(_study({"target_moe_pct": -1}))
