"""Measure one arm at every concurrency level and store a result set (``data/runs/<run_id>/``).

For each (concurrency C, repeat) in order: warm-up requests (excluded), then a closed loop that
keeps exactly C requests in flight until the level's measured requests are done, while
``/metrics`` gauges are polled in the background and its counters read before and after. The
level's rows are written at once and atomically, so an interruption keeps every finished level;
``resume`` continues a run and skips its finished levels. Ctrl-C saves, marks the run incomplete
and says how to resume.

Prompts are paired across arms: measured request ``i`` of plan position ``k`` always gets the
same prompt for the same parameters, and no prompt is reused across levels (so a prefix cache
cannot make a later level look faster).
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from specsweep import provenance
from specsweep.config import WARMUP_OUTPUT_TOKENS, ConfigError, SweepConfig, parse_config
from specsweep.loadgen import LevelResult, LoadGenerator
from specsweep.metrics import level_metrics, requests_frame
from specsweep.probe import (MetricsPoller, ProbeError, ServerProbe, TokenCounter, acceptance_from_counters, probe,
                             spec_level_figures)
from specsweep.store import SCHEMA_VERSION, append_level, finished_levels, load_result_set, write_meta
from specsweep.workload import Workload, check_vocabulary, explain_rejection, make_workload, warmup_workload

WARMUP_INDEX_BASE = 1_000_000_000
#: meta.json fields that must match for a run to be resumed
RESUME_KEYS = ("concurrency", "repeats", "requests_per_level", "warmup_requests", "temperature", "api", "seed")


@dataclass
class SweepResult:
    """What a sweep produced."""

    run_dir: Path
    meta: dict[str, Any]
    levels: pd.DataFrame
    warnings: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return bool(self.meta.get("complete"))


# ----------------------------------------------------------------------------------- run folders


def _find_resume_dir(cfg: SweepConfig) -> Path:
    out = Path(cfg.out_dir)
    if cfg.resume == "latest":
        candidates = [m.parent for m in sorted(out.glob(f"*-{cfg.arm}/meta.json"))
                      if not json.loads(m.read_text()).get("complete", False)]
        if not candidates:
            raise ConfigError(f"parameter 'resume': no incomplete run of arm '{cfg.arm}' in {out}; "
                              "leave resume empty to start a new run")
        return candidates[-1]
    given = Path(cfg.resume)
    for candidate in (given, out / cfg.resume):
        if (candidate / "meta.json").is_file():
            return candidate
    raise ConfigError(f"parameter 'resume': {cfg.resume!r} is not a run folder (no meta.json there or in {out}); "
                      "give a run folder, its run id, 'latest', or leave it empty")


def _check_resumable(run_dir: Path, meta: dict[str, Any], sweep: dict[str, Any], workload: dict[str, Any], arm: str) -> None:
    diffs = []
    if meta.get("arm") != arm:
        diffs.append(f"arm {meta.get('arm')!r} vs {arm!r}")
    for key in RESUME_KEYS:
        if meta.get("sweep", {}).get(key) != sweep.get(key):
            diffs.append(f"{key} {meta.get('sweep', {}).get(key)!r} vs {sweep.get(key)!r}")
    for key in ("kind", "input_tokens", "output_tokens", "seed", "dataset_digest"):
        if meta.get("workload", {}).get(key) != workload.get(key):
            diffs.append(f"workload.{key} {meta.get('workload', {}).get(key)!r} vs {workload.get(key)!r}")
    if diffs:
        raise ConfigError(f"parameter 'resume': {run_dir} was measured with different parameters ({'; '.join(diffs)}); "
                          "resume with the same parameters, or start a new run")


# ------------------------------------------------------------------------------------ the levels


def _prompt_offsets(cfg: SweepConfig) -> dict[tuple[int, int], int]:
    offsets, total = {}, 0
    for key in cfg.plan():
        offsets[key] = total
        total += cfg.requests_for(key[0])
    return offsets


def server_figures(
    requests: pd.DataFrame, samples: list[tuple[float, str, float]], window: tuple[float, float],
    before: dict[str, float], after: dict[str, float], server: str,
) -> dict[str, Any]:
    """Server-side figures of one level: acceptance length, max running/queued, KV usage.

    ``samples``: polled gauges (perf_counter seconds, name, value); only those inside ``window``
    (the level's first send to last finish) count, and a gauge needs two of them.
    """
    out: dict[str, Any] = {}
    ok = requests[requests["error"].isna() & requests["output_tokens"].notna()]
    if "spec_verify_ct" in ok and ok["spec_verify_ct"].notna().any():
        part = ok[ok["spec_verify_ct"].notna() & (ok["spec_verify_ct"] > 0)]
        out["spec_accept_length"] = float(part["output_tokens"].sum() / part["spec_verify_ct"].sum())
        out["spec_accept_length_source"] = "per-request meta_info (Σ completion tokens / Σ verify steps)"
    else:
        acc = acceptance_from_counters(before, after, server)
        if acc is not None:
            out["spec_accept_length"] = acc
            out["spec_accept_length_source"] = "/metrics counter deltas"
    out.update(spec_level_figures(before, after))
    for key in ("generation_tokens", "requests"):
        if key in before and key in after:
            out[f"server_{key}_delta"] = after[key] - before[key]
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


def summarise_level(
    result: LevelResult, *, cfg: SweepConfig, run_id: str, concurrency: int, repeat: int, prompt_offset: int,
    requested_tokens: int, server: str, samples: list[tuple[float, str, float]],
    before: dict[str, float], after: dict[str, float], started_utc: str,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(level row, request rows, server-metric rows) of one finished level."""
    t0 = result.t_start
    req = requests_frame(result.records, t0=t0, run_id=run_id, arm=cfg.arm, concurrency=concurrency, repeat=repeat,
                         request_indices=result.request_index,
                         prompt_ids=[prompt_offset + i for i in result.request_index], keep_chunks=cfg.keep_chunks)
    lv: dict[str, Any] = level_metrics(req, concurrency)
    ok = req["error"].isna() & req["output_tokens"].notna()
    lv.update(
        run_id=run_id, arm=cfg.arm, concurrency=concurrency, repeat=repeat, started_utc=started_utc,
        requested_output_tokens=requested_tokens,
        short_outputs=int((ok & (req["output_tokens"] < requested_tokens)).sum()),
        warmup_requests=cfg.warmups_for(concurrency),
        client_cpu_cores=result.client_cores, client_mean_in_flight=result.mean_in_flight,
        client_max_in_flight=result.max_in_flight, client_loop_lag_p99_s=result.loop_lag_p99_s,
        client_workers=result.workers,
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


class _Progress:
    """A tqdm bar per level with finished requests and an estimated live tok/s."""

    def __init__(self, enabled: bool, total: int, desc: str, tokens_per_request: int) -> None:
        self.bar = None
        self.t0 = time.perf_counter()
        self.tokens = tokens_per_request
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="req", file=sys.stderr, mininterval=1.0, leave=True,
                            dynamic_ncols=False, ncols=100)

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            return
        self.bar.n = done
        elapsed = time.perf_counter() - self.t0
        if elapsed > 0:
            self.bar.set_postfix_str(f"≈{done * self.tokens / elapsed:,.0f} tok/s", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ------------------------------------------------------------------------------------------ main


@contextlib.contextmanager
def _endpoint(cfg: SweepConfig, log: Callable[[str], None]) -> Iterator[tuple[str, dict[str, Any] | None]]:
    if not cfg.embedded:
        yield cfg.endpoint, None
        return
    from specsweep.refserver.launch import RefServer

    spec = cfg.resolved_embedded_spec()
    args = list(cfg.embedded_args)
    log(f"starting the embedded reference server (simulated): profile {cfg.embedded_profile}, spec {spec}"
        + (f", args {' '.join(args)}" if args else ""))
    with RefServer(profile=cfg.embedded_profile, spec=spec, args=args) as server:
        yield server.url, {"profile": cfg.embedded_profile, "spec": spec, "args": args}


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
              counter: TokenCounter | None = None) -> list[str]:
    """One request through the chosen flavour; raise on failure, warn on short output or no counts.

    ``workload``: the preflight/warm-up prompts (:func:`~specsweep.workload.warmup_workload`), of
    the measured workload's kind. ``counter``: counts tokens with the server's ``/tokenize`` when
    the server reports none.
    """
    tokens = min(workload.output_tokens, 32)
    body = workload.bodies(info.flavour, [WARMUP_INDEX_BASE * 2], model=info.model, temperature=cfg.temperature,
                           output_tokens=tokens)
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


class SweepAborted(RuntimeError):
    """The server failed every request of a level (or of its warm-up): measuring on is pointless."""


#: server settings that must match for a run to be resumed against a (restarted) server
RESUME_SERVER_KEYS = ("name", "speculative_algorithm", "speculative_num_steps", "speculative_num_draft_tokens",
                      "speculative_eagle_topk", "max_running_requests", "simulated")


def _check_same_server(run_dir: Path, meta: dict[str, Any], info: ServerProbe) -> None:
    diffs = []
    if meta.get("api") != info.flavour:
        diffs.append(f"API {meta.get('api')!r} vs {info.flavour!r}")
    if meta.get("model") != info.model:
        diffs.append(f"model {meta.get('model')!r} vs {info.model!r}")
    now = info.snapshot()
    for key in RESUME_SERVER_KEYS:
        if meta.get("server", {}).get(key) != now.get(key):
            diffs.append(f"server {key} {meta.get('server', {}).get(key)!r} vs {now.get(key)!r}")
    if diffs:
        raise ConfigError(f"parameter 'resume': the server now differs from the one {run_dir} measured "
                          f"({'; '.join(diffs)}); resume against the same configuration, or start a new run")


def _open_run(cfg: SweepConfig, info: ServerProbe, workload: Workload, sweep_params: dict[str, Any],
              embedded: dict[str, Any] | None, log: Callable[[str], None]) -> tuple[Path, dict[str, Any], set[tuple[int, int]]]:
    """A new run folder with its meta.json, or the run to resume (checked) and its finished levels."""
    if cfg.resume:
        run_dir = _find_resume_dir(cfg)
        meta = json.loads((run_dir / "meta.json").read_text())
        _check_resumable(run_dir, meta, sweep_params, workload.describe(), cfg.arm)
        _check_same_server(run_dir, meta, info)
        done = finished_levels(run_dir)
        meta.setdefault("resumed_utc", []).append(provenance.utc_now())
        stopped_at = (meta.get("interrupted") or meta.get("failed") or {}).get("level")
        if stopped_at and tuple(stopped_at) not in done:
            # that level's first requests already reached the server once: a prefix cache may now hold them
            meta.setdefault("rerun_levels", []).append(stopped_at)
        log(f"resuming {run_dir}: {len(done)} of {len(cfg.plan())} levels already finished")
        return run_dir, meta, done
    run_id = f"{provenance.utc_stamp()}-{cfg.arm}"
    run_dir = Path(cfg.out_dir) / run_id
    if run_dir.exists():
        raise ConfigError(f"parameter 'out_dir': {run_dir} already exists; wait a second or pick another out_dir")
    meta = {
        "schema_version": SCHEMA_VERSION, "kind": "run", "run_id": run_id, "arm": cfg.arm,
        "label": cfg.label or cfg.arm, "complete": False, "level_only": False,
        "tool": provenance.tool(), "started_utc": provenance.utc_now(), "finished_utc": None,
        "endpoint": info.base_url, "embedded_server": embedded, "api": info.flavour, "model": info.model,
        "server": info.snapshot(), "workload": workload.describe(), "sweep": sweep_params,
        "environment": provenance.environment(), "metric_definitions": {}, "warnings": [],
    }
    return run_dir, meta, set()


def _workload_warnings(cfg: SweepConfig, workload: Workload) -> list[str]:
    needed = sum(cfg.requests_for(c) for c, _ in cfg.plan())
    if workload.kind == "prompt-file" and len(workload.prompts) < needed:
        return [f"The prompt file has {len(workload.prompts)} prompts but the sweep sends {needed} measured requests, "
                "so prompts repeat across levels and a server's prefix cache can serve the repeats (shorter TTFT)."]
    return []


def run_sweep(
    params: dict[str, Any] | SweepConfig,
    *,
    progress: bool = True,
    stop: threading.Event | None = None,
    log: Callable[[str], None] = print,
) -> SweepResult:
    """Measure one arm at every level of ``params`` (see ``config``) and return its result set."""
    cfg = parse_config(params)
    output_tokens = cfg.resolved_output_tokens()
    workload = make_workload(cfg.workload, cfg.input_tokens, output_tokens, cfg.seed)
    # warm-up and preflight prompts never overlap measured ones (a prefix cache would flatter them):
    # prompts of the measured workload's kind from their own index range (never IDs it does not use)
    warm_workload = warmup_workload(workload)
    sweep_params = {
        "concurrency": cfg.concurrency, "repeats": cfg.repeats,
        "requests_per_level": {str(c): cfg.requests_for(c) for c in cfg.concurrency},
        "requests_per_level_rule": cfg.requests_per_level if cfg.requests_per_level == "auto" else "fixed",
        "warmup_requests": {str(c): cfg.warmups_for(c) for c in cfg.concurrency},
        "warmup_output_tokens": WARMUP_OUTPUT_TOKENS, "request_timeout_s": cfg.request_timeout_s,
        "temperature": cfg.temperature, "api": cfg.api, "seed": cfg.seed, "closed_loop": True,
        "client_workers": cfg.client_workers, "metrics_interval_s": cfg.metrics_interval_s,
    }
    with _endpoint(cfg, log) as (url, embedded):
        info = probe(url, cfg.api, cfg.model)
        check_prompts_fit(workload, info)
        log(f"{info.base_url}: {info.server}{' (simulated)' if info.simulated else ''}, API {info.flavour}, "
            f"model {info.model}, max_running_requests {info.server_info.get('max_running_requests', 'unknown')}, "
            f"speculative {info.server_info.get('speculative_algorithm') or 'off/unknown'}")
        run_dir, meta, done = _open_run(cfg, info, workload, sweep_params, embedded, log)
        run_id = meta["run_id"]
        warnings: list[str] = meta.setdefault("warnings", [])

        def warn(text: str) -> None:
            if text not in warnings:
                warnings.append(text)
                log("⚠ " + text)

        write_meta(run_dir, meta)
        offsets = _prompt_offsets(cfg)
        poller = MetricsPoller(info.base_url, info.server, cfg.metrics_interval_s) if info.metrics else None
        counter = TokenCounter(info.base_url, info.server, info.model)
        current: tuple[int, int] | None = None
        try:
            with LoadGenerator(info.base_url, info.flavour, max_concurrency=max(cfg.concurrency),
                               workers=cfg.client_workers, timeout_s=cfg.request_timeout_s,
                               read_timeout_s=cfg.request_timeout_s) as gen:
                for w in preflight(gen, info, warm_workload, cfg, counter) + _workload_warnings(cfg, workload):
                    warn(w)
                for c, r in cfg.plan():
                    if (c, r) in done:
                        log(f"C={c} repeat {r}: already finished, skipped")
                        continue
                    if stop is not None and stop.is_set():
                        raise KeyboardInterrupt
                    current = (c, r)
                    n_warm = cfg.warmups_for(c)
                    if n_warm:
                        first = WARMUP_INDEX_BASE + offsets[(c, r)]
                        warm = warm_workload.bodies(info.flavour, range(first, first + n_warm), model=info.model,
                                                    temperature=cfg.temperature,
                                                    output_tokens=min(WARMUP_OUTPUT_TOKENS, output_tokens))
                        wres = gen.run_level(warm, min(c, n_warm), stop=stop)
                        if wres.stopped or (stop is not None and stop.is_set()):
                            raise KeyboardInterrupt
                        if wres.records and all(rec.error for rec in wres.records):
                            raise SweepAborted(f"C={c}: every warm-up request failed (first: {wres.records[0].error}); "
                                               "the server is not answering — stopping")
                    n = cfg.requests_for(c)
                    bodies = workload.bodies(info.flavour, range(offsets[(c, r)], offsets[(c, r)] + n),
                                             model=info.model, temperature=cfg.temperature)
                    before = poller.snapshot() if poller else {}
                    if poller:
                        poller.start()
                    bar = _Progress(progress, n, f"C={c} r{r}", output_tokens)
                    started = provenance.utc_now()
                    try:
                        result = gen.run_level(bodies, c, stop=stop, progress=bar)
                    finally:
                        bar.close()
                        samples = poller.stop() if poller else []
                    if result.stopped:
                        raise KeyboardInterrupt
                    after = poller.snapshot() if poller else {}
                    count_tokens(result.records, counter)
                    level, req, srv = summarise_level(
                        result, cfg=cfg, run_id=run_id, concurrency=c, repeat=r, prompt_offset=offsets[(c, r)],
                        requested_tokens=output_tokens, server=info.server, samples=samples, before=before,
                        after=after, started_utc=started)
                    append_level(run_dir, level, req, srv if poller else None)
                    current = None
                    for w in result.warnings:
                        warn(f"C={c} repeat {r}: {w}")
                    write_meta(run_dir, meta)
                    row = level.iloc[0]
                    log(_level_line(row))
                    if row["n_ok"] == 0:
                        first_error = req["error"].dropna().iloc[0] if req["error"].notna().any() else "no tokens"
                        raise SweepAborted(f"C={c}: every request failed (first: {first_error}); the level is saved, "
                                           "later levels would fail too — stopping")
        except BaseException as exc:
            meta["complete"] = False
            interrupted = isinstance(exc, KeyboardInterrupt)
            meta["interrupted" if interrupted else "failed"] = {
                "utc": provenance.utc_now(), "levels_finished": len(finished_levels(run_dir)),
                "level": list(current) if current else None,
                "reason": "interrupted (Ctrl-C or stop)" if interrupted else f"{type(exc).__name__}: {exc}",
            }
            write_meta(run_dir, meta)
            log(f"{'interrupted' if interrupted else 'failed'}: {len(finished_levels(run_dir))} finished level(s) are "
                f"saved in {run_dir}; continue with resume={str(run_dir)!r}")
            raise
        finally:
            if poller:
                poller.close()
            counter.close()
        meta["complete"] = True
        meta["finished_utc"] = provenance.utc_now()
        meta.pop("interrupted", None)
        meta.pop("failed", None)
        write_meta(run_dir, meta)
    rs = load_result_set(run_dir)
    return SweepResult(run_dir=run_dir, meta=rs.meta, levels=rs.levels, warnings=list(warnings))


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
        parts.append(f"accept length {row['spec_accept_length']:.2f}")
    if not pd.isna(row.get("server_running_max", math.nan)):
        parts.append(f"server ran ≤ {int(row['server_running_max'])}")
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
    "decoding_concurrency": "decoding concurrency",
    "server_running_max": "server running max",
    "server_queued_max": "server queued max",
    "short_outputs": "short outputs",
    "client_cpu_cores": "client CPU (cores)",
}


def summary_table(levels: pd.DataFrame) -> pd.DataFrame:
    """This arm's per-level figures with readable, unit-carrying column names."""
    cols = [c for c in SUMMARY_COLUMNS if c in levels.columns and levels[c].notna().any()]
    out = levels.sort_values(["concurrency", "repeat"])[cols].rename(columns=SUMMARY_COLUMNS)
    return out.reset_index(drop=True)


def warnings_markdown(result: SweepResult) -> str:
    """The run's warnings (short outputs, client load, errors) as Markdown; a clean bill otherwise."""
    lines = [f"- ⚠ {w}" for w in result.warnings]
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
