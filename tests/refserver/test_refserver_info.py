"""/server_info, /v1/models, /health, /metrics, headers, routes; cap and timing over a socket."""
from __future__ import annotations

import asyncio
import time

import httpx
from refserver_helpers import post

from specsweep.refserver.launch import RefServer


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_server_info_spec(refserver_mtp: RefServer) -> None:
    post(refserver_mtp.url + "/generate", {"text": "a b", "sampling_params": {
        "max_new_tokens": 50, "ignore_eos": True}})
    for path in ("/server_info", "/get_server_info"):
        info = httpx.get(refserver_mtp.url + path).json()
        assert info["simulated"] is True and "simulated" in info["version"]
        assert info["version"].startswith("0.5.23")
        assert info["speculative_algorithm"] == "EAGLE"
        assert info["speculative_num_steps"] == 3
        assert info["speculative_eagle_topk"] == 1
        assert info["speculative_num_draft_tokens"] == 4
        assert info["max_running_requests"] == 48
        assert info["tp_size"] == 1
        assert info["max_total_num_tokens"] == 32000
        st = info["internal_states"][0]
        assert st["effective_max_running_requests_per_dp"] == 48
        assert 1.5 < st["avg_spec_accept_length"] < 2.6
        assert "last_gen_throughput" in st
        assert "--spec mtp" in info["launch_command"]


def test_server_info_baseline(refserver: RefServer) -> None:
    info = httpx.get(refserver.url + "/server_info").json()
    assert info["speculative_algorithm"] is None and info["speculative_num_steps"] is None
    assert info["max_running_requests"] is None  # unset without speculation, as SGLang
    st = info["internal_states"][0]
    assert "avg_spec_accept_length" not in st
    assert st["effective_max_running_requests_per_dp"] >= 2048


def test_models_health_ready_and_routes(refserver: RefServer) -> None:
    url = refserver.url
    models = httpx.get(url + "/v1/models").json()
    assert models["object"] == "list"
    (m,) = models["data"]
    assert m["id"] == "specsweep-sim/tiny" and m["owned_by"] == "sglang" and m["simulated"] is True
    assert httpx.get(url + "/version").status_code == 404  # SGLang has no /version
    r = httpx.get(url + "/nope")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    assert r.headers["x-simulated"] == "true" and "simulated" in r.headers["server"]
    t0 = time.perf_counter()
    assert httpx.get(url + "/health").status_code == 200
    assert time.perf_counter() - t0 >= 0.2  # --health-delay-s 0.2 in the fixtures
    assert httpx.get(url + "/health_generate").status_code == 200
    assert httpx.get(url + "/ready").status_code == 200
    info = httpx.get(url + "/model_info").json()
    assert info["is_generation"] is True and info["simulated"] is True


def test_running_gauge_moves_when_requests_finish_in_lockstep_before_40_steps(refserver_factory) -> None:  # noqa: ANN001
    """Without speculation, a closed loop of equal requests of 24 tokens finishes in lockstep and the
    server idles between rounds. SGLang refreshes its gauges every 40th decode step since start
    (``forward_ct_decode % decode_log_interval``), so within a few rounds a refresh falls mid-round;
    a counter that an idle spell resets would never reach 40 and the gauge would read 0 forever."""
    server = refserver_factory("off")
    seen: list[float] = []

    async def main() -> None:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            done = asyncio.Event()

            async def poll() -> None:
                while not done.is_set():
                    seen.append(_metric((await client.get("/metrics")).text, "sglang:num_running_reqs"))
                    await asyncio.sleep(0.005)

            poller = asyncio.create_task(poll())
            body = {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}}
            for _ in range(8):  # 8 rounds x 24 steps: the 40th, 80th, ... step falls inside a round
                await asyncio.gather(*(client.post("/generate", json=body) for _ in range(6)))
            done.set()
            await poller

    asyncio.run(main())
    assert max(seen) == 6.0, sorted(set(seen))


def test_metrics_names_and_counters(refserver_mtp: RefServer) -> None:
    url = refserver_mtp.url
    before = httpx.get(url + "/metrics").text
    n0 = _metric(before, "sglang:num_requests_total")
    g0 = _metric(before, "sglang:generation_tokens_total")
    post(url + "/generate", {"input_ids": [1, 2, 3, 4], "sampling_params": {
        "max_new_tokens": 120, "ignore_eos": True}})
    text = httpx.get(url + "/metrics").text
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput",
                 "sglang:token_usage", "sglang:num_used_tokens", "sglang:spec_accept_length",
                 "sglang:spec_accept_rate", "sglang:prompt_tokens_total",
                 "sglang:generation_tokens_total", "sglang:num_requests_total",
                 "sglang:spec_verify_calls_total", "sglang:time_to_first_token_seconds_bucket",
                 "sglang:e2e_request_latency_seconds_count", "specsweep_refserver_info"):
        assert name in text, name
    assert 'engine_type="unified"' in text and 'tp_rank="0"' in text
    assert 'specsweep_refserver_info{model_name="specsweep-sim/tiny",profile="tiny",simulated="true"' in text
    assert _metric(text, "sglang:num_requests_total") == n0 + 1
    assert _metric(text, "sglang:generation_tokens_total") == g0 + 120
    assert _metric(text, "sglang:spec_verify_calls_total") > 0
    # a windowed gauge (the last 40 decode steps of whatever traffic the shared server saw):
    # between 1 and steps + 1 = 4; its long-run mean is checked in test_refserver_model
    assert 1.0 < _metric(text, "sglang:spec_accept_length") <= 4.0
    assert _metric(text, "sglang:num_running_reqs") == 0  # idle again


def test_running_cap_and_queue_over_socket(refserver_factory) -> None:
    srv = refserver_factory("mtp", ["--max-running-requests", "2"])
    info = httpx.get(srv.url + "/server_info").json()
    assert info["max_running_requests"] == 2
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 2

    async def one(client: httpx.AsyncClient) -> tuple[float, float]:
        t0 = time.perf_counter()
        first = None
        async with client.stream("POST", srv.url + "/generate", json={
                "text": "go", "stream": True,
                "sampling_params": {"max_new_tokens": 150, "ignore_eos": True}}) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: {") and first is None:
                    first = time.perf_counter() - t0
        return first or 0.0, time.perf_counter() - t0

    async def main() -> list[tuple[float, float]]:
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(*(one(client) for _ in range(4)))

    results = sorted(asyncio.run(main()))
    (ttft_a, e2e_a), (ttft_b, e2e_b), (ttft_c, _), (ttft_d, _) = results
    # two run at once; the other two queue until the first ones finish
    assert ttft_c >= 0.8 * min(e2e_a, e2e_b) and ttft_d >= 0.8 * min(e2e_a, e2e_b)
    assert ttft_a < 0.5 * e2e_a


def test_real_time_follows_the_model(refserver: RefServer) -> None:
    # tiny: prefill ~0.5 ms + 1.8 ms per decode step at batch 1 -> 300 tokens ~0.55 s
    from specsweep.refserver.model import resolve
    from specsweep.refserver.profiles import load_profile

    cfg = resolve(load_profile("tiny"), False)
    expected = cfg.prefill_ms(3) / 1e3 + sum(cfg.decode_step_ms(1, 3 + i) for i in range(1, 300)) / 1e3
    body = post(refserver.url + "/generate", {"text": "one two three", "sampling_params": {
        "max_new_tokens": 300, "ignore_eos": True}}).json()
    e2e = body["meta_info"]["e2e_latency"]
    assert abs(e2e - expected) / expected < 0.05, (e2e, expected)


def test_real_time_closed_loop_agrees_with_the_virtual_simulator(refserver_mtp: RefServer) -> None:
    from specsweep.refserver.model import simulate_closed_loop
    from specsweep.refserver.profiles import load_profile

    conc, n, n_in, n_out = 4, 12, 50, 200
    virtual = simulate_closed_loop(load_profile("tiny"), "mtp", conc, n, n_in, n_out)

    async def main() -> tuple[float, int]:
        todo = list(range(n))
        tokens = 0

        async def worker(client: httpx.AsyncClient) -> None:
            nonlocal tokens
            while todo:
                i = todo.pop()
                r = await client.post(refserver_mtp.url + "/generate", json={
                    "input_ids": [i] * n_in,
                    "sampling_params": {"max_new_tokens": n_out, "ignore_eos": True}})
                tokens += r.json()["meta_info"]["completion_tokens"]

        async with httpx.AsyncClient(timeout=30) as client:
            t0 = time.perf_counter()
            await asyncio.gather(*(worker(client) for _ in range(conc)))
            return time.perf_counter() - t0, tokens

    window, tokens = asyncio.run(main())
    assert tokens == n * n_out
    # same engine code: aggregate tok/s within 15 % (client round trips and acceptance draws differ)
    assert abs((tokens / window) / virtual.output_tok_s - 1) < 0.15, (tokens / window, virtual.output_tok_s)


def test_client_disconnect_frees_the_slot(refserver_factory) -> None:
    srv = refserver_factory("off", ["--max-running-requests", "1"])
    with httpx.Client(timeout=10) as client:
        with client.stream("POST", srv.url + "/generate", json={
                "text": "x", "stream": True,
                "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True}}) as resp:
            next(resp.iter_lines())
    # the abandoned request is aborted at its next chunk, so the only slot is free again
    t0 = time.perf_counter()
    body = post(srv.url + "/generate", {"text": "y", "sampling_params": {
        "max_new_tokens": 5, "ignore_eos": True}}).json()
    assert body["meta_info"]["completion_tokens"] == 5
    assert time.perf_counter() - t0 < 2.0
