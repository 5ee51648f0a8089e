#!/usr/bin/env python3
"""A lean streaming server that writes OpenAI/SGLang-style SSE as fast as it can, or paced.

Used by ``bench/client_overhead.py`` (client cost and timestamp lag) and by the tests (a real socket
with fault injection). Raw asyncio (uvloop when available), HTTP/1.1 keep-alive, chunked transfer,
pre-encoded frames; every token-carrying chunk's write time (``perf_counter``) is logged per request
id so client receive times can be joined to server writes.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``POST /generate`` (streams);
``GET /health``; ``GET /stats`` (requests, active and max concurrent streams, request ids in arrival
order, Authorization headers seen); ``POST /stats/reset``.

Per request, the body's ``max_tokens`` (``sampling_params.max_new_tokens`` for ``/generate``) sets
the output length; ``rid`` (or header ``X-Request-Id``) names the request in the log; an optional
``fastsse`` object overrides the command-line defaults: ``k`` (tokens per chunk), ``itl_ms``,
``ttft_ms``, ``counts`` (``continuous`` | ``final`` | ``none``: where usage counts appear),
``fault`` (``http500``, ``http400text``, ``nostream``, ``error``, ``malformed``, ``drop``,
``no_done``, ``stall``), ``fault_at`` (content chunks sent before the fault), ``stall_s``.

Run: ``python bench/fastsse_server.py --port 0`` prints ``LISTENING <port>`` when ready. On SIGTERM or
SIGINT it writes the write-time log (pickle: {rid: [t, ...]}) to ``--log-out`` if given, prints its
own CPU seconds and chunk rate, and exits.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any

try:
    import orjson

    def _loads(b: bytes) -> Any:
        return orjson.loads(b)

    def _dumps(o: Any) -> bytes:
        return orjson.dumps(o)
except ImportError:  # pragma: no cover - orjson is a project dependency
    import json

    def _loads(b: bytes) -> Any:
        return json.loads(b)

    def _dumps(o: Any) -> bytes:
        return json.dumps(o, separators=(",", ":")).encode()


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk holding ``payload``."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj: Any) -> bytes:
    return _frame(b"data: " + _dumps(obj) + b"\n\n")


_DONE = _frame(b"data: [DONE]\n\n")
_END = b"0\r\n\r\n"
_SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
             b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")


@dataclass(frozen=True, slots=True)
class Spec:
    """What one stream sends. ``k``: tokens per content chunk; ``n``: output tokens."""

    flavour: str
    n: int
    k: int
    prompt_tokens: int
    counts: str  # continuous | final | none


def _tok(i: int) -> str:
    return f" w{i}"


def build_frames(spec: Spec) -> tuple[list[tuple[bytes, int]], list[bytes]]:
    """(content frames with the tokens each carries (0 = no token), tail frames after the last)."""
    n, k, p = spec.n, spec.k, spec.prompt_tokens
    cont = spec.counts == "continuous"
    bounds = list(range(0, n, k)) + [n]
    frames: list[tuple[bytes, int]] = []
    tail: list[bytes] = []
    if spec.flavour == "sglang":
        text = ""
        for j in range(len(bounds) - 1):
            lo, hi = bounds[j], bounds[j + 1]
            text += "".join(_tok(i) for i in range(lo, hi))
            last = hi == n
            meta: dict[str, Any] = {"id": "fastsse", "finish_reason": None}
            if spec.counts != "none":
                meta.update({"prompt_tokens": p, "completion_tokens": hi, "cached_tokens": 0})
            if last:
                meta["finish_reason"] = {"type": "length", "length": n}
                meta["e2e_latency"] = 0.5
                if k > 1:
                    verify = len(bounds) - 1
                    meta.update({"spec_accept_length": n / verify, "spec_verify_ct": verify})
            frames.append((_sse({"text": text, "output_ids": list(range(hi)), "meta_info": meta}), hi - lo))
        tail = [_DONE, _END]
        return frames, tail
    chat = spec.flavour == "openai-chat"
    obj_name = "chat.completion.chunk" if chat else "text_completion"
    head = b'{"id":"cmpl-fastsse","object":"%s","created":0,"model":"fastsse","choices":' % obj_name.encode()

    def usage(c: int) -> bytes:
        return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (p, p + c, c)

    if chat:
        role = head + b'[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]'
        role += (b',"usage":' + usage(0) if cont else b"") + b"}"
        frames.append((_frame(b"data: " + role + b"\n\n"), 0))
    for j in range(len(bounds) - 1):
        lo, hi = bounds[j], bounds[j + 1]
        piece = _dumps("".join(_tok(i) for i in range(lo, hi)))
        fr = b'"length"' if hi == n else b"null"
        if chat:
            choice = b'[{"index":0,"delta":{"content":%s},"finish_reason":%s}]' % (piece, fr)
        else:
            choice = b'[{"index":0,"text":%s,"logprobs":null,"finish_reason":%s}]' % (piece, fr)
        payload = head + choice + (b',"usage":' + usage(hi) if cont else b"") + b"}"
        frames.append((_frame(b"data: " + payload + b"\n\n"), hi - lo))
    if spec.counts != "none":
        tail.append(_frame(b"data: " + head + b'[],"usage":' + usage(n) + b"}\n\n"))
    tail += [_DONE, _END]
    return frames, tail


class Server:
    """Shared state: defaults, frame cache, stats and the write-time log."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.k: int = args.tokens_per_chunk
        self.itl_s: float = args.itl_ms / 1000.0
        self.ttft_s: float = args.ttft_ms / 1000.0
        self.counts: str = args.counts
        self.cache: dict[Spec, tuple[list[tuple[bytes, int]], list[bytes]]] = {}
        self.log: dict[str, list[float]] = {}
        self.requests = 0
        self.active = 0
        self.max_active = 0
        self.rids: list[str] = []
        self.auth_seen: list[str] = []
        self.chunks_written = 0
        self.t_first: float | None = None
        self.t_last = 0.0

    def frames(self, spec: Spec) -> tuple[list[tuple[bytes, int]], list[bytes]]:
        got = self.cache.get(spec)
        if got is None:
            if len(self.cache) > 256:
                self.cache.clear()
            got = self.cache[spec] = build_frames(spec)
        return got

    def reset(self) -> None:
        self.requests = self.max_active = 0
        self.rids = []
        self.auth_seen = []
        self.log = {}


class Stream:
    """One streamed response, driven by loop callbacks (no coroutine per chunk)."""

    __slots__ = ("conn", "srv", "frames", "tail", "i", "rid", "times", "itl", "t0", "fault", "fault_at",
                 "stall_s", "loop", "done")

    def __init__(self, conn: Conn, srv: Server, frames: list[tuple[bytes, int]], tail: list[bytes],
                 rid: str, itl: float, ttft: float, fault: str | None, fault_at: int, stall_s: float) -> None:
        self.conn, self.srv, self.frames, self.tail, self.rid = conn, srv, frames, tail, rid
        self.i = 0
        self.times: list[float] = []
        self.itl = itl
        self.fault, self.fault_at, self.stall_s = fault, fault_at, stall_s
        self.loop = asyncio.get_running_loop()
        self.done = False
        self.t0 = perf_counter() + ttft
        conn.transport.write(_SSE_HEAD)
        if ttft > 0:
            self.loop.call_later(ttft, self.step)
        else:
            self.step()

    def step(self) -> None:
        conn = self.conn
        if self.done:
            return
        if conn.closed:
            self.finish(close=False)
            return
        if conn.paused:
            conn.resume_cb = self.step
            return
        i = self.i
        if self.fault is not None and i == self.fault_at and self._fault():
            return
        if i >= len(self.frames):
            for fr in self.tail:
                conn.transport.write(fr)
            self.finish(close=False)
            return
        frame, ntok = self.frames[i]
        t = perf_counter()
        conn.transport.write(frame)
        if ntok:
            self.times.append(t)
        self.i = i + 1
        self.srv.chunks_written += 1
        if self.itl > 0:
            delay = self.t0 + self.i * self.itl - perf_counter()
            self.loop.call_later(delay if delay > 0 else 0, self.step)
        else:
            self.loop.call_soon(self.step)

    def _fault(self) -> bool:
        """Apply the injected fault at this point; True when the stream is over (or paused for good)."""
        conn, fault = self.conn, self.fault
        self.fault = None
        if fault == "error":
            conn.transport.write(_sse({"error": {"message": "injected failure: out of memory",
                                                 "type": "invalid_request_error", "code": 400}}))
            conn.transport.write(_DONE + _END)
            self.finish(close=False)
            return True
        if fault == "malformed":
            conn.transport.write(_frame(b'data: {"choices": [{"text": "x"\n\n'))
            return False
        if fault == "drop":
            self.finish(close=True)
            return True
        if fault == "no_done":
            conn.transport.write(_END)
            self.finish(close=False)
            return True
        if fault == "stall":
            self.loop.call_later(self.stall_s, self.finish, True)
            return True
        return False

    def finish(self, close: bool) -> None:
        if self.done:
            return
        self.done = True
        srv = self.srv
        srv.active -= 1
        srv.log[self.rid] = self.times
        srv.t_last = perf_counter()
        if close:
            self.conn.transport.abort()
        else:
            self.conn.response_done()


class Conn(asyncio.Protocol):
    """One HTTP/1.1 connection: parses requests one at a time and answers them."""

    def __init__(self, srv: Server) -> None:
        self.srv = srv
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.paused = False
        self.resume_cb: Any = None
        self.transport: asyncio.Transport = None  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        cb, self.resume_cb = self.resume_cb, None
        if cb is not None:
            cb()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        cb, self.resume_cb = self.resume_cb, None
        if cb is not None:
            asyncio.get_running_loop().call_soon(cb)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self.parse()

    def response_done(self) -> None:
        self.busy = False
        if not self.closed and self.buf:
            self.parse()

    def parse(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        try:
            method, target, _ = head[0].split(" ", 2)
        except ValueError:
            self.transport.abort()
            return
        headers: dict[str, str] = {}
        for line in head[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        clen = int(headers.get("content-length", "0") or 0)
        if len(self.buf) < end + 4 + clen:
            return
        body = bytes(self.buf[end + 4:end + 4 + clen])
        del self.buf[:end + 4 + clen]
        self.busy = True
        self.handle(method, target.split("?", 1)[0], headers, body)

    def reply(self, status: str, body: bytes, ctype: bytes = b"application/json") -> None:
        self.transport.write(b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
                             % (status.encode(), ctype, len(body), body))
        self.response_done()

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        srv = self.srv
        if method == "GET" and path == "/health":
            self.reply("200 OK", b"ok", b"text/plain")
            return
        if method == "GET" and path == "/stats":
            self.reply("200 OK", _dumps({"requests": srv.requests, "active": srv.active,
                                         "max_active": srv.max_active, "rids": srv.rids,
                                         "auth": srv.auth_seen, "chunks_written": srv.chunks_written}))
            return
        if method == "POST" and path == "/stats/reset":
            srv.reset()
            self.reply("200 OK", b"{}")
            return
        flavour = {"/v1/completions": "openai-completions", "/v1/chat/completions": "openai-chat",
                   "/generate": "sglang"}.get(path)
        if method != "POST" or flavour is None:
            self.reply("404 Not Found", b'{"error":{"message":"no such route","code":404}}')
            return
        try:
            req = _loads(body)
        except ValueError:
            self.reply("400 Bad Request", b'{"error":{"message":"body is not JSON","code":400}}')
            return
        srv.requests += 1
        rid = str(req.get("rid", headers.get("x-request-id", srv.requests)))
        srv.rids.append(rid)
        auth = headers.get("authorization")
        if auth is not None and auth not in srv.auth_seen:
            srv.auth_seen.append(auth)
        opts = req.get("fastsse") or {}
        fault = opts.get("fault")
        if flavour == "sglang":
            sp = req.get("sampling_params") or {}
            if "stream" in sp:
                self.reply("400 Bad Request", b'{"error":{"message":"unknown field `stream` in sampling_params","code":400}}')
                return
            n = int(sp.get("max_new_tokens", 128))
            prompt = req.get("input_ids") or str(req.get("text", "")).split()
        else:
            n = int(req.get("max_tokens", 16))
            prompt = req.get("prompt") if flavour == "openai-completions" else req.get("messages")
            if isinstance(prompt, str):
                prompt = prompt.split()
            elif flavour == "openai-chat":
                prompt = " ".join(str(m.get("content", "")) for m in (prompt or [])).split()
        if fault == "http500":
            self.reply("500 Internal Server Error",
                       b'{"object":"error","message":"injected: engine crashed","type":"InternalServerError","code":500}')
            return
        if fault == "http400text":
            self.reply("400 Bad Request", b"bad request: injected plain-text error", b"text/plain")
            return
        if fault == "nostream":
            self.reply("200 OK", b'{"choices":[{"text":"x"}],"usage":{"completion_tokens":1}}')
            return
        spec = Spec(flavour, max(n, 1), int(opts.get("k", srv.k)), len(prompt or ()),
                    str(opts.get("counts", srv.counts)))
        frames, tail = srv.frames(spec)
        srv.active += 1
        if srv.active > srv.max_active:
            srv.max_active = srv.active
        if srv.t_first is None:
            srv.t_first = perf_counter()
        Stream(self, srv, frames, tail, rid, float(opts.get("itl_ms", srv.itl_s * 1000)) / 1000.0,
               float(opts.get("ttft_ms", srv.ttft_s * 1000)) / 1000.0, fault,
               int(opts.get("fault_at", 2)), float(opts.get("stall_s", 30.0)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = any free port (printed)")
    ap.add_argument("--tokens-per-chunk", "-k", type=int, default=1)
    ap.add_argument("--itl-ms", type=float, default=0.0, help="gap between chunks of a stream; 0 = unpaced")
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--counts", choices=["continuous", "final", "none"], default="continuous")
    ap.add_argument("--log-out", default=None, help="pickle of {rid: [write times]} written on exit")
    ap.add_argument("--no-uvloop", action="store_true")
    return ap.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    srv = Server(args)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Conn(srv), args.host, args.port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    cpu0 = time.process_time()
    print(f"LISTENING {port}", flush=True)
    await stop.wait()
    server.close()
    cpu = time.process_time() - cpu0
    if args.log_out:
        tmp = args.log_out + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump({"log": srv.log, "cpu_s": cpu, "chunks": srv.chunks_written,
                         "t_first": srv.t_first, "t_last": srv.t_last}, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, args.log_out)
    span = (srv.t_last - srv.t_first) if srv.t_first else 0.0
    rate = srv.chunks_written / span if span > 0 else 0.0
    print(f"fastsse: {srv.requests} requests, {srv.chunks_written} chunks, {rate:,.0f} chunks/s while active, "
          f"cpu {cpu:.2f} s", file=sys.stderr, flush=True)


@contextlib.contextmanager
def spawn(*args: str, cpu: str | None = None, python: str = sys.executable) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run this server in a child process; yield (process, base URL); stop it on exit.

    ``args``: command-line options (e.g. ``"-k", "4"``). ``cpu``: pin to these cores with ``taskset``.
    """
    cmd = [python, os.path.abspath(__file__), "--port", "0", *args]
    if cpu is not None:
        cmd = ["taskset", "-c", cpu, *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("LISTENING"):
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"fastsse server did not start: {line!r} {err[-2000:]}")
        yield proc, f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.no_uvloop:
        try:
            import uvloop
        except ImportError:  # pragma: no cover
            pass
        else:
            uvloop.run(serve(args))
            return
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
