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
body bytes; a sequential buffered write, cheap per token in the loop): whenever a response
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

Modules, one job each: ``level`` (:class:`LevelResult` and how a level's figures are assembled),
``engine`` (the closed loop of C slots on one event loop, shared by both runners), ``spool`` (the
level's temporary file), ``inprocess`` (:class:`InProcessRunner`: ``workers=1``) and ``workers``
(:class:`WorkerPoolRunner`: N processes). :class:`LoadGenerator` checks its arguments and hands
each level to its runner.

The client measures itself: CPU seconds of its loop thread(s)/processes, mean in-flight count
(Σ request durations / level window, Little's law), gap between a slot's finish and its next send,
and event-loop lag (one loop iteration, sampled every 50 ms: about how late a timestamp can be).
"""
from __future__ import annotations

import ssl
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from specsweep.measure.client import ReadPath, TransportKind, encode_body
from specsweep.measure.loadgen.engine import _Config
from specsweep.measure.loadgen.inprocess import InProcessRunner
from specsweep.measure.loadgen.level import LevelResult, ProgressFn, UntilFn, split_concurrency
from specsweep.measure.loadgen.workers import WorkerPoolRunner
from specsweep.servers.flavours import PATHS, Flavour

__all__ = ["InProcessRunner", "LevelResult", "LoadGenerator", "ProgressFn", "UntilFn", "WorkerPoolRunner", "run_level",
           "split_concurrency"]


class LoadGenerator:
    """Runs closed-loop levels against one endpoint; one httpx client per loop for its lifetime.

    ``base_url``: ``http(s)://host:port``. ``flavour``: the API flavour of every body.
    ``max_concurrency``: the largest C any level will use (sizes connection limits).
    ``workers``: 1 = one event loop in a thread of this process (:class:`InProcessRunner`);
    N > 1 = N processes (:class:`WorkerPoolRunner`). ``timeout_s``: limit on one whole request (seconds, None = none). ``read_timeout_s``: longest
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
        self._runner: InProcessRunner | WorkerPoolRunner = (
            InProcessRunner(self.cfg) if workers == 1 else WorkerPoolRunner(self.cfg, workers))

    def run_level(
        self,
        bodies: Sequence[Mapping[str, Any] | bytes],
        concurrency: int,
        *,
        stop: threading.Event | None = None,
        progress: ProgressFn | None = None,
        until: UntilFn | None = None,
    ) -> LevelResult:
        """Send every body once with ``concurrency`` in flight; return records in issue order.

        ``bodies``: request bodies (dicts or encoded JSON) in issue order. ``stop``: when set, the
        requests in flight are cancelled promptly and what finished is returned (``stopped=True``).
        ``progress(finished, total)``: called from this (the calling) thread whenever the number
        of finished requests changed (coalesced, at most every 50 ms, and once at the end) — never
        on the measuring loop. Ctrl-C (KeyboardInterrupt) stops the level the same way and then
        re-raises. ``until``: a stopping rule (:data:`UntilFn`) asked as requests finish; once it
        says stop no further body is sent and the requests in flight finish (they are measured): the
        level then has fewer records than bodies.
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
            return self._runner.run_level(encoded, concurrency, stop, progress, until)

    def close(self) -> None:
        """Close the client(s) and stop the loop thread or worker processes."""
        if self._closed:
            return
        self._closed = True
        self._runner.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
