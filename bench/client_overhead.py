#!/usr/bin/env python3
"""How fast and how accurately the streaming client ingests SSE, side by side with reference clients.

For every scenario (C concurrent streams × K tokens per chunk, unpaced or paced) and every client
variant, a fresh ``bench/fastsse_server.py`` runs pinned to one core and the client pinned to another
(``taskset``). The server logs when it wrote each token-carrying chunk; clients record when they
received it; the two are joined by request id. Printed per row:

- ``tok/s``: output tokens the client received per second over the steady window (from the send of
  request C to the send of the last request: all C slots busy);
- ``cores``: client CPU seconds per wall second in that window (psutil, whole process tree, 0.1 s
  samples); ``CPU s/1k tok``: client CPU seconds per 1,000 tokens in that window;
- ``lag p50/p99``: client receive time − server write time per chunk (ms). Meaningful when paced;
  unpaced, the server runs ahead and the lag is mostly queueing in socket buffers;
- ``in flight``: Σ request durations / run window (mean concurrency the client achieved);
- ``srv cores``: the server's CPU use in the window (near 1.0 = the server may be the limit);
- ``parse s/1k``: CPU seconds specsweep spends per 1,000 tokens decoding SSE/JSON after the level
  (outside the measuring loop, so it cannot delay timestamps);
- ``TTFT p50/p99``: first token-carrying chunk − request sent, as the client reports it (the
  server sends the first chunk at once, so this is client dispatch delay plus lag);
- ``other cores``: CPU used by everything else on the machine in the window (runs above
  ``--max-other`` are redone: the machine is shared);
- ``tokens``: client-counted tokens ÷ tokens the server sent (1.000 = exact accounting).

Clients: ``null`` (raw asyncio socket, no parsing: the server's ceiling against a reader that is
always waiting — each write then wakes the reader, the costliest pattern for the server, so a
client that reads in batches can go faster than this row; check ``srv cores`` < 1 instead),
``ref-httpx-lines``
(plain httpx ``aiter_lines`` + ``json``), ``ref-aiohttp-any`` (plain aiohttp ``iter_any`` + split +
``json``, like vLLM's bench client), and ``ss:<transport>:<read>:<loop>:w<N>`` = specsweep's
``loadgen`` with that transport (aiohttp | httpx | httpx-aiohttp), read path (raw | bytes | stream;
``readany``: raw over aiohttp without the tap, the reading task woken per read, ``SPECSWEEP_READ_PATH=readany``),
loop (uvloop | asyncio) and number of worker processes.

Run from the repository root::

    .venv/bin/python bench/client_overhead.py                  # all scenarios, default clients
    .venv/bin/python bench/client_overhead.py --scenarios u-k1-c64 p20-k1-c256 --reps 3
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

HERE = Path(__file__).resolve().parent
SERVER = HERE / "fastsse_server.py"

DEFAULT_CLIENTS = [
    "null",
    "ref-httpx-lines",
    "ref-aiohttp-any",
    "ss:httpx:raw:uvloop:w1",
    "ss:httpx-aiohttp:raw:uvloop:w1",
    "ss:aiohttp:raw:asyncio:w1",
    "ss:aiohttp:bytes:uvloop:w1",
    "ss:aiohttp:stream:uvloop:w1",
    "ss:aiohttp:raw:uvloop:w2",
    "ss:aiohttp:raw:uvloop:w1",
]


@dataclass(frozen=True)
class Scenario:
    name: str
    concurrency: int
    k: int
    itl_ms: float
    max_tokens: int
    n_requests: int


def scenario(name: str) -> Scenario:
    """``u-k1-c64`` (unpaced) or ``p20-k4-c256`` (paced, 20 ms between chunks)."""
    pace, k, c = name.split("-")
    conc, kk = int(c[1:]), int(k[1:])
    if pace == "u":
        max_tokens = 512
        n = max(4 * conc, math.ceil(400_000 / max_tokens))
        return Scenario(name, conc, kk, 0.0, max_tokens, n)
    if pace.startswith("p"):
        itl = float(pace[1:])
        max_tokens = 256 * kk
        return Scenario(name, conc, kk, itl, max_tokens, 2 * conc)
    raise ValueError(f"scenario must look like u-k1-c64 or p20-k1-c256; got {name!r}")


DEFAULT_SCENARIOS = ["u-k1-c64", "u-k1-c256", "u-k4-c64", "u-k4-c256",
                     "p20-k1-c64", "p20-k1-c256", "p20-k4-c64", "p20-k4-c256"]


# ==================================================================================================
# client side (runs in its own pinned process: --run-client)
# ==================================================================================================

def _body(i: int, max_tokens: int) -> dict[str, Any]:
    return {"model": "fastsse", "prompt": [1, 2, 3, 4], "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "stream": True, "rid": i,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


class _Out:
    """Per-request results every client variant produces."""

    def __init__(self, n: int) -> None:
        self.t_sent = [0.0] * n
        self.t_end = [0.0] * n
        self.times: list[list[float]] = [[] for _ in range(n)]
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.errors = 0

    def dump(self) -> dict[str, Any]:
        return {"t_sent": self.t_sent, "t_end": self.t_end, "times": self.times, "tokens": self.tokens,
                "errors": self.errors}


async def _closed_loop(n: int, conc: int, one: Any) -> None:
    it = iter(range(n))

    async def slot() -> None:
        for i in it:
            await one(i)

    await asyncio.gather(*(slot() for _ in range(conc)))


def run_null(url: str, conc: int, n: int, max_tokens: int) -> dict[str, Any]:
    """Raw asyncio sink: sends requests, counts bytes, finds the end of each chunked body."""
    import uvloop

    host, port = url.split("//", 1)[1].split(":")
    out = _Out(n)
    reqs = []
    for i in range(n):
        body = json.dumps(_body(i, max_tokens)).encode()
        reqs.append(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (host.encode(), len(body), body))

    class Sink(asyncio.Protocol):
        def __init__(self, take: Any, finished: asyncio.Future[None]) -> None:
            self.take, self.finished = take, finished
            self.tail = b""
            self.i = -1

        def connection_made(self, tr: Any) -> None:
            self.tr = tr
            self.next()

        def next(self) -> None:
            i = self.take()
            if i is None:
                self.tr.close()
                if not self.finished.done():
                    self.finished.set_result(None)
                return
            self.i = i
            self.tail = b""
            out.t_sent[i] = perf_counter()
            self.tr.write(reqs[i])

        def data_received(self, data: bytes) -> None:
            tail = (self.tail + data)[-5:]
            self.tail = tail
            if tail == b"0\r\n\r\n":
                out.t_end[self.i] = perf_counter()
                self.next()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        it = iter(range(n))
        futs = []
        for _ in range(conc):
            f: asyncio.Future[None] = loop.create_future()
            futs.append(f)
            await loop.create_connection(lambda f=f: Sink(lambda: next(it, None), f), host, int(port))
        await asyncio.gather(*futs)

    uvloop.run(main())
    out.times = []
    out.tokens = []
    return out.dump()


def run_ref_httpx(url: str, conc: int, n: int, max_tokens: int) -> dict[str, Any]:
    """Plain httpx client: default transport, asyncio loop, ``aiter_lines`` + ``json.loads``."""
    import httpx

    out = _Out(n)

    async def main() -> None:
        limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
            async def one(i: int) -> None:
                times, toks = out.times[i], out.tokens[i]
                last = 0
                out.t_sent[i] = perf_counter()
                try:
                    async with client.stream("POST", "/v1/completions", json=_body(i, max_tokens)) as r:
                        async for line in r.aiter_lines():
                            t = perf_counter()
                            if not line.startswith("data:"):
                                continue
                            data = line[5:].strip()
                            if data == "[DONE]":
                                break
                            usage = json.loads(data).get("usage")
                            if usage and usage["completion_tokens"] > last:
                                times.append(t)
                                toks.append(usage["completion_tokens"] - last)
                                last = usage["completion_tokens"]
                except Exception:
                    out.errors += 1
                out.t_end[i] = perf_counter()

            await _closed_loop(n, conc, one)

    asyncio.run(main())
    return out.dump()


def run_ref_aiohttp(url: str, conc: int, n: int, max_tokens: int) -> dict[str, Any]:
    """Plain aiohttp client (as vLLM's bench client): asyncio loop, ``iter_any``, split events, json."""
    import aiohttp

    out = _Out(n)

    async def main() -> None:
        conn = aiohttp.TCPConnector(limit=conc)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as s:
            async def one(i: int) -> None:
                times, toks = out.times[i], out.tokens[i]
                last = 0
                buf = ""
                out.t_sent[i] = perf_counter()
                try:
                    async with s.post(url + "/v1/completions", json=_body(i, max_tokens)) as r:
                        async for chunk in r.content.iter_any():
                            t = perf_counter()
                            buf += chunk.decode("utf-8")
                            while "\n\n" in buf:
                                ev, buf = buf.split("\n\n", 1)
                                data = ev[5:].strip() if ev.startswith("data:") else ""
                                if not data or data == "[DONE]":
                                    continue
                                usage = json.loads(data).get("usage")
                                if usage and usage["completion_tokens"] > last:
                                    times.append(t)
                                    toks.append(usage["completion_tokens"] - last)
                                    last = usage["completion_tokens"]
                except Exception:
                    out.errors += 1
                out.t_end[i] = perf_counter()

            await _closed_loop(n, conc, one)

    asyncio.run(main())
    return out.dump()


def run_specsweep(variant: str, url: str, conc: int, n: int, max_tokens: int) -> dict[str, Any]:
    """specsweep's loadgen: ``ss:<transport>:<read>:<loop>:w<N>``."""
    _, transport, read, loop, w = variant.split(":")
    if read == "readany":  # the aiohttp transport's read path without the tap (read at import: set it first)
        os.environ["SPECSWEEP_READ_PATH"], read = "readany", "raw"
    sys.path.insert(0, str(HERE.parent / "lib"))
    from specsweep.measure import client as _client
    from specsweep.measure.loadgen import run_level

    assert _client._READANY == (os.environ.get("SPECSWEEP_READ_PATH") == "readany"), "specsweep imported too early"
    bodies = [_body(i, max_tokens) for i in range(n)]
    res = run_level(url, "openai-completions", bodies, conc, workers=int(w[1:]), transport=transport,  # type: ignore[arg-type]
                    read=read, use_uvloop=(loop == "uvloop"), timeout_s=600, read_timeout_s=60)
    out = _Out(n)
    for i, rec in zip(res.request_index, res.records):
        out.t_sent[i], out.t_end[i] = rec.t_sent, rec.t_end
        out.times[i] = rec.chunk_times.tolist()
        out.tokens[i] = rec.chunk_tokens.tolist() if rec.chunk_tokens is not None else []
        if rec.error:
            out.errors += 1
    d = out.dump()
    d["self"] = {"cpu_s": res.cpu_s, "parse_cpu_s": res.parse_cpu_s, "mean_in_flight": res.mean_in_flight,
                 "loop_lag_p99_ms": res.loop_lag_p99_s * 1e3, "warnings": res.warnings}
    return d


def client_main(args: argparse.Namespace) -> None:
    v = args.run_client
    if v == "null":
        d = run_null(args.url, args.c, args.n, args.max_tokens)
    elif v == "ref-httpx-lines":
        d = run_ref_httpx(args.url, args.c, args.n, args.max_tokens)
    elif v == "ref-aiohttp-any":
        d = run_ref_aiohttp(args.url, args.c, args.n, args.max_tokens)
    elif v.startswith("ss:"):
        d = run_specsweep(v, args.url, args.c, args.n, args.max_tokens)
    else:
        raise SystemExit(f"unknown client variant {v!r}")
    with open(args.out, "wb") as f:
        pickle.dump(d, f, protocol=pickle.HIGHEST_PROTOCOL)


# ==================================================================================================
# orchestration
# ==================================================================================================

class CpuSampler(threading.Thread):
    """Samples (perf_counter, CPU seconds of a process tree) every 0.1 s; pid None = whole machine
    (busy CPU seconds of all cores from /proc/stat)."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(daemon=True)
        import psutil

        self.proc = psutil.Process(pid) if pid is not None else None
        self.samples: list[tuple[float, float]] = []
        self.halt = threading.Event()
        self.start()

    def _cpu(self) -> float | None:
        import psutil

        if self.proc is None:
            return busy_cpu_s()
        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
            total = 0.0
            for p in procs:
                try:
                    ct = p.cpu_times()
                    total += ct.user + ct.system
                except psutil.Error:
                    pass
            return total
        except psutil.Error:
            return None

    def run(self) -> None:
        while not self.halt.is_set():
            c = self._cpu()
            if c is not None:
                self.samples.append((perf_counter(), c))
            self.halt.wait(0.1)

    def stop(self) -> None:
        self.halt.set()
        self.join()

    def at(self, t: float) -> float:
        """CPU seconds at time t (linear interpolation; monotone)."""
        s = self.samples
        if not s:
            return 0.0
        if t <= s[0][0]:
            return s[0][1]
        for (t0, c0), (t1, c1) in zip(s, s[1:]):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1
        return s[-1][1]


def busy_cpu_s() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (user, nice, system, irq,
    softirq, steal: all but idle and iowait)."""
    import psutil

    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + t.steal


def wait_quiet(threshold: float, max_wait_s: float) -> None:
    """Wait (up to max_wait_s) until the whole machine uses at most ``threshold`` cores over 1 s."""
    deadline = time.monotonic() + max_wait_s
    while True:
        b0, t0 = busy_cpu_s(), time.monotonic()
        time.sleep(1.0)
        load = (busy_cpu_s() - b0) / (time.monotonic() - t0)
        if load <= threshold or time.monotonic() > deadline:
            return
        time.sleep(2.0)


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _start_server(sc: Scenario, core: str, log_out: str) -> tuple[subprocess.Popen[str], str]:
    cmd = ["taskset", "-c", core, sys.executable, str(SERVER), "--port", "0", "-k", str(sc.k),
           "--itl-ms", str(sc.itl_ms), "--log-out", log_out]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("LISTENING"):
        proc.kill()
        raise RuntimeError(f"fastsse server did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def run_one(sc: Scenario, variant: str, server_core: str, client_core: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        slog, cout = os.path.join(tmp, "server.pkl"), os.path.join(tmp, "client.pkl")
        machine = CpuSampler(None)
        server, url = _start_server(sc, server_core, slog)
        srv_cpu = CpuSampler(server.pid)
        try:
            cmd = ["taskset", "-c", client_core, sys.executable, __file__, "--run-client", variant, "--url", url,
                   "-c", str(sc.concurrency), "-n", str(sc.n_requests), "--max-tokens", str(sc.max_tokens),
                   "--out", cout]
            client = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
            cli_cpu = CpuSampler(client.pid)
            _, err = client.communicate(timeout=900)
            cli_cpu.stop()
            if client.returncode != 0:
                raise RuntimeError(f"client {variant} failed ({client.returncode}): {err[-2000:]}")
        finally:
            srv_cpu.stop()
            machine.stop()
            server.terminate()
            server.wait(timeout=30)
        with open(cout, "rb") as f:
            cd = pickle.load(f)
        with open(slog, "rb") as f:
            sd = pickle.load(f)
    return summarise(sc, variant, cd, sd, cli_cpu, srv_cpu, machine)


def summarise(sc: Scenario, variant: str, cd: dict[str, Any], sd: dict[str, Any],
              cli_cpu: CpuSampler, srv_cpu: CpuSampler, machine: CpuSampler) -> dict[str, Any]:
    n, c = sc.n_requests, sc.concurrency
    sent = sorted(cd["t_sent"])
    a, b = sent[c - 1], sent[n - 1]
    if cd["times"]:
        tok = 0
        for times, toks in zip(cd["times"], cd["tokens"]):
            for t, k in zip(times, toks):
                if a <= t <= b:
                    tok += k
        counted = sum(sum(t) for t in cd["tokens"])
    else:
        tok = sum(sc.max_tokens for e in cd["t_end"] if a < e <= b)
        counted = float("nan")
    win = b - a
    cpu = cli_cpu.at(b) - cli_cpu.at(a)
    srv = srv_cpu.at(b) - srv_cpu.at(a)
    foreign = machine.at(b) - machine.at(a) - cpu - srv
    lags: list[float] = []
    if cd["times"]:
        log = sd["log"]
        for i, times in enumerate(cd["times"]):
            st = log.get(str(i))
            if st:
                lags.extend(ct - s for ct, s in zip(times, st))
    ttfts = [times[0] - ts for times, ts in zip(cd["times"], cd["t_sent"]) if times]
    me = cd.get("self") or {}
    parse_per_1k = me["parse_cpu_s"] / counted * 1000 if me and counted else float("nan")
    run_wall = max(cd["t_end"]) - min(cd["t_sent"])
    busy = sum(e - s for s, e in zip(cd["t_sent"], cd["t_end"]))
    return {
        "scenario": sc.name, "client": variant, "tok_s": tok / win if win > 0 else float("nan"),
        "cores": cpu / win if win > 0 else float("nan"),
        "cpu_s_per_1k": cpu / tok * 1000 if tok else float("nan"),
        "lag_p50_ms": _pct(lags, 0.5) * 1e3, "lag_p99_ms": _pct(lags, 0.99) * 1e3,
        "ttft_p50_ms": _pct(ttfts, 0.5) * 1e3, "ttft_p99_ms": _pct(ttfts, 0.99) * 1e3,
        "parse_s_per_1k": parse_per_1k,
        "in_flight": busy / run_wall if run_wall > 0 else float("nan"),
        "srv_cores": srv / win if win > 0 else float("nan"),
        "foreign_cores": foreign / win if win > 0 else float("nan"),
        "tokens_ratio": counted / (n * sc.max_tokens), "errors": cd["errors"], "window_s": win,
        "self": cd.get("self"),
    }


def fmt_row(r: dict[str, Any], ref: float | None) -> str:
    ratio = f"{r['tok_s'] / ref:5.2f}" if ref else "    -"
    return (f"| {r['scenario']:<11} | {r['client']:<31} | {r['tok_s']:>9,.0f} | {ratio} | {r['cores']:4.2f} | "
            f"{r['cpu_s_per_1k']:6.4f} | {r['parse_s_per_1k']:6.4f} | {r['lag_p50_ms']:7.2f} | {r['lag_p99_ms']:7.2f} | "
            f"{r['ttft_p50_ms']:7.1f} | {r['ttft_p99_ms']:7.1f} | {r['in_flight']:6.1f} | "
            f"{r['srv_cores']:4.2f} | {r['foreign_cores']:4.2f} | {r['tokens_ratio']:5.3f} | {r['errors']} |")


HEADER = ("| scenario    | client                          |     tok/s | ÷httpx | cores | CPU s/1k tok | parse s/1k | "
          "lag p50 ms | lag p99 ms | TTFT p50 ms | TTFT p99 ms | in flight | srv cores | other cores | tokens | errors |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", nargs="*", default=DEFAULT_SCENARIOS)
    ap.add_argument("--clients", nargs="*", default=DEFAULT_CLIENTS)
    ap.add_argument("--reps", type=int, default=1, help="repeats per (scenario, client); medians printed")
    ap.add_argument("--server-core", default="0")
    ap.add_argument("--client-core", default="1")
    ap.add_argument("--max-other", type=float, default=0.15,
                    help="redo a run (up to 3 times) when other processes used more than this many cores")
    ap.add_argument("--quiet-wait-s", type=float, default=120.0,
                    help="before each run, wait up to this long for the machine to be idle")
    ap.add_argument("--json-out", default=None, help="write all rows (every repeat) as JSON here")
    ap.add_argument("--run-client", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("-c", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("-n", type=int, default=256, help=argparse.SUPPRESS)
    ap.add_argument("--max-tokens", type=int, default=512, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_client:
        client_main(args)
        return
    if any(v.startswith("ss:httpx-aiohttp:") for v in args.clients):
        try:
            import httpx_aiohttp  # noqa: F401
        except ImportError:
            print("# httpx-aiohttp not installed: its rows are skipped (pip install httpx-aiohttp)", flush=True)
            args.clients = [v for v in args.clients if not v.startswith("ss:httpx-aiohttp:")]
    print(f"# client_overhead: server on core {args.server_core}, client on core {args.client_core}, "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}", flush=True)
    print(HEADER, flush=True)
    all_rows: list[dict[str, Any]] = []
    for name in args.scenarios:
        sc = scenario(name)
        if sc.itl_ms > 0:
            clients = [v for v in args.clients if v != "null"]
        else:
            clients = list(args.clients)
        reps: dict[str, list[dict[str, Any]]] = {v: [] for v in clients}
        for _ in range(args.reps):
            for v in clients:  # interleave variants within a repeat: noise hits all alike
                attempts = []
                for _attempt in range(4):
                    wait_quiet(args.max_other, args.quiet_wait_s)
                    attempts.append(run_one(sc, v, args.server_core, args.client_core))
                    if attempts[-1]["foreign_cores"] <= args.max_other:
                        break
                    print(f"  (redo {sc.name} {v}: other processes used {attempts[-1]['foreign_cores']:.2f} cores)",
                          file=sys.stderr, flush=True)
                row = min(attempts, key=lambda r: r["foreign_cores"])  # the least disturbed attempt
                reps[v].append(row)
                all_rows.append(row)
        med = {v: {k: (statistics.median(r[k] for r in rs) if isinstance(rs[0][k], (int, float)) else rs[0][k])
                   for k in rs[0]} for v, rs in reps.items()}
        ref = med.get("ref-httpx-lines", {}).get("tok_s")
        for v in clients:
            print(fmt_row(med[v], ref), flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(all_rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
