"""The closed loop of one level on one event loop (:func:`_engine`), and what both runners share.

C slots each take the next body index, send it (``client.send_streaming``: timestamps and bytes
only), and take the next when its stream ends; responses over 1 MiB are parsed as soon as they end,
and unparsed bytes over the level's budget go to its spool (``spool``). Also here: the level's
configuration (:class:`_Config`), the event loop and client of a runner, parsing a finished level
(:func:`_parse_all`, :func:`_parse_on_loop`), giving freed memory back (glibc ``malloc_trim``) and
the event-loop lag sampler. Times are perf_counter seconds; CPU is the loop thread's
(``time.thread_time``).
"""
from __future__ import annotations

import asyncio
import ctypes
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter

import httpx

from specsweep.measure.client import (
    PATHS,
    Flavour,
    RawExchange,
    ReadPath,
    SpillFn,
    TransportKind,
    make_client,
    parse_exchange,
    send_streaming,
)
from specsweep.measure.loadgen.spool import _Spilled, _Spool
from specsweep.results.records import RequestRecord

#: how often the loop thread wakes on its own while a level runs (seconds): to see whether the level
#: was stopped (Ctrl-C, a study's stop) and to time one trip through the event loop (the lag
#: sample). Every wake costs the loop thread CPU, and on a CPU engine that CPU is taken from the
#: server measured, so there is one such timer, not one per job.
#: 20 lag samples a second: 200 in a 10 s level, enough for its p99.
_TICK_S = 0.05
#: a response bigger than this (bytes) is parsed as soon as it ends, inside the loop (a few ms),
#: instead of being held until the level ends
_EAGER_PARSE_BYTES = 1 << 20


@dataclass(slots=True)
class _Config:
    """A generator's settings, as ``LoadGenerator`` takes them (seconds, bytes); sent to every
    worker process, so only plain values."""

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
class _Tally:
    """One loop's running counts while a level runs: requests in flight now and at most, the sum
    (seconds) and count of dispatch gaps, and the bytes held by finished unparsed responses and by
    responses still streaming."""

    inflight: int = 0
    max: int = 0
    gap_sum: float = 0.0
    gap_n: int = 0
    unparsed_bytes: int = 0
    inflight_bytes: int = 0


@dataclass(slots=True)
class _EngineOut:
    """One loop's share of a level: ``results`` by body index (raw, spooled, or parsed when over
    1 MiB), the level's ``spool`` (None: nothing spilled), ``cpu_s`` (loop-thread CPU seconds),
    ``lag`` (loop-lag samples, seconds), the most requests in flight at once, the sum (seconds) and
    count of dispatch gaps, requests ``cancelled`` by a stop and whether it ``stopped``."""

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
    it instead. Its CPU grows with what it releases, once per level; nothing where malloc is not
    glibc's.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


async def _ticker(samples: list[float], stop_check: Callable[[], bool], on_stop: Callable[[], None]) -> None:
    """Every ``_TICK_S`` (50 ms): call ``on_stop`` and return once ``stop_check()`` is True; else
    time one trip through the event loop (``sleep(0)``), the lag sample: under load this is how
    long a read that just arrived waits before its coroutine can timestamp it."""
    sleep = asyncio.sleep
    append = samples.append
    while True:
        await sleep(_TICK_S)
        if stop_check():
            on_stop()
            return
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
    on_done: Callable[[RawExchange], None],
) -> _EngineOut:
    """Run C slots until ``take`` returns None or ``stop_check`` turns True; ``on_done(raw)`` as
    each request ends (its exchange, whole: for counting, or a look at its last bytes)."""
    path = PATHS[cfg.flavour]
    timeout_s, read, flavour, budget = cfg.timeout_s, cfg.read, cfg.flavour, cfg.parse_budget_bytes
    # requests are built before the clock starts: building one costs CPU the hot path must not pay
    prepared: list[httpx.Request | None] = [client.build_request("POST", path, content=b) for b in bodies]
    results: dict[int, RawExchange | RequestRecord | _Spilled] = {}
    spool: _Spool | None = None
    unparsed: list[int] = []
    state = _Tally()
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
            state.inflight_bytes += held - counted
            counted = held
            if spool is None:
                if state.inflight_bytes + state.unparsed_bytes <= budget:
                    return False
                spool = _Spool(cfg.spill_dir)
            spool.spill(ex)
            state.inflight_bytes -= counted
            counted = 0
            return True

        def settle() -> None:
            state.inflight_bytes -= counted

        return spill, settle

    async def slot() -> None:
        nonlocal spool
        prev_end: float | None = None
        while True:
            i = take()
            if i is None:
                return
            active.add(i)
            state.inflight += 1
            if state.inflight > state.max:
                state.max = state.inflight
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
            state.inflight -= 1
            active.discard(i)
            if prev_end is not None:
                state.gap_sum += raw.t_sent - prev_end
                state.gap_n += 1
            prev_end = raw.t_end
            if raw.spilled:  # part of it is in the spool already: the rest goes there too
                results[i] = spool.put(raw)  # type: ignore[union-attr]
                on_done(raw)
                continue
            nbytes = raw.nbytes
            if nbytes > _EAGER_PARSE_BYTES:  # e.g. SGLang's cumulative text: parse now, memory stays flat
                results[i] = parse_exchange(flavour, raw)
                on_done(raw)
                continue
            results[i] = raw
            unparsed.append(i)
            state.unparsed_bytes += nbytes
            if state.unparsed_bytes + state.inflight_bytes > budget:  # bound memory: spill (or parse) what finished so far
                if cfg.spill and spool is None:
                    spool = _Spool(cfg.spill_dir)
                for j in unparsed:
                    r = results[j]
                    if isinstance(r, RawExchange):
                        results[j] = spool.put(r) if spool is not None else parse_exchange(flavour, r)
                unparsed.clear()
                state.unparsed_bytes = 0
            on_done(raw)

    lag: list[float] = []
    gc.freeze()  # long-lived objects (e.g. a notebook's data) leave the GC's scans during the level
    cpu0 = time.thread_time()
    tasks = [asyncio.create_task(slot()) for _ in range(concurrency)]
    stopped = False

    def on_stop() -> None:
        nonlocal stopped
        stopped = True
        for t in tasks:
            t.cancel()

    ticker = asyncio.create_task(_ticker(lag, stop_check, on_stop))
    try:
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        ticker.cancel()
        for t in tasks:
            t.cancel()
        cpu = time.thread_time() - cpu0
        gc.unfreeze()
    for t in tasks:  # a bug in a slot must not pass silently
        if not t.cancelled() and t.exception() is not None:
            raise RuntimeError("loadgen slot failed") from t.exception()
    return _EngineOut(results=results, spool=spool, cpu_s=cpu, lag=lag, max_in_flight=state.max,
                      gap_sum=state.gap_sum, gap_n=state.gap_n, cancelled=len(active),
                      stopped=stopped)
