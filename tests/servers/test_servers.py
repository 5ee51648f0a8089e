"""The server registry: one dialect per server the probe can tell apart, detection from canned
answers, each dialect's acceptance length from hand-computed counter deltas, and the generic
OpenAI dialect for any server it does not know."""
from __future__ import annotations

from typing import Any

import pytest

import specsweep.servers as servers
from specsweep.refserver.state import API_SURFACES
from specsweep.servers import DIALECTS, detect, dialect_of, owner

pytestmark = pytest.mark.fast  # no server, socket or subprocess

#: the names ServerProbe.server takes (and meta.json's server.name keeps)
PROBED = {"sglang", "vllm", "trtllm", "llamacpp", "openai-compatible"}


def test_the_registry_covers_every_server_the_probe_can_detect() -> None:
    assert set(DIALECTS) == PROBED
    assert set(API_SURFACES) <= set(DIALECTS)  # every surface the reference server simulates
    for name, dialect in DIALECTS.items():
        assert dialect.name == name and dialect.label
        assert dialect.flavours[0] == ("sglang" if name == "sglang" else "openai-completions")
    # every dialect but the fallback has a way to be recognised
    assert all(d.signs or d.owned_by for n, d in DIALECTS.items() if n != "openai-compatible")


def test_the_package_exports_only_public_names() -> None:
    assert all(not name.startswith("_") and hasattr(servers, name) for name in servers.__all__)


def _fetcher(answers: dict[str, Any]) -> tuple[list[str], Any]:
    asked: list[str] = []

    def fetch(path: str) -> Any:
        asked.append(path)
        return answers.get(path)

    return asked, fetch


@pytest.mark.parametrize(("answers", "owned_by", "expected", "asked"), [
    ({"/server_info": {"version": "0.5.9"}}, None, "sglang", ["/server_info", "/version"]),
    ({"/get_server_info": {}}, None, "sglang", ["/server_info", "/get_server_info", "/version"]),
    # a vLLM in dev mode answers /server_info too; /version says vLLM
    ({"/server_info": {}, "/version": {"version": "0.11.0"}}, None, "vllm", ["/server_info", "/version"]),
    ({"/version": {"no": "version"}}, None, "openai-compatible",
     ["/server_info", "/get_server_info", "/version", "/props"]),
    ({"/props": {"total_slots": 4}}, "llamacpp", "llamacpp", ["/server_info", "/get_server_info", "/version", "/props"]),
    ({"/props": {"default_generation_settings": {}}}, None, "llamacpp",
     ["/server_info", "/get_server_info", "/version", "/props"]),
    ({}, "llamacpp", "llamacpp", ["/server_info", "/get_server_info", "/version", "/props"]),
    ({}, "vllm", "vllm", ["/server_info", "/get_server_info", "/version", "/props"]),
    ({"/props": {"total_slots": 4}}, "vllm", "vllm", ["/server_info", "/get_server_info", "/version", "/props"]),
    ({"/server_info": {}}, "llamacpp", "sglang", ["/server_info", "/version"]),  # owned_by does not overrule SGLang
    # trtllm-serve answers SGLang's /server_info and vLLM's /version; its owned_by overrules both
    ({"/server_info": {}, "/version": {"version": "1.2.0rc2"}}, "tensorrt_llm", "trtllm", ["/server_info", "/version"]),
    ({"/props": {"unrelated": 1}}, "someone", "openai-compatible",
     ["/server_info", "/get_server_info", "/version", "/props"]),
])
def test_detection_from_canned_answers(answers: dict[str, Any], owned_by: str | None, expected: str,
                                       asked: list[str]) -> None:
    seen, fetch = _fetcher(answers)
    found_dialect, found = detect(fetch)
    assert owner(found_dialect, owned_by).name == expected
    assert seen == asked
    assert set(found) <= set(answers)


def _deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before if k in after}


def test_acceptance_from_hand_computed_counter_deltas() -> None:
    # SGLang: Δgeneration tokens / Δverify calls = (1600 - 1000) / (300 - 100) = 3
    sg = _deltas({"generation_tokens": 1000.0, "spec_verify_calls": 100.0},
                 {"generation_tokens": 1600.0, "spec_verify_calls": 300.0})
    assert dialect_of("sglang").acceptance(sg) == pytest.approx(3.0)
    # vLLM: 1 + Δaccepted / Δdrafts = 1 + (110 - 50) / (80 - 40) = 2.5
    vl = _deltas({"spec_drafts": 40.0, "spec_accepted_tokens": 50.0, "generation_tokens": 9.0},
                 {"spec_drafts": 80.0, "spec_accepted_tokens": 110.0, "generation_tokens": 99.0})
    assert dialect_of("vllm").acceptance(vl) == pytest.approx(2.5)
    # llama.cpp: the same formula over its verification steps: 1 + 450 / 150 = 4
    lc = _deltas({"spec_drafts": 0.0, "spec_accepted_tokens": 0.0}, {"spec_drafts": 150.0, "spec_accepted_tokens": 450.0})
    assert dialect_of("llamacpp").acceptance(lc) == pytest.approx(4.0)
    # a formula of the other kind reads nothing from these deltas; no movement, nothing claimed
    assert dialect_of("sglang").acceptance(vl) is None and dialect_of("vllm").acceptance(sg) is None
    assert dialect_of("vllm").acceptance({"spec_drafts": 0.0, "spec_accepted_tokens": 0.0}) is None
    assert dialect_of("openai-compatible").acceptance(sg) is None and dialect_of("openai-compatible").acceptance(vl) is None
    for name in ("sglang", "vllm", "llamacpp"):
        assert dialect_of(name).acceptance_formula.startswith(("Δ", "1 + Δ"))
        assert set(dialect_of(name).acceptance_formula.replace("Δ", " ").split()) & {
            n.removesuffix("_total") for n in dialect_of(name).counters.values()}


def test_an_unknown_server_gets_the_generic_openai_dialect() -> None:
    generic = DIALECTS["openai-compatible"]
    for name in ("tensorrt_llm", "", "llama.cpp", "SGLang"):
        assert dialect_of(name) is generic
    assert generic.spec_request_options("openai-chat") == {}  # it may reject a field it does not know
    assert generic.flush_routes is None and not generic.counters and not generic.gauges
    assert generic.tokenize_body("a b", "m") == {"prompt": "a b", "add_special_tokens": False, "model": "m"}
    assert servers.FLUSH_ROUTES == ("/flush_cache", "/reset_prefix_cache")


def test_request_options_and_figure_keys_per_server() -> None:
    assert dialect_of("sglang").spec_request_options("openai-chat") == {"return_spec_tokens_details": True}
    assert dialect_of("sglang").spec_request_options("sglang") == {}  # /generate always sends meta_info
    assert dialect_of("vllm").spec_request_options("openai-completions") == {}  # a server flag, not a field
    assert {key for key, _ in servers.CHUNK_FIGURES} == {"sglext", "metrics", "timings"}
    assert dialect_of("llamacpp").tokenize_body("x", "m") == {"content": "x", "add_special": False}
    server: dict[str, float] = {}
    dict(servers.CHUNK_FIGURES)["timings"]({"draft_n": 10, "draft_n_accepted": 6, "predicted_n": 16}, server)
    # 16 tokens in 16 - 6 = 10 target forwards
    assert server["spec_verify_ct"] == 10 and server["spec_accept_length"] == pytest.approx(1.6)
    assert server["spec_draft_acceptance_rate"] == pytest.approx(0.6)
