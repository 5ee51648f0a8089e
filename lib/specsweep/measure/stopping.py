"""Per-level stopping: a level measures until its throughput is known to a target margin of error.

The statistic is the level's throughput per slot, ``rate`` = Σ output tokens ÷ Σ request durations
(tok/s; a duration is a request's ``t_end − t_sent``, a failed request counts with 0 tokens). In a
closed loop with C slots kept busy, Little's law makes the aggregate output tok/s ≈ C × ``rate``
and the pooled per-request tok/s equal to ``rate``, so one relative margin serves both.

Its margin of error comes from **overlapping batch means** (Meketon & Schmeiser 1984) over
consecutive completions. In the order they finished, each completion gives its residual
``e_i = tokens_i − rate × duration_i`` (the ratio estimator linearised); the variance of their mean
is estimated from the means of every run of m consecutive residuals,
``m ÷ ((n − m + 1)(n − m)) × Σ_j ē_j(m)²``, and the 95 % half-width of ``rate`` is
``t(0.975, df) × sqrt(that) ÷ mean(duration)`` with df = 1.5 (n ÷ m − 1). Why batches: in a closed
loop the requests in flight together share the server's state (its batch, a slow spell, a slow
neighbour), so consecutive completions are correlated and an iid t interval over requests is too
narrow; batch means stay right as long as a batch is long against that correlation. A batch holds
a quarter of the level's completions (so batches grow with the level and correlation of any finite
length is averaged out as it grows), and never fewer than C (one turn of every slot: requests that
overlapped mostly fall in one batch); a margin therefore needs at least 4 C completions.
Overlapping batches give the same robustness as 4 disjoint ones with a variance estimate half again
as steady (the 1.5 in df). tests/measure/test_stopping.py checks the interval's coverage over many
synthetic streams from several noise models, at a fixed count and where the rule stopped;
``docs/method.md`` states the figures.

:class:`StopRule` is the live rule: handed every completion so far (``(t_sent, t_end, tokens)``,
tokens None when the stream's count could not be read cheaply, see
``client.count_hint``), it says stop once the level has its minimum count and the margin is
at most the target, checked after every C further completions. Requests in flight when it says
stop are never cut off: no further request is sent, and the level drains as any level does.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specsweep.results.columns import LEVEL_DEFAULTS

__all__ = ["BATCHES_PER_LEVEL", "CONFIDENCE", "Completion", "Margin", "StopRule", "batch_size", "level_margin_pct",
           "throughput_margin"]

#: the interval's confidence
CONFIDENCE = 0.95
#: a batch holds at least 1 / BATCHES_PER_LEVEL of the level's completions (and at least C)
BATCHES_PER_LEVEL = 4
#: the rule stops only when the margin is met with this confidence in its own variance estimate
#: (a margin read off a few batches is often narrower than the truth; stopping on the first lucky one
#: would leave intervals that cover less than they say)
STOP_CONFIDENCE = 0.9
#: what a level row says when its count was fixed in advance (no target margin): what older result sets read as
FIXED_COUNT: str = LEVEL_DEFAULTS["stop_reason"]

#: one finished request: (t_sent, t_end) in perf_counter seconds and its output tokens (None: unknown)
Completion = tuple[float, float, int | None]


def batch_size(n: int, concurrency: int) -> int:
    """Completions per batch for ``n`` completions at ``concurrency`` slots: max(C, ⌊n / 4⌋, 1)."""
    return max(1, concurrency, n // BATCHES_PER_LEVEL)


@dataclass(frozen=True)
class Margin:
    """A throughput estimate with its 95 % interval: ``rate`` and ``half_width`` in tok/s per slot,
    from ``n`` completions in overlapping batches of ``batch_size``, ``df`` degrees of freedom."""

    rate: float
    half_width: float
    n: int
    batch_size: int
    df: float

    @property
    def pct(self) -> float:
        """The half-width relative to the rate (%)."""
        return 100.0 * self.half_width / self.rate

    def covers(self, truth: float) -> bool:
        return abs(self.rate - truth) <= self.half_width


def _t_quantile(df: float) -> float:
    from scipy import special  # deferred: scipy is slow to import and only a margin needs it

    return float(special.stdtrit(df, 0.5 + CONFIDENCE / 2))


def _doubt(df: float) -> float:
    """How much wider the margin may really be, at :data:`STOP_CONFIDENCE`: sqrt(df ÷ the lower
    χ² quantile) — the factor its variance estimate, of ``df`` degrees of freedom, may be low by."""
    from scipy import special

    return math.sqrt(df / float(special.chdtri(df, STOP_CONFIDENCE)))


def throughput_margin(tokens: Sequence[float] | np.ndarray, durations: Sequence[float] | np.ndarray,
                      concurrency: int) -> Margin | None:
    """The overlapping-batch-means interval of Σ tokens ÷ Σ durations (module docstring), or None
    with fewer than 4 batches' worth of completions (4 C) or a rate that is not positive.

    ``tokens``/``durations``: per completion (tokens, seconds), in completion order.
    """
    tok = np.asarray(tokens, dtype=float)
    dur = np.asarray(durations, dtype=float)
    n = len(tok)
    m = batch_size(n, concurrency)
    if n < BATCHES_PER_LEVEL * m or not (np.isfinite(tok).all() and np.isfinite(dur).all()):
        return None
    total = float(dur.sum())
    rate = float(tok.sum()) / total if total > 0 else math.nan
    if not rate > 0:
        return None
    resid = np.concatenate(([0.0], np.cumsum(tok - rate * dur)))
    means = (resid[m:] - resid[:-m]) / m  # the n − m + 1 overlapping batch means (their overall mean is 0)
    var = m / ((n - m + 1) * (n - m)) * float(means @ means)
    df = 1.5 * (n / m - 1)
    return Margin(rate=rate, half_width=_t_quantile(df) * math.sqrt(var) / (total / n), n=n, batch_size=m, df=df)


def completions_margin(done: Sequence[Completion], concurrency: int) -> Margin | None:
    """:func:`throughput_margin` of live completions: those with a known count, in the order they ended."""
    known = sorted((c for c in done if c[2] is not None), key=lambda c: c[1])
    if not known:
        return None
    arr = np.array([(c[1] - c[0], c[2]) for c in known], dtype=float)
    return throughput_margin(arr[:, 1], arr[:, 0], concurrency)


def level_margin_pct(requests: pd.DataFrame, concurrency: int) -> float:
    """The measured level's margin (%) from its request rows (``t_start_s``, ``t_end_s``,
    ``output_tokens``, ``error``; failed requests count 0 tokens), NaN when not computable."""
    if requests.empty or not {"t_start_s", "t_end_s", "output_tokens"} <= set(requests.columns):
        return math.nan
    rows = requests.sort_values("t_end_s", kind="stable")
    tokens = pd.to_numeric(rows["output_tokens"], errors="coerce").fillna(0.0)
    if "error" in rows:
        tokens = tokens.where(rows["error"].isna(), 0.0)
    durations = rows["t_end_s"].astype(float) - rows["t_start_s"].astype(float)
    margin = throughput_margin(tokens.to_numpy(dtype=float), durations.to_numpy(), concurrency)
    return margin.pct if margin is not None else math.nan


class StopRule:
    """The live rule of one level: call it with every completion so far; True once the level may stop.

    ``target_pct``: the margin wanted (%); ``min_requests``/``max_requests``: the level sends at
    least / at most this many (the caller sends no more than ``max_requests`` bodies). The check
    runs when the level has ``min_requests`` completions and again after every ``concurrency``
    further ones. :attr:`decided` holds ``(margin %, completions)`` of the check that said stop.
    """

    def __init__(self, *, concurrency: int, target_pct: float, min_requests: int, max_requests: int) -> None:
        self.concurrency = concurrency
        self.target_pct = target_pct
        self.min_requests = min_requests
        self.max_requests = max_requests
        self.decided: tuple[float, int] | None = None
        self._next_check = min_requests

    def __call__(self, done: Sequence[Completion]) -> bool:
        if self.decided is not None:
            return True
        n = len(done)
        if n < self._next_check:
            return False
        while self._next_check <= n:
            self._next_check += max(1, self.concurrency)
        margin = completions_margin(done[:n], self.concurrency)
        if margin is not None and margin.pct * _doubt(margin.df) <= self.target_pct:
            self.decided = (margin.pct, n)
            return True
        return False

    def reason(self, final_pct: float) -> str:
        """What the level row says about why it stopped, given the level's own margin (%) over all
        its requests (``final_pct``; NaN: too few batches)."""
        if self.decided is not None:
            pct, n = self.decided
            return f"margin reached (±{pct:.1f} % after {n} requests)"
        shown = (f"±{final_pct:.1f} %" if math.isfinite(final_pct)
                 else f"no margin: under {BATCHES_PER_LEVEL} × {self.concurrency} requests")
        return f"max requests ({shown})"
