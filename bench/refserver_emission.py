"""Emission benchmark: does the reference server emit chunks on schedule under load?

Starts the server (``--emit-log``, so it records, for every chunk it writes, the scheduled end
of the engine step that produced it and the ``perf_counter`` time just before the write), pinned
to one core with ``taskset``, and drives it from this process, pinned to the other core, with a
lean aiohttp client: ``--concurrency`` closed-loop streaming clients for ``--duration-s`` seconds
(then in-flight requests finish). It prints the emit lag (actual - scheduled write time)
p50/p90/p99/p99.9/max in ms, the late-step counters, the server's CPU use and the achieved
output tok/s (tokens of finished requests / window).

Default scenario: the seed profile, baseline, 128 clients, 1000-token prompts and 1000 output
tokens with ignore_eos on SGLang's native ``/generate`` (cumulative text: the heaviest chunks),
i.e. the seed's C=128 workload at ~2,800 tok/s with ~100 streams decoding at once.

    .venv/bin/python bench/refserver_emission.py [--api sglang|completions|chat]
        [--concurrency 128] [--duration-s 40] [--input-tokens 1000] [--output-tokens 1000]
        [--profile NAME] [--spec off|mtp] [--server-cpu 0] [--client-cpu 1]
        [--server-arg=--set --server-arg=memory.max_total_num_tokens=400000 ...]

Environment: ``KEEP_EMIT_LOG=path.npy`` keeps the raw (scheduled, actual) pairs;
``SHOW_SERVER_STDERR=1`` prints the server's stderr (with ``--server-arg=--log-level
--server-arg=info`` it logs every step that woke more than 2 ms late).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

from specsweep.refserver.launch import RefServer


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _payload(api: str, i: int, n_in: int, n_out: int) -> tuple[str, dict]:
    ids = [(i * 7919 + k * 104729) % 150000 for k in range(n_in)]
    if api == "sglang":
        return "/generate", {"input_ids": ids, "stream": True, "sampling_params": {
            "max_new_tokens": n_out, "ignore_eos": True, "temperature": 0}}
    if api == "completions":
        return "/v1/completions", {"prompt": ids, "max_tokens": n_out, "ignore_eos": True,
                                   "stream": True, "stream_options": {
                                       "include_usage": True, "continuous_usage_stats": True}}
    words = " ".join(f"w{(i + k) % 977}" for k in range(max(1, n_in - 10)))
    return "/v1/chat/completions", {"messages": [{"role": "user", "content": words}],
                                    "max_tokens": n_out, "ignore_eos": True, "stream": True,
                                    "stream_options": {"include_usage": True}}


async def _client(url: str, api: str, conc: int, duration: float, n_in: int, n_out: int
                  ) -> dict[str, float]:
    counter = iter(range(10**9))
    finished_tokens = 0
    done = 0
    failed = 0
    t_first: float | None = None
    t_last = 0.0
    stop_at = time.perf_counter() + duration

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal finished_tokens, done, failed, t_first, t_last
        while time.perf_counter() < stop_at:
            path, body = _payload(api, next(counter), n_in, n_out)
            t0 = time.perf_counter()
            if t_first is None:
                t_first = t0
            tail = b""
            try:
                async with session.post(url + path, json=body) as resp:
                    async for chunk in resp.content.iter_any():
                        tail = (tail + chunk)[-65536:]
            except aiohttp.ClientError:
                failed += 1
                continue
            if not tail.endswith(b"data: [DONE]\n\n"):
                failed += 1
                continue
            events = tail.split(b"\n\n")
            last = [e for e in events if e.startswith(b"data: {")][-1][6:]
            obj = json.loads(last)
            if api == "sglang":
                n = obj["meta_info"]["completion_tokens"]
            else:
                n = obj["usage"]["completion_tokens"]
            finished_tokens += n
            done += 1
            t_last = time.perf_counter()

    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(conc)))
    window = t_last - (t_first or t_last)
    return {"requests": done, "failed": failed, "tokens": finished_tokens, "window_s": window,
            "tok_s": finished_tokens / window if window else 0.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="qwen3.5-122b-a10b-4x-rtxpro6000")
    p.add_argument("--spec", default="off", choices=("off", "mtp"))
    p.add_argument("--api", default="sglang", choices=("sglang", "completions", "chat"))
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--duration-s", type=float, default=40.0)
    p.add_argument("--input-tokens", type=int, default=1000)
    p.add_argument("--output-tokens", type=int, default=1000)
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra server argument (repeat; use --server-arg=--flag for flags)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    pin = shutil.which("taskset") is not None and (os.cpu_count() or 1) > max(
        args.server_cpu, args.client_cpu)
    if pin:
        os.sched_setaffinity(0, {args.client_cpu})
    tmp = Path(tempfile.mkdtemp(prefix="refserver-emit-"))
    log_path = tmp / "emit.npy"
    server_args = ["--emit-log", str(log_path), "--health-delay-s", "0", *args.server_arg]
    srv = RefServer(args.profile, args.spec, server_args, cpu=args.server_cpu if pin else None,
                    stop_timeout_s=30)
    srv.start()
    assert srv.process is not None and srv.url is not None
    pid = srv.process.pid
    try:
        cpu0, wall0 = _cpu_seconds(pid), time.perf_counter()
        stats = asyncio.run(_client(srv.url, args.api, args.concurrency, args.duration_s,
                                    args.input_tokens, args.output_tokens))
        cpu1, wall1 = _cpu_seconds(pid), time.perf_counter()
        import httpx

        info = httpx.get(srv.url + "/server_info", timeout=10).json()
    finally:
        srv.stop()
    if os.environ.get("SHOW_SERVER_STDERR"):
        print(srv.stderr_text(), file=sys.stderr)
    arr = np.load(log_path)
    lag_ms = (arr[:, 1] - arr[:, 0]) * 1e3
    eng = info["specsweep_refserver"]["engine"]
    pct = {q: float(np.percentile(lag_ms, q)) for q in (50, 90, 99, 99.9)}
    result = {
        "profile": args.profile, "spec": args.spec, "api": args.api,
        "concurrency": args.concurrency, "input_tokens": args.input_tokens,
        "output_tokens": args.output_tokens, "pinned": pin,
        "chunks": int(lag_ms.size),
        "lag_ms": {"p50": pct[50], "p90": pct[90], "p99": pct[99], "p99.9": pct[99.9],
                   "max": float(lag_ms.max()), "mean": float(lag_ms.mean())},
        "engine": eng,
        "server_cpu_fraction": (cpu1 - cpu0) / (wall1 - wall0),
        "client": stats,
        "chunks_per_s": float(lag_ms.size / (arr[-1, 0] - arr[0, 0])) if lag_ms.size > 1 else 0.0,
    }
    if os.environ.get("KEEP_EMIT_LOG"):
        shutil.copy(log_path, os.environ["KEEP_EMIT_LOG"])
    shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"server: {args.profile} spec={args.spec} api={args.api}"
          f" {'pinned to cpu ' + str(args.server_cpu) if pin else 'not pinned'}; client "
          f"{'on cpu ' + str(args.client_cpu) if pin else 'not pinned'}, {args.concurrency} "
          f"streams, {args.input_tokens} in / {args.output_tokens} out")
    print(f"achieved: {stats['tok_s']:.0f} output tok/s over {stats['window_s']:.1f} s "
          f"({stats['requests']} requests, {stats['failed']} failed); "
          f"{result['chunks_per_s']:.0f} chunks/s written")
    lag = result["lag_ms"]
    print(f"emit lag (actual - scheduled write), {result['chunks']} chunks: "
          f"p50 {lag['p50']:.3f} ms  p90 {lag['p90']:.3f}  p99 {lag['p99']:.3f}  "
          f"p99.9 {lag['p99.9']:.3f}  max {lag['max']:.3f}  mean {lag['mean']:.3f}")
    print(f"engine: {eng['steps']} steps, {eng['late_steps_over_1ms']} woke >1 ms late, "
          f"worst step wake-up lag {eng['max_step_lag_ms']} ms, clock resyncs "
          f"{eng['clock_resyncs']}; server CPU {result['server_cpu_fraction'] * 100:.0f} % of "
          f"one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
