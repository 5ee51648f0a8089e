#!/usr/bin/env python3
"""Client CPU per streamed request, the tapped read path beside ``readany``, as llama-server streams.

llama.cpp's server sends each token in its own write and closes the connection after every stream,
so at one request in flight the client pays a connection and one wake-up per token. This runs a
small asyncio server in another process that does the same (``--tokens`` SSE events of the OpenAI
chat shape, ``--itl-ms`` apart, chunked, then closes) and, in fresh client processes, alternately
for each path, sends ``--requests`` requests one after another through ``client.send_streaming``
on uvloop (as ``loadgen`` does), after five warm-up requests. Printed per path: the client's CPU
(``time.process_time``, the whole process) per request in ms, the median over ``--reps`` runs and
each run, and the reads per request.

``tapped``: the default (``client._TappedStreamReader``: chunks timestamped in the protocol's
``data_received``, the read timeout on one lazily re-armed timer); ``readany``:
``SPECSWEEP_READ_PATH=readany`` (the reading task woken per read, aiohttp's per-read timer).

    .venv/bin/python bench/read_path.py [--requests 200] [--tokens 32] [--itl-ms 4] [--reps 3]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PATHS = ("tapped", "readany")


def serve(port: int, tokens: int, itl_s: float) -> None:
    """The server process: llama-server's streaming shape (one write per token, then close)."""
    event = b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {"content": " tok"}, "finish_reason": None}]}).encode() + b"\n\n"
    chunk = b"%x\r\n%s\r\n" % (len(event), event)
    done = b"data: [DONE]\n\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            for _ in range(tokens):
                await asyncio.sleep(itl_s)
                writer.write(chunk)
                await writer.drain()
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def client(port: int, requests: int) -> None:
    """One client process: print JSON {ms per request, reads per request}."""
    import uvloop

    sys.path.insert(0, str(REPO / "lib"))
    from specsweep.measure import client as C

    async def run() -> dict[str, float]:
        cl = C.make_client(f"http://127.0.0.1:{port}", 1)
        body = b'{"messages": [], "max_tokens": 32, "stream": true}'
        try:
            for _ in range(5):
                await C.send_streaming(cl, cl.build_request("POST", "/v1/chat/completions", content=body))
            prepared = [cl.build_request("POST", "/v1/chat/completions", content=body) for _ in range(requests)]
            reads = 0
            t0 = time.process_time()
            for req in prepared:
                ex = await C.send_streaming(cl, req)
                if ex.error is not None:
                    raise SystemExit(f"request failed: {ex.error}")
                reads += len(ex.reads)
            cpu = time.process_time() - t0
        finally:
            await cl.aclose()
        return {"ms_per_request": cpu / requests * 1e3, "reads_per_request": reads / requests}

    print(json.dumps(uvloop.run(run())))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="measured requests per run (default 200)")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per response (default 32, the real-engine demo's)")
    ap.add_argument("--itl-ms", type=float, default=4.0, help="ms between the server's token writes (default 4)")
    ap.add_argument("--reps", type=int, default=3, help="runs per path, alternating (default 3)")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--client", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.serve, args.tokens, args.itl_ms / 1e3)
        return 0
    if args.client:
        client(args.client, args.requests)
        return 0
    port = _free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--tokens", str(args.tokens),
                               "--itl-ms", str(args.itl_ms)])
    try:
        time.sleep(1.0)
        runs: dict[str, list[dict[str, float]]] = {p: [] for p in PATHS}
        for _ in range(args.reps):
            for path in PATHS:
                env = {k: v for k, v in os.environ.items() if k != "SPECSWEEP_READ_PATH"}
                if path == "readany":
                    env["SPECSWEEP_READ_PATH"] = "readany"
                out = subprocess.run([sys.executable, __file__, "--client", str(port), "--requests", str(args.requests)],
                                     env=env, capture_output=True, text=True, check=True, timeout=600)
                runs[path].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"client CPU per request: {args.tokens} tokens {args.itl_ms:g} ms apart, a new connection each, "
          f"{args.requests} requests a run, uvloop; load average {os.getloadavg()[0]:.2f} at the end")
    print("| read path | ms CPU per request (median) | each run | reads per request |")
    print("|---|---:|---|---:|")
    med = {}
    for path, rows in runs.items():
        ms = [r["ms_per_request"] for r in rows]
        med[path] = statistics.median(ms)
        print(f"| {path} | {med[path]:.2f} | {', '.join(f'{m:.2f}' for m in ms)} | {rows[0]['reads_per_request']:.1f} |")
    print(f"tapped ÷ readany: {med['tapped'] / med['readany']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
