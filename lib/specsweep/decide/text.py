"""Number and band formats shared by the recommendation's sentences (percentages, level lists)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from specsweep.analyze.compare import ESTIMATED_WAIT
from specsweep.analyze.enginecpu import BASIS_CPU
from specsweep.decide.claims import pct


def tested_bracket(cs: Sequence[int], x: float) -> tuple[int, int]:
    """The tested levels at or just below and at or just above ``x`` (concurrency): the one bracket
    of a crossover or an 'up to X' that every sentence, table and file names."""
    lo = max((c for c in cs if c <= x + 1e-9), default=min(cs))
    hi = min((c for c in cs if c >= x - 1e-9), default=max(cs))
    return int(lo), int(hi)


def _pct(x: float) -> str:
    """A Δ% as every sentence writes it (see :func:`specsweep.decide.claims.pct`)."""
    return pct(x)


def _range_pct(r: tuple[float, float]) -> str:
    lo, hi = r
    if math.isnan(lo):
        return "n/a"
    return _pct(lo) if abs(hi - lo) < 0.05 else f"{_pct(lo)} to {_pct(hi)}"


def _levels_text(cs: Sequence[int]) -> str:
    cs = list(cs)
    if len(cs) == 1:
        return f"concurrency {cs[0]}"
    return f"concurrency {', '.join(map(str, cs[:-1]))} and {cs[-1]}"


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


WAIT_WORDS: dict[str, str] = {
    "ttft_p50_s": "waits longer for its first token (TTFT p50)",
    "ttft_p99_s": "waits longer for its first token at the tail (TTFT p99)",
    "e2e_p50_s": "takes longer end to end (e2e p50)",
    "e2e_p99_s": "takes longer end to end at the tail (e2e p99)",
    ESTIMATED_WAIT: "takes longer per request in total, queueing included (Little's-law estimate)",
}


_DECIDING: dict[str, str] = {
    "output_tok_s": "aggregate throughput", "user_tok_s_mean": "per-user decode speed",
    "request_tok_s_mean": "per-request speed", ESTIMATED_WAIT: "e2e (Little's-law estimate)",
    "ttft_p50_s": "TTFT p50", "ttft_p99_s": "TTFT p99", "e2e_p50_s": "e2e p50", "e2e_p99_s": "e2e p99",
}


#: what follows the aggregate's name by the basis a comparison decides on (``Comparison.aggregate_basis``):
#: a CPU engine that lost CPU to another process is judged on tok/s per engine CPU-second, and every
#: sentence naming the aggregate says so
_BASIS_SUFFIX: dict[str, str] = {BASIS_CPU: "per engine CPU-second"}


def basis_suffix(basis: str | None = None) -> str:
    """' per engine CPU-second' after the aggregate's name where the comparison decides on that basis
    (``Comparison.aggregate_basis``), '' for wall-clock tok/s (``basis`` None)."""
    if not basis:
        return ""
    return " " + _BASIS_SUFFIX.get(basis, f"({basis})")


def aggregate_word(basis: str | None = None) -> str:
    """The aggregate's name on a page: 'aggregate throughput' for wall-clock tok/s (``basis`` None),
    'aggregate throughput per engine CPU-second' where the comparison decides on that (:func:`basis_suffix`)."""
    return _DECIDING["output_tok_s"] + basis_suffix(basis)


def deciding_word(metric: str, basis: str | None = None) -> str:
    """The short name a page gives a metric that decides a level ('aggregate throughput', 'TTFT p99');
    the column name for any other. ``basis``: ``Comparison.aggregate_basis``, where the aggregate is
    not wall-clock tok/s (:func:`aggregate_word`)."""
    if metric == "output_tok_s":
        return aggregate_word(basis)
    return _DECIDING.get(metric, metric)


def _fit(row: pd.Series | dict[str, Any] | None) -> float:
    if row is None:
        return math.nan
    return float(row["fit_delta_pct"]) if not pd.isna(row["fit_delta_pct"]) else float(row["delta_pct"])


def band_text(row: pd.Series | dict[str, Any] | None) -> str:
    """'+12% [+3%, +21%]' for a delta row with a band, '+12% (no interval)' without; a band clear of 0 at
    a level that is not credible says why (its own measured Δ points the other way)."""
    if row is None:
        return "n/a"
    if pd.isna(row["ci_low_pct"]):
        return f"{_pct(row['delta_pct'])} (no interval)"
    band = f"[{_pct(row['ci_low_pct'])}, {_pct(row['ci_high_pct'])}]"
    # a band clear of 0 at a level that is not credible: its own measured Δ points the other way
    why = (" — its own measured Δ points the other way, so not credible"
           if row.get("credible", 1) == 0 and (row["ci_low_pct"] > 0 or row["ci_high_pct"] < 0) else "")
    if abs(_fit(row) - row["delta_pct"]) >= 0.5:  # the band is around the fitted curve: show both
        return f"{_pct(row['delta_pct'])} (fitted {_pct(_fit(row))} {band}){why}"
    return f"{_pct(row['delta_pct'])} {band}{why}"
