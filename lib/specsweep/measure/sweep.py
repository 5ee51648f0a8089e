"""Measure one arm at every concurrency level and store a result set (``data/runs/<run_id>/``).

For each (concurrency C, repeat) in order: warm-up requests (excluded), then a closed loop that
keeps exactly C requests in flight until the level's measured requests are done, while
``/metrics`` gauges are polled in the background and its counters read before and after. The
level's rows are written at once and atomically, so an interruption keeps every finished level;
``resume`` continues a run and skips its finished levels. Ctrl-C saves, marks the run incomplete
and says how to resume.

Crash safety: the sweep stops only on evidence that the server is gone (``ABORT_CONSECUTIVE_FAILURES``
failures in a row, or a failed level or warm-up followed by a failed health check), never on one
request. Resuming an unfinished run measures again the level it stopped at (also after a hard
kill: meta.json names the level in progress) and every damaged level (:func:`damaged_levels`);
the first attempt's rows stay in the files, marked ``superseded``. A lock file in the run folder
keeps a second sweep out while one writes it. Everything that needs no server (parameters,
``out_dir``, the run to resume, the prompt file) is checked before a server is contacted or
started, and the run folder is created only after the preflight request succeeded. The API key's
value is masked in every log line, warning, error and file (``specsweep.results.redact``).

Prompts are paired across arms: measured request ``i`` of plan position ``k`` always gets the
same prompt for the same parameters, and no prompt is reused across levels (so a prefix cache
cannot make a later level look faster).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.enginecpu import engine_threads
from specsweep.analyze.metrics import (
    SIM_LAG_WARN_MS,
    SOURCE_COUNTERS,
    LevelAcceptance,
    acceptance_from_requests,
    level_metrics,
    requests_frame,
)
from specsweep.errors import RunError
from specsweep.markup import md_text
from specsweep.measure.config import WARMUP_OUTPUT_TOKENS, ConfigError, SweepConfig, parse_config
from specsweep.measure.cpushare import CpuShare, level_suffix
from specsweep.measure.loadgen import LevelResult, LoadGenerator
from specsweep.measure.plausibility import PREFIX as PLAUSIBILITY_PREFIX
from specsweep.measure.plausibility import implausible_count, padded_outputs, reject_implausible, suspect_count
from specsweep.measure.probe import (
    FlushOutcome,
    MetricsPoller,
    ProbeError,
    ServerProbe,
    TokenCounter,
    acceptance_from_counters,
    erase_llamacpp_slots,
    probe,
    spec_level_figures,
    try_flush_prefix_cache,
)
from specsweep.measure.stopping import FIXED_COUNT, StopRule, level_margin_pct
from specsweep.notebooks.terminal import progress_stream
from specsweep.results import provenance
from specsweep.results.meta import Meta
from specsweep.results.outpath import PathError, writable_dir
from specsweep.results.redact import redact_exception, redact_text
from specsweep.results.store import (
    SCHEMA_VERSION,
    SchemaError,
    append_level,
    finished_levels,
    live_levels,
    load_result_set,
    lock_run,
    read_meta,
    write_meta,
)
from specsweep.servers import SIM_COUNTERS, Dialect, dialect_of
from specsweep.servers.dialect import CACHE_SALT_NOTE
from specsweep.workloads.prompts import (
    RANDOM_IDS,
    RANDOM_TEXT,
    Workload,
    check_vocabulary,
    explain_rejection,
    make_workload,
    warmup_workload,
)

WARMUP_INDEX_BASE = 1_000_000_000
#: meta.json fields that must match for a run to be resumed (a changed timeout would change what counts as failed)
RESUME_KEYS = ("concurrency", "repeats", "requests_per_level", "warmup_requests", "temperature", "api", "seed",
               "request_timeout_s", "target_moe_pct", "max_requests_per_level")
#: a level is damaged (measured again on resume) when this fraction of its requests failed ...
DAMAGED_ERROR_RATE = 0.5
#: ... or at least this fraction, and more than twice the median of the run's other levels
RELATIVE_ERROR_RATE = 0.1
#: the sweep stops after this many failed requests in a row (warm-ups included)
ABORT_CONSECUTIVE_FAILURES = 16


@dataclass
class SweepResult:
    """What a sweep produced."""

    run_dir: Path
    meta: Meta
    levels: pd.DataFrame
    warnings: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.meta.complete


# ----------------------------------------------------------------------------------- run folders


def _find_resume_dir(cfg: SweepConfig, log: Callable[[str], None]) -> Path:
    """The run folder ``resume`` names; ``latest``: the newest incomplete run whose meta.json arm is exactly ``arm``."""
    out = Path(cfg.out_dir)
    if cfg.resume == "latest":
        candidates = []
        for folder in sorted(p.parent for p in out.glob("*/meta.json")):
            try:
                meta = read_meta(folder)
            except SchemaError as exc:
                log(f"resume latest: skipped {folder} ({exc})")
                continue
            if meta.arm == cfg.arm and meta.kind == "run" and not meta.complete:
                candidates.append((meta.started_utc or "", folder.name, folder))
        if not candidates:
            raise ConfigError(f"parameter 'resume': no incomplete run of arm '{cfg.arm}' in {out}; "
                              "leave resume empty to start a new run")
        return max(candidates)[2]
    given = Path(cfg.resume)
    for candidate in (given, out / cfg.resume):
        if (candidate / "meta.json").is_file():
            return candidate
    raise ConfigError(f"parameter 'resume': {cfg.resume!r} is not a run folder (no meta.json there or in {out}); "
                      "give a run folder, its run id, 'latest', or leave it empty")


def _check_resumable(run_dir: Path, meta: Meta, sweep: dict[str, Any], workload: dict[str, Any], arm: str) -> None:
    diffs = []
    if meta.arm != arm:
        diffs.append(f"arm {meta.arm!r} vs {arm!r}")
    for key in RESUME_KEYS:
        if getattr(meta.sweep, key) != sweep.get(key):
            diffs.append(f"{key} {getattr(meta.sweep, key)!r} vs {sweep.get(key)!r}")
    for key in ("kind", "input_tokens", "output_tokens", "seed", "dataset_digest", "output_length"):
        old = getattr(meta.workload, key)
        if old != workload.get(key):
            diffs.append(f"workload.{key} {old!r} vs {workload.get(key)!r}")
    if diffs:
        raise ConfigError(f"parameter 'resume': {run_dir} was measured with different parameters ({'; '.join(diffs)}); "
                          "resume with the same parameters, or start a new run")


def _check_out_dir(cfg: SweepConfig) -> None:
    """Fail (naming ``out_dir``) when result sets cannot be written there — before any server is touched."""
    try:
        writable_dir(cfg.out_dir, "parameter 'out_dir':")
    except PathError as exc:
        raise ConfigError(str(exc)) from None


@dataclass
class _Resume:
    """A run to continue, read and checked before any server is contacted."""

    run_dir: Path
    meta: Meta
    levels: pd.DataFrame


def _prepare_resume(run_dir: Path, cfg: SweepConfig, sweep_params: dict[str, Any], workload: Workload) -> _Resume:
    """The run to resume: its meta.json and finished levels validated by the store (files named), parameters checked."""
    meta = read_meta(run_dir)
    _check_resumable(run_dir, meta, sweep_params, workload.describe(), cfg.arm)
    if not os.access(run_dir, os.W_OK):
        raise ConfigError(f"parameter 'resume': cannot write in {run_dir}; resume a run folder you can write to")
    return _Resume(run_dir, meta, live_levels(run_dir))


def damaged_levels(levels: pd.DataFrame) -> dict[tuple[int, int], str]:
    """Levels whose failures say the server broke down during them, not how it performs.

    A level is damaged when at least ``DAMAGED_ERROR_RATE`` of its requests failed, or when at
    least ``RELATIVE_ERROR_RATE`` failed and that is more than twice the median error rate of the
    run's other levels. Resume measures damaged levels of an unfinished run again.
    """
    out: dict[tuple[int, int], str] = {}
    if levels.empty or "error_rate" not in levels:
        return out
    rates = pd.to_numeric(levels["error_rate"], errors="coerce").fillna(1.0).to_numpy()
    for i, (c, r) in enumerate(levels[["concurrency", "repeat"]].itertuples(index=False)):
        others = np.delete(rates, i)
        typical = float(np.median(others)) if len(others) else 0.0
        if rates[i] >= DAMAGED_ERROR_RATE:
            out[(int(c), int(r))] = f"{rates[i]:.0%} of its requests failed"
        elif rates[i] >= RELATIVE_ERROR_RATE and rates[i] > 2 * typical:
            out[(int(c), int(r))] = f"{rates[i]:.0%} of its requests failed, the run's other levels {typical:.0%}"
    return out


def _levels_to_remeasure(resume: _Resume, log: Callable[[str], None]) -> tuple[set[tuple[int, int]], list[list[int]]]:
    """(levels that count as finished, levels whose requests already reached the server and run again).

    In an unfinished run, a damaged level (:func:`damaged_levels`) and the level the run stopped
    at are measured again; their old rows stay in the files, marked superseded.
    """
    meta = resume.meta
    done = {(int(c), int(r)) for c, r in resume.levels[["concurrency", "repeat"]].itertuples(index=False)}
    if meta.complete:
        return done, []
    rerun: list[list[int]] = []
    stopped = [(meta.interrupted or {}).get("level"), (meta.failed or {}).get("level"), meta.in_progress]
    for level in stopped:
        if level and list(level) not in rerun:
            rerun.append(list(level))  # its first requests reached the server: a prefix cache may hold them
    for key, why in sorted(damaged_levels(resume.levels).items()):
        log(f"C={key[0]} repeat {key[1]}: measured again ({why}); the first attempt is kept, marked superseded")
        if list(key) not in rerun:
            rerun.append(list(key))
    for level in rerun:
        done.discard((level[0], level[1]))
    return done, rerun


# ------------------------------------------------------------------------------------ the levels


def _prompt_offsets(cfg: SweepConfig) -> dict[tuple[int, int], int]:
    """Where each level's prompts start: after every earlier level's most requests, so a level that
    stops early leaves the next level's prompts where they would be (paired across arms)."""
    offsets, total = {}, 0
    for key in cfg.plan():
        offsets[key] = total
        total += cfg.max_requests_for(key[0])
    return offsets


def server_figures(
    requests: pd.DataFrame, samples: list[tuple[float, str, float]], window: tuple[float, float],
    before: dict[str, float], after: dict[str, float], server: str,
) -> dict[str, Any]:
    """Server-side figures of one level: acceptance length, max running/queued, KV usage.

    Acceptance (``spec_accept_length``, tokens per verify step): from the server's per-request
    figures when every successful request carries them (``metrics.acceptance_from_requests``; for
    a server whose figures count every target step, llama.cpp, tokens per target step, its
    counters' per-drafted-step figure kept beside), else from ``/metrics`` counter deltas; ``spec_accept_length_source`` names which
    (``metrics.SOURCE_PER_REQUEST`` / ``SOURCE_COUNTERS``) and ``spec_accept_length_formula``
    how. ``spec_accept_length_counters`` keeps the counters' figure whenever they moved, as a
    cross-check. ``spec_draft_acceptance_rate`` and ``spec_accept_rate_pos_<i>`` come from the same
    source as the acceptance length where it has them, else from counter deltas.

    ``samples``: polled gauges (perf_counter seconds, name, value); only those inside ``window``
    (the level's first send to last finish) count, and a gauge needs two of them.
    """
    out: dict[str, Any] = {}
    dialect = dialect_of(server)
    counted = acceptance_from_counters(before, after, server)
    acc = acceptance_from_requests(requests)
    timings = dialect.timings
    if timings is not None and acc is not None:
        # tokens per target step, as every other server's figure; the counters' per-drafted-step figure
        # stays beside it (spec_accept_length_counters) with the share of steps that drafted
        out.update(timings.step_figures(requests, before, after))
        acc = LevelAcceptance(acc.accept_length, acc.source, timings.timings_formula, acc.detail)
    if acc is None and counted is not None:
        acc = LevelAcceptance(counted, SOURCE_COUNTERS, dialect.acceptance_formula, {})
    if acc is not None:
        out.update(spec_accept_length=acc.accept_length, spec_accept_length_source=acc.source,
                   spec_accept_length_formula=acc.formula)
    if counted is not None:
        out["spec_accept_length_counters"] = counted
    out.update(spec_level_figures(before, after))
    if acc is not None:
        out.update(acc.detail)
    for key in ("generation_tokens", "requests"):
        if key in before and key in after:
            out[f"server_{key}_delta"] = after[key] - before[key]
    out.update(simulator_schedule_figures(before, after))
    by_name: dict[str, list[float]] = {}
    for t, name, value in samples:
        if window[0] <= t <= window[1]:
            by_name.setdefault(name, []).append(value)
    # a gauge sampled fewer than twice inside the level says nothing about it
    by_name = {k: v for k, v in by_name.items() if len(v) >= 2}
    if "running_requests" in by_name:
        out["server_running_max"] = max(by_name["running_requests"])
        out["server_running_mean"] = float(np.mean(by_name["running_requests"]))
    if "queued_requests" in by_name:
        out["server_queued_max"] = max(by_name["queued_requests"])
    if "kv_usage" in by_name:
        out["server_kv_usage_max"] = max(by_name["kv_usage"])
    return out


def simulator_schedule_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """How well a reference server kept its profile's schedule over one level (``sim_*`` columns;
    none for a real server, which has no such counters): steps run, their mean lag (ms, and % of the
    scheduled step length), the share woken more than 1 ms late (%), clock resyncs and the schedule
    time they dropped (s). See ``refserver/schedule_metrics.py``."""
    if not all(k in before and k in after for k in SIM_COUNTERS):
        return {}
    d = {k: after[k] - before[k] for k in SIM_COUNTERS}
    if d["sim_steps"] <= 0 or any(v < 0 for v in d.values()):  # none ran, or the server restarted
        return {}
    return {
        "sim_steps": d["sim_steps"],
        "sim_step_lag_mean_ms": 1e3 * d["sim_step_lag_s"] / d["sim_steps"],
        "sim_step_lag_pct": 100 * d["sim_step_lag_s"] / d["sim_step_s"] if d["sim_step_s"] > 0 else math.nan,
        "sim_late_steps_pct": 100 * d["sim_late_steps"] / d["sim_steps"],
        "sim_clock_resyncs": d["sim_clock_resyncs"],
        "sim_resync_lost_s": d["sim_resync_lost_s"],
    }


def summarise_level(
    result: LevelResult, *, cfg: SweepConfig, run_id: str, concurrency: int, repeat: int, prompt_offset: int,
    requested_tokens: int, server: str, samples: list[tuple[float, str, float]],
    before: dict[str, float], after: dict[str, float], started_utc: str, workload: Workload | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(level row, request rows, server-metric rows) of one finished level.

    Each request row carries its prompt's ``category`` (``workload.category(prompt_id)``;
    ``"all"`` without a workload or for formats without categories) and the tokens it asked for
    (``requested_output_tokens``). ``short_outputs`` counts requests that returned fewer than
    they asked for with ``ignore_eos`` only: with natural lengths a short output is the point.
    The records' chunk times become level-relative (``requests_frame(in_place=True)``).
    """
    t0 = result.t_start
    prompt_ids = [prompt_offset + i for i in result.request_index]
    # a count the server could not have produced makes its request an error row, with the reason
    implausible = reject_implausible(result.records,
                                     [workload.max_tokens(i) if workload else requested_tokens for i in prompt_ids])
    # in place: the records' chunk times become the frame's (level-relative) timelines, not a copy of them
    req = requests_frame(result.records, t0=t0, run_id=run_id, arm=cfg.arm, concurrency=concurrency, repeat=repeat,
                         request_indices=result.request_index, prompt_ids=prompt_ids, keep_chunks=cfg.keep_chunks,
                         in_place=True)
    req["category"] = pd.Series([workload.category(i) if workload else "all" for i in prompt_ids],
                                index=req.index, dtype="string")
    # tokens each request asked for (output_length="reference": its prompt's reference length)
    req["requested_output_tokens"] = [workload.max_tokens(i) if workload else requested_tokens for i in prompt_ids]
    lv: dict[str, Any] = level_metrics(req, concurrency)
    lv["moe_pct"] = level_margin_pct(req, concurrency)  # what the level's count achieved, stopping rule or not
    # natural lengths: short outputs are expected, not a warning
    ok = req["error"].isna() & req["output_tokens"].notna() & (workload is None or workload.ignore_eos)
    lv.update(
        run_id=run_id, arm=cfg.arm, concurrency=concurrency, repeat=repeat, started_utc=started_utc,
        requested_output_tokens=requested_tokens,
        short_outputs=int((ok & (req["output_tokens"] < req["requested_output_tokens"])).sum()),
        warmup_requests=cfg.warmups_for(concurrency),
        client_cpu_cores=result.client_cores, client_mean_in_flight=result.mean_in_flight,
        client_max_in_flight=result.max_in_flight, client_loop_lag_p99_s=result.loop_lag_p99_s,
        client_workers=result.workers, implausible_counts=len(implausible),
        suspect_counts=sum(suspect_count(rec) is not None for rec in result.records),
    )
    lv.update(server_figures(req, samples, (result.t_start, result.t_end), before, after, server))
    level = pd.DataFrame([lv])
    metrics = pd.DataFrame(
        [{"concurrency": concurrency, "repeat": repeat, "t_s": t - t0, "name": name, "value": value}
         for t, name, value in samples],
        columns=["concurrency", "repeat", "t_s", "name", "value"],
    )
    return level, req, metrics


# -------------------------------------------------------------------------------------- progress


def _close_bars() -> None:
    """Close every progress bar still open (a Ctrl-C can land between a bar's creation and its
    ``finally``): one left to the interpreter's exit writes to a kernel stream already gone and
    prints a traceback under the resume hint."""
    tqdm_mod = sys.modules.get("tqdm")
    tqdm_cls = tqdm_mod.tqdm if tqdm_mod is not None else None
    for bar in list(getattr(tqdm_cls, "_instances", ()) or ()):
        with contextlib.suppress(Exception):
            bar.close()


class _Progress:
    """A tqdm bar per level with finished requests and an estimated live tok/s, redrawn at most
    every :attr:`REFRESH_S` seconds until the level's last request (each redraw in a notebook
    kernel is a message to the front end: about 4 ms of the client's CPU per second at one
    request when every finished request redrew it, a fifth of what the client spent there)."""

    #: seconds between redraws while requests are still running (the bar's own ``mininterval``)
    REFRESH_S = 1.0

    def __init__(self, enabled: bool, total: int, desc: str, tokens_per_request: int) -> None:
        self.bar = None
        self.t0 = self.shown = time.perf_counter()
        self.tokens = tokens_per_request
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="req", file=progress_stream(), mininterval=self.REFRESH_S,
                            leave=True, dynamic_ncols=False, ncols=100)

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            return
        self.bar.n = done
        now = time.perf_counter()
        last = done >= total
        if not last and now - self.shown < self.REFRESH_S:
            return  # the count is kept; the next redraw (or close) shows it
        self.shown = now
        elapsed = now - self.t0
        if elapsed > 0:
            self.bar.set_postfix_str(f"≈{done * self.tokens / elapsed:,.0f} tok/s", refresh=False)
        if not last:  # the last state is drawn once, by close()
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ------------------------------------------------------------------------------------------ main


@contextlib.contextmanager
def _endpoint(cfg: SweepConfig, log: Callable[[str], None],
              log_path: Path | None = None) -> Iterator[tuple[str, dict[str, Any] | None]]:
    if not cfg.embedded:
        yield cfg.endpoint, None
        return
    from specsweep.refserver.launch import RefServer

    spec = cfg.resolved_embedded_spec()
    args = list(cfg.embedded_args)
    log(f"starting the embedded reference server (simulated): profile {cfg.embedded_profile}, spec {spec}"
        + (f", args {' '.join(args)}" if args else ""))
    with RefServer(profile=cfg.embedded_profile, spec=spec, args=args, log_path=log_path) as server:
        assert server.url is not None  # entering the server started it
        yield server.url, {"profile": cfg.embedded_profile, "spec": spec, "args": args}


def _keep_server_log(server_log: dict[str, Path], log: Callable[[str], None]) -> None:
    """Move the embedded server's log (``server_log["path"]``) into the run folder as ``server.log``
    (``server-<stamp>.log`` when a resumed run has one), API key masked. Without a run folder (the
    sweep failed before one existed) the log stays where it is and its path is logged."""
    src, run_dir = server_log["path"], server_log.get("run_dir")
    if not src.is_file():
        return
    if run_dir is None:
        log(f"the embedded server's log: {src}")
        return
    dst = run_dir / "server.log"
    if dst.exists():
        dst = run_dir / src.name.replace("embedded-", "")
    dst.write_text(redact_text(src.read_text(encoding="utf-8", errors="replace")), encoding="utf-8")
    src.unlink()


def check_prompts_fit(workload: Workload, info: ServerProbe) -> None:
    """Refuse, before any request, a workload of token IDs the server's model does not have."""
    try:
        check_vocabulary(workload, info.vocab_size, info.flavour, f"{info.base_url}{info.vocab_source or ''}")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def count_tokens(records: list[Any], counter: TokenCounter | None) -> None:
    """Give records the server gave no counts for the count of the server's tokenizer (in place)."""
    if counter is not None and counter.available:
        counter.recount(records)


def preflight(gen: LoadGenerator, info: ServerProbe, workload: Workload, cfg: SweepConfig,
              counter: TokenCounter | None = None, seen: dict[str, Any] | None = None) -> list[str]:
    """One request through the chosen flavour; raise on failure, warn on short output or no counts.

    ``workload``: the preflight/warm-up prompts (:func:`~specsweep.workloads.prompts.warmup_workload`), of
    the measured workload's kind. ``counter``: counts tokens with the server's ``/tokenize`` when
    the server reports none. ``seen``: receives the preflight's ``token_source`` (so that a
    server that changes how it counts later is noticed).
    """
    tokens = min(workload.output_tokens, 32)
    body = workload.bodies(info.flavour, [WARMUP_INDEX_BASE * 2], model=info.model, temperature=cfg.temperature,
                           output_tokens=tokens, extra=dialect_of(info.server).spec_request_options(info.flavour))
    rec = None
    for _ in range(3):  # a server that fails a fraction of requests should not fail the preflight
        result = gen.run_level(body, 1)
        rec = result.records[0] if result.records else None
        if rec is not None and not rec.error:
            break
    if rec is None or rec.error:
        why = explain_rejection(rec.error, workload, info.flavour, info.vocab_size) if rec and rec.error else "no response"
        raise ProbeError(f"preflight request to {info.base_url} ({info.flavour}, model {info.model!r}) failed: {why}. "
                         f"The server offers: {', '.join(info.flavours)}; models: {', '.join(info.models) or 'unknown'}")
    warnings = []
    count_tokens([rec], counter)
    if seen is not None:
        seen["token_source"] = rec.token_source
    bad_count = implausible_count(rec, tokens)
    if bad_count:
        warnings.append(f"The preflight request's count is impossible ({bad_count}); every request with such a count "
                        "is recorded as an error row, not measured.")
    if rec.token_source == "tokenize":
        warnings.append("The server reports no token counts (no usage / meta_info), so output tokens are counted "
                        "from the returned text with the server's own tokenizer (POST /tokenize; token_source "
                        "'tokenize').")
    elif rec.token_source == "chunks":
        why = f" and {counter.why}" if counter is not None and counter.why else ""
        warnings.append("The server reports no token counts (no usage / meta_info)" + why + ", so tokens are "
                        "counted from chunks: a lower bound under speculative decoding, where one chunk carries "
                        "several tokens.")
    if rec.output_tokens is not None and rec.output_tokens < tokens:
        warnings.append(f"The server returned {int(rec.output_tokens)} of {tokens} requested tokens with ignore_eos "
                        "set: it may not honour ignore_eos, so output lengths (and work per request) can differ "
                        "between arms. Levels record short outputs in 'short_outputs'.")
    return warnings


class SweepAborted(RunError, RuntimeError):
    """The evidence says the server is gone (many failures in a row, or failures and a failed health check).

    ``level``: the saved (concurrency, repeat) the abort ended, if any; resume measures it again.
    """

    def __init__(self, message: str, level: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.level = list(level) if level else None


#: server settings that must match for a run to be resumed against a (restarted) server
RESUME_SERVER_KEYS = ("name", "speculative_algorithm", "speculative_num_steps", "speculative_num_draft_tokens",
                      "speculative_eagle_topk", "max_running_requests", "simulated")


def _check_same_server(run_dir: Path, meta: Meta, info: ServerProbe) -> None:
    diffs = []
    if meta.api != info.flavour:
        diffs.append(f"API {meta.api!r} vs {info.flavour!r}")
    if meta.model != info.model:
        diffs.append(f"model {meta.model!r} vs {info.model!r}")
    now = info.snapshot()
    for key in RESUME_SERVER_KEYS:
        if meta.server.get(key) != now.get(key):
            diffs.append(f"server {key} {meta.server.get(key)!r} vs {now.get(key)!r}")
    if diffs:
        raise ConfigError(f"parameter 'resume': the server now differs from the one {run_dir} measured "
                          f"({'; '.join(diffs)}); resume against the same configuration, or start a new run")


def _new_run(cfg: SweepConfig, info: ServerProbe, workload: Workload, sweep_params: dict[str, Any],
             embedded: dict[str, Any] | None) -> tuple[Path, Meta]:
    """A new run folder (created only now, after the preflight passed) and its meta.json record."""
    run_id = f"{provenance.utc_stamp()}-{cfg.arm}"
    run_dir = Path(cfg.out_dir) / run_id
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        raise ConfigError(f"parameter 'out_dir': {run_dir} already exists; wait a second or pick another out_dir") from None
    meta = Meta.model_validate({
        "schema_version": SCHEMA_VERSION, "kind": "run", "run_id": run_id, "arm": cfg.arm,
        "label": cfg.label or cfg.arm, "complete": False, "level_only": False,
        "tool": provenance.tool(), "started_utc": provenance.utc_now(), "finished_utc": None,
        "endpoint": info.base_url, "embedded_server": embedded, "api": info.flavour, "model": info.model,
        "server": info.snapshot(), "workload": workload.describe(), "sweep": sweep_params,
        "environment": provenance.environment(), "metric_definitions": {}, "warnings": [],
    })
    return run_dir, meta


def _resumed_meta(resume: _Resume, cfg: SweepConfig, log: Callable[[str], None]) -> tuple[Meta, set[tuple[int, int]]]:
    """meta.json of a resumed run, updated (resume time, levels measured again, a changed label) and its finished levels."""
    meta = resume.meta
    done, rerun = _levels_to_remeasure(resume, log)
    meta.resumed_utc = [*meta.resumed_utc, provenance.utc_now()]
    meta.rerun_levels = [*meta.rerun_levels, *(level for level in rerun if level not in meta.rerun_levels)]
    meta.unset("in_progress")
    if cfg.label is not None and cfg.label != meta.label:
        meta.changes_on_resume = [*meta.changes_on_resume,
                                  {"utc": provenance.utc_now(), "parameter": "label", "old": meta.label, "new": cfg.label}]
        log(f"label changed on resume: {meta.label!r} → {cfg.label!r} (recorded in meta.json changes_on_resume)")
        meta.label = cfg.label
    log(f"resuming {resume.run_dir}: {len(done)} of {len(cfg.plan())} levels already finished")
    return meta, done


HEALTH_PATHS = ("/health", "/v1/models")


def server_alive(base_url: str, timeout_s: float = 5.0) -> tuple[bool, str]:
    """(alive, what was seen): does the server still answer ``/health`` (or ``/v1/models``) below HTTP 500?"""
    import httpx

    from specsweep.measure.client import auth_headers
    from specsweep.measure.tls import verify_for

    seen = []
    with httpx.Client(timeout=timeout_s, headers=auth_headers(), verify=verify_for(base_url, trust_env=True)) as client:
        for path in HEALTH_PATHS:
            try:
                status = client.get(base_url + path).status_code
            except httpx.HTTPError as exc:
                seen.append(f"GET {path}: {type(exc).__name__}")
                continue
            if status < 500 and status != 404:
                return True, f"GET {path}: HTTP {status}"
            seen.append(f"GET {path}: HTTP {status}")
    return False, "; ".join(seen)


class _Evidence:
    """Failures in completion order, for abort decisions made on evidence, never on one request.

    The sweep stops when ``ABORT_CONSECUTIVE_FAILURES`` requests in a row failed (across warm-ups
    and levels), or when a level or its warm-up went badly and the server's health check fails.
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.streak = 0

    def add(self, records: list[Any]) -> None:
        for rec in sorted(records, key=lambda r: r.t_end):
            self.streak = 0 if rec.ok else self.streak + 1

    def check(self, where: str, trouble: str | None, level: tuple[int, int] | None = None) -> None:
        """Raise :class:`SweepAborted` when the evidence says the server is gone.

        ``trouble``: what went wrong here; ``level``: the saved level the abort ends (re-measured on resume).
        """
        if self.streak >= ABORT_CONSECUTIVE_FAILURES:
            raise SweepAborted(f"{where}: {self.streak} requests in a row failed ({trouble or 'see the error column'}); "
                               "the server is not answering — stopping", level)
        if trouble:
            alive, seen = server_alive(self.base_url)
            if not alive:
                raise SweepAborted(f"{where}: {trouble}, and the health check failed ({seen}); the server is not "
                                   "answering — stopping", level)


def _workload_warnings(cfg: SweepConfig, workload: Workload, server_info: dict[str, Any]) -> list[str]:
    """Where a prompt set is too small for the sweep, so that a prefix cache can serve repeats.

    Within a level nothing empties the cache; across levels ``flush_cache`` does (where the server
    offers a route: ``meta.prefix_cache_flush`` says whether it did). None where the server's own
    ``server_info`` says it keeps no prefix cache (SGLang's ``disable_radix_cache: true``)."""
    n = len(workload.prompts)
    if not n or server_info.get("disable_radix_cache") is True:
        return []
    per_level = max(cfg.max_requests_for(c) for c, _ in cfg.plan())
    needed = sum(cfg.max_requests_for(c) for c, _ in cfg.plan())
    if per_level > n:
        return [f"The prompt set has {n} prompts but a level sends up to {per_level} measured requests, so prompts "
                "repeat within a level and a server's prefix cache can serve the repeats (shorter TTFT)."]
    if needed > n and not cfg.flush_cache:
        return [f"The prompt set has {n} prompts but the sweep sends {needed} measured requests, so prompts repeat "
                "across levels and a server's prefix cache can serve the repeats (shorter TTFT); flush_cache=true "
                "empties it before each level where the server offers a route."]
    return []


def run_sweep(
    params: dict[str, Any] | SweepConfig,
    *,
    progress: bool = True,
    stop: threading.Event | None = None,
    log: Callable[[str], None] = print,
) -> SweepResult:
    """Measure one arm at every level of ``params`` (see ``config``) and return its result set.

    Every log line, warning and error message has the API key's value masked (``redact``).
    Ctrl-C (or ``stop``) raises :class:`SweepInterrupted`, which says how to resume.
    """
    def masked_log(text: str) -> None:
        log(redact_text(text))

    try:
        return _run_sweep(params, progress=progress, stop=stop, log=masked_log)
    except SweepInterrupted as exc:
        masked_log(str(exc))
        _tell_terminal(exc)
        raise
    except KeyboardInterrupt:
        interrupted = SweepInterrupted(None, 0)  # before any level: nothing new was saved
        _tell_terminal(interrupted)
        raise interrupted from None
    except BaseException as exc:
        redact_exception(exc)
        raise


def _sweep_params(cfg: SweepConfig) -> dict[str, Any]:
    return {
        "concurrency": cfg.concurrency, "repeats": cfg.repeats,
        "requests_per_level": {str(c): cfg.requests_for(c) for c in cfg.concurrency},
        "requests_per_level_rule": cfg.requests_per_level if cfg.requests_per_level == "auto" else "fixed",
        **({"min_requests_per_level": cfg.min_requests_per_level} if cfg.requests_per_level == "auto" else {}),
        **({"target_moe_pct": cfg.target_moe_pct,
            "max_requests_per_level": {str(c): cfg.max_requests_for(c) for c in cfg.concurrency}}
           if cfg.target_moe_pct is not None else {}),
        "warmup_requests": {str(c): cfg.warmups_for(c) for c in cfg.concurrency},
        "warmup_output_tokens": WARMUP_OUTPUT_TOKENS, "request_timeout_s": cfg.request_timeout_s,
        "temperature": cfg.temperature, "api": cfg.api, "seed": cfg.seed, "closed_loop": True,
        "client_workers": cfg.client_workers, "metrics_interval_s": cfg.metrics_interval_s,
        "flush_cache": cfg.flush_cache,
    }


def _run_sweep(params: dict[str, Any] | SweepConfig, *, progress: bool, stop: threading.Event | None,
               log: Callable[[str], None]) -> SweepResult:
    cfg = parse_config(params)
    output_tokens = cfg.resolved_output_tokens()
    workload_value, workload_reason = cfg.resolved_workload()
    workload = make_workload(workload_value, cfg.input_tokens, output_tokens, cfg.seed, cfg.output_length)
    # warm-up and preflight prompts never overlap measured ones (a prefix cache would flatter them):
    # prompts of the measured workload's kind from their own index range (never IDs it does not use)
    warm_workload = warmup_workload(workload)
    sweep_params = _sweep_params(cfg)
    # everything that can be checked without a server is checked before one is contacted or started
    _check_out_dir(cfg)
    with contextlib.ExitStack() as stack:
        resume = None
        if cfg.resume:
            resume_dir = _find_resume_dir(cfg, log)
            stack.enter_context(lock_run(resume_dir))  # read it only once no other sweep writes it
            resume = _prepare_resume(resume_dir, cfg, sweep_params, workload)
        server_log: dict[str, Path] = {"path": Path(cfg.out_dir) / f"embedded-server-{provenance.utc_stamp()}.log"}
        if cfg.embedded:  # registered before the server starts, so it runs after the server stopped
            stack.callback(_keep_server_log, server_log, log)
        url, embedded = stack.enter_context(_endpoint(cfg, log, server_log["path"]))
        if workload_reason != "given":
            log(f"workload {workload_value} ({workload_reason})")
        info = probe(url, cfg.api, cfg.model)
        api_reason = choose_chat(cfg, info, workload)
        check_prompts_fit(workload, info)
        log(f"{info.base_url}: {info.server}{' (simulated)' if info.simulated else ''}, API {info.flavour}, "
            f"model {info.model}, max_running_requests {info.server_info.get('max_running_requests', 'unknown')}, "
            f"speculative {info.server_info.get('speculative_algorithm') or 'off/unknown'}")
        if resume is not None:
            _check_same_server(resume.run_dir, resume.meta, info)
        gen = stack.enter_context(LoadGenerator(info.base_url, info.flavour, max_concurrency=max(cfg.concurrency),
                                                workers=cfg.client_workers, timeout_s=cfg.request_timeout_s,
                                                read_timeout_s=cfg.request_timeout_s))
        counter = TokenCounter(info.base_url, info.server, info.model)
        stack.callback(counter.close)
        seen: dict[str, Any] = {}
        preflight_warnings = preflight(gen, info, warm_workload, cfg, counter, seen)
        if resume is None:
            run_dir, meta = _new_run(cfg, info, workload, sweep_params, embedded)
            meta.workload.chosen_by = workload_reason  # "given", or the auto rule and its reason
            if api_reason:
                meta.api_chosen_by = api_reason
            stack.enter_context(lock_run(run_dir))
            done: set[tuple[int, int]] = set()
        else:
            run_dir = resume.run_dir
            meta, done = _resumed_meta(resume, cfg, log)
        server_log["run_dir"] = run_dir
        meta.preflight_token_source = seen.get("token_source")
        meta.warnings = warnings = list(meta.warnings)

        def warn(text: str) -> None:
            text = redact_text(text)
            if text not in warnings:
                warnings.append(text)
                log("⚠ " + text)

        for w in preflight_warnings + _workload_warnings(cfg, workload, info.server_info or {}):
            warn(w)
        write_meta(run_dir, meta)  # rerun_levels and the resume time are on disk before anything is measured
        todo = [key for key in cfg.plan() if key not in done]
        if not todo and meta.complete:
            log(f"{run_dir}: every level is finished and the run is complete; nothing to measure")
        else:
            _measure_levels(cfg, info, gen, workload, warm_workload, run_dir, meta, done, warn, stop, progress, log,
                            counter)
            meta.complete = True
            meta.finished_utc = provenance.utc_now()
            meta.unset("interrupted")
            meta.unset("failed")
            write_meta(run_dir, meta)
    rs = load_result_set(run_dir)
    return SweepResult(run_dir=run_dir, meta=rs.meta, levels=rs.levels, warnings=list(warnings))


def choose_chat(cfg: SweepConfig, info: ServerProbe, workload: Workload) -> str | None:
    """With ``api="auto"``, send a conversational workload (a prompt set of text or chat messages:
    ``builtin``, a prompt file, a dataset) to the chat route when the server's settings say its
    model has a chat template (``has_chat_template``: llama.cpp's ``/props`` ``chat_template``, the
    only dialect that reports one): an instruct model then sees its template and answers instead
    of continuing the prompt. A set with token-ID prompts stays as probed (chat takes no IDs). Sets
    ``info.flavour``; returns the reason (kept as ``meta.api_chosen_by``), or None when the flavour
    stays as probed."""
    if (cfg.api != "auto" or not _conversational(workload)
            or not info.server_info.get("has_chat_template") or "openai-chat" not in info.flavours):
        return None
    info.flavour = "openai-chat"
    return (f"auto: the model has a chat template (/props chat_template) and the {workload.kind} workload is "
            "conversational, so its prompts go to /v1/chat/completions as user messages")


def _conversational(workload: Workload) -> bool:
    """A prompt set (not random IDs or words) none of whose prompts is token IDs."""
    if workload.kind in (RANDOM_IDS, RANDOM_TEXT) or not workload.prompts:
        return False
    return not any(isinstance(p, list) and p and isinstance(p[0], int) for p in workload.prompts)


def prompt_cache_plan(cfg: SweepConfig, info: ServerProbe) -> tuple[dict[str, Any], str | None, bool]:
    """How a sweep of a server whose prompt cache lives in slots (the dialect's ``erase_slots``:
    llama.cpp) keeps that cache from serving one level what another left: (extra request-body
    keys, what ``meta.prefix_cache_flush`` says, erase slots before each level). With
    ``flush_cache``: erase every slot (``POST /slots/{id}?action=erase``) where the server allows
    it, else send the dialect's ``no_cache_options`` (llama.cpp: ``cache_prompt: false``) on every
    request (no reuse at all, the shared chat-template prefix included). Other servers: ({}, None,
    False); their routes are tried per level by :func:`specsweep.measure.probe.try_flush_prefix_cache`."""
    dialect = dialect_of(info.server)
    if not dialect.erase_slots or not cfg.flush_cache:
        return {}, None, False
    how, why = erase_llamacpp_slots(info.base_url)
    if how is not None:
        return {}, how, True
    keys = ", ".join(f"{key}: {json.dumps(value)}" for key, value in dialect.no_cache_options.items())
    return dict(dialect.no_cache_options), f"{keys} on every request (slot erase refused: {why})", False


def _measure_levels(cfg: SweepConfig, info: ServerProbe, gen: LoadGenerator, workload: Workload,
                    warm_workload: Workload, run_dir: Path, meta: Meta, done: set[tuple[int, int]],
                    warn: Callable[[str], None], stop: threading.Event | None, progress: bool,
                    log: Callable[[str], None], counter: TokenCounter | None = None) -> None:
    """Warm up and measure every level of the plan not in ``done``, saving each; on any exit, record why in meta.json."""
    lv = _Levels(cfg, info, gen, workload, warm_workload, run_dir, meta, warn, stop, progress, log, counter,
                 dialect_of(info.server), _prompt_offsets(cfg), _Evidence(info.base_url))
    _plan_prompt_cache(lv)
    lv.poller = MetricsPoller(info.base_url, info.server, cfg.metrics_interval_s) if info.metrics else None
    lv.cpu_meter = CpuShare.for_url(info.base_url)  # a server on this machine: the client's CPU against its own
    try:
        for c, r in cfg.plan():
            if (c, r) in done:
                log(f"C={c} repeat {r}: already finished, skipped")
                continue
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
            _measure_level(lv, c, r)
    except BaseException as exc:
        _record_exit(lv, exc)
        raise
    finally:
        if lv.poller:
            lv.poller.close()


@dataclass
class _Levels:
    """What every level of one sweep shares, for :func:`_measure_levels`' steps: the sweep's
    parameters and tools, the extra request-body keys (``options``), whether slots are erased
    before each level, and ``current``: the level whose prompts may have been sent but which is
    not saved yet (an exit then names it in meta.json)."""

    cfg: SweepConfig
    info: ServerProbe
    gen: LoadGenerator
    workload: Workload
    warm_workload: Workload
    run_dir: Path
    meta: Meta
    warn: Callable[[str], None]
    stop: threading.Event | None
    progress: bool
    log: Callable[[str], None]
    counter: TokenCounter | None
    dialect: Dialect
    offsets: dict[tuple[int, int], int]
    evidence: _Evidence
    options: dict[str, Any] = field(default_factory=dict)
    #: the level's own request-body keys (a ``cache_salt`` where no route empties the cache)
    level_options: dict[str, Any] = field(default_factory=dict)
    erase_slots: bool = False
    poller: MetricsPoller | None = None
    cpu_meter: CpuShare | None = None
    current: tuple[int, int] | None = None


@dataclass
class _Measured:
    """One level's measured requests and what the server said around them: ``/metrics`` gauges
    polled during the level, counters before and after it, its start (UTC) and the CPU share."""

    result: LevelResult
    samples: list[tuple[float, str, float]]
    before: dict[str, float]
    after: dict[str, float]
    started_utc: str
    cpu_figures: dict[str, Any]
    #: the level's stopping rule (None: a fixed count)
    rule: StopRule | None = None


def _plan_prompt_cache(lv: _Levels) -> None:
    """The request options every level sends (per-request acceptance where the server takes a
    field for it, and the prompt-cache plan's keys), and what meta.json says of the cache."""
    lv.options = lv.dialect.spec_request_options(lv.info.flavour)  # per-request acceptance, where asked for
    cache_options, cache_how, lv.erase_slots = prompt_cache_plan(lv.cfg, lv.info)
    lv.options = {**lv.options, **cache_options}
    if cache_how:
        lv.meta.prefix_cache_flush = cache_how
    elif lv.dialect.erase_slots:
        lv.warn(f"{lv.dialect.label} keeps each slot's prompt cache across levels (flush_cache=false): a level may "
                "reuse prompt prefixes an earlier one left in a slot (shorter TTFT); set flush_cache=true to erase "
                "slots")


def _measure_level(lv: _Levels, c: int, r: int) -> None:
    """Level (``c``, ``r``): empty the cache, warm up, measure, save, judge the evidence."""
    lv.current = (c, r)
    flush_note = _empty_cache(lv, c, r)
    lv.meta.in_progress = [c, r]  # survives a hard kill: resume then knows this level's prompts were sent
    write_meta(lv.run_dir, lv.meta)
    _warm_up(lv, c, r)
    measured = _run_measured(lv, c, r)
    row, req = _save_level(lv, c, r, measured, flush_note)
    _judge_level(lv, c, r, measured.result, row, req)


def _empty_cache(lv: _Levels, c: int, r: int) -> str | None:
    """Empty the server's prompt cache before a level, so that no level reads an earlier level's
    prompts (slots erased, or the dialect's flush routes tried, with ``flush_cache``); what the
    level row says about it (None: not flushed). A failure is recorded and warned about."""
    flush_note = failure = None
    if lv.erase_slots:  # every slot emptied before the level's warm-up
        how, why = erase_llamacpp_slots(lv.info.base_url)
        if how is None:
            failure = f"{lv.dialect.label}'s slot erase worked before the first level but not now: {why}"
        flush_note = how or f"failed: {failure}"
    elif lv.cfg.flush_cache and not lv.dialect.erase_slots:
        flushed = try_flush_prefix_cache(lv.info.base_url, routes=lv.dialect.flush_routes)
        lv.meta.prefix_cache_flush = flush_note = flushed.describe
        if flushed.failure and not flushed.route:
            failure = flushed.failure
        if not flushed.route and lv.dialect.cache_salt:
            lv.meta.prefix_cache_flush = flush_note = _salt_level(lv, c, r, flushed)
            failure = None  # the salt keeps the level cold: said in the note, warned about once
    if failure:
        lv.meta.prefix_cache_flush_failed = [*lv.meta.prefix_cache_flush_failed, {"level": [c, r], "why": failure}]
        lv.warn(f"C={c} repeat {r}: the prefix-cache flush failed ({failure}), so this level may "
                "read prompts an earlier level left in the server's cache (a warm cache: shorter TTFT)")
    return flush_note


def _salt_level(lv: _Levels, c: int, r: int, flushed: FlushOutcome) -> str:
    """Where no route emptied the cache of a server that takes a per-request ``cache_salt``: every
    request of level (``c``, ``r``) carries the level's own salt, so no level reads cached prefixes
    another level (or run) left; warns once, naming what makes the route exist. Returns the note."""
    lv.level_options = {"cache_salt": f"specsweep-{lv.meta.run_id}-c{c}-r{r}"}
    why = flushed.describe.removeprefix("none: ").removeprefix("failed: ")
    if not any("cache_salt" in w for w in lv.meta.warnings):
        hint = f" ({lv.dialect.flush_hint})" if lv.dialect.flush_hint else ""
        lv.warn(f"{lv.dialect.label}'s prefix cache could not be emptied ({why}){hint}: each level's requests carry "
                "their own cache_salt instead, so no level reuses prefixes another cached; the cache is not emptied")
    return f"{CACHE_SALT_NOTE} (not emptied: {why})"


def _warm_up(lv: _Levels, c: int, r: int) -> None:
    """The level's warm-up requests (excluded from its figures); a stop interrupts, and a warm-up
    that failed entirely is evidence the server may be gone."""
    n_warm = lv.cfg.warmups_for(c)
    if not n_warm:
        return
    first = WARMUP_INDEX_BASE + lv.offsets[(c, r)]
    warm = lv.warm_workload.bodies(lv.info.flavour, range(first, first + n_warm), model=lv.info.model,
                                   temperature=lv.cfg.temperature,
                                   output_tokens=min(WARMUP_OUTPUT_TOKENS, lv.workload.output_tokens),
                                   extra={**lv.options, **lv.level_options})
    wres = lv.gen.run_level(warm, min(c, n_warm), stop=lv.stop)
    if wres.stopped or (lv.stop is not None and lv.stop.is_set()):
        raise KeyboardInterrupt
    lv.evidence.add(wres.records)
    if wres.records and all(rec.error for rec in wres.records):
        lv.evidence.check(f"C={c}", f"every warm-up request failed (first: {wres.records[0].error})")


def _run_measured(lv: _Levels, c: int, r: int) -> _Measured:
    """The level's measured requests, ``c`` in flight, with the server's counters read before and
    after and its gauges polled during; a stop interrupts."""
    poller, cpu_meter = lv.poller, lv.cpu_meter
    n = lv.cfg.max_requests_for(c)
    rule = (StopRule(concurrency=c, target_pct=lv.cfg.target_moe_pct, min_requests=lv.cfg.requests_for(c),
                     max_requests=n) if lv.cfg.target_moe_pct is not None else None)
    start = lv.offsets[(c, r)]
    bodies = lv.workload.bodies(lv.info.flavour, range(start, start + n), model=lv.info.model,
                                temperature=lv.cfg.temperature, extra={**lv.options, **lv.level_options})
    before = poller.snapshot() if poller else {}
    if poller:
        poller.start()
    started = provenance.utc_now()
    cpu_start = cpu_meter.read() if cpu_meter else None
    bar: _Progress | None = None
    try:
        bar = _Progress(lv.progress, n, f"C={c} r{r}", lv.workload.output_tokens)
        result = lv.gen.run_level(bodies, c, stop=lv.stop, progress=bar, until=rule)
    finally:
        if bar is not None:
            bar.close()
        samples = poller.stop() if poller else []
    # the level's own window: the parsing below happens while the server is idle
    cpu_figures = cpu_meter.level_figures(cpu_start) if cpu_meter and cpu_start else {}
    if result.stopped:
        raise KeyboardInterrupt
    after = poller.snapshot() if poller else {}
    return _Measured(result, samples, before, after, started, cpu_figures, rule)


def _save_level(lv: _Levels, c: int, r: int, measured: _Measured,
                flush_note: str | None) -> tuple[pd.Series, pd.DataFrame]:
    """Summarise the level and append it to the run's files (from then on an exit no longer
    touches it); warn about its requests and counts, and log its line. Returns (level row, request rows)."""
    result = measured.result
    count_tokens(result.records, lv.counter)
    level, req, srv = summarise_level(
        result, cfg=lv.cfg, run_id=lv.meta.run_id, concurrency=c, repeat=r, prompt_offset=lv.offsets[(c, r)],
        requested_tokens=lv.workload.output_tokens, server=lv.info.server, samples=measured.samples,
        before=measured.before, after=measured.after, started_utc=measured.started_utc, workload=lv.workload)
    if flush_note is not None:
        level["prefix_cache_flush"] = flush_note
    rule = measured.rule
    level["stop_reason"] = rule.reason(float(level["moe_pct"].iloc[0])) if rule is not None else FIXED_COUNT
    for key, value in measured.cpu_figures.items():
        level[key] = value
    threads = engine_threads(lv.meta)
    if threads and "server_cpu_cores" in measured.cpu_figures:  # a CPU engine: what it got of its threads' CPU
        level["server_cpu_got_pct"] = 100.0 * measured.cpu_figures["server_cpu_cores"] / threads
    append_level(lv.run_dir, level, req, srv if lv.poller else None)
    lv.current = None  # saved: an interrupt from here on does not touch this level
    lv.meta.unset("in_progress")
    for w in result.warnings:
        lv.warn(f"C={c} repeat {r}: {w}")
    _warn_counts(level.iloc[0], req, c, r, lv.meta.preflight_token_source, lv.warn, lv.meta)
    padded = padded_outputs(req) if lv.cfg.output_length == "natural" else None
    if padded:
        lv.warn(f"C={c} repeat {r}: {padded}")
    write_meta(lv.run_dir, lv.meta)
    row = level.iloc[0]
    # the CPU share, and a simulator's lag where it fell behind its schedule
    lv.log(_level_line(row).replace(" — saved", level_suffix(row) + _schedule_suffix(row) + " — saved"))
    return row, req


def _judge_level(lv: _Levels, c: int, r: int, result: LevelResult, row: pd.Series, req: pd.DataFrame) -> None:
    """Add the saved level's requests to the evidence; a level that failed entirely or is damaged
    stops the sweep when the server no longer answers its health check, else it is kept with a warning."""
    lv.evidence.add(result.records)
    damage = damaged_levels(live_levels(lv.run_dir)).get((c, r))
    trouble = None
    if row["n_ok"] == 0:
        first_error = req["error"].dropna().iloc[0] if req["error"].notna().any() else "no tokens"
        trouble = f"every request failed (first: {first_error})"
    elif damage:
        trouble = damage
    lv.evidence.check(f"C={c} (saved, measured again on resume)", trouble, level=(c, r))
    if trouble:
        lv.warn(f"C={c} repeat {r}: {trouble}, but the server still answers its health check; the level is kept")


def _record_exit(lv: _Levels, exc: BaseException) -> None:
    """On any exit from the levels, meta.json says why (interrupted or failed), how many levels are
    finished and which level it cut short; an interrupt becomes :class:`SweepInterrupted`."""
    meta = lv.meta
    meta.complete = False
    interrupted = isinstance(exc, KeyboardInterrupt)
    n_done = len(finished_levels(lv.run_dir))
    setattr(meta, "interrupted" if interrupted else "failed", {
        "utc": provenance.utc_now(), "levels_finished": n_done,
        "level": list(lv.current) if lv.current else getattr(exc, "level", None),
        "reason": "interrupted (Ctrl-C or stop)" if interrupted else f"{type(exc).__name__}: {exc}",
    })
    write_meta(lv.run_dir, meta)
    if interrupted:
        _close_bars()
        raise SweepInterrupted(lv.run_dir, n_done) from None
    lv.log(f"failed: {n_done} finished level(s) are saved in {lv.run_dir}; continue with resume={str(lv.run_dir)!r}")


def _schedule_suffix(row: pd.Series) -> str:
    """``", simulator 3.2 ms late per step, 1 clock reset"`` for a level line where a reference server
    fell behind its schedule (``metrics.SIM_LAG_WARN_MS``), else ''."""
    lag = float(row.get("sim_step_lag_mean_ms", math.nan))
    resyncs = int(row.get("sim_clock_resyncs", 0) or 0)
    if not (lag > SIM_LAG_WARN_MS or resyncs):
        return ""
    return f", simulator {lag:.1f} ms late per step" + (f", {resyncs} clock reset(s)" if resyncs else "")


def _warn_counts(row: pd.Series, req: pd.DataFrame, c: int, r: int, preflight_source: str | None,
                 warn: Callable[[str], None], meta: Meta) -> None:
    """Warn (log and meta.json) about a level's refused counts, and as soon as a server that sent
    integer counts in the preflight stops sending them (``meta.count_changes`` records each level)."""
    n_bad = int(row.get("implausible_counts", 0) or 0)
    if n_bad:
        errors = req["error"].dropna()
        first = errors[errors.str.startswith(PLAUSIBILITY_PREFIX)]
        warn(f"C={c} repeat {r}: {n_bad} request(s) claimed an impossible token count and are error rows, not "
             f"measured (first: {first.iloc[0] if len(first) else 'see requests.parquet'})")
    n_suspect = int(row.get("suspect_counts", 0) or 0)
    if n_suspect:
        warn(f"C={c} repeat {r}: {n_suspect} request(s) claimed more tokens than the text that arrived has bytes "
             "(possible only for tokens that decode to nothing); their counts are kept, check the server's counting")
    if preflight_source != "usage" or "token_source" not in req.columns:
        return
    fine = req["error"].isna() & req["token_source"].notna()
    other = req.loc[fine & (req["token_source"] != "usage"), "token_source"]
    if len(other):
        sources = {str(k): int(v) for k, v in other.value_counts().items()}
        meta.count_changes = [*meta.count_changes, {"level": [c, r], "requests": int(len(other)),
                                                     "of": int(fine.sum()), "token_sources": sources}]
        warn(f"C={c} repeat {r}: the server sent integer token counts in the preflight but none for "
             f"{len(other)} of {int(fine.sum())} requests of this level, which are counted "
             f"{' and '.join(f'from {k} ({v})' for k, v in sources.items())} instead: it changed how it counts "
             "after the preflight, so tokens (and throughput) of these requests are estimates")


class _ClientGone(logging.Filter):
    """Drop the kernel's "Exception in message handler" traceback when its client (papermill) has gone away."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (exc is not None and type(exc).__module__.startswith("zmq"))


def _tell_terminal(exc: SweepInterrupted) -> None:
    """Inside a Jupyter kernel, also say how to resume on the terminal that pressed Ctrl-C.

    Ctrl-C under papermill reaches papermill and the kernel together: papermill stops at once, so
    the notebook never receives the message, and the kernel's reply then fails with a zmq
    traceback. The message goes to the kernel's own stderr (the terminal), and that traceback,
    which only says the client has gone, is filtered out.
    """
    if "ipykernel" not in sys.modules:
        return
    kernel_log = logging.getLogger("IPKernelApp")
    if not any(isinstance(f, _ClientGone) for f in kernel_log.filters):
        kernel_log.addFilter(_ClientGone())
    stream = sys.__stderr__
    if stream is not None:
        print(f"\nspecsweep: {exc.args[0]}", file=stream, flush=True)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or ``stop``) ended the sweep; finished levels are saved and the message says how to resume.

    In a notebook it shows as that message alone (``_render_traceback_``), not a traceback.
    """

    def __init__(self, run_dir: Path | None, levels_finished: int) -> None:
        if run_dir is None:
            text = "Interrupted before any level was measured; nothing new was saved."
        else:
            text = (f"Interrupted: {levels_finished} finished level(s) are saved in {run_dir} (meta.json says "
                    f"'interrupted'). Continue it with the same parameters plus resume={str(run_dir)!r} "
                    f"(papermill: -p resume {shlex.quote(str(run_dir))}); finished levels are skipped.")
        super().__init__(text)
        self.run_dir = run_dir

    def _render_traceback_(self) -> list[str]:
        return [f"SweepInterrupted: {self.args[0]}"]


def _level_line(row: pd.Series) -> str:
    def f(v: Any, fmt: str) -> str:
        return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    parts = [
        f"C={int(row['concurrency'])} repeat {int(row['repeat'])}: {f(row.get('output_tok_s'), ',.0f')} tok/s aggregate",
        f"{f(row.get('user_tok_s_mean'), ',.1f')} tok/s per user",
        f"TTFT p99 {f(row.get('ttft_p99_s'), '.3f')} s",
        f"{int(row.get('n_errors', 0))} error(s)",
    ]
    if not pd.isna(row.get("spec_accept_length", math.nan)):
        source = row.get("spec_accept_length_source")
        parts.append(f"accept length {row['spec_accept_length']:.2f}"
                     + (f" [{source}]" if isinstance(source, str) and source else ""))
    if not pd.isna(row.get("server_running_max", math.nan)):
        parts.append(f"server ran ≤ {int(row['server_running_max'])}")
    reason = row.get("stop_reason")
    if isinstance(reason, str) and reason != FIXED_COUNT:
        parts.append(f"{int(row.get('n_requests', 0))} requests, stopped on {reason}")
    return ", ".join(parts) + " — saved"


SUMMARY_COLUMNS: dict[str, str] = {
    "concurrency": "concurrency",
    "repeat": "repeat",
    "n_ok": "requests ok",
    "n_errors": "errors",
    "output_tok_s": "aggregate (tok/s)",
    "steady_output_tok_s": "steady aggregate (tok/s)",
    "user_tok_s_mean": "per-user 1/TPOT (tok/s)",
    "ttft_p50_s": "TTFT p50 (s)",
    "ttft_p99_s": "TTFT p99 (s)",
    "tpot_p50_s": "TPOT p50 (s)",
    "e2e_p99_s": "e2e p99 (s)",
    "tokens_per_chunk_mean": "tokens/chunk",
    "spec_accept_length": "accept length",
    "spec_accept_length_source": "accept length source",
    "decoding_concurrency": "decoding concurrency",
    "server_running_max": "server running max",
    "server_queued_max": "server queued max",
    "short_outputs": "short outputs",
    "moe_pct": "throughput margin ± (%)",
    "stop_reason": "stopped on",
    "client_cpu_cores": "client CPU (cores)",
}


def summary_table(levels: pd.DataFrame) -> pd.DataFrame:
    """This arm's per-level figures with readable, unit-carrying column names."""
    cols = [c for c in SUMMARY_COLUMNS if c in levels.columns and levels[c].notna().any()]
    out = levels.sort_values(["concurrency", "repeat"])[cols].rename(columns=SUMMARY_COLUMNS)
    return out.reset_index(drop=True)


def any_succeeded(result: SweepResult) -> bool:
    """Whether any measured request of the run succeeded (an arm whose every request failed has no
    speed to chart; its warnings quote the server)."""
    lv = result.levels
    return bool(len(lv)) and "n_ok" in lv and bool(lv["n_ok"].fillna(0).sum() > 0)


def warnings_markdown(result: SweepResult) -> str:
    """The run's warnings (short outputs, client load, errors) as Markdown; a clean bill otherwise."""
    lines = [f"- ⚠ {md_text(w)}" for w in result.warnings]  # they quote servers: text, never markup
    lv = result.levels
    short = lv[lv.get("short_outputs", pd.Series(0, index=lv.index)).fillna(0) > 0] if len(lv) else lv
    for row in short.itertuples():
        lines.append(f"- ⚠ C={row.concurrency}: {int(row.short_outputs)} request(s) returned fewer than the "
                     f"{int(row.requested_output_tokens)} requested tokens — the server did not honour ignore_eos; "
                     "arms may have done different amounts of work.")
    if "error_rate" in lv and (lv["error_rate"] > 0).any():
        for row in lv[lv["error_rate"] > 0].itertuples():
            lines.append(f"- ⚠ C={row.concurrency}: {int(row.n_errors)} failed request(s) ({row.error_rate:.1%}); "
                         "see the error column of requests.parquet.")
    if "client_cpu_cores" in lv and (lv["client_cpu_cores"] > 0.7).any():
        lines.append("- ⚠ The client used more than 0.7 of a core at some levels; its timestamps may lag there "
                     "(raise client_workers).")
    if not lines:
        return "No warnings: every request succeeded with the requested number of tokens."
    return "\n".join(lines)
