"""/server_info, /v1/models, /health, /metrics, headers, routes; cap and timing over a socket."""
from __future__ import annotations

import asyncio
import json
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
    assert info["disable_radix_cache"] is True  # the simulated engine keeps no prefix cache, and says so
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
    """Requests one after another, each 38 decode steps long, so the server idles between them.
    SGLang refreshes its gauges every 40th decode step since start (``forward_ct_decode %
    decode_log_interval``): the refreshes fall 2, 4, 6 … steps into the 2nd, 3rd, 4th … request
    and the gauge reads 1 for the rest of it; a counter that an idle spell resets would never
    reach 40 and the gauge would read 0 forever.

    One request at a time makes each busy spell exactly 38 steps however slowly the client sends
    (several at once spread out on a busy machine into longer spells and a smaller gauge)."""
    server = refserver_factory("off")
    seen: list[float] = []

    async def main() -> None:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            done = asyncio.Event()

            async def poll() -> None:
                while not done.is_set():
                    seen.append(_metric((await client.get("/metrics")).text, "sglang:num_running_reqs"))
                    await asyncio.sleep(0.002)

            poller = asyncio.create_task(poll())
            # the first token comes from the prefill step: 39 tokens are 38 decode steps
            body = {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 39, "ignore_eos": True}}
            for _ in range(12):
                await client.post("/generate", json=body)
            done.set()
            await poller

    asyncio.run(main())
    engine = httpx.get(server.url + "/server_info").json()["specsweep_refserver"]["engine"]
    assert engine["decode_steps"] == 12 * 38  # the spells really were 38 steps each
    assert max(seen) == 1.0, sorted(set(seen))


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


def _bucket(text: str, name: str, le: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "_bucket{") and f'le="{le}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} bucket le={le} not in /metrics")


def test_running_cap_and_queue_over_socket(refserver_factory) -> None:  # noqa: ANN001
    """Four requests at a cap of 2: two run at once, two queue until a slot frees.

    Judged on the server's own records, which no load on the machine changes: its queue-time
    histogram (admission − arrival, on its scheduled clock) and each request's ``e2e_latency``.
    The client's wall-clock TTFTs would not do: a CPU-bound job beside the test distorts them.
    """
    srv = refserver_factory("mtp", ["--max-running-requests", "2"])
    info = httpx.get(srv.url + "/server_info").json()
    assert info["max_running_requests"] == 2
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 2

    async def one(client: httpx.AsyncClient) -> dict:
        final: dict = {}
        async with client.stream("POST", srv.url + "/generate", json={
                "text": "go", "stream": True,
                "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: {"):
                    final = json.loads(line[len("data: "):])["meta_info"]
        return final

    async def main() -> list[dict]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(one(client) for _ in range(4)))

    metas = asyncio.run(main())
    assert [m["completion_tokens"] for m in metas] == [400] * 4
    text = httpx.get(srv.url + "/metrics").text
    name = "sglang:queue_time_seconds"
    assert _metric(text, name + "_count") == 4
    # two were admitted at once (waited less than a step or two), two waited for a slot: at least
    # a whole 400-token request, far longer than 0.05 s however slowly the client sent them
    assert _bucket(text, name, "0.05") == 2, text
    e2e = sorted(m["e2e_latency"] for m in metas)
    assert _metric(text, name + "_sum") >= 0.5 * (e2e[0] + e2e[1]), (e2e, _metric(text, name + "_sum"))


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


def test_real_time_closed_loop_agrees_with_the_virtual_simulator(refserver_factory) -> None:  # noqa: ANN001
    """The real-time engine runs the simulator's engine code on the server's own clock.

    The server queues what its cap (4) does not admit and starts each queued request the moment a
    slot frees, so 12 requests sent at once are a closed loop of 4 with no client in the loop; the
    server's ``e2e_latency`` is measured on its scheduled clock. Both are independent of how
    busy the machine is. The client's wall-clock throughput would not do: a CPU-bound job beside
    the test distorts it (wall-clock speed is a bench/ figure).
    """
    from specsweep.refserver.model import simulate_closed_loop
    from specsweep.refserver.profiles import load_profile

    cap, n, n_in, n_out = 4, 12, 50, 200
    server = refserver_factory("mtp", ["--max-running-requests", str(cap)])
    virtual = simulate_closed_loop(load_profile("tiny"), "mtp", n, n, n_in, n_out, max_running_requests=cap)

    async def main() -> tuple[float, list[dict]]:
        async with httpx.AsyncClient(timeout=120) as client:
            t0 = time.perf_counter()
            replies = await asyncio.gather(*(client.post(server.url + "/generate", json={
                "input_ids": [i] * n_in, "sampling_params": {"max_new_tokens": n_out, "ignore_eos": True}})
                for i in range(n)))
            return time.perf_counter() - t0, [r.json()["meta_info"] for r in replies]

    wall, metas = asyncio.run(main())
    engine = httpx.get(server.url + "/server_info").json()["specsweep_refserver"]["engine"]
    tokens = sum(m["completion_tokens"] for m in metas)
    assert tokens == n * n_out == virtual.total_output_tokens
    # the same acceptance draws (request seeds) through the same engine: the same verify steps
    assert sorted(m["spec_verify_ct"] for m in metas) == sorted(r.verify_ct for r in virtual.records)
    assert engine["generated_tokens"] == tokens
    # the server's clock: its window (every request sent at once, so the longest e2e) is the model's;
    # only the few ms over which the 12 requests arrived (a busy client sends them more slowly,
    # splitting the first prefill) separate them. A host stalled 0.25 s makes the engine resync its
    # clock to now, which can only lengthen the window.
    window = max(m["e2e_latency"] for m in metas)
    assert window > 0.95 * virtual.window_s, (window, virtual.window_s, engine)
    if not engine["clock_resyncs"]:
        assert window < 1.05 * virtual.window_s, (window, virtual.window_s, engine)
    # and no client sees its answer before the server's schedule says it is done
    assert wall >= window


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
