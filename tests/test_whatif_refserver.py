"""Ground truth from the reference server: untested settings of the ``tiny`` profile (caps 64 and 96,
a smaller KV pool, concurrency 24/48/96, accept length 3) predicted from four measured levels, and
compared with a real sweep of each, over real sockets on 127.0.0.1.

The profile is slowed (40 ms per forward, 0.1 ms per token) so that a 2-core machine streams what it
simulates: with ~1 ms steps the client, not the simulated server, would set the pace at 64+ clients.
The error figures printed by ``bench/whatif_error.py`` are the measured ones; here the bounds are
the issue's (median 5 %) with a worst-case allowance for a busy machine.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specsweep.compare import compare
from specsweep.refserver.launch import RefServer
from specsweep.store import ResultSet, load_result_set
from specsweep.sweep import run_sweep
from specsweep import whatif

PROMPT, OUTPUT = 32, 32
SLOW = ["--set", "decode.fixed_ms=40", "--set", "decode.per_token_ms=0.1", "--set", "prefill.fixed_ms=5"]
POOL = 1600  # tokens: 25 requests of 32 + 32
#: name -> (server args, levels, what-if settings)
TRUTHS: dict[str, tuple[list[str], list[int], dict[str, Any]]] = {
    "cap64": (["--max-running-requests", "64"], [96, 128], {"max_running_requests": 64}),
    "cap96": (["--max-running-requests", "96"], [128], {"max_running_requests": 96}),
    "levels": (["--max-running-requests", "128"], [24, 48, 96], {}),
    "accept3": (["--max-running-requests", "128", "--mean-accept-length", "3.0"], [16, 64], {"accept_length": 3.0}),
    "pool": (["--max-running-requests", "128", "--set", f"speculative.max_total_num_tokens={POOL}"], [48, 128],
             {"max_total_num_tokens": POOL}),
}


def sweep(out: Path, name: str, args: list[str], levels: list[int]) -> ResultSet:
    with RefServer("tiny", "mtp", ["--health-delay-s", "0.2", *SLOW, *args]) as srv:
        res = run_sweep({"endpoint": srv.url, "concurrency": levels, "input_tokens": PROMPT, "output_tokens": OUTPUT,
                         "workload": "random-ids", "out_dir": str(out / name), "metrics_interval_s": 0.05,
                         "arm": name}, progress=False, log=lambda _: None)
    return load_result_set(res.run_dir)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResultSet]:
    out = tmp_path_factory.mktemp("whatif")
    sets = {"train": sweep(out, "train", ["--max-running-requests", "128"], [4, 16, 64, 128])}
    for name, (args, levels, _) in TRUTHS.items():
        sets[name] = sweep(out, name, args, levels)
    return sets


def errors(measured: dict[str, ResultSet]) -> list[dict[str, Any]]:
    train = measured["train"]
    comp = compare([train], baseline="train")
    rows = []
    for name, (_, levels, settings) in TRUTHS.items():
        lv = measured[name].levels.groupby("concurrency").mean(numeric_only=True)
        p = whatif.predict(comp, "train", concurrency=levels, sets=[train], **settings)
        for row in p.to_dict("records"):
            c = int(row["concurrency"])
            assert not row["refused"], (name, c, row["why"])
            rows.append({"case": name, "concurrency": c, "running": row["running_requests"],
                         "aggregate": (row["aggregate_tok_s"] / lv.at[c, "output_tok_s"] - 1) * 100,
                         "user": (row["user_tok_s"] / lv.at[c, "user_tok_s_mean"] - 1) * 100,
                         "in_band": row["aggregate_tok_s_lo"] <= lv.at[c, "output_tok_s"] <= row["aggregate_tok_s_hi"]})
    return rows


def test_untested_settings_are_predicted_within_the_issue_bounds(measured: dict[str, ResultSet]) -> None:
    rows = errors(measured)
    assert len(rows) == 10
    errs = np.abs([[r["aggregate"], r["user"]] for r in rows])
    detail = "\n".join(f"{r['case']} C={r['concurrency']}: aggregate {r['aggregate']:+.1f} %, per-user {r['user']:+.1f} %"
                       for r in rows)
    assert np.median(errs) <= 5.0, detail
    assert errs[:, 0].max() <= 15.0 and errs[:, 1].max() <= 20.0, detail
    assert np.mean([r["in_band"] for r in rows]) >= 0.8, detail


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
