"""What one level returns (``LevelResult``, built by :func:`_assemble` from the records and the
client's own figures), how its slots are split over worker processes, and the progress callback."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter

from specsweep.results.records import RequestRecord

__all__ = ["LevelResult", "ProgressFn", "UntilFn", "split_concurrency"]

ProgressFn = Callable[[int, int], None]
#: ``until(completions) -> stop``: a level's stopping rule (``measure.stopping.StopRule``), called
#: from the calling thread with every completion so far, ``(t_sent, t_end, output tokens or None)``
#: in the order they ended; once it says True no further request is sent and the level drains
UntilFn = Callable[[Sequence[tuple[float, float, int | None]]], bool]


@dataclass(slots=True)
class LevelResult:
    """Outcome of one level.

    ``records[j]`` is the record of body ``request_index[j]``; both in issue order. Requests still in
    flight when a stop was requested are cancelled and left out (``cancelled`` counts them).
    ``t_start``/``t_end``: perf_counter seconds of the first send and the last finish.
    ``cpu_s``: CPU seconds the client spent measuring (loop thread, or all worker processes),
    excluding ``parse_cpu_s`` spent decoding after the level. ``mean_in_flight``: Σ request
    durations / (t_end − t_start). ``mean_dispatch_gap_s``: mean seconds from a slot's finish to its
    next send. ``loop_lag_*_s``: duration of one event-loop iteration, sampled every 50 ms (seconds): about
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


def _call_progress(progress: ProgressFn, done: int, total: int) -> None:
    try:
        progress(done, total)
    except Exception:  # a broken progress bar must not stop a level
        pass
