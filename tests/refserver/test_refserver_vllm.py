"""The vLLM API surface (``--api-surface vllm``) over a real socket: routes, /version, usage rules,
vLLM metric names, acceptance from the spec-decode counters, the cap, and specsweep's probe and
sweep against it."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from refserver_helpers import post, stream

from specsweep.measure.probe import ProbeError, probe
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.cli import main
from specsweep.refserver.launch import RefServer
from specsweep.refserver.profiles import load_profile
from specsweep.results.store import load_result_set

VLLM = ["--api-surface", "vllm"]
MODEL = "specsweep-sim/tiny"
Factory = Callable[..., RefServer]


def _metrics(url: str) -> dict[str, float]:
    """``/metrics`` as {name: value summed over label sets} (``_created`` series dropped)."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name = series.split("{", 1)[0]
        if not name.endswith("_created"):
            out[name] = out.get(name, 0.0) + float(value)
    return out


def test_routes_version_models_and_health(refserver_factory: Factory) -> None:
    url = refserver_factory(spec="mtp", args=[*VLLM, "--health-delay-s", "2"]).url
    for path in ("/server_info", "/get_server_info", "/model_info", "/get_model_info",
                 "/health_generate", "/ready", "/generate"):
        r = httpx.get(url + path)
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}, path
    r = httpx.post(url + "/generate", json={"text": "a b", "sampling_params": {"max_new_tokens": 4}})
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    r = httpx.get(url + "/version")
    assert r.status_code == 200
    version = r.json()["version"]
    assert version.startswith("0.33.0") and "simulated" in version
    assert r.headers["x-simulated"] == "true" and "vLLM" in r.headers["server"]
    (m,) = httpx.get(url + "/v1/models").json()["data"]
    assert m["id"] == MODEL and m["owned_by"] == "vllm" and m["simulated"] is True
    assert m["max_model_len"] == 32768
    r = httpx.get(url + "/health", timeout=5)
    assert r.status_code == 200 and r.content == b""
    assert r.elapsed.total_seconds() < 1.0  # instant: no health generation, no 2 s delay
    assert httpx.get(url + "/load").json() == {"server_load": 0}


def test_openai_semantics(refserver_factory: Factory) -> None:
    url = refserver_factory(args=VLLM).url
    comp, chat = url + "/v1/completions", url + "/v1/chat/completions"
    base = {"prompt": "one two three", "max_tokens": 8, "ignore_eos": True, "stream": True}
    cases = {  # (include_usage, continuous_usage_stats) -> (usage on content chunks, usage chunk)
        (False, False): (False, False),
        (True, False): (False, True),
        (False, True): (False, False),  # SGLang would send per-chunk usage here; vLLM needs both
        (True, True): (True, True),
    }
    for (inc, cont), (per_chunk, final) in cases.items():
        s = stream(comp, {**base, "stream_options": {"include_usage": inc,
                                                     "continuous_usage_stats": cont}})
        assert s.status == 200 and s.done
        content = [c for c in s.chunks if c["choices"]]
        usage_chunks = [c for c in s.chunks if not c["choices"]]
        assert "".join(c["choices"][0]["text"] for c in content)
        assert all((c.get("usage") is not None) == per_chunk for c in content), (inc, cont)
        if per_chunk:
            assert content[-1]["usage"]["completion_tokens"] == 8
        assert len(usage_chunks) == (1 if final else 0), (inc, cont)
        if final:
            assert usage_chunks[0]["usage"]["completion_tokens"] == 8
    s = stream(chat, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
                      "ignore_eos": True, "stream": True,
                      "stream_options": {"continuous_usage_stats": True}})
    assert s.done and all(c.get("usage") is None for c in s.chunks)
    # a model that is not served is a 404 (vLLM does not take "default"); extra keys are ignored
    for name in ("nope", "default"):
        r = post(comp, {**base, "stream": False, "model": name})
        assert r.status_code == 404
        assert r.json()["error"]["message"] == f"The model `{name}` does not exist."
    r = post(comp, {**base, "stream": False, "model": MODEL, "no_such_key": 1,
                    "priority": 0})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8


async def _open_streams(url: str, n: int, max_tokens: int) -> tuple[dict[str, float], int, int]:
    """Start ``n`` streams, scrape /metrics and /load once all have produced a chunk, finish."""
    body = {"prompt": [1, 2, 3, 4], "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    started = asyncio.Event()
    seen = 0
    limits = httpx.Limits(max_connections=n + 4)

    async def one(client: httpx.AsyncClient) -> int:
        nonlocal seen
        lines = 0
        async with client.stream("POST", url + "/v1/completions", json=body) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    lines += 1
                    if lines == 1:
                        seen += 1
                        if seen == n:
                            started.set()
        return lines

    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        tasks = [asyncio.create_task(one(client)) for _ in range(n)]
        await asyncio.wait_for(started.wait(), 20)
        # both read at once from another thread: a request queued on this loop behind n busy streams
        # can reach the server after most of them ended (on a loaded machine)
        metrics, load = await asyncio.to_thread(lambda: (_metrics(url), httpx.get(url + "/load").json()["server_load"]))
        await asyncio.gather(*tasks)
    return metrics, load, n


def test_metrics_are_live_and_the_cap_is_not_reset_to_48(refserver_factory: Factory) -> None:
    url = refserver_factory(spec="mtp", args=VLLM).url
    names = _metrics(url)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:request_success_total",
                 "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total",
                 "vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count",
                 "specsweep_refserver_info"):
        assert name in names, name
    assert not any(n.startswith("sglang:") for n in names)
    text = httpx.get(url + "/metrics").text
    assert 'engine="0"' in text and f'model_name="{MODEL}"' in text and 'simulated="true"' in text
    # 60 concurrent requests all run at once (SGLang would cap them at 48 under speculation),
    # and the gauges say so while they run, not only every 40 decode steps
    during, load, n = asyncio.run(_open_streams(url, 60, 300))
    assert during["vllm:num_requests_running"] == n
    assert during["vllm:num_requests_waiting"] == 0 and load == n
    assert 0 < during["vllm:kv_cache_usage_perc"] <= 1
    after = _metrics(url)
    assert after["vllm:num_requests_running"] == 0 and after["vllm:kv_cache_usage_perc"] == 0
    assert after["vllm:request_success_total"] == n
    assert after["vllm:generation_tokens_total"] == n * 300
    assert after["vllm:prompt_tokens_total"] == n * 4
    assert after["vllm:e2e_request_latency_seconds_count"] == n


def test_describe_keeps_the_non_spec_cap(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", "tiny", "--spec", "mtp", "--api-surface", "vllm", "--describe"]) == 0
    assert '"max_running_requests": 2048' in capsys.readouterr().out  # not 48
    assert main(["--profile", "tiny", "--spec", "mtp", "--api-surface", "vllm",
                 "--max-running-requests", "7", "--describe"]) == 0
    assert '"max_running_requests": 7' in capsys.readouterr().out


def test_acceptance_from_counter_deltas(refserver_factory: Factory) -> None:
    url = refserver_factory(spec="mtp", args=VLLM).url
    before = _metrics(url)

    async def run(n: int, tokens: int) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            bodies = [{"prompt": [i + 1, 7, 9], "max_tokens": tokens, "ignore_eos": True}
                      for i in range(n)]
            rs = await asyncio.gather(*(client.post(url + "/v1/completions", json=b) for b in bodies))
            assert all(r.status_code == 200 for r in rs)

    n, tokens = 8, 600
    asyncio.run(run(n, tokens))
    after = _metrics(url)
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    drafts = d["vllm:spec_decode_num_drafts_total"]
    accepted = d["vllm:spec_decode_num_accepted_tokens_total"]
    assert d["vllm:spec_decode_num_draft_tokens_total"] == 3 * drafts  # 3 draft steps (tiny)
    # every token is the prefill's, a verify step's bonus token, or an accepted draft
    assert d["vllm:generation_tokens_total"] == n * tokens == n + drafts + accepted
    assert d["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == accepted  # all positions
    mean = load_profile("tiny").speculative.mean_accept_length
    assert 1 + accepted / drafts == pytest.approx(mean, abs=0.1)  # ~2400 verify steps: s.e. ~0.02


def test_probe_detects_vllm_and_refuses_the_sglang_api(refserver_factory: Factory) -> None:
    url = refserver_factory(spec="mtp", args=VLLM).url
    info = probe(url)
    assert info.server == "vllm" and info.flavour == "openai-completions"
    assert info.flavours == ["openai-completions", "openai-chat"]
    assert info.model == MODEL and info.models == [MODEL]
    assert info.simulated is True and info.metrics is True
    assert info.version is not None and info.version.startswith("0.33.0")
    with pytest.raises(ProbeError) as err:
        probe(url, api="sglang")
    msg = str(err.value)
    assert "does not offer the 'sglang' API" in msg and "openai-completions, openai-chat" in msg


def test_sweep_takes_acceptance_from_vllm_counters(tmp_path: Path,
                                                    refserver_factory: Factory) -> None:
    url = refserver_factory(spec="mtp", args=VLLM).url
    res = run_sweep({"endpoint": url, "concurrency": [2], "input_tokens": 16, "output_tokens": 60,
                     "out_dir": str(tmp_path), "metrics_interval_s": 0.05},
                    progress=False, log=lambda s: None)
    assert res.complete and res.meta.server["name"] == "vllm"
    assert res.meta.api == "openai-completions"
    row = res.levels.iloc[0]
    assert row["spec_accept_length_source"] == "per-level counter deltas (/metrics)"
    assert row["spec_accept_length_formula"].startswith("1 + Δvllm:spec_decode_num_accepted_tokens")
    assert row["spec_accept_length_counters"] == row["spec_accept_length"]
    assert 1.5 <= row["spec_accept_length"] <= 3.0
    req = load_result_set(res.run_dir).requests
    measured = req[~req["warmup"]]
    assert measured["error"].isna().all() and (measured["output_tokens"] == 60).all()
    assert row["server_generation_tokens_delta"] == measured["output_tokens"].sum()
    assert row["server_generation_tokens_delta"] == row["output_tokens"]
    assert row["server_requests_delta"] == len(measured)
