"""The worker-pool runner: N processes ("spawn"), each with its own event loop and client, sharing
one level.

The C slots are split over the workers (``split_concurrency``); they take body indices from one
shared counter, so issue order and the closed loop stay global, and count finished requests in
another for the parent's progress. Times are ``time.perf_counter()`` (CLOCK_MONOTONIC on Linux:
one clock for all processes of the machine). The parent and each worker talk over a pipe:
``level`` → ``armed`` → ``go`` → ``result`` (the worker's parsed records and its own figures),
``close`` to end. A worker that dies or stops answering makes the level fail with its exit code.
"""
from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from time import perf_counter
from typing import Any

from specsweep.measure.client import RawExchange, count_hint
from specsweep.measure.loadgen.engine import _client, _Config, _engine, _new_loop, _parse_all, _release_free_memory
from specsweep.measure.loadgen.level import (
    LevelResult,
    ProgressFn,
    UntilFn,
    _assemble,
    _call_progress,
    split_concurrency,
)
from specsweep.results.records import RequestRecord

__all__ = ["WorkerPoolRunner"]

#: seconds between two looks at the workers' pipes and progress
_POLL_S = 0.05


class WorkerPoolRunner:
    """Runs levels over ``workers`` processes (``LoadGenerator(workers=N)``, N > 1); see
    :meth:`run_level`.

    ``cfg``: the generator's configuration; worker ``w``'s client is sized to its share of
    ``cfg.max_concurrency``. Starting waits (up to 120 s) until every worker's client is ready,
    and raises RuntimeError (the workers stopped) when one fails to start. Call :meth:`close`.
    """

    def __init__(self, cfg: _Config, workers: int) -> None:
        self.cfg = cfg
        self.workers = workers
        ctx = mp.get_context("spawn")
        self._counter = ctx.Value("q", 0)
        self._done = ctx.Value("q", 0)
        self._mp_stop = ctx.Event()
        # (level number, t_sent, t_end, tokens or None) of each finished request, for a stopping rule
        self._finished: Any = ctx.Queue()
        self._level_no = 0
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        shares = split_concurrency(self.cfg.max_concurrency, self.workers)
        try:
            for w in range(self.workers):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker_main, name=f"specsweep-loadgen-{w}", daemon=True,
                                args=(child, self.cfg, max(1, shares[w]), self._counter, self._done,
                                      self._mp_stop, self._finished))
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

    def _consult(self, until: UntilFn, completions: list[tuple[float, float, int | None]], n: int) -> bool:
        """Add the completions the workers reported since the last look to ``completions`` (in the
        order they ended) and ask ``until``; when it says stop, the shared counter jumps to ``n`` so
        no worker takes another body (those in flight finish). Whether it said stop."""
        fresh = False
        while True:
            try:
                no, *item = self._finished.get_nowait()
            except queue.Empty:
                break
            if no == self._level_no:  # a late report of an earlier level is not this one's
                completions.append(tuple(item))  # type: ignore[arg-type]
                fresh = True
        if not fresh:
            return False
        completions.sort(key=lambda c: c[1])
        if not until(completions[:]):
            return False
        with self._counter.get_lock():
            self._counter.value = max(self._counter.value, n)
        return True

    def run_level(self, bodies: list[bytes], concurrency: int, stop: threading.Event | None,
                  progress: ProgressFn | None, until: UntilFn | None = None) -> LevelResult:
        """One level of encoded ``bodies`` with ``concurrency`` slots (checked by the caller) split
        over the workers; as ``LoadGenerator.run_level``. Each worker parses its own responses."""
        n = len(bodies)
        self._level_no += 1
        completions: list[tuple[float, float, int | None]] = []
        shares = split_concurrency(concurrency, self.workers)
        with self._counter.get_lock():
            self._counter.value = 0
        with self._done.get_lock():
            self._done.value = 0
        self._mp_stop.clear()
        used = [w for w in range(self.workers) if shares[w] > 0]
        for w in used:
            self._conns[w].send(("level", bodies, shares[w], self._level_no if until is not None else 0))
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
                if until is not None and self._consult(until, completions, n):
                    until = None  # decided: the level drains
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
        """Tell every worker to close its client and exit; terminate one that does not within 10 s."""
        with contextlib.suppress(queue.Empty, OSError, ValueError):
            while True:  # reports nobody read: a worker exits only once its queue's pipe took them
                self._finished.get_nowait()
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


def _worker_main(conn: Any, cfg: _Config, limit: int, counter: Any, done: Any, stop: Any, finished: Any) -> None:
    """Entry point of a worker process: one loop, one client, levels on command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and tells us to stop
    loop = _new_loop(cfg.use_uvloop)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(_worker_async(conn, cfg, limit, counter, done, stop, finished))
    except Exception as exc:  # report, then exit non-zero
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
        raise
    finally:
        loop.close()


async def _worker_async(conn: Any, cfg: _Config, limit: int, counter: Any, done: Any, stop: Any,
                        finished: Any) -> None:
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
            _, bodies, share, level_no = msg  # level_no 0: no stopping rule listens
            n = len(bodies)
            conn.send(("armed",))
            go = await loop.run_in_executor(None, conn.recv)
            if go[0] == "close":
                return

            def take() -> int | None:
                with counter.get_lock():
                    i = counter.value
                    if i >= n:  # noqa: B023 - called only within this iteration
                        return None
                    counter.value = i + 1
                return i

            def on_done(raw: RawExchange) -> None:
                with done.get_lock():
                    done.value += 1
                if level_no:  # noqa: B023 - called only within this iteration
                    finished.put((level_no, raw.t_sent, raw.t_end, count_hint(raw)))  # noqa: B023

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
