"""What a sweep does differently against llama.cpp (the reference server's llama.cpp surface over
real sockets): conversational prompts go to the chat route when the model has a template, and the
prompt cache is handled and said, never left silent."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specsweep.measure.sweep import run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.results.meta import Meta
from specsweep.results.store import load_result_set

SURFACE = ["--api-surface", "llamacpp", "--set", "model.vocab_size=1403"]


def _run(url: str, out: Path, arm: str, **kw: object) -> Meta:
    res = run_sweep({"endpoint": url, "arm": arm, "concurrency": [1], "input_tokens": 32, "output_tokens": 16,
                     "requests_per_level": 2, "warmup_requests": 0, "out_dir": str(out), **kw},
                    progress=False, log=lambda _: None)
    assert res.complete
    return load_result_set(res.run_dir).meta


def test_builtin_prompts_go_to_chat_where_the_model_has_a_template(
        tmp_path: Path, refserver_factory: Callable[..., RefServer]) -> None:
    srv = refserver_factory("off", SURFACE)  # its /props has a chat_template
    meta = _run(srv.url, tmp_path, "chat", workload="builtin")
    assert meta.api == "openai-chat" and "chat template" in meta.api_chosen_by
    assert meta.server["has_chat_template"] is True
    # not conversational, or the API given: the flavour stays as probed or asked
    assert _run(srv.url, tmp_path, "text", workload="random-text").api == "openai-completions"
    given = _run(srv.url, tmp_path, "given", workload="builtin", api="openai-completions")
    assert given.api == "openai-completions" and given.api_chosen_by is None


def test_a_text_prompt_file_goes_to_chat_where_the_model_has_a_template_token_ids_do_not(
        tmp_path: Path, refserver_factory: Callable[..., RefServer]) -> None:
    srv = refserver_factory("off", SURFACE)  # its /props has a chat_template
    text = tmp_path / "text.jsonl"
    text.write_text('{"prompt": "Repeat the following text exactly: the river runs past the mill."}\n'
                    '{"prompt": "List the days of the week."}\n')
    meta = _run(srv.url, tmp_path, "file", workload=str(text))
    assert meta.api == "openai-chat" and "chat template" in meta.api_chosen_by
    ids = tmp_path / "ids.jsonl"
    ids.write_text('{"input_ids": [101, 202, 303, 404]}\n{"input_ids": [111, 222, 333]}\n')
    assert _run(srv.url, tmp_path, "ids", workload=str(ids)).api == "openai-completions"


def test_the_prompt_cache_is_handled_and_said(tmp_path: Path, refserver_factory: Callable[..., RefServer]) -> None:
    srv = refserver_factory("off", SURFACE)  # no slot erase here: the sweep falls back and says so
    meta = _run(srv.url, tmp_path, "flushed", workload="random-text", flush_cache=True)
    assert meta.prefix_cache_flush.startswith("cache_prompt: false on every request (slot erase refused: ")
    meta = _run(srv.url, tmp_path, "kept", workload="random-text", flush_cache=False)
    assert "prefix_cache_flush" not in meta
    assert any("llama.cpp keeps each slot's prompt cache across levels" in w for w in meta.warnings)
