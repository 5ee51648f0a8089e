"""What each column of a result set's ``levels`` table means: label, unit, better direction, definition.

The definitions are DESIGN.md's metric contract in words (the page's Definitions section shows
them); :mod:`specsweep.analyze.metrics` computes them. A column not listed here gets a neutral
fallback from :func:`metric_info`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

__all__ = ["LEVEL_DEFAULTS", "METRICS", "PERCENTILES", "TEXT_COLUMNS", "Better", "MetricInfo", "level_column",
           "metric_info"]

#: the percentiles every latency figure is reported at
PERCENTILES: tuple[int, ...] = (50, 90, 99)
Better = Literal["higher", "lower", "neutral"]


@dataclass(frozen=True)
class MetricInfo:
    """How to label and read one metric column."""

    label: str
    unit: str
    better: Better
    definition: str


METRICS: dict[str, MetricInfo] = {
    "output_tok_s": MetricInfo(
        "Aggregate output throughput", "tok/s", "higher",
        "Σ output tokens of successful requests / measured window (first request sent → last finished)",
    ),
    "steady_output_tok_s": MetricInfo(
        "Steady-state aggregate throughput", "tok/s", "higher",
        "output tokens arriving while all C slots were busy / that span (excludes ramp-up and drain)",
    ),
    "request_per_s": MetricInfo("Request rate", "req/s", "higher", "successful requests / measured window"),
    "user_tok_s_mean": MetricInfo(
        "Per-user decode speed (1/TPOT)", "tok/s", "higher",
        "mean over requests of 1 / TPOT, TPOT = (e2e − TTFT) / (output tokens − 1)",
    ),
    "user_tok_s_p50": MetricInfo("Per-user decode speed, p50", "tok/s", "higher", "median over requests of 1 / TPOT"),
    "user_tok_s_p10": MetricInfo(
        "Per-user decode speed, p10 (slowest tenth)", "tok/s", "higher", "10th percentile over requests of 1 / TPOT"
    ),
    "request_tok_s_mean": MetricInfo(
        "Per-request throughput", "tok/s", "higher",
        "mean over requests of output tokens / end-to-end latency (includes queueing and prefill)",
    ),
    "error_rate": MetricInfo("Error rate", "fraction", "lower", "failed requests / measured requests"),
    "tokens_per_chunk_mean": MetricInfo(
        "Tokens per chunk", "tokens", "neutral", "Σ output tokens / Σ token-carrying chunks"
    ),
    "effective_concurrency": MetricInfo(
        "Effective concurrency (Little's law)", "requests", "neutral",
        "Σ (t_end − t_start) / window: mean requests in flight from the client's side",
    ),
    "decoding_concurrency": MetricInfo(
        "Decoding concurrency", "requests", "neutral",
        "Σ (e2e − TTFT) / window: mean requests between first and last token",
    ),
    "spec_accept_length": MetricInfo(
        "Acceptance length", "tokens/step", "higher",
        "server-side accepted tokens (incl. bonus) per verify step over the level: from the server's per-request "
        "figures when every request carries them, else from /metrics counter deltas (spec_accept_length_source)",
    ),
    "client_cpu_cores": MetricInfo(
        "Client CPU", "cores", "lower", "client CPU seconds / measured window"
    ),
    "client_cpu_share_pct": MetricInfo(
        "Client CPU share of the server's", "%", "lower",
        "100 × client CPU seconds ÷ the local server process tree's CPU seconds over the level (user + system, "
        "/proc/<pid>/stat; specsweep.measure.cpushare); NaN for a server on another machine",
    ),
    "client_cpu_s": MetricInfo(
        "Client CPU time", "s", "lower",
        "user + system CPU seconds of the client process and its children over the level (specsweep.measure.cpushare)",
    ),
    "server_cpu_s": MetricInfo(
        "Server CPU time", "s", "neutral",
        "user + system CPU seconds of the local server's process tree over the level (specsweep.measure.cpushare)",
    ),
    "server_cpu_cores": MetricInfo(
        "Server CPU", "cores", "neutral",
        "the local server process tree's CPU seconds ÷ the level's wall seconds (specsweep.measure.cpushare)",
    ),
    "server_cpu_got_pct": MetricInfo(
        "Engine CPU got", "%", "neutral",
        "100 × server CPU cores ÷ the engine's compute threads (a CPU engine the launcher started): the CPU it "
        "got against what its threads could use (specsweep.analyze.enginecpu)",
    ),
    "output_tok_per_cpu_s": MetricInfo(
        "Aggregate per engine CPU-second", "tok/CPU-s", "higher",
        "aggregate tok/s ÷ server CPU cores: output tokens per second of the engine's CPU (specsweep.analyze.enginecpu)",
    ),
    "spec_draft_share": MetricInfo(
        "Draft share", "fraction", "neutral",
        "llama.cpp: verification steps ÷ decode steps over the level (the steps that carried a draft)",
    ),
    "moe_pct": MetricInfo(
        "Throughput margin of error", "%", "lower",
        "half-width of the 95 % interval of the level's throughput per slot (Σ output tokens ÷ Σ request durations; "
        "the aggregate ÷ C in a closed loop) relative to it: overlapping batch means over consecutive completions, "
        "batches of at least C requests and a quarter of the level (specsweep.measure.stopping); NaN under 4 × C requests",
    ),
    # the reference server only (refserver/schedule_metrics.py): how well the simulator kept its schedule
    "sim_steps": MetricInfo(
        "Simulator steps", "steps", "neutral",
        "Δ specsweep_refserver_steps_total over the level: engine steps the simulated server ran",
    ),
    "sim_step_lag_mean_ms": MetricInfo(
        "Simulator step lag", "ms", "lower",
        "1000 × Δ specsweep_refserver_step_lag_seconds_total ÷ Δ steps: how late the simulated server's steps "
        "woke after their scheduled end, on average (its machine's CPU, not the profile)",
    ),
    "sim_step_lag_pct": MetricInfo(
        "Simulator step lag share", "%", "lower",
        "100 × Δ specsweep_refserver_step_lag_seconds_total ÷ Δ specsweep_refserver_step_seconds_total: the "
        "mean lag as a share of the scheduled step length",
    ),
    "sim_late_steps_pct": MetricInfo(
        "Simulator late steps", "%", "lower",
        "100 × Δ specsweep_refserver_late_steps_total ÷ Δ steps: steps that woke more than 1 ms late",
    ),
    "sim_clock_resyncs": MetricInfo(
        "Simulator clock resyncs", "resets", "lower",
        "Δ specsweep_refserver_clock_resyncs_total: times the simulator fell more than 0.25 s behind and reset "
        "its clock (it then ran slower than its profile)",
    ),
    "sim_resync_lost_s": MetricInfo(
        "Simulator time lost", "s", "lower",
        "Δ specsweep_refserver_resync_lost_seconds_total: schedule time the clock resets dropped",
    ),
}
for _name, _label in (("ttft", "Time to first token"), ("tpot", "Time per output token"),
                      ("e2e", "End-to-end latency"), ("itl", "Inter-token latency (token-normalised)"),
                      ("chunk_gap", "Inter-chunk latency")):
    METRICS[f"{_name}_mean_s"] = MetricInfo(f"{_label}, mean", "s", "lower", f"mean of {_name}")
    for _p in PERCENTILES:
        METRICS[f"{_name}_p{_p}_s"] = MetricInfo(f"{_label}, p{_p}", "s", "lower", f"p{_p} of {_name}")


#: level columns that hold text: what each says
TEXT_COLUMNS: dict[str, str] = {
    "stop_reason": "why the level stopped sending requests: 'fixed count' (requests_per_level), 'margin reached "
                   "(±x % after n requests)' (target_moe_pct; the requests in flight then finished too) or "
                   "'max requests (±x %)' (max_requests_per_level reached first)",
}

#: what a level column reads as in a result set written before it existed
LEVEL_DEFAULTS: dict[str, Any] = {"stop_reason": "fixed count", "moe_pct": math.nan}


def level_column(levels: pd.DataFrame, name: str) -> pd.Series:
    """Column ``name`` of a levels table, or its :data:`LEVEL_DEFAULTS` value on every row where an
    older result set lacks it (measured sweeps sent a fixed count before per-level stopping)."""
    if name in levels.columns:
        return levels[name]
    return pd.Series([LEVEL_DEFAULTS[name]] * len(levels), index=levels.index, name=name,
                     dtype="string" if isinstance(LEVEL_DEFAULTS[name], str) else "float64")


def metric_info(name: str) -> MetricInfo:
    """Label, unit and direction of a metric column (a neutral fallback for unknown names)."""
    return METRICS.get(name, MetricInfo(name.replace("_", " "), "", "neutral", name))
