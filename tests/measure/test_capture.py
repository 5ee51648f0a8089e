"""``specsweep capture`` of the reference server's surfaces: what a bundle holds (every flavour's
stream, with and without the speculation field, the probe routes, /metrics twice, /tokenize, the
flush), that the API key never reaches it, and that ``serve --replay`` of it meets the probe and a
sweep as the captured server did."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsweep.measure.capture import capture, write_bundle
from specsweep.measure.probe import probe
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.results.store import load_result_set
from specsweep.servers.capture_bundle import read_bundle


def test_an_sglang_capture_holds_every_flavour_and_replays_its_counts(refserver_mtp, tmp_path: Path) -> None:  # noqa: ANN001
    path = write_bundle(capture(refserver_mtp.url, max_tokens=12), tmp_path / "sglang.capture.json")
    bundle = read_bundle(path)
    assert bundle.dialect == "sglang" and bundle.flavour == "sglang"
    asked = sorted((s.path, "return_spec_tokens_details" in s.request) for s in bundle.streams)
    assert asked == [("/generate", False), ("/v1/chat/completions", False), ("/v1/chat/completions", True),
                     ("/v1/completions", False), ("/v1/completions", True)]
    assert all(s.status == 200 and s.tail[-1] == "data: [DONE]\n\n" for s in bundle.streams)
    routes = {(r.method, r.path): r.status for r in bundle.routes}
    assert routes[("GET", "/server_info")] == 200 and routes[("GET", "/version")] == 404
    assert routes[("POST", "/tokenize")] == 200 and routes[("POST", "/flush_cache")] == 200
    assert bundle.metrics_before and bundle.metrics_after and "sglang:" in bundle.metrics_after
    with RefServer(args=["--replay", str(path)]) as replay:
        info = probe(replay.url)
        assert (info.server, info.flavour, info.server_info.get("speculative_algorithm")) == ("sglang", "sglang", "EAGLE")
        res = run_sweep({"endpoint": replay.url, "arm": "r", "concurrency": [1, 2], "output_tokens": 12,
                         "workload": "random-ids", "input_tokens": 8, "requests_per_level": 2, "warmup_requests": 0,
                         "flush_cache": False, "metrics_interval_s": 0.2, "out_dir": str(tmp_path / "runs")},
                        progress=False, log=lambda _: None)
    final = json.loads(next(s for s in bundle.streams if s.path == "/generate").tail[-2].removeprefix("data: "))
    rs = load_result_set(res.run_dir)
    assert rs.requests is not None and (rs.requests["output_tokens"] == final["meta_info"]["completion_tokens"]).all()
    assert (rs.requests["spec_verify_ct"] == final["meta_info"]["spec_verify_ct"]).all()


def test_the_api_key_a_server_echoes_is_redacted_from_the_bundle(refserver_factory, tmp_path: Path,  # noqa: ANN001
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-capture-secret-4711"
    monkeypatch.setenv("SPECSWEEP_API_KEY", key)
    srv = refserver_factory(args=["--fault-error-rate", "1", "--fault-echo-auth"])  # every generation: 500 quoting the key
    path = write_bundle(capture(srv.url, max_tokens=4), tmp_path / "echo.capture.json")
    text = path.read_text()
    assert key not in text and "[redacted SPECSWEEP_API_KEY]" in text
    assert all(s.status in (500, 503) for s in read_bundle(path).streams)  # injected faults


@pytest.mark.fast
def test_a_bundle_that_cannot_be_written_is_bad_input(tmp_path: Path) -> None:
    from specsweep.errors import InputError

    with pytest.raises(InputError, match="cannot write the capture bundle"):
        write_bundle({"format": "specsweep-capture"}, tmp_path / "no-such-folder" / "x.capture.json")
