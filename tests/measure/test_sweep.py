"""The sweep against the reference server over real sockets: flavours, token accounting, resume,
preflight errors."""
from __future__ import annotations

import _thread
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsweep.measure.probe import ProbeError, probe
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.results.store import load_result_set


def quiet(_: str) -> None:
    pass


def small(tmp_path: Path, url: str, **kw) -> dict:
    return {"endpoint": url, "concurrency": [1, 3], "input_tokens": 32, "output_tokens": 40, "workload": "random-ids",
            "out_dir": str(tmp_path), "metrics_interval_s": 0.05, **kw}


@pytest.mark.parametrize("api", ["sglang", "openai-completions", "openai-chat"])
def test_every_flavour_counts_the_servers_tokens(tmp_path: Path, refserver: RefServer, api: str) -> None:
    res = run_sweep(small(tmp_path, refserver.url, api=api, arm=f"b-{api}"), progress=False, log=quiet)
    assert res.complete and res.meta.api == api and res.meta.server["simulated"] is True
    rs = load_result_set(res.run_dir)
    req = rs.requests
    assert len(req) == 4 + 6 and not req["warmup"].any()
    assert req["error"].isna().all() and (req["token_source"] == "usage").all()
    assert (req["output_tokens"] == 40).all()
    # per-chunk counts add up to the server's total, one token per chunk without speculation
    assert all(sum(t) == 40 and set(t) == {1} for t in req["chunk_tokens"])
    lv = rs.levels.set_index("concurrency")
    assert (lv["short_outputs"] == 0).all()
    # the server's own generation counter moved by exactly what the client counted
    assert lv.at[3, "server_generation_tokens_delta"] == pytest.approx(6 * 40)
    assert lv.at[3, "output_tok_s"] == pytest.approx(240 / lv.at[3, "window_s"])
    assert set(rs.levels["concurrency"]) == {1, 3}


def test_speculation_streams_several_tokens_per_chunk(tmp_path: Path, refserver_mtp: RefServer) -> None:
    res = run_sweep(small(tmp_path, refserver_mtp.url, arm="mtp", output_tokens=60), progress=False, log=quiet)
    rs = load_result_set(res.run_dir)
    req = rs.requests
    assert (req["output_tokens"] == 60).all()
    assert all(sum(t) == 60 for t in req["chunk_tokens"])
    counts = np.concatenate([np.asarray(t) for t in req["chunk_tokens"]])
    assert counts.max() > 1 and counts.max() <= 4  # 3 draft steps: 1..4 tokens per step
    assert (req["chunks"] < 60).all()
    lv = rs.levels
    assert (lv["tokens_per_chunk_mean"] > 1.3).all()
    assert lv["spec_accept_length"].between(1.5, 3.0).all()
    assert rs.meta.server["speculative_algorithm"] == "EAGLE"
    assert rs.meta.server["max_running_requests"] == 48
    # token-normalised ITL is shorter than the gap between chunks under speculation
    assert (lv["itl_mean_s"] < lv["chunk_gap_mean_s"]).all()


def test_interrupted_sweep_resumes_without_rerunning_finished_levels(tmp_path: Path, refserver: RefServer) -> None:
    params = small(tmp_path, refserver.url, arm="resumable", concurrency=[1, 2, 4], output_tokens=300,
                   requests_per_level=4)
    saved = threading.Event()

    def log(line: str) -> None:
        if "saved" in line and not saved.is_set():
            saved.set()
            threading.Timer(0.25, _thread.interrupt_main).start()  # Ctrl-C in the middle of level 2

    with pytest.raises(KeyboardInterrupt):
        run_sweep(params, progress=False, log=log)
    run_dir = next(tmp_path.glob("*-resumable"))
    partial = load_result_set(run_dir)
    assert partial.meta.complete is False and partial.meta.interrupted is not None
    assert partial.levels["concurrency"].tolist() == [1]
    first = partial.requests.copy()

    lines: list[str] = []
    res = run_sweep({**params, "resume": str(run_dir)}, progress=False, log=lines.append)
    assert res.complete and res.run_dir == run_dir
    assert any("C=1 repeat 0: already finished, skipped" in line for line in lines)
    full = load_result_set(run_dir)
    assert sorted(full.levels["concurrency"]) == [1, 2, 4]
    assert full.meta.interrupted is None and full.meta.resumed_utc
    kept = full.requests[full.requests["concurrency"] == 1].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept.drop(columns=["chunk_t_s", "chunk_tokens"]),
                                  first.drop(columns=["chunk_t_s", "chunk_tokens"]))
    assert len(full.requests) == 4 * 3
    # resuming with other parameters is refused, naming what differs
    with pytest.raises(ValueError, match=r"workload.output_tokens 300 vs 20"):
        run_sweep({**params, "output_tokens": 20, "resume": str(run_dir)}, progress=False, log=quiet)


def test_preflight_unreachable_endpoint_names_url_and_attempts() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ProbeError) as err:
        probe(f"http://127.0.0.1:{port}")
    msg = str(err.value)
    assert f"http://127.0.0.1:{port}" in msg and "GET /server_info" in msg and "GET /v1/models" in msg
    assert "Is the server running" in msg


def test_preflight_wrong_model_lists_the_models(refserver: RefServer) -> None:
    with pytest.raises(ProbeError, match=r"model 'llama' is not served at .*; it serves: specsweep-sim/tiny"):
        probe(refserver.url, model="llama")
    with pytest.raises(ProbeError, match=r"api must be 'auto' or one of sglang, openai-completions, openai-chat"):
        probe(refserver.url, api="grpc")
    info = probe(refserver.url)
    assert (info.server, info.flavour, info.model) == ("sglang", "sglang", "specsweep-sim/tiny")


def test_server_that_ignores_ignore_eos_is_flagged(tmp_path: Path, refserver_factory) -> None:
    srv = refserver_factory(args=["--disregard-ignore-eos"])
    res = run_sweep(small(tmp_path, srv.url, arm="eos", output_tokens=400, concurrency=[2]), progress=False, log=quiet)
    assert any("may not honour ignore_eos" in w for w in res.warnings)
    lv = res.levels.iloc[0]
    assert lv["short_outputs"] > 0
    from specsweep.measure.sweep import warnings_markdown

    assert "did not honour ignore_eos" in warnings_markdown(res)


def test_failed_requests_become_records_not_aborts(tmp_path: Path, refserver_factory) -> None:
    srv = refserver_factory(args=["--fault-error-rate", "0.3", "--seed", "5"])
    res = run_sweep(small(tmp_path, srv.url, arm="faulty", concurrency=[4], requests_per_level=20,
                          warmup_requests=0), progress=False, log=quiet)
    rs = load_result_set(res.run_dir)
    errors = rs.requests["error"].dropna()
    assert 0 < len(errors) < 20 and errors.str.contains("HTTP 5").all()
    assert rs.levels.iloc[0]["error_rate"] == pytest.approx(len(errors) / 20)


def test_warmup_never_sends_a_measured_prompt(tmp_path: Path, refserver_factory) -> None:
    """With a prompt file, warm-up and preflight use their own random IDs (no prefix-cache help)."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "question number {i} about rivers"}}\n' for i in range(1000)))
    srv = refserver_factory()
    res = run_sweep(small(tmp_path, srv.url, arm="file", workload=str(prompts), concurrency=[2, 4]),
                    progress=False, log=quiet)
    rs = load_result_set(res.run_dir)
    # measured prompts are file lines 0..N-1 in order, never reused across levels
    assert sorted(rs.requests["prompt_id"]) == list(range(4 + 8))
    assert rs.meta.workload.kind == "prompt-file" and rs.meta.workload.dataset_digest.startswith("sha256:")
    from specsweep.measure.sweep import WARMUP_INDEX_BASE
    from specsweep.workloads.prompts import random_ids

    warm = random_ids(32, 40, 0).prompt(WARMUP_INDEX_BASE, "sglang")
    assert isinstance(warm, list) and len(warm) == 32  # token IDs, not a line of the file
    short = tmp_path / "short.jsonl"
    short.write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    # the SGLang surface says disable_radix_cache: true (the simulated engine keeps no prefix cache): no warning
    res = run_sweep(small(tmp_path, srv.url, arm="short0", workload=str(short), concurrency=[1]), progress=False, log=quiet)
    assert not any("prompts repeat" in w for w in res.warnings), res.warnings
    # a vLLM surface has no /server_info to say so: repeats within and across levels are warned of
    vllm = refserver_factory(args=["--api-surface", "vllm"])
    res = run_sweep(small(tmp_path, vllm.url, arm="short", workload=str(short), concurrency=[1]), progress=False, log=quiet)
    assert any("prompts repeat within a level" in w for w in res.warnings), res.warnings
    res = run_sweep(small(tmp_path, vllm.url, arm="short2", workload=str(short), concurrency=[1, 2],
                          requests_per_level=2), progress=False, log=quiet)
    assert any("prompts repeat across levels" in w and "flush_cache=true" in w for w in res.warnings)
    res = run_sweep(small(tmp_path, vllm.url, arm="short3", workload=str(short), concurrency=[1, 2],
                          requests_per_level=2, flush_cache=True), progress=False, log=quiet)
    assert not any("prompts repeat" in w for w in res.warnings)  # the cache is emptied between levels


def test_resume_refuses_a_different_server(tmp_path: Path, refserver: RefServer, refserver_mtp: RefServer) -> None:
    params = small(tmp_path, refserver.url, arm="same", concurrency=[1, 2])
    res = run_sweep(params, progress=False, log=quiet)
    meta_path = res.run_dir / "meta.json"
    import json

    meta = json.loads(meta_path.read_text())
    meta["complete"] = False
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"the server now differs .*speculative_algorithm None vs 'EAGLE'"):
        run_sweep({**params, "endpoint": refserver_mtp.url, "resume": str(res.run_dir)}, progress=False, log=quiet)


def test_a_level_where_everything_fails_stops_the_sweep(tmp_path: Path, refserver_factory) -> None:
    srv = refserver_factory(args=["--fault-error-rate", "1.0"])
    from specsweep.measure.probe import ProbeError

    # the preflight already fails (three tries): a clear error before any level
    with pytest.raises(ProbeError, match=r"preflight request .* failed: HTTP 5"):
        run_sweep(small(tmp_path, srv.url, arm="dead"), progress=False, log=quiet)


def test_a_server_that_dies_mid_sweep_stops_it_and_keeps_finished_levels(tmp_path: Path, refserver_factory) -> None:
    from specsweep.measure.sweep import SweepAborted

    srv = refserver_factory()

    def log(line: str) -> None:
        if "saved" in line:
            srv.stop()  # the server goes away after the first level

    with pytest.raises(SweepAborted, match=r"C=2: every warm-up request failed .*connect"):
        run_sweep(small(tmp_path, srv.url, arm="dies", concurrency=[1, 2, 4]), progress=False, log=log)
    rs = load_result_set(next(tmp_path.glob("*-dies")))
    assert rs.levels["concurrency"].tolist() == [1]
    assert rs.meta.complete is False and rs.meta.failed["level"] == [2, 0]
    assert "SweepAborted" in rs.meta.failed["reason"]


def test_the_level_bar_redraws_at_most_once_a_second_and_ends_on_the_last_count(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each redraw in a kernel is a message (about 0.5 ms of the client's CPU): finished requests
    within REFRESH_S of the last redraw only move the count; the last one is drawn once, by close."""
    from specsweep.measure import sweep as sweep_mod

    clock = [100.0]
    monkeypatch.setattr(sweep_mod.time, "perf_counter", lambda: clock[0])
    bar = sweep_mod._Progress(True, 4, "C=1 r0", 32)
    draws = lambda: capsys.readouterr().err.count("\r")  # noqa: E731 - tqdm starts every redraw with \r
    assert draws() == 1  # the empty bar
    for done, t in ((1, 100.3), (2, 100.6)):
        clock[0] = t
        bar(done, 4)
    assert draws() == 0  # within a second of the last redraw
    clock[0] = 101.2
    bar(3, 4)
    assert draws() == 1
    clock[0] = 101.3
    bar(4, 4)
    assert draws() == 0  # the last count waits for close
    bar.close()
    err = capsys.readouterr().err
    assert err.count("\r") == 1 and "4/4" in err and "tok/s" in err
