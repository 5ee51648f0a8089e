"""Closed-loop load for one concurrency level: keep exactly C requests in flight until all are done.

Synchronous entry points that work from a Jupyter kernel whose own asyncio loop is running:
:class:`LoadGenerator` owns a fresh event loop (uvloop) in a worker thread, or ``workers`` processes
each with its own loop, and one ``httpx.AsyncClient`` per loop kept for the whole sweep (so a
warm-up level leaves warm connections for the measured level); :func:`run_level` is the one-shot
form.

How a level runs: C slots each take the next body (in issue order), send it, wait for the end of
its stream and take the next, so a finished request immediately starts the next and the number in
flight is C until the bodies run out. The hot path only timestamps and stores bytes
(``client.send_streaming``); SSE/JSON are parsed after the level, except that a response over
1 MiB (SGLang's cumulative-text streams) is parsed as soon as it ends (in the loop: a few ms).

Memory per level is bounded: unparsed response bytes held in memory — finished responses and the
reads of streams still in flight — count toward ``parse_budget_bytes`` (default 64 MiB). Once
they exceed it the level gets a temporary file (:class:`_Spool`: read lengths, read times and
body bytes; a sequential buffered write, about 0.1 µs per token in the loop): whenever a response
ends with the total over the budget, the finished ones held go there, and a stream in flight
moves its reads there every ``client.SPILL_STEP_BYTES`` (64 KiB) of body (``client.SpillFn``), so
it holds at most about that much however long it runs. Responses are read back one at a time
when the level is parsed. SGLang's native ``/generate`` stream (cumulative text: bytes grow with
the square of its length) is not spilled while it streams; it is parsed as soon as it ends
instead, when over 1 MiB. While the level runs, memory holds the budget, C × 64 KiB of streams
in flight and aiohttp's read buffers; afterwards, the parsed records (numpy arrays: 12 bytes per token-carrying chunk, a
float64 time and an int32 count, or 8 when every chunk carried one token; see ``records``). The
level is parsed on its own loop thread, whose heap the reads freed, and the free memory is then
handed back to the system (glibc ``malloc_trim``), so the records do not add to the level's peak
and what comes next starts from the records, not from that peak. ``spill=False`` parses them in
the loop instead (slower timestamps). ``bench/level_memory.py`` measures the peaks.

With ``workers=N`` (N > 1) the C slots are split over N processes ("spawn"), which take body
indices from one shared counter, so issue order and the closed loop stay global. Times are
``time.perf_counter()`` (CLOCK_MONOTONIC on Linux: one clock for all processes of the machine).

The client measures itself: CPU seconds of its loop thread(s)/processes, mean in-flight count
(Σ request durations / level window, Little's law), gap between a slot's finish and its next send,
and event-loop lag (one loop iteration, sampled every 10 ms: about how late a timestamp can be).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import gc
import math
import multiprocessing as mp
import os
import signal
import ssl
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import httpx

from .client import (
    PATHS,
    Flavour,
    RawExchange,
    ReadPath,
    SpillFn,
    TransportKind,
    encode_body,
    make_client,
    parse_exchange,
    send_streaming,
)
from .records import RequestRecord

__all__ = ["LevelResult", "LoadGenerator", "run_level", "split_concurrency"]

ProgressFn = Callable[[int, int], None]
_LAG_INTERVAL_S = 0.01
_POLL_S = 0.05
#: a response bigger than this (bytes) is parsed as soon as it ends, inside the loop (a few ms),
#: instead of being held until the level ends
_EAGER_PARSE_BYTES = 1 << 20
#: write buffer of a level's spool file (bytes)
_SPOOL_BUFFER = 1 << 20


@dataclass(slots=True)
class _Spilled:
    """A finished response whose reads and read times are in the level's spool file.

    ``meta``: the exchange without its reads/times; ``segments``: where its blocks start (bytes)
    and how many reads and body bytes each holds, in order (one block, or several when the response
    was spilled while it streamed).
    """

    meta: RawExchange
    segments: list[tuple[int, int, int]]


class _Spool:
    """One level's temporary file of unparsed responses (deleted when closed).

    A block is the read lengths (int64), the read times (float64 perf_counter seconds) and the body
    bytes, back to back; a response is one block or several (``client.SpillFn``: reads moved out
    while it streamed). Written from the measuring loop (buffered: one ``write`` system call per
    MiB), read back after the level.
    """

    __slots__ = ("_file", "_pos")

    def __init__(self, directory: str | None = None) -> None:
        self._file = tempfile.TemporaryFile(prefix="specsweep-level-", dir=directory, buffering=_SPOOL_BUFFER)
        self._pos = 0

    def put_block(self, reads: list[bytes], times: list[float]) -> tuple[int, int, int]:
        """Write one block of reads and their times; its ``(offset, reads, body bytes)``."""
        lens = array("q", map(len, reads))
        body = b"".join(reads)
        n_bytes = len(body)
        w = self._file.write
        w(lens)
        w(array("d", times))
        w(body)
        at = self._pos
        self._pos += 16 * len(reads) + n_bytes
        return at, len(reads), n_bytes

    def spill(self, raw: RawExchange) -> None:
        """Move ``raw``'s reads and times (held so far) to the file: a handle in ``raw.spilled``."""
        raw.spilled.append(self.put_block(raw.reads, raw.times))
        raw.reads.clear()
        raw.times.clear()

    def put(self, raw: RawExchange) -> _Spilled:
        """Write ``raw``'s reads and times (after any spilled while it streamed); the handle that
        reads them all back."""
        segments = [*raw.spilled]
        if raw.reads or not segments:
            segments.append(self.put_block(raw.reads, raw.times))
        meta = RawExchange(t_sent=raw.t_sent, t_end=raw.t_end, http_status=raw.http_status,
                           content_type=raw.content_type, error=raw.error)
        return _Spilled(meta, segments)

    def get(self, sp: _Spilled) -> RawExchange:
        """The exchange ``sp`` stands for, reads and times restored."""
        f = self._file
        f.flush()
        reads: list[bytes] = []
        times = array("d")
        for offset, n, n_bytes in sp.segments:
            f.seek(offset)
            lens = array("q")
            lens.frombytes(f.read(8 * n))
            times.frombytes(f.read(8 * n))
            body = f.read(n_bytes)
            pos = 0
            for ln in lens:
                reads.append(body[pos:pos + ln])
                pos += ln
        f.seek(0, os.SEEK_END)
        m = sp.meta
        return RawExchange(t_sent=m.t_sent, t_end=m.t_end, http_status=m.http_status,
                           content_type=m.content_type, reads=reads, times=times.tolist(), error=m.error)

    def close(self) -> None:
        self._file.close()


@dataclass(slots=True)
class LevelResult:
    """Outcome of one level.

    ``records[j]`` is the record of body ``request_index[j]``; both in issue order. Requests still in
    flight when a stop was requested are cancelled and left out (``cancelled`` counts them).
    ``t_start``/``t_end``: perf_counter seconds of the first send and the last finish.
    ``cpu_s``: CPU seconds the client spent measuring (loop thread, or all worker processes),
    excluding ``parse_cpu_s`` spent decoding after the level. ``mean_in_flight``: Σ request
    durations / (t_end − t_start). ``mean_dispatch_gap_s``: mean seconds from a slot's finish to its
    next send. ``loop_lag_*_s``: duration of one event-loop iteration, sampled every 10 ms (seconds): about
    how long a read that just arrived waits before it is timestamped.
    ``warnings``: plain sentences when the client may have distorted the measurement.
    """

    records: list[RequestRecord]
    request_index: list[int]
    concurrency: int
    workers: int
    n_bodies: int
    t_start: float
    t_end: float
    cpu_s: float
    parse_cpu_s: float
    mean_in_flight: float
    max_in_flight: int
    mean_dispatch_gap_s: float
    loop_lag_p50_s: float
    loop_lag_p99_s: float
    loop_lag_max_s: float
    stopped: bool = False
    cancelled: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        """Level window in seconds (first send to last finish); 0 when nothing finished."""
        return max(0.0, self.t_end - self.t_start)

    @property
    def client_cores(self) -> float:
        """Client CPU seconds per wall second (1.0 = one core busy)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


def split_concurrency(concurrency: int, workers: int) -> list[int]:
    """Split C slots over N workers as evenly as possible (first workers get the remainder)."""
    base, extra = divmod(concurrency, workers)
    return [base + (1 if w < extra else 0) for w in range(workers)]


@dataclass(slots=True)
class _Config:
    base_url: str
    flavour: Flavour
    max_concurrency: int
    timeout_s: float | None
    read_timeout_s: float | None
    connect_timeout_s: float
    transport: TransportKind
    read: ReadPath
    use_uvloop: bool
    keepalive_s: float
    verify: bool
    headers: dict[str, str]
    parse_budget_bytes: int
    spill: bool
    spill_dir: str | None


@dataclass(slots=True)
class _EngineOut:
    results: dict[int, RawExchange | RequestRecord | _Spilled]
    spool: _Spool | None
    cpu_s: float
    lag: list[float]
    max_in_flight: int
    gap_sum: float
    gap_n: int
    cancelled: int
    stopped: bool


def _new_loop(use_uvloop: bool) -> asyncio.AbstractEventLoop:
    if use_uvloop:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _client(cfg: _Config, limit: int) -> httpx.AsyncClient:
    return make_client(cfg.base_url, max(1, limit), connect_timeout_s=cfg.connect_timeout_s,
                       read_timeout_s=cfg.read_timeout_s, transport=cfg.transport,
                       keepalive_s=cfg.keepalive_s, verify=cfg.verify, headers=cfg.headers)


def _parse_all(flavour: Flavour, out: _EngineOut) -> None:
    """Parse every response of a level in place (spilled ones read back one at a time); closes the
    level's spool file."""
    results, spool = out.results, out.spool
    try:
        for i, r in results.items():
            if isinstance(r, _Spilled):
                results[i] = parse_exchange(flavour, spool.get(r))  # type: ignore[union-attr]
            elif isinstance(r, RawExchange):
                results[i] = parse_exchange(flavour, r)
    finally:
        if spool is not None:
            spool.close()
            out.spool = None


async def _parse_on_loop(flavour: Flavour, out: _EngineOut) -> float:
    """:func:`_parse_all` on the level's own (now idle) loop thread, between two
    :func:`_release_free_memory`; the CPU seconds of all three.

    glibc's malloc keeps a heap per thread: parsed on the thread that read the level, the records
    reuse the memory its reads freed instead of adding to it from another heap.
    """
    t0 = time.thread_time()
    _release_free_memory()
    _parse_all(flavour, out)
    _release_free_memory()
    return time.thread_time() - t0


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
        return None


_MALLOC_TRIM = _malloc_trim()


def _release_free_memory() -> None:
    """Give the memory a finished level freed back to the system (glibc ``malloc_trim``).

    The level's reads leave its heaps full of free space that glibc keeps resident; without this,
    whatever comes next (the level's summary and store, the next level from another thread) adds to
    it instead. About 15 ms of CPU per 250 MB released; nothing where malloc is not glibc's.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


async def _lag_monitor(samples: list[float]) -> None:
    """Every 10 ms, time one trip through the event loop (``sleep(0)``): under load this is how long
    a read that just arrived waits before its coroutine can timestamp it."""
    sleep = asyncio.sleep
    append = samples.append
    while True:
        await sleep(_LAG_INTERVAL_S)
        t0 = perf_counter()
        await sleep(0)
        append(perf_counter() - t0)


async def _engine(
    client: httpx.AsyncClient,
    cfg: _Config,
    bodies: Sequence[bytes],
    concurrency: int,
    take: Callable[[], int | None],
    stop_check: Callable[[], bool],
    on_done: Callable[[], None],
) -> _EngineOut:
    """Run C slots until ``take`` returns None or ``stop_check`` turns True."""
    path = PATHS[cfg.flavour]
    timeout_s, read, flavour, budget = cfg.timeout_s, cfg.read, cfg.flavour, cfg.parse_budget_bytes
    # requests are built before the clock starts (about 60 µs each, off the hot path)
    prepared: list[httpx.Request | None] = [client.build_request("POST", path, content=b) for b in bodies]
    results: dict[int, RawExchange | RequestRecord | _Spilled] = {}
    spool: _Spool | None = None
    unparsed: list[int] = []
    state = {"inflight": 0, "max": 0, "gap_sum": 0.0, "gap_n": 0, "unparsed_bytes": 0, "inflight_bytes": 0}
    # long responses move to the spool while they stream, except SGLang's native cumulative-text
    # stream (its bytes grow with the square of its length: it is parsed as soon as it ends instead)
    spill_long = cfg.spill and flavour != "sglang"
    active: set[int] = set()

    def spill_hook() -> tuple[SpillFn, Callable[[], None]]:
        """A response's :data:`client.SpillFn` and what to call when it ends.

        The response's reads held in memory count toward the level's budget with the finished,
        unparsed ones; once they exceed it the level gets its spool, and from then on every long
        response moves its reads there each :data:`client.SPILL_STEP_BYTES` of body, so a stream in
        flight holds at most about that much.
        """
        counted = 0

        def spill(ex: RawExchange, held: int) -> bool:
            nonlocal spool, counted
            state["inflight_bytes"] += held - counted
            counted = held
            if spool is None:
                if state["inflight_bytes"] + state["unparsed_bytes"] <= budget:
                    return False
                spool = _Spool(cfg.spill_dir)
            spool.spill(ex)
            state["inflight_bytes"] -= counted
            counted = 0
            return True

        def settle() -> None:
            state["inflight_bytes"] -= counted

        return spill, settle

    async def slot() -> None:
        nonlocal spool
        prev_end: float | None = None
        while True:
            i = take()
            if i is None:
                return
            active.add(i)
            state["inflight"] += 1
            if state["inflight"] > state["max"]:
                state["max"] = state["inflight"]
            req = prepared[i]
            prepared[i] = None  # a request is sent once
            if spill_long:
                spill, settle = spill_hook()
                try:
                    raw = await send_streaming(client, req, timeout_s=timeout_s, read=read,  # type: ignore[arg-type]
                                               spill=spill)
                finally:
                    settle()
            else:
                raw = await send_streaming(client, req, timeout_s=timeout_s, read=read)  # type: ignore[arg-type]
            state["inflight"] -= 1
            active.discard(i)
            if prev_end is not None:
                state["gap_sum"] += raw.t_sent - prev_end
                state["gap_n"] += 1
            prev_end = raw.t_end
            if raw.spilled:  # part of it is in the spool already: the rest goes there too
                results[i] = spool.put(raw)  # type: ignore[union-attr]
                on_done()
                continue
            nbytes = raw.nbytes
            if nbytes > _EAGER_PARSE_BYTES:  # e.g. SGLang's cumulative text: parse now, memory stays flat
                results[i] = parse_exchange(flavour, raw)
                on_done()
                continue
            results[i] = raw
            unparsed.append(i)
            state["unparsed_bytes"] += nbytes
            if state["unparsed_bytes"] + state["inflight_bytes"] > budget:  # bound memory: spill (or parse) what finished so far
                if cfg.spill and spool is None:
                    spool = _Spool(cfg.spill_dir)
                for j in unparsed:
                    r = results[j]
                    if isinstance(r, RawExchange):
                        results[j] = spool.put(r) if spool is not None else parse_exchange(flavour, r)
                unparsed.clear()
                state["unparsed_bytes"] = 0
            on_done()

    lag: list[float] = []
    gc.freeze()  # long-lived objects (e.g. a notebook's data) leave the GC's scans during the level
    cpu0 = time.thread_time()
    tasks = [asyncio.create_task(slot()) for _ in range(concurrency)]
    lag_task = asyncio.create_task(_lag_monitor(lag))
    stopped = False

    async def watch() -> None:
        nonlocal stopped
        while True:
            await asyncio.sleep(0.02)
            if stop_check():
                stopped = True
                for t in tasks:
                    t.cancel()
                return

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        watcher.cancel()
        lag_task.cancel()
        for t in tasks:
            t.cancel()
        cpu = time.thread_time() - cpu0
        gc.unfreeze()
    for t in tasks:  # a bug in a slot must not pass silently
        if not t.cancelled() and t.exception() is not None:
            raise RuntimeError("loadgen slot failed") from t.exception()
    return _EngineOut(results=results, spool=spool, cpu_s=cpu, lag=lag, max_in_flight=state["max"],
                      gap_sum=state["gap_sum"], gap_n=state["gap_n"], cancelled=len(active),
                      stopped=stopped)


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _assemble(
    results: dict[int, RequestRecord],
    *,
    concurrency: int,
    workers: int,
    n_bodies: int,
    cpu_s: float,
    parse_cpu_s: float,
    lag: list[float],
    max_in_flight: int,
    gap_sum: float,
    gap_n: int,
    cancelled: int,
    stopped: bool,
) -> LevelResult:
    order = sorted(results)
    records = [results[i] for i in order]
    if records:
        t_start = min(r.t_sent for r in records)
        t_end = max(r.t_end for r in records)
    else:
        t_start = t_end = perf_counter()
    wall = t_end - t_start
    busy = sum(r.t_end - r.t_sent for r in records)
    res = LevelResult(
        records=records, request_index=order, concurrency=concurrency, workers=workers,
        n_bodies=n_bodies, t_start=t_start, t_end=t_end, cpu_s=cpu_s, parse_cpu_s=parse_cpu_s,
        mean_in_flight=busy / wall if wall > 0 else 0.0, max_in_flight=max_in_flight,
        mean_dispatch_gap_s=gap_sum / gap_n if gap_n else 0.0,
        loop_lag_p50_s=_percentile(lag, 0.5), loop_lag_p99_s=_percentile(lag, 0.99),
        loop_lag_max_s=max(lag) if lag else 0.0, stopped=stopped, cancelled=cancelled,
    )
    per_core = res.client_cores / max(1, workers)
    if wall > 1.0 and per_core > 0.7:
        res.warnings.append(
            f"the client used {per_core:.2f} of a core per worker: its timestamps may lag; "
            f"use workers > 1 or a bigger machine")
    if res.loop_lag_p99_s > 0.005:
        res.warnings.append(
            f"event-loop lag p99 {res.loop_lag_p99_s * 1e3:.1f} ms: chunk timestamps can be late by that much")
    if not stopped and len(records) >= 4 * concurrency and res.mean_in_flight < 0.9 * concurrency:
        res.warnings.append(
            f"mean in flight {res.mean_in_flight:.1f} of {concurrency}: the client did not keep all slots busy")
    return res


class LoadGenerator:
    """Runs closed-loop levels against one endpoint; one httpx client per loop for its lifetime.

    ``base_url``: ``http(s)://host:port``. ``flavour``: the API flavour of every body.
    ``max_concurrency``: the largest C any level will use (sizes connection limits).
    ``workers``: 1 = one event loop in a thread of this process; N > 1 = N processes.
    ``timeout_s``: limit on one whole request (seconds, None = none). ``read_timeout_s``: longest
    silence between two reads before a request fails as stalled. ``transport``/``read``: see
    ``client.make_client`` and ``client.stream_request``. ``parse_budget_bytes``: unparsed response
    bytes held in memory during a level (finished responses and streams in flight); above it they
    are spilled to a temporary file of the level, and long streams then spill as they go
    (``spill=True``, in ``spill_dir`` or the system's temp folder: up to the level's whole body
    bytes, about 230 bytes per token for OpenAI streams), or, with ``spill=False``, finished
    responses are parsed inside the loop (0 = spill or parse each response as it ends).
    Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        flavour: Flavour,
        *,
        max_concurrency: int,
        workers: int = 1,
        timeout_s: float | None = 600.0,
        read_timeout_s: float | None = 60.0,
        connect_timeout_s: float = 30.0,
        transport: TransportKind = "aiohttp",
        read: ReadPath = "raw",
        use_uvloop: bool = True,
        keepalive_s: float = 4.0,
        verify: bool = True,
        headers: Mapping[str, str] | None = None,
        parse_budget_bytes: int = 64 << 20,
        spill: bool = True,
        spill_dir: str | None = None,
    ) -> None:
        if flavour not in PATHS:
            raise ValueError(f"flavour must be one of {', '.join(PATHS)}; got {flavour!r}")
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an integer >= 1; got {max_concurrency!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1; got {workers!r}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 or None; got {timeout_s!r}")
        if read not in ("raw", "bytes", "stream"):
            raise ValueError(f"read must be 'raw', 'bytes' or 'stream'; got {read!r}")
        if isinstance(verify, ssl.SSLContext):
            raise ValueError("verify must be a bool here (an SSLContext cannot be sent to worker processes)")
        self.cfg = _Config(base_url=base_url, flavour=flavour, max_concurrency=max_concurrency,
                           timeout_s=timeout_s, read_timeout_s=read_timeout_s,
                           connect_timeout_s=connect_timeout_s, transport=transport, read=read,
                           use_uvloop=use_uvloop, keepalive_s=keepalive_s, verify=bool(verify),
                           headers=dict(headers or {}), parse_budget_bytes=parse_budget_bytes,
                           spill=spill, spill_dir=spill_dir)
        self.workers = workers
        self._closed = False
        self._lock = threading.Lock()
        if workers == 1:
            self._loop = _new_loop(use_uvloop)
            self._thread = threading.Thread(target=self._loop.run_forever, name="specsweep-loadgen",
                                            daemon=True)
            self._thread.start()
            try:
                self._client = self._call(self._make_client(max_concurrency))
            except BaseException:
                self._stop_loop()
                raise
        else:
            self._start_workers()

    # ---- in-process ----------------------------------------------------------------------------
    async def _make_client(self, limit: int) -> httpx.AsyncClient:
        return _client(self.cfg, limit)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    # ---- worker processes ----------------------------------------------------------------------
    def _start_workers(self) -> None:
        ctx = mp.get_context("spawn")
        self._counter = ctx.Value("q", 0)
        self._done = ctx.Value("q", 0)
        self._mp_stop = ctx.Event()
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        shares = split_concurrency(self.cfg.max_concurrency, self.workers)
        try:
            for w in range(self.workers):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker_main, name=f"specsweep-loadgen-{w}", daemon=True,
                                args=(child, self.cfg, max(1, shares[w]), self._counter, self._done,
                                      self._mp_stop))
                p.start()
                child.close()
                self._procs.append(p)
                self._conns.append(parent)
            for w in range(self.workers):
                msg = self._recv(w, timeout=120.0)
                if msg[0] != "ready":
                    raise RuntimeError(f"loadgen worker {w} failed to start: {msg[1] if len(msg) > 1 else msg!r}")
        except BaseException:
            for p in self._procs:
                if p.is_alive():
                    p.terminate()
                p.join(timeout=5)
            for conn in self._conns:
                conn.close()
            self._closed = True
            raise

    def _recv(self, w: int, timeout: float | None = None) -> Any:
        conn, proc = self._conns[w], self._procs[w]
        deadline = None if timeout is None else time.monotonic() + timeout
        while not conn.poll(_POLL_S):
            if not proc.is_alive():
                raise RuntimeError(f"loadgen worker {w} (pid {proc.pid}) died with exit code {proc.exitcode}")
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(f"loadgen worker {w} did not answer within {timeout:g} s")
        try:
            return conn.recv()
        except EOFError:
            raise RuntimeError(f"loadgen worker {w} closed its pipe (exit code {proc.exitcode})") from None

    # ---- public --------------------------------------------------------------------------------
    def run_level(
        self,
        bodies: Sequence[Mapping[str, Any] | bytes],
        concurrency: int,
        *,
        stop: threading.Event | None = None,
        progress: ProgressFn | None = None,
    ) -> LevelResult:
        """Send every body once with ``concurrency`` in flight; return records in issue order.

        ``bodies``: request bodies (dicts or encoded JSON) in issue order. ``stop``: when set, the
        requests in flight are cancelled promptly and what finished is returned (``stopped=True``).
        ``progress(finished, total)``: called from this (the calling) thread whenever the number
        of finished requests changed (coalesced, at most every 50 ms, and once at the end) — never
        on the measuring loop. Ctrl-C (KeyboardInterrupt) stops the level the same way and then
        re-raises.
        """
        if self._closed:
            raise RuntimeError("this LoadGenerator is closed")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1; got {concurrency!r}")
        if concurrency > self.cfg.max_concurrency:
            raise ValueError(f"concurrency {concurrency} exceeds max_concurrency {self.cfg.max_concurrency} "
                             "given to LoadGenerator; create it with a larger max_concurrency")
        encoded = [encode_body(b) for b in bodies]
        if not encoded:
            raise ValueError("bodies is empty: nothing to send")
        with self._lock:
            if self.workers == 1:
                return self._run_inprocess(encoded, concurrency, stop, progress)
            return self._run_workers(encoded, concurrency, stop, progress)

    def _run_inprocess(self, bodies: list[bytes], concurrency: int, stop: threading.Event | None,
                       progress: ProgressFn | None) -> LevelResult:
        n = len(bodies)
        it = iter(range(n))
        counter = {"done": 0}
        interrupt = threading.Event()

        def take() -> int | None:
            return next(it, None)

        def on_done() -> None:
            counter["done"] += 1

        def stop_check() -> bool:
            return interrupt.is_set() or (stop is not None and stop.is_set())

        fut = asyncio.run_coroutine_threadsafe(
            _engine(self._client, self.cfg, bodies, concurrency, take, stop_check, on_done), self._loop)
        out, interrupted = self._wait(fut, lambda: counter["done"], n, progress, interrupt)
        parse_cpu = self._call(_parse_on_loop(self.cfg.flavour, out))
        res = _assemble(out.results, concurrency=concurrency, workers=1, n_bodies=n, cpu_s=out.cpu_s,  # type: ignore[arg-type]
                        parse_cpu_s=parse_cpu, lag=out.lag, max_in_flight=out.max_in_flight,
                        gap_sum=out.gap_sum, gap_n=out.gap_n, cancelled=out.cancelled, stopped=out.stopped)
        if interrupted:
            raise KeyboardInterrupt
        return res

    @staticmethod
    def _wait(fut: concurrent.futures.Future[Any], done: Callable[[], int], total: int,
              progress: ProgressFn | None, interrupt: threading.Event) -> tuple[Any, bool]:
        last = -1
        interrupted = False
        while True:
            try:
                try:
                    out = fut.result(timeout=_POLL_S)
                    break
                except concurrent.futures.TimeoutError:
                    pass
                d = done()
                if progress is not None and d != last:
                    last = d
                    _call_progress(progress, d, total)
            except KeyboardInterrupt:
                interrupted = True
                interrupt.set()
        if progress is not None:
            _call_progress(progress, done(), total)
        return out, interrupted

    def _run_workers(self, bodies: list[bytes], concurrency: int, stop: threading.Event | None,
                     progress: ProgressFn | None) -> LevelResult:
        n = len(bodies)
        shares = split_concurrency(concurrency, self.workers)
        with self._counter.get_lock():
            self._counter.value = 0
        with self._done.get_lock():
            self._done.value = 0
        self._mp_stop.clear()
        used = [w for w in range(self.workers) if shares[w] > 0]
        for w in used:
            self._conns[w].send(("level", bodies, shares[w]))
        for w in used:
            msg = self._recv(w, timeout=120.0)
            if msg[0] != "armed":
                raise RuntimeError(f"loadgen worker {w} answered {msg[0]!r} instead of 'armed'")
        for w in used:
            self._conns[w].send(("go",))
        pending = set(used)
        outs: dict[int, dict[str, Any]] = {}
        last = -1
        interrupted = False
        while pending:
            try:
                for w in list(pending):
                    if self._conns[w].poll(0 if len(pending) > 1 else _POLL_S):
                        msg = self._recv(w)
                        if msg[0] != "result":
                            raise RuntimeError(f"loadgen worker {w} failed: {msg[1] if len(msg) > 1 else msg!r}")
                        outs[w] = msg[1]
                        pending.discard(w)
                    elif not self._procs[w].is_alive():
                        raise RuntimeError(f"loadgen worker {w} died with exit code {self._procs[w].exitcode}")
                if len(pending) > 1:
                    time.sleep(_POLL_S)
                if stop is not None and stop.is_set():
                    self._mp_stop.set()
                d = self._done.value
                if progress is not None and d != last:
                    last = d
                    _call_progress(progress, d, n)
            except KeyboardInterrupt:
                interrupted = True
                self._mp_stop.set()
        if progress is not None:
            _call_progress(progress, self._done.value, n)
        results: dict[int, RequestRecord] = {}
        lag: list[float] = []
        agg = {"cpu": 0.0, "parse": 0.0, "max": 0, "gap_sum": 0.0, "gap_n": 0, "cancelled": 0}
        stopped = False
        for o in outs.values():
            results.update(o["records"])
            lag.extend(o["lag"])
            agg["cpu"] += o["cpu_s"]
            agg["parse"] += o["parse_cpu_s"]
            agg["max"] += o["max_in_flight"]
            agg["gap_sum"] += o["gap_sum"]
            agg["gap_n"] += o["gap_n"]
            agg["cancelled"] += o["cancelled"]
            stopped = stopped or o["stopped"]
        res = _assemble(results, concurrency=concurrency, workers=self.workers, n_bodies=n,
                        cpu_s=agg["cpu"], parse_cpu_s=agg["parse"], lag=lag, max_in_flight=int(agg["max"]),
                        gap_sum=agg["gap_sum"], gap_n=int(agg["gap_n"]), cancelled=int(agg["cancelled"]),
                        stopped=stopped)
        if interrupted:
            raise KeyboardInterrupt
        return res

    def close(self) -> None:
        """Close the client(s) and stop the loop thread or worker processes."""
        if self._closed:
            return
        self._closed = True
        if self.workers == 1:
            try:
                self._call(self._client.aclose())
            finally:
                self._stop_loop()
            return
        for conn in self._conns:
            try:
                conn.send(("close",))
            except (OSError, ValueError):
                pass
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call_progress(progress: ProgressFn, done: int, total: int) -> None:
    try:
        progress(done, total)
    except Exception:  # a broken progress bar must not stop a level
        pass


# ---- worker process side -----------------------------------------------------------------------

def _worker_main(conn: Any, cfg: _Config, limit: int, counter: Any, done: Any, stop: Any) -> None:
    """Entry point of a worker process: one loop, one client, levels on command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and tells us to stop
    loop = _new_loop(cfg.use_uvloop)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(_worker_async(conn, cfg, limit, counter, done, stop))
    except Exception as exc:  # report, then exit non-zero
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
        raise
    finally:
        loop.close()


async def _worker_async(conn: Any, cfg: _Config, limit: int, counter: Any, done: Any, stop: Any) -> None:
    loop = asyncio.get_running_loop()
    client = _client(cfg, limit)
    conn.send(("ready", perf_counter(), os.getpid()))
    try:
        while True:
            msg = await loop.run_in_executor(None, conn.recv)
            if msg[0] == "close":
                return
            if msg[0] != "level":
                continue
            _, bodies, share = msg
            n = len(bodies)
            conn.send(("armed",))
            go = await loop.run_in_executor(None, conn.recv)
            if go[0] == "close":
                return

            def take() -> int | None:
                with counter.get_lock():
                    i = counter.value
                    if i >= n:
                        return None
                    counter.value = i + 1
                return i

            def on_done() -> None:
                with done.get_lock():
                    done.value += 1

            out = await _engine(client, cfg, bodies, share, take, stop.is_set, on_done)
            t0 = time.process_time()
            _parse_all(cfg.flavour, out)
            _release_free_memory()
            parse_cpu = time.process_time() - t0
            conn.send(("result", {
                "records": out.results, "cpu_s": out.cpu_s, "parse_cpu_s": parse_cpu, "lag": out.lag,
                "max_in_flight": out.max_in_flight, "gap_sum": out.gap_sum, "gap_n": out.gap_n,
                "cancelled": out.cancelled, "stopped": out.stopped,
            }))
    finally:
        await client.aclose()


def run_level(
    base_url: str,
    flavour: Flavour,
    bodies: Sequence[Mapping[str, Any] | bytes],
    concurrency: int,
    *,
    timeout_s: float | None = 600.0,
    workers: int = 1,
    stop: threading.Event | None = None,
    progress: ProgressFn | None = None,
    **options: Any,
) -> LevelResult:
    """One level with a fresh :class:`LoadGenerator` (closed afterwards). ``options`` are the other
    keyword arguments of :class:`LoadGenerator` (``read_timeout_s``, ``transport``, …)."""
    with LoadGenerator(base_url, flavour, max_concurrency=concurrency, workers=workers,
                       timeout_s=timeout_s, **options) as gen:
        return gen.run_level(bodies, concurrency, stop=stop, progress=progress)
