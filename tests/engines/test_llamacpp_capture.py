"""``specsweep capture`` of the real llama.cpp engine (SmolLM2-135M, n-gram drafting), then
``specsweep serve --replay`` of that bundle, then a sweep of the replay: the sweep's counts are the
captured ones, exactly (output and prompt tokens, the timings' draft counts).

Needs the ``[llamacpp]`` extra and the model package (skips locally, fails under CI=true).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_llamacpp_real import NGRAM, TOKENS, launched, require_engine

from specsweep.cli import main as cli_main
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.results.store import load_result_set
from specsweep.servers.capture_bundle import read_bundle

pytestmark = pytest.mark.slow


def _final_figures(tail: list[str]) -> dict[str, Any]:
    """The usage and timings a recorded stream's last JSON events carry (the oracle: the engine's own)."""
    out: dict[str, Any] = {}
    for event in tail:
        data = event.strip().removeprefix("data: ")
        if data.startswith("{"):
            obj = json.loads(data)
            out.update({k: obj[k] for k in ("usage", "timings") if isinstance(obj.get(k), dict)})
    return out


def test_capture_then_replay_reproduces_the_engines_counts(tmp_path: Path) -> None:
    require_engine()
    bundle_path = tmp_path / "llamacpp.capture.json"
    with launched(tmp_path, "capture", *NGRAM) as srv:
        assert cli_main(["capture", "--endpoint", srv.url, "--out", str(bundle_path),
                         "--max-tokens", str(TOKENS)]) == 0
    bundle = read_bundle(bundle_path)
    assert bundle.dialect == "llamacpp" and {s.path for s in bundle.streams} == {"/v1/completions",
                                                                                   "/v1/chat/completions"}
    assert {("GET", "/props"), ("GET", "/v1/models"), ("POST", "/tokenize")} <= {(r.method, r.path) for r in bundle.routes}
    assert bundle.metrics_before and bundle.metrics_after and "llamacpp:" in bundle.metrics_after
    assert str(Path.home()) not in bundle_path.read_text() or str(Path.home()) == "/"
    captured = {s.path: _final_figures(s.tail) for s in bundle.streams}
    with RefServer(args=["--replay", str(bundle_path)]) as replay:
        res = run_sweep({"endpoint": replay.url, "arm": "replay", "concurrency": [1, 2], "output_tokens": TOKENS,
                         "workload": "builtin", "requests_per_level": 3, "warmup_requests": 0, "flush_cache": False,
                         "metrics_interval_s": 0.2, "out_dir": str(tmp_path / "runs")},
                        progress=False, log=lambda _: None)
    assert res.complete
    rs = load_result_set(res.run_dir)
    assert rs.meta.server["name"] == "llamacpp"
    figures = captured["/v1/chat/completions" if rs.meta.api == "openai-chat" else "/v1/completions"]
    req = rs.requests
    assert req is not None and len(req) == 6 and req["error"].isna().all()
    assert (req["output_tokens"] == figures["usage"]["completion_tokens"]).all()
    assert (req["prompt_tokens"] == figures["usage"]["prompt_tokens"]).all()
    timings = figures["timings"]
    if "draft_n" in timings:  # the engine drafted in the recorded stream: the replay's requests say the same
        assert (req["spec_draft_tokens"] == timings["draft_n"]).all()
        assert (req["spec_accepted_tokens"] == timings["draft_n_accepted"]).all()
