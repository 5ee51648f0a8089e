"""Ground truth from the reference server: untested settings of the ``tiny`` profile (caps 64 and 96,
a smaller KV pool, concurrency 24/48/96, accept length 3) predicted from four measured levels, and
compared with a real sweep of each, over real sockets on 127.0.0.1.

The profile is slowed (60 ms per forward, 0.1 ms per token) so that a 2-core machine streams what it
simulates: with ~1 ms steps the client, not the simulated server, would set the pace at 64+ clients.
The sweeps and the error table are ``bench/whatif_error.py``'s (``--refserver`` prints the measured
figures, which README quotes). The measured truth is real time on a shared machine, so the bounds here
are loose enough for a busy one (median 8 %, worst 30 %): they catch a broken
model (a misread pool limit was off by 77 %), not the last percent.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from typing import Any

import numpy as np
import pytest

from helpers import ROOT
from specsweep.analyze import whatif
from specsweep.analyze.compare import compare
from specsweep.results.store import ResultSet


def _bench() -> Any:
    """``bench/whatif_error.py`` (a script, not a package): the sweeps and the error table live there."""
    if "whatif_error" not in sys.modules:
        spec = importlib.util.spec_from_file_location("whatif_error", ROOT / "bench" / "whatif_error.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["whatif_error"] = module
        spec.loader.exec_module(module)
    return sys.modules["whatif_error"]


POOL = 1600
PROMPT = OUTPUT = 32


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResultSet]:
    bench = _bench()
    assert (bench.POOL, bench.PROMPT, bench.OUTPUT) == (POOL, PROMPT, OUTPUT)
    return bench.ground_truth(tmp_path_factory.mktemp("whatif"))


def errors(measured: dict[str, ResultSet]) -> list[dict[str, Any]]:
    rows = _bench().truth_errors(measured)
    for r in rows:
        assert not r["refused"], r
    return rows


def test_untested_settings_are_predicted_within_the_issue_bounds(measured: dict[str, ResultSet]) -> None:
    rows = errors(measured)
    assert len(rows) == 10
    errs = np.abs([[r["aggregate"], r["user"]] for r in rows])
    detail = "\n".join(f"{r['case']} C={r['concurrency']}: aggregate {r['aggregate']:+.1f} %, per-user {r['user']:+.1f} %"
                       for r in rows)
    assert np.median(errs) <= 8.0, detail
    assert errs.max() <= 30.0, detail
    assert np.mean([r["in_band"] for r in rows]) >= 0.6, detail


def test_the_running_requests_follow_the_cap_and_the_pool(measured: dict[str, ResultSet]) -> None:
    rows = {(r["case"], r["concurrency"]): r["running"] for r in errors(measured)}
    assert rows[("cap64", 96)] == rows[("cap64", 128)] == 64
    assert rows[("cap96", 128)] == 96
    assert rows[("pool", 48)] == rows[("pool", 128)] == POOL // (PROMPT + OUTPUT)
    assert rows[("levels", 24)] == 24


def test_beyond_the_measured_batches_it_refuses(measured: dict[str, ResultSet]) -> None:
    train = measured["train"]
    comp = compare([train], baseline="train")
    p = whatif.predict(comp, "train", concurrency=[256], max_running_requests=256, sets=[train])
    assert bool(p.iloc[0]["refused"]) and "outside the batch sizes" in p.iloc[0]["why"]
    assert math.isnan(p.iloc[0]["aggregate_tok_s"])
    p = whatif.predict(comp, "train", concurrency=[16], accept_length=5.0, sets=[train])
    assert bool(p.iloc[0]["refused"]) and "must lie in [1, 4]" in p.iloc[0]["why"]


def test_mem_fraction_static_sizes_the_pool_from_the_servers_memory_figures(measured: dict[str, ResultSet]) -> None:
    train = measured["train"]
    comp = compare([train], baseline="train")
    with pytest.raises(whatif.WhatIfError, match="pass gpu_mem_gib"):
        whatif.predict(comp, "train", concurrency=[64], mem_fraction_static=0.7, sets=[train])
    same = whatif.predict(comp, "train", concurrency=[64], mem_fraction_static=0.75, gpu_mem_gib=16, sets=[train])
    plain = whatif.predict(comp, "train", concurrency=[64], sets=[train])
    assert int(same.iloc[0]["pool_tokens"]) == int(plain.iloc[0]["pool_tokens"]) == 32000
    smaller = whatif.predict(comp, "train", concurrency=[64], mem_fraction_static=0.72, gpu_mem_gib=16, sets=[train])
    # 0.03 × 16 GiB less static memory comes out of the KV cache (0.519 GiB): a pool of ~2,400 tokens, 37 requests
    kv = train.meta.server["server_info"]["internal_states"][0]["memory_usage"]["kvcache"]
    pool = int(32000 * (kv - 0.03 * 16) / kv)
    assert int(smaller.iloc[0]["pool_tokens"]) == pool
    assert smaller.iloc[0]["limited_by"] == "KV pool" and smaller.iloc[0]["running_requests"] == pool // 64
