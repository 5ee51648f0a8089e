"""``serve --replay``: the reference server serving recorded bundles (``tests/fixtures/shapes``)
over a real socket, met by the probe, the metrics poller and a sweep as a real server would be."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specsweep.analyze.metrics import SOURCE_PER_REQUEST
from specsweep.measure.probe import MetricsPoller, probe
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.results.store import load_result_set

SHAPES = Path(__file__).parents[1] / "fixtures" / "shapes"


@pytest.fixture(scope="module")
def trtllm() -> Iterator[RefServer]:
    with RefServer(args=["--replay", str(SHAPES / "trtllm-serve.capture.json")]) as srv:
        yield srv


def test_trtllm_serve_is_probed_as_tensorrt_llm_not_vllm(trtllm: RefServer) -> None:
    # it answers /version and /server_info as vLLM and SGLang do; owned_by says what it is
    assert httpx.get(f"{trtllm.url}/version", trust_env=False).status_code == 200
    info = probe(trtllm.url)
    assert info.server == "trtllm" and info.flavour == "openai-completions" and info.version == "1.2.0rc2"
    assert info.metrics  # its Prometheus text, at /prometheus/metrics: its /metrics is a JSON list
    assert httpx.get(f"{trtllm.url}/metrics", trust_env=False).json()[0]["iter"] == 41
    poller = MetricsPoller(trtllm.url, "trtllm")
    try:
        counters = poller.snapshot()
    finally:
        poller.close()
    assert counters["generation_tokens"] == 11 and counters["spec_accepted_tokens"] == 7


def test_a_sweep_of_trtllm_serve_reads_its_acceptance(trtllm: RefServer, tmp_path: Path) -> None:
    res = run_sweep({"endpoint": trtllm.url, "arm": "trt", "concurrency": [1, 2], "output_tokens": 11,
                     "workload": "random-ids", "input_tokens": 9, "requests_per_level": 2, "warmup_requests": 0,
                     "flush_cache": False, "metrics_interval_s": 0.2, "out_dir": str(tmp_path)},
                    progress=False, log=lambda _: None)
    assert res.complete
    rs = load_result_set(res.run_dir)
    assert rs.meta.server["name"] == "trtllm"
    assert rs.requests is not None and (rs.requests["output_tokens"] == 11).all()
    # the recorded avg_decoded_tokens_per_iter, 2.75: 11 tokens in 4 decoding iterations per request
    assert rs.levels["spec_accept_length"].tolist() == pytest.approx([2.75, 2.75])
    assert (rs.levels["spec_accept_length_source"] == SOURCE_PER_REQUEST).all()


def test_a_replayed_vllm_without_dev_mode_has_no_flush_route(tmp_path: Path) -> None:
    with RefServer(args=["--replay", str(SHAPES / "vllm-per-choice-stats.capture.json")]) as srv:
        assert probe(srv.url).server == "vllm"
        assert httpx.post(f"{srv.url}/reset_prefix_cache", trust_env=False).status_code == 404
        assert httpx.get(f"{srv.url}/no/such/route", trust_env=False).json() == {"detail": "Not Found"}


def test_replay_refuses_a_file_that_is_no_bundle(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"format": "something-else"}')
    srv = RefServer(args=["--replay", str(bad)], ready_timeout_s=20)
    with pytest.raises(Exception, match="not a specsweep-capture bundle"):
        srv.start()
    srv.stop()
