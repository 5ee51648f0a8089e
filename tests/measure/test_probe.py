"""Probe: llama.cpp detected as its own flavour, its settings and vocabulary recorded, its metrics
read — from recorded llama-server bodies served over a real socket, and against the reference
server's llamacpp surface; /tokenize counting on every surface."""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specsweep.measure.probe import (
    TokenCounter,
    acceptance_from_counters,
    counters,
    gauges,
    metric_names,
    parse_metrics,
    probe,
    spec_level_figures,
)
from specsweep.refserver.launch import RefServer
from specsweep.results.records import RequestRecord
from specsweep.servers.llamacpp import SPEC_TYPE_UNREPORTED, props_settings

FIXTURES = Path(__file__).parents[1] / "fixtures" / "llamacpp"
REAL = FIXTURES / "real-b1-0c1e570"


def _fixture_server(routes: dict[str, tuple[int, str, bytes]]) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            status, ctype, body = routes.get(self.path, (404, "application/json", b'{"error": "not found"}'))
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def _serve_recording(folder: Path) -> tuple[ThreadingHTTPServer, str]:
    """A socket answering GET /props, /slots, /v1/models and /metrics with a folder's recorded bodies."""
    js = "application/json; charset=utf-8"
    routes = {f"/{name}": (200, js, (folder / f"{name}.json").read_bytes()) for name in ("props", "slots")}
    routes["/v1/models"] = (200, js, (folder / "models.json").read_bytes())
    routes["/metrics"] = (200, "text/plain; version=0.0.4", (folder / "metrics.txt").read_bytes())
    return _fixture_server(routes)


@pytest.fixture
def recorded_llamacpp() -> Iterator[str]:
    """A socket answering with the llama-server bodies written for the tests (tests/fixtures/llamacpp)."""
    srv, url = _serve_recording(FIXTURES)
    yield url
    srv.shutdown()


def test_recorded_llamacpp_is_its_own_flavour_with_its_settings(recorded_llamacpp: str) -> None:
    info = probe(recorded_llamacpp)
    assert info.server == "llamacpp" and info.flavour == "openai-completions"
    assert info.flavours == ["openai-completions", "openai-chat"]
    assert info.model == "tiny-stories" and info.metrics is True and info.simulated is False
    assert info.vocab_size == 1403 and info.vocab_source == "/v1/models meta.n_vocab"
    snap = info.snapshot()
    assert snap["name"] == "llamacpp" and snap["version"] == "b6500-3f4e2c1"
    assert snap["parallel_slots"] == snap["max_running_requests"] == 4
    assert snap["context_length"] == 8192
    assert (snap["draft_max"], snap["draft_min"], snap["draft_p_min"]) == (16, 0, 0.75)
    assert snap["speculative_algorithm"] == "draft"  # /slots says the slots speculate
    assert snap["vocab_size"] == 1403
    assert snap["server_info"]["model_path"] == "/models/tiny-stories-1403.gguf"
    assert "chat_template" not in snap["server_info"]  # trimmed to what is needed


def test_llamacpp_settings_without_slots_endpoint() -> None:
    props = json.loads((FIXTURES / "props.json").read_text())
    out = props_settings(props, None)  # --no-slots: whether it speculates is unknown
    assert "speculative_algorithm" not in out and out["draft_max"] == 16
    no_spec = [{"id": 0, "speculative": False}]
    assert props_settings(props, no_spec)["speculative_algorithm"] is None
    # newer builds say the speculative types in /props instead of the draft limits
    params = props["default_generation_settings"]["params"]
    speculating = [{"id": 0, "n_ctx": 2048, "speculative": True, "is_processing": False}]  # a real b1-0c1e570 /slots
    for types, slots, algo in (("ngram-mod", None, "ngram-mod"), ("ngram-mod", speculating, "ngram-mod"),
                               ("none", speculating, SPEC_TYPE_UNREPORTED), ("none", no_spec, None)):
        newer = {**props, "default_generation_settings": {"n_ctx": 2048, "params": {
            k: v for k, v in {**params, "speculative.types": types}.items() if not k.startswith("speculative.n_")}}}
        out = props_settings(newer, slots)
        assert out["speculative_types"] == types and out["speculative_algorithm"] == algo and "draft_max" not in out
    # a real llama-server with --spec-type draft-simple says "none" in /props: without /slots, unknown
    newer = {**props, "default_generation_settings": {"n_ctx": 2048, "params": {"speculative.types": "none"}}}
    assert "speculative_algorithm" not in props_settings(newer, None)
    assert props_settings({"total_slots": "x"}, None) == {"total_slots": "x"}  # odd bodies: no crash


def test_recorded_llamacpp_metrics() -> None:
    samples = parse_metrics((FIXTURES / "metrics.txt").read_text())
    assert gauges(samples, "llamacpp") == {"running_requests": 3.0, "queued_requests": 2.0}
    c = counters(samples, "llamacpp")
    assert c["generation_tokens"] == 888 and c["prompt_tokens"] == 4242 and c["decode_calls"] == 111
    assert (c["spec_drafts"], c["spec_draft_tokens"], c["spec_accepted_tokens"]) == (150, 600, 450)
    assert [c[f"spec_accepted_pos_{i}"] for i in range(4)] == [140, 120, 100, 90]
    zero = {k: 0.0 for k in c}
    assert acceptance_from_counters(zero, c, "llamacpp") == pytest.approx(4.0)
    fig = spec_level_figures(zero, c)
    assert fig["spec_draft_acceptance_rate"] == pytest.approx(0.75)
    assert [fig[f"spec_accept_rate_pos_{i}"] for i in range(4)] == pytest.approx([140 / 150, 0.8, 100 / 150, 0.6])
    # 1 + Σ per-position rates is the acceptance length
    assert 1 + sum(fig[f"spec_accept_rate_pos_{i}"] for i in range(4)) == pytest.approx(4.0)
    assert spec_level_figures(c, c) == {}  # no movement, nothing claimed


#: an exposition with the shapes that could fool a line filter: a longer name sharing a wanted
#: prefix, label values holding blanks, braces, quotes and commas, comments naming wanted metrics,
#: leading blanks, a timestamp, a histogram, and a line of another metric no parser can read
TRICKY = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="a b{c}, \\"d\\""} 3.0
vllm:num_requests_running_max{engine="0"} 99.0
   vllm:num_requests_waiting{engine="0",model_name="m"} 2.0 1700000000000
vllm:num_requests_waitingX 7.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0"} 1234.0
vllm:generation_tokens_created{engine="0"} 1.7e9
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3"} 4.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 3.0
"""


def test_the_pollers_line_filter_keeps_exactly_the_samples_it_reads(
        refserver_mtp: RefServer, refserver_factory: Callable[..., RefServer]) -> None:
    """parse_metrics(text, names) returns what the whole parse returns for those names, on every
    exposition at hand (two recorded llama-server ones, the reference server's SGLang and vLLM
    surfaces, TRICKY), so the gauges and counters a level reads are the same; an unreadable line
    of a metric the poller does not read no longer costs the level its figures."""
    import httpx

    vllm = refserver_factory("mtp", ["--api-surface", "vllm"])
    texts = {"llamacpp": [(FIXTURES / "metrics.txt").read_text(), (REAL / "metrics.txt").read_text()],
             "sglang": [httpx.get(refserver_mtp.url + "/metrics").text],
             "vllm": [httpx.get(vllm.url + "/metrics").text, TRICKY]}
    for server, expositions in texts.items():
        for text in expositions:
            full = parse_metrics(text)
            for what in ("gauges", "counters"):
                names = metric_names(server, what)
                assert names, (server, what)
                assert parse_metrics(text, names) == [s for s in full if s[0] in names], (server, what, text[:80])
            assert gauges(parse_metrics(text, metric_names(server, "gauges")), server) == gauges(full, server)
            assert counters(parse_metrics(text, metric_names(server, "counters")), server) == counters(full, server)
    tricky = parse_metrics(TRICKY, metric_names("vllm", "gauges"))
    assert tricky == [("vllm:num_requests_running", {"engine": "0", "model_name": 'a b{c}, "d"'}, 3.0),
                      ("vllm:num_requests_waiting", {"engine": "0", "model_name": "m"}, 2.0)]
    assert counters(parse_metrics(TRICKY, metric_names("vllm", "counters")), "vllm") == {
        "generation_tokens": 1234.0, "spec_accepted_pos_0": 5.0, "spec_accepted_pos_1": 3.0}
    broken = TRICKY + "vllm:cache_config_info{block_size=16 1\n"
    with pytest.raises(ValueError):
        parse_metrics(broken)
    assert parse_metrics(broken, metric_names("vllm", "gauges")) == tricky
    assert parse_metrics(TRICKY, frozenset()) == []
    with pytest.raises(ValueError, match="gauges.*counters"):
        metric_names("vllm", "histograms")


def test_reference_llamacpp_surface_probes_like_the_recording(
        refserver_factory: Callable[..., RefServer]) -> None:
    srv = refserver_factory("mtp", ["--api-surface", "llamacpp", "--set", "model.vocab_size=1403",
                                    "--max-running-requests", "4"])
    info = probe(srv.url)
    assert info.server == "llamacpp" and info.simulated is True and info.vocab_size == 1403
    snap = info.snapshot()
    assert snap["parallel_slots"] == 4 and snap["speculative_algorithm"] == SPEC_TYPE_UNREPORTED  # /props says "none"
    assert snap["draft_max"] == 3 and snap["context_length"] == 32768
    base = refserver_factory("off", ["--api-surface", "llamacpp"])
    assert probe(base.url).snapshot()["speculative_algorithm"] is None


@pytest.mark.parametrize("surface", ["sglang", "vllm", "llamacpp"])
def test_token_counter_uses_each_servers_tokenize(refserver_factory: Callable[..., RefServer], surface: str) -> None:
    srv = refserver_factory("off", ["--api-surface", surface])
    info = probe(srv.url)
    counter = TokenCounter(info.base_url, info.server, info.model)
    try:
        assert counter.count(" tas vir sel") == 3
        recs = [RequestRecord(0.0, 1.0, output_tokens=1, token_source="chunks", output_text=" a b c d"),
                RequestRecord(0.0, 1.0, output_tokens=7, token_source="usage")]
        assert counter.recount(recs) == 1
        assert (recs[0].output_tokens, recs[0].token_source) == (4, "tokenize")
        assert (recs[1].output_tokens, recs[1].token_source) == (7, "usage")
    finally:
        counter.close()


def test_token_counter_without_tokenize_gives_up_once(recorded_llamacpp: str) -> None:
    counter = TokenCounter(recorded_llamacpp, "llamacpp", None)  # the recording has no /tokenize
    rec = RequestRecord(0.0, 1.0, output_tokens=2, token_source="chunks", output_text=" a b c")
    assert counter.recount([rec]) == 0 and rec.token_source == "chunks" and rec.output_tokens == 2
    assert counter.available is False and "/tokenize" in (counter.why or "")
    counter.close()


@pytest.fixture
def real_llamacpp() -> Iterator[str]:
    """A socket answering with bodies recorded from a real llama-server (see its README)."""
    srv, url = _serve_recording(REAL)
    yield url
    srv.shutdown()


def test_real_llama_server_recording(real_llamacpp: str) -> None:
    from specsweep.measure.client import RawExchange, error_message_from_body, parse_exchange
    from specsweep.workloads.prompts import explain_rejection, random_ids

    info = probe(real_llamacpp)
    snap = info.snapshot()
    assert info.server == "llamacpp" and info.vocab_size == 1403 and snap["version"] == "b1-0c1e570"
    assert snap["parallel_slots"] == 2 and snap["context_length"] == 2048
    # /props says speculative.types "none" although the server drafts; /slots says it does
    # (it was started with a draft model, but an n-gram drafter looks the same: never guess "draft")
    assert snap["speculative_types"] == "none" and snap["speculative_algorithm"] == SPEC_TYPE_UNREPORTED
    c = counters(parse_metrics((REAL / "metrics.txt").read_text()), "llamacpp")
    assert (c["spec_drafts"], c["spec_draft_tokens"], c["spec_accepted_tokens"]) == (22, 82, 0)
    assert acceptance_from_counters({k: 0.0 for k in c}, c, "llamacpp") == 1.0
    # the streamed response: usage and timings on the last content chunk
    raw = (REAL / "completions-stream.txt").read_bytes()
    rec = parse_exchange("openai-completions", RawExchange(t_sent=0.0, t_end=1.0, http_status=200,
                                                           content_type="text/event-stream", reads=[raw], times=[0.5]))
    assert rec.error is None and rec.output_tokens == 24 and rec.token_source == "usage"
    assert rec.server["spec_draft_tokens"] == 82 and rec.server["spec_accepted_tokens"] == 0
    assert rec.server["spec_accept_length"] == 1.0
    # the rejection of out-of-vocabulary IDs, and the cause named
    msg = "HTTP 400: " + error_message_from_body((REAL / "out-of-vocab.json").read_bytes())
    assert msg == "HTTP 400: Prompt contains invalid tokens"
    assert "vocabulary is probably smaller (it has 1,403)" in explain_rejection(msg, random_ids(8, 8), "sglang", 1403)
    assert len(json.loads((REAL / "tokenize.json").read_text())["tokens"]) == 9
