"""The real-time engine: drives ``model.EngineCore`` on the server's event loop.

Timing (all ``time.perf_counter()`` seconds):

* When work arrives at an idle engine, the engine first lets the burst it belongs to come in: it
  waits while requests keep arriving less than ``burst_gap_s`` (default 2 ms) apart, for at most
  ``burst_max_s`` (default 20 ms) and never past half the first request's own prefill, so the
  first step ends on time. A sweep level starts with all its clients sending at once, a few
  tenths of a millisecond apart; without the wait, whether the first request was prefilled alone
  depended on whether the engine task ran before the next handlers (a race the virtual-time
  model, which admits a closed loop's first wave together, does not have), and it moved a level's
  median time to first token by a whole prefill. The virtual clock ``t`` is then set to the
  burst's last submission (or now, if later): no request is admitted before it arrived. Each step is
  planned at ``t`` (admission happens there) and scheduled to *end* at ``t + duration`` on this
  absolute clock; the engine sleeps until then, commits the step, emits every request's chunk of
  that step, and the next step starts at exactly that scheduled end. Per-step overhead therefore
  never accumulates into drift: when the process is late, the next step's deadline is already
  due and emission catches up. Only if the engine falls more than ``resync_s`` (default 0.25 s)
  behind (a stalled host) is the clock reset to now, and ``resyncs`` counts it.
* Sleeping uses the event loop's timer until ``spin_s`` (default 1 ms) before the deadline,
  then a busy-wait on ``perf_counter`` (the loop's timers have about 1 ms resolution). The loop is
  always yielded to once per step, so new requests are parsed between steps.
* HTTP handlers call ``wait_gate()`` before parsing a request: while a step's end is less
  than ``min(gate_s, step/2)`` away (default 2 ms) they wait until its chunks are written, so
  bursts of arrivals cannot delay an emission (the loop runs all ready handlers before timers).
* Requests record the *scheduled* step-end times (``first_token_t``, ``finish_t``), which are the
  model's times; ``EmitLog`` can record, per emitted chunk, scheduled versus actual write time.

A step's outcome is known when it is planned, so the engine commits it at once and asks every
request's sink to ``prepare`` its chunk (format the bytes) while it waits; at the scheduled end
it only calls ``deliver`` (one ``transport.write`` per chunk). Sinks live in ``streaming.py``.

Schedule: ``steps_timed``, ``step_s_total``, ``lag_s_total``, ``late_steps`` and ``resyncs`` (with the time they
dropped, ``resync_lost_s``) say how well the process kept the profile's schedule; every API surface
exposes them on ``/metrics`` (``schedule_metrics.py``), so a sweep can tell a level measured on a
machine too busy to simulate it.

Metrics: with ``metrics`` (SGLang names) the engine updates counters and histograms per request
and refreshes the scheduler gauges every ``decode_log_interval`` decode steps. An ``observer``
(``StepObserver``; the vLLM surface's metrics) is instead called once per committed step with the
requests that got tokens, before their chunks are prepared.
"""
from __future__ import annotations

import asyncio
import logging
import time
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from specsweep.refserver.model import FINISHED, EngineCore, ModelConfig, SimRequest, Step

if TYPE_CHECKING:
    from specsweep.refserver.metrics import ServerMetrics

__all__ = ["EmitLog", "Engine", "Sink", "StepObserver"]

log = logging.getLogger("specsweep.refserver")


class Sink(Protocol):
    """Receives a request's tokens after each step that gave it some.

    ``prepare`` runs right after the step is committed, *before* its scheduled end (so
    formatting is off the critical path) and returns what to do (``None``: nothing);
    ``deliver`` runs at the scheduled end and only writes.
    """

    def prepare(self, req: SimRequest, t_sched: float) -> Any: ...

    def deliver(self, req: SimRequest, action: Any, t_sched: float) -> None: ...


class StepObserver(Protocol):
    """Called once per committed step: ``(step, requests that got tokens, scheduled end)``.

    ``t_sched`` is the step's scheduled end, ``time.perf_counter()`` seconds. Must be cheap: it
    runs on the engine's critical path, before the step's chunks are formatted.
    """

    def __call__(self, step: Step, emitted: list[SimRequest], t_sched: float) -> None: ...


class EmitLog:
    """Scheduled vs actual emit times of chunks, in preallocated-growth arrays (cheap appends).

    ``record(t_sched, t_actual)`` appends one pair (perf_counter seconds); at most ``capacity``
    pairs are kept. ``save(path)`` writes a ``.npy`` array of shape (n, 2).
    """

    __slots__ = ("sched", "actual", "capacity")

    def __init__(self, capacity: int = 5_000_000) -> None:
        self.sched = array("d")
        self.actual = array("d")
        self.capacity = capacity

    def record(self, t_sched: float, t_actual: float) -> None:
        """Append one chunk's scheduled and actual write time."""
        if len(self.sched) < self.capacity:
            self.sched.append(t_sched)
            self.actual.append(t_actual)

    def __len__(self) -> int:
        return len(self.sched)

    def lags_ms(self) -> list[float]:
        """actual - scheduled, milliseconds, per chunk."""
        return [(a - s) * 1e3 for s, a in zip(self.sched, self.actual)]

    def save(self, path: str | Path) -> None:
        """Write the pairs as a ``.npy`` array of shape (n, 2) [scheduled, actual]."""
        import numpy as np

        arr = np.empty((len(self.sched), 2))
        arr[:, 0] = np.frombuffer(self.sched, dtype=np.float64)
        arr[:, 1] = np.frombuffer(self.actual, dtype=np.float64)
        np.save(Path(path), arr)


class Engine:
    """Continuous-batching engine in real time (see the module docstring)."""

    def __init__(self, cfg: ModelConfig, *, metrics: ServerMetrics | None = None,
                 decode_log_interval: int = 40, spin_s: float = 0.001, resync_s: float = 0.25,
                 emit_log: EmitLog | None = None, gate_s: float = 0.002,
                 observer: StepObserver | None = None, burst_gap_s: float = 0.002,
                 burst_max_s: float = 0.02) -> None:
        self.cfg = cfg
        self.core = EngineCore(cfg)
        self.metrics = metrics
        self.observer = observer
        self.decode_log_interval = max(1, decode_log_interval)
        self.spin_s = spin_s
        self.resync_s = resync_s
        self.emit_log = emit_log
        self.resyncs = 0
        self.late_steps = 0
        self.max_step_lag_s = 0.0
        #: the schedule, summed over every step (seconds): scheduled length, how late each woke (≥ 0),
        #: and the time the clock resyncs dropped (the simulated server ran that much slower than its
        #: profile); ``schedule_metrics`` exposes them as counters
        self.steps_timed = 0
        self.step_s_total = 0.0
        self.lag_s_total = 0.0
        self.resync_lost_s = 0.0
        self.last_gen_throughput = 0.0
        self.last_spec_accept_length: float | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._log_t = time.perf_counter()
        self._log_tokens = 0
        self._log_spec_tokens = 0
        self._log_spec_verify = 0
        #: decode steps since start; the gauges refresh when it reaches a multiple of the interval,
        #: as SGLang's ``forward_ct_decode % decode_log_interval`` (never reset by an idle spell, so
        #: requests that finish in lockstep before 40 steps still see the gauges move)
        self._decode_ct = 0
        #: scheduled end of the step being waited for (None when idle), and its length
        self.deadline: float | None = None
        self._step_len = 0.0
        self.gate_s = gate_s
        self._gate_waiters: list[asyncio.Future[None]] = []
        self.gated_requests = 0
        #: an idle start waits for its burst (module docstring): the longest pause between two of
        #: its requests and the longest wait in all (seconds), and when the last request came in
        self.burst_gap_s = burst_gap_s
        self.burst_max_s = burst_max_s
        self._last_submit_t = 0.0
        #: the drift fault (``ModelConfig.drift_pct_per_min``): steps grow with wall-clock time since this
        self.drift_epoch_s = cfg.drift_epoch_s if cfg.drift_epoch_s is not None else time.time()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the engine task on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="refserver-engine")

    async def stop(self) -> None:
        """Stop the engine task."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    @property
    def alive(self) -> bool:
        """True while the engine task runs (False before start, after stop or a crash)."""
        return self._task is not None and not self._task.done()

    # -- requests ---------------------------------------------------------------------------
    def submit(self, req: SimRequest) -> None:
        """Queue a request; the engine admits it at the next step boundary."""
        self.core.add(req)
        self._last_submit_t = time.perf_counter()
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        """Drop a request (client gone, injected drop)."""
        self.core.abort(req)

    async def wait_gate(self) -> None:
        """Defer new HTTP work while a step's emission is imminent.

        Called by the request handlers before they parse a request. When the current step ends
        within ``min(gate_s, step / 2)`` the handler waits until that step's chunks are
        written, so a burst of arrivals (a closed-loop wave) cannot push a step's emission
        late; right after a delivery the check passes, so no handler starves.
        """
        while True:
            d = self.deadline
            if d is None or time.perf_counter() < d - min(self.gate_s, 0.5 * self._step_len):
                return
            self.gated_requests += 1
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._gate_waiters.append(fut)
            await fut

    def _open_gate(self) -> None:
        waiters, self._gate_waiters = self._gate_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- loop -------------------------------------------------------------------------------
    async def _run(self) -> None:
        core = self.core
        clock = time.perf_counter
        idle = True
        t = 0.0
        while True:
            if not core.has_work():
                self.deadline = None
                self._open_gate()
                if not idle:
                    self._refresh_gauges(clock(), idle=True)
                idle = True
                self._wake.clear()
                await self._wake.wait()
                continue
            now = clock()
            if idle:
                t = await self._gather_burst(now)
                idle = False
                self._log_t = now
            elif now - t > self.resync_s:
                self.resyncs += 1
                self.resync_lost_s += now - t
                t = now
            step = core.plan(t)
            if step is None:  # pragma: no cover - admission always succeeds when nothing runs
                idle = True
                await asyncio.sleep(0)
                continue
            if self.cfg.drift_pct_per_min:  # the drift fault: the machine slows (or speeds up) with time
                step.duration_s *= self.cfg.drift_factor(time.time(), self.drift_epoch_s)
            target = t + step.duration_s
            # the step's outcome is known now: commit it and format its chunks while waiting
            emitted = core.commit(step, target)
            if self.observer is not None:
                self.observer(step, emitted, target)
            actions = self._prepare(emitted, target)
            self.deadline = target
            self._step_len = step.duration_s
            await self._sleep_until(target)
            lag = clock() - target
            self.steps_timed += 1
            self.step_s_total += step.duration_s
            if lag > 0:
                self.lag_s_total += lag
            if lag > 0.001:
                self.late_steps += 1
                if lag > 0.002:
                    log.info("step woke %.2f ms late (%s, batch %d, %.2f ms long, %d waiting)",
                             lag * 1e3, step.kind, step.batch, step.duration_s * 1e3,
                             len(core.waiting))
            if lag > self.max_step_lag_s:
                self.max_step_lag_s = lag
            t = target
            self._deliver(actions, target)
            self._open_gate()
            if step.kind == Step.DECODE:
                self._decode_ct += 1
                if self._decode_ct % self.decode_log_interval == 0:
                    self._refresh_gauges(target, idle=False)

    async def _gather_burst(self, woke: float) -> float:
        """At an idle start (``woke``, ``perf_counter`` seconds), wait while the burst's requests
        keep arriving (module docstring); return the first step's start: the last submission, or
        ``woke`` if that was later."""
        waiting = self.core.waiting
        if not waiting or self.burst_gap_s <= 0 or self.burst_max_s <= 0:
            return woke
        head = waiting[0]
        solo_s = self.cfg.prefill_ms(head.prompt_tokens - head.prefilled) / 1e3
        limit = woke + min(self.burst_max_s, 0.5 * solo_s)
        clock = time.perf_counter
        while True:
            wait = min(max(woke, self._last_submit_t) + self.burst_gap_s, limit) - clock()
            if wait <= 0:
                break
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                break
        return max(woke, self._last_submit_t)

    async def _sleep_until(self, target: float) -> None:
        clock = time.perf_counter
        delay = target - clock()
        if delay > self.spin_s:
            await asyncio.sleep(delay - self.spin_s)
        else:
            await asyncio.sleep(0)
        while clock() < target:
            pass

    def _prepare(self, emitted: list[SimRequest], t_sched: float) -> list[tuple[Any, SimRequest, Any]]:
        m = self.metrics
        actions: list[tuple[Any, SimRequest, Any]] = []
        append = actions.append
        for req in emitted:
            if m is not None and req.index >= 0:  # health-check generations are not counted
                if req.generated == req.new_tokens:  # first tokens of this request
                    m.ttft.observe(t_sched - req.arrival_t)
                    if req.admitted_t is not None:
                        m.queue_time.observe(max(0.0, req.admitted_t - req.arrival_t))
                if req.state == FINISHED:
                    m.e2e.observe(t_sched - req.arrival_t)
                    m.num_requests_total.inc()
                    m.prompt_tokens_total.inc(req.prompt_tokens)
                    m.generation_tokens_total.inc(req.generated)
                    if req.verify_ct:
                        m.spec_verify_calls_total.inc(req.verify_ct)
            sink = req.sink
            if sink is not None:
                try:
                    action = sink.prepare(req, t_sched)
                except Exception:  # a broken sink must never stop the engine
                    log.exception("sink failed for request %s", req.index)
                    self.core.abort(req)
                    continue
                if action is not None:
                    append((sink, req, action))
        return actions

    def _deliver(self, actions: list[tuple[Any, SimRequest, Any]], t_sched: float) -> None:
        for sink, req, action in actions:
            try:
                sink.deliver(req, action, t_sched)
            except Exception:
                log.exception("sink failed for request %s", req.index)
                self.core.abort(req)

    def _refresh_gauges(self, now: float, *, idle: bool) -> None:
        core = self.core
        dt = now - self._log_t
        tokens = core.generated_total - self._log_tokens
        if idle:
            self.last_gen_throughput = 0.0
        elif dt > 0:
            self.last_gen_throughput = tokens / dt
        d_tok = core.spec_tokens_total - self._log_spec_tokens
        d_ver = core.spec_verify_total - self._log_spec_verify
        accept_len = d_tok / d_ver if d_ver else None
        if accept_len is not None:
            self.last_spec_accept_length = accept_len
        self._log_t = now
        self._log_tokens = core.generated_total
        self._log_spec_tokens = core.spec_tokens_total
        self._log_spec_verify = core.spec_verify_total
        m = self.metrics
        if m is None:
            return
        m.num_running_reqs.set(0 if idle else core.num_admitted)
        m.num_queue_reqs.set(0 if idle else len(core.waiting))
        m.gen_throughput.set(self.last_gen_throughput)
        m.num_used_tokens.set(core.kv_tokens)
        m.token_usage.set(core.kv_tokens / self.cfg.max_total_num_tokens)
        if accept_len is not None and self.cfg.num_draft_tokens:
            m.spec_accept_length.set(accept_len)
            m.spec_accept_rate.set((accept_len - 1) / (self.cfg.num_draft_tokens - 1))

    def stats(self) -> dict[str, Any]:
        """Engine counters for ``/server_info`` (simulator section)."""
        core = self.core
        return {
            "steps": core.steps,
            "decode_steps": core.decode_steps,
            "prefill_steps": core.prefill_steps,
            "generated_tokens": core.generated_total,
            "late_steps_over_1ms": self.late_steps,
            "max_step_lag_ms": round(self.max_step_lag_s * 1e3, 3),
            "clock_resyncs": self.resyncs,
            "requests_deferred_by_gate": self.gated_requests,
            "emit_log_chunks": len(self.emit_log) if self.emit_log is not None else None,
        }
