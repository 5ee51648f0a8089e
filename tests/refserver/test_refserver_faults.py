"""Fault injection over a socket: every fault observed, as the seed predicts per request index."""
from __future__ import annotations

import httpx
import pytest
from refserver_helpers import stream

from specsweep.refserver.faults import FaultConfig

RATES = dict(error_rate=0.2, drop_rate=0.2, stall_rate=0.2, malformed_rate=0.2, stall_s=0.3)
N = 14


def _pick_seed() -> int:
    """The first seed under which the first N requests show every fault, alone at least once."""
    for seed in range(200):
        plans = [FaultConfig(seed=seed, **RATES).plan(i) for i in range(N)]
        solo = {"error": False, "drop": False, "stall": False, "malformed": False}
        for p in plans:
            kinds = [k for k, v in (("error", p.error_status), ("drop", p.drop_at),
                                    ("stall", p.stall_at), ("malformed", p.malformed_at))
                     if v is not None]
            if len(kinds) == 1:
                solo[kinds[0]] = True
        if all(solo.values()):
            return seed
    raise AssertionError("no seed found")


def test_faults_are_observed_as_planned(refserver_factory) -> None:
    seed = _pick_seed()
    srv = refserver_factory("off", [
        "--seed", str(seed), "--fault-error-rate", "0.2", "--fault-drop-rate", "0.2",
        "--fault-stall-rate", "0.2", "--fault-stall-s", "0.3", "--fault-malformed-rate", "0.2"])
    cfg = FaultConfig(seed=seed, **RATES)
    seen = {"error": 0, "drop": 0, "stall": 0, "malformed": 0, "clean": 0}
    for i in range(N):
        plan = cfg.plan(i)
        s = stream(srv.url + "/generate", {"text": "fault test", "stream": True, "sampling_params": {
            "max_new_tokens": 40, "ignore_eos": True}})
        if plan.error_status is not None:
            assert s.status == plan.error_status
            assert s.body["error"]["code"] == plan.error_status and "injected" in s.body["error"]["message"]
            seen["error"] += 1
            continue
        assert s.status == 200
        if plan.drop_at is not None:
            assert not s.done  # closed mid-way: no [DONE]
            counts = [c["meta_info"]["completion_tokens"] for c in s.chunks]
            assert not counts or counts[-1] < 40
            seen["drop"] += 1
            continue
        assert s.done, (i, plan, s.error)
        assert s.chunks[-1]["meta_info"]["completion_tokens"] == 40  # counts still add up
        gaps = [b - a for a, b in zip(s.times, s.times[1:])]
        if plan.malformed_at is not None:
            assert len(s.malformed) == 1
            seen["malformed"] += 1
        else:
            assert not s.malformed
        if plan.stall_at is not None:
            assert max(gaps) >= 0.27
            seen["stall"] += 1
        else:
            assert max(gaps) < 0.2
        if plan == type(plan)():
            seen["clean"] += 1
    assert all(seen[k] for k in ("error", "drop", "stall", "malformed")), seen
    info = httpx.get(srv.url + "/server_info").json()["specsweep_refserver"]
    assert info["faults"]["error_rate"] == 0.2 and info["counts"]["errors_injected"] == seen["error"]


def test_non_streaming_faults(refserver_factory) -> None:
    srv = refserver_factory("off", ["--fault-error-rate", "1"])
    r = httpx.post(srv.url + "/v1/completions", json={"prompt": "x", "max_tokens": 3})
    assert r.status_code in (500, 503) and r.json()["error"]["code"] == r.status_code
    srv = refserver_factory("off", ["--fault-drop-rate", "1"])
    with pytest.raises(httpx.HTTPError):
        httpx.post(srv.url + "/v1/completions", json={"prompt": "x", "max_tokens": 3})
    s = stream(srv.url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 30, "ignore_eos": True,
        "stream": True})
    assert s.status == 200 and not s.done


def test_omit_usage(refserver_factory) -> None:
    srv = refserver_factory("mtp", ["--fault-omit-usage"])
    s = stream(srv.url + "/generate", {"text": "x", "stream": True, "sampling_params": {
        "max_new_tokens": 20, "ignore_eos": True}})
    assert s.done and len(s.chunks[-1]["output_ids"]) == 20
    for c in s.chunks:
        assert "completion_tokens" not in c["meta_info"] and "prompt_tokens" not in c["meta_info"]
    s = stream(srv.url + "/v1/completions", {"prompt": "x", "max_tokens": 20, "ignore_eos": True,
                                             "stream": True, "stream_options": {
                                                 "include_usage": True, "continuous_usage_stats": True}})
    assert s.done and all(c["choices"] and c["usage"] is None for c in s.chunks)
    body = httpx.post(srv.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}).json()
    assert body["usage"] is None
