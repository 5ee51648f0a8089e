"""The running-request cap a comparison reads: the one accessor of each server's dialect (SGLang's
scheduler cap where ``--max-running-requests`` was left unset), and the cap a server that states
none showed through its gauges while requests waited."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from helpers import write_level_only
from specsweep.analyze.compare import compare, observed_cap
from specsweep.results.store import load_result_set

pytestmark = pytest.mark.fast  # files only: no server, socket or subprocess

ROWS = {1: (100.0, 100.0), 8: (600.0, 75.0), 64: (2000.0, 31.0)}
UNSET = {"name": "sglang", "max_running_requests": None,
         "server_info": {"max_running_requests": None, "dp_size": 1,
                         "internal_states": [{"effective_max_running_requests_per_dp": 48}]}}


def test_an_sglang_cap_left_unset_is_read_from_the_scheduler_by_compare(tmp_path: Path) -> None:
    base = write_level_only(tmp_path / "baseline", "baseline", ROWS, server={"name": "sglang"})
    arm = write_level_only(tmp_path / "mtp", "mtp", ROWS, server=UNSET)
    comp = compare([load_result_set(base), load_result_set(arm)])
    assert comp.caps == {"baseline": None, "mtp": 48}


def test_a_cap_no_route_states_is_observed_where_requests_waited(tmp_path: Path) -> None:
    levels = pd.DataFrame({"concurrency": [8, 64, 128], "server_running_max": [8.0, 256.0, 256.0],
                           "server_queued_max": [0.0, 0.0, 70.0]})
    assert observed_cap(levels) == 256
    assert observed_cap(levels.assign(server_queued_max=0.0)) is None  # nothing waited: no evidence of a cap
    assert observed_cap(levels.drop(columns="server_queued_max")) is None
    base = write_level_only(tmp_path / "baseline", "baseline", ROWS, server={"name": "vllm"})
    arm = write_level_only(tmp_path / "mtp", "mtp", ROWS, server={"name": "vllm"})
    lv = pd.read_csv(arm / "levels.csv").assign(server_running_max=[1.0, 8.0, 40.0], server_queued_max=[0.0, 0.0, 24.0])
    lv.to_csv(arm / "levels.csv", index=False)
    comp = compare([load_result_set(base), load_result_set(arm)])
    assert comp.caps["mtp"] is None and comp.observed_caps == {"mtp": 40}
