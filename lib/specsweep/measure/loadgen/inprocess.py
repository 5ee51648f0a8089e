"""The in-process runner: one event loop (uvloop) in a daemon thread of this process, one
``httpx.AsyncClient`` on it for the runner's whole life, levels run there one at a time.

The calling thread (a notebook's, whose own loop may be running) only waits, reports progress and
turns Ctrl-C into a stop of the level; the measuring loop never runs the progress callback.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import httpx

from specsweep.measure.client import RawExchange, count_hint
from specsweep.measure.loadgen.engine import _client, _Config, _engine, _new_loop, _parse_on_loop
from specsweep.measure.loadgen.level import LevelResult, ProgressFn, UntilFn, _assemble, _call_progress

__all__ = ["InProcessRunner"]

#: seconds between two looks at a level's progress from the calling thread (4 a second: the bar
#: redraws once a second; Ctrl-C interrupts the wait at once, whatever this is)
_POLL_S = 0.25
#: the same with a stopping rule to consult: requests sent between its "stop" and the next look
#: are measured, but cost time
_RULE_POLL_S = 0.05


class InProcessRunner:
    """Runs levels on its own loop thread (``LoadGenerator(workers=1)``); see :meth:`run_level`.

    ``cfg``: the generator's configuration; the client's connection limit is
    ``cfg.max_concurrency``. Call :meth:`close` when done.
    """

    def __init__(self, cfg: _Config) -> None:
        self.cfg = cfg
        self._loop = _new_loop(cfg.use_uvloop)
        self._thread = threading.Thread(target=self._loop.run_forever, name="specsweep-loadgen",
                                        daemon=True)
        self._thread.start()
        try:
            self._client = self._call(self._make_client(cfg.max_concurrency))
        except BaseException:
            self._stop_loop()
            raise

    async def _make_client(self, limit: int) -> httpx.AsyncClient:
        return _client(self.cfg, limit)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    def run_level(self, bodies: list[bytes], concurrency: int, stop: threading.Event | None,
                  progress: ProgressFn | None, until: UntilFn | None = None) -> LevelResult:
        """One level of encoded ``bodies`` with ``concurrency`` slots (checked by the caller); as
        ``LoadGenerator.run_level``. The level is parsed on the loop thread after it ends."""
        n = len(bodies)
        it = iter(range(n))
        counter = {"done": 0}
        interrupt = threading.Event()
        halt = threading.Event()  # the stopping rule said stop: send no more, let the rest finish
        completions: list[tuple[float, float, int | None]] = []

        def take() -> int | None:
            return None if halt.is_set() else next(it, None)

        def on_done(raw: RawExchange) -> None:
            counter["done"] += 1
            if until is not None:  # a look at its last bytes only: the level is parsed after it ends
                completions.append((raw.t_sent, raw.t_end, count_hint(raw)))

        def stop_check() -> bool:
            return interrupt.is_set() or (stop is not None and stop.is_set())

        fut = asyncio.run_coroutine_threadsafe(
            _engine(self._client, self.cfg, bodies, concurrency, take, stop_check, on_done), self._loop)
        rule = None if until is None else (lambda: until(completions[:]), halt)
        out, interrupted = self._wait(fut, lambda: counter["done"], n, progress, interrupt, rule)
        parse_cpu = self._call(_parse_on_loop(self.cfg.flavour, out))
        res = _assemble(out.results, concurrency=concurrency, workers=1, n_bodies=n, cpu_s=out.cpu_s,  # type: ignore[arg-type]
                        parse_cpu_s=parse_cpu, lag=out.lag, max_in_flight=out.max_in_flight,
                        gap_sum=out.gap_sum, gap_n=out.gap_n, cancelled=out.cancelled, stopped=out.stopped)
        if interrupted:
            raise KeyboardInterrupt
        return res

    @staticmethod
    def _wait(fut: concurrent.futures.Future[Any], done: Callable[[], int], total: int,
              progress: ProgressFn | None, interrupt: threading.Event,
              rule: tuple[Callable[[], bool], threading.Event] | None = None) -> tuple[Any, bool]:
        """The level's outcome and whether Ctrl-C came meanwhile (``interrupt`` is then set, which
        stops the level); ``progress`` is called here whenever ``done()`` changed. ``rule``: (the
        stopping rule on the completions so far, the event that halts sending) — asked at every look
        whenever the count changed, until it says stop."""
        last = -1
        interrupted = False
        poll = _POLL_S if rule is None else _RULE_POLL_S
        while True:
            try:
                try:
                    out = fut.result(timeout=poll)
                    break
                except concurrent.futures.TimeoutError:
                    pass
                d = done()
                if d != last and rule is not None and not rule[1].is_set() and rule[0]():
                    rule[1].set()
                if progress is not None and d != last:
                    _call_progress(progress, d, total)
                last = d
            except KeyboardInterrupt:
                interrupted = True
                interrupt.set()
        if progress is not None:
            _call_progress(progress, done(), total)
        return out, interrupted

    def close(self) -> None:
        """Close the client and stop the loop thread."""
        try:
            self._call(self._client.aclose())
        finally:
            self._stop_loop()
