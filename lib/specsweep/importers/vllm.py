"""Read ``vllm bench serve --save-result`` files (one JSON object per run; ``--append-result``
writes one per line) into :class:`~specsweep.importers.common.ToolRun`.

Written against vLLM's writer at commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1
(``vllm/benchmarks/serve.py``: ``calculate_metrics``, ``benchmark``'s ``result`` dict and
``main_async``'s ``result_json``). What the file means there:

- ``max_concurrency``: the closed-loop concurrency (None: an open loop at ``request_rate``).
- ``output_throughput`` = Σ output_lens / ``duration`` (tok/s); ``duration`` runs from before the
  first request is dispatched until every response is gathered (seconds), a little longer than
  specsweep's first-sent to last-finished window: where the two differ by more than 0.1 %, an
  import note names it (``HEADLINE``).
- ``output_lens[i]``: the server's ``usage.completion_tokens``, or, when the server sent none, the
  generated text re-tokenised on the client; the file does not say which.
- ``ttfts[i]``: first chunk − request sent; ``latencies[i]``: last chunk − request sent (seconds).
- ``itls[i]``: every gap between consecutive chunks after the first (seconds): **one sample per
  chunk**, however many tokens it carried; ``mean_itl_ms`` pools them over requests. In specsweep
  terms that is the inter-chunk latency (``chunk_gap_*``), not the token-normalised ITL.
- ``mean_tpot_ms``: mean over requests with output_len > 1 of (latency − ttft)/(output_len − 1):
  specsweep's TPOT.
- ``max_output_tokens_per_s``: the most **chunks** that arrived in one 1-s bucket (one count per
  chunk): under speculation it is low by about the tokens per chunk.
- ``spec_decode_acceptance_length`` = 1 + Δaccepted / Δdrafts of ``/metrics`` counters before and
  after the run: specsweep's counter-delta acceptance length.
- Per-request arrays (``ttfts``, ``itls``, ``output_lens``, ``start_times``, ``errors``) are
  written only with ``--save-detailed``; without them the level holds vLLM's figures only.

``vllm bench sweep serve`` (``vllm/benchmarks/sweep/serve.py``) writes the same objects, one per
run, as ``EXPERIMENT/SERVE--<serve params>-BENCH--<bench params>/run=N.json`` (with the overrides
and ``run_number`` merged in), a ``summary.json`` per folder (the list of its runs) and a
``summary.csv`` over all folders. A file's serve-parameter set (its folder's ``SERVE--`` part) is
kept as ``server["sweep_serve"]``: files of different server settings are never one arm.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from specsweep.importers.common import (
    BadInput,
    Level,
    ToolRun,
    concurrency_of,
    ms,
    number,
    read_json_objects,
    record,
    refuse_foreign,
    tool_headline,
)

TOOL = "vllm bench serve"
READER = "specsweep.importers.vllm (vLLM serve.py at commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1)"

DEFINITIONS: dict[str, str] = {
    "vllm_itl_mean_s": "vLLM 'ITL', mean: every gap between consecutive stream chunks, one sample per chunk "
                       "however many tokens it carried (= specsweep's inter-chunk latency, not its ITL)",
    "vllm_itl_p50_s": "vLLM 'ITL', median: one sample per chunk gap",
    "vllm_itl_p99_s": "vLLM 'ITL', p99: one sample per chunk gap",
    "vllm_peak_output_tok_s": "vLLM 'peak output token throughput': the most stream chunks (not tokens) that "
                              "arrived in one 1-second bucket; under speculation low by about the tokens per chunk",
    "vllm_output_throughput": "vLLM output_throughput: Σ output tokens / benchmark duration (tok/s)",
}
#: the level-only per-user speed, where there are no per-request samples
USER_FROM_MEAN_TPOT = "1 / mean TPOT (TPOT = (e2e − TTFT) / (output tokens − 1), mean over requests)"
WARNING = ("Imported from vllm bench serve: vLLM's 'ITL' is one sample per stream chunk (under speculation one chunk "
           "carries several tokens), so it appears here as inter-chunk latency, not as specsweep's token-normalised "
           "ITL; its 'peak output tok/s' counts chunks, not tokens, and is not used for any verdict; its output "
           "token counts are the server's usage figures or, when the server sent none, a client re-tokenisation "
           "(the file does not say which).")

#: where the level's acceptance length came from (compare names it beside the figure)
ACCEPT_SOURCE = "vllm bench serve: /metrics counter deltas over the run (1 + Δaccepted / Δdrafts)"

_DETAIL = ("ttfts", "itls", "output_lens", "start_times", "latencies")


def _percentiles(obj: dict[str, Any], stem: str, where: str) -> dict[int, float]:
    """vLLM's ``p{P}_{stem}_ms`` figures (seconds) by whole percentile."""
    out = {}
    for key in obj:
        m = re.fullmatch(rf"p(\d+(?:\.\d+)?)_{stem}_ms", key)
        if m and float(m.group(1)).is_integer():
            out[int(float(m.group(1)))] = number(obj, key, where) / 1000.0
    return out


def _figures(obj: dict[str, Any], where: str, detailed: bool) -> tuple[dict[str, float], dict[str, str]]:
    """Level figures and their definition ids (where not specsweep's)."""
    f: dict[str, float] = {}
    ids: dict[str, str] = {}
    completed, failed = number(obj, "completed", where), number(obj, "failed", where)
    f["vllm_output_throughput"] = number(obj, "output_throughput", where, required=True)
    f["output_tokens"] = number(obj, "total_output_tokens", where)
    f["n_ok"] = completed
    f["vllm_itl_mean_s"] = ms(obj, "mean_itl_ms", where)
    f["vllm_itl_p50_s"] = ms(obj, "median_itl_ms", where)
    itl_p = _percentiles(obj, "itl", where)
    if 99 in itl_p:
        f["vllm_itl_p99_s"] = itl_p[99]
    f["vllm_peak_output_tok_s"] = number(obj, "max_output_tokens_per_s", where)
    if not math.isnan(number(obj, "spec_decode_acceptance_length", where)):
        f["spec_accept_length"] = number(obj, "spec_decode_acceptance_length", where)
        f["spec_accept_length_source"] = ACCEPT_SOURCE  # type: ignore[assignment]
    if detailed:
        return f, ids
    # level figures only: under specsweep names where the formula is specsweep's
    f["output_tok_s"] = f["vllm_output_throughput"]
    f["request_per_s"] = number(obj, "request_throughput", where)
    f["n_ok"] = completed
    f["n_errors"] = failed
    if completed == completed and failed == failed and completed + failed > 0:
        f["n_requests"] = completed + failed
        f["error_rate"] = failed / (completed + failed)
    for stem, name in (("ttft", "ttft"), ("tpot", "tpot"), ("e2el", "e2e"), ("itl", "chunk_gap")):
        f[f"{name}_mean_s"] = ms(obj, f"mean_{stem}_ms", where)
        f[f"{name}_p50_s"] = ms(obj, f"median_{stem}_ms", where)
        for p, v in _percentiles(obj, stem, where).items():
            if p in (90, 99):
                f[f"{name}_p{p}_s"] = v
    tpot = f.get("tpot_mean_s", math.nan)
    if tpot == tpot and tpot > 0:
        f["user_tok_s_mean"] = 1.0 / tpot
        ids["user_tok_s_mean"] = USER_FROM_MEAN_TPOT
    return {k: v for k, v in f.items() if isinstance(v, str) or v == v}, ids


#: specsweep column -> (vLLM's field, seconds or tok/s per unit of it, why the two can differ)
_WINDOW = ("vLLM divides by its benchmark duration, from before the first request is dispatched until every "
           "response is gathered; specsweep by its window, from the first request sent to the last finished")
_PERCENTILE = "vLLM's median over the same per-request values"
HEADLINE: dict[str, tuple[Any, float, str]] = {
    "output_tok_s": ("output_throughput", 1.0, _WINDOW),
    "request_per_s": ("request_throughput", 1.0, _WINDOW),
    "ttft_p50_s": ("median_ttft_ms", 1e-3, _PERCENTILE),
    "tpot_p50_s": ("median_tpot_ms", 1e-3, _PERCENTILE),
    "e2e_p50_s": ("median_e2el_ms", 1e-3, _PERCENTILE),
    "chunk_gap_p50_s": ("median_itl_ms", 1e-3, "vLLM's median ITL, pooled over every chunk gap of every request"),
}


def _level_requests(obj: dict[str, Any], where: str) -> list:
    n = len(obj["ttfts"])
    for key in _DETAIL:
        if not isinstance(obj.get(key), list) or len(obj[key]) != n:
            raise BadInput(f"{where}: per-request field '{key}' is missing or has a different length than 'ttfts' "
                           f"({n}); the file was edited or truncated")
    errors = obj.get("errors")
    if not isinstance(errors, list) or len(errors) != n:
        errors = [""] * n
    inputs = obj.get("input_lens")
    if not isinstance(inputs, list):
        inputs = [None] * n
    records = []
    for i in range(n):
        err = str(errors[i]) if errors[i] else None
        gaps = obj["itls"][i]
        if not isinstance(gaps, list) or not all(isinstance(g, (int, float)) and g >= 0 for g in gaps):
            raise BadInput(f"{where}: itls[{i}] must be a list of non-negative seconds")
        out = obj["output_lens"][i]
        if out is not None and (isinstance(out, bool) or not isinstance(out, (int, float))):
            raise BadInput(f"{where}: output_lens[{i}] must be a number of tokens, found {json.dumps(out)[:40]}")
        if not err and not (isinstance(out, (int, float)) and out >= 1):
            err = f"vLLM recorded {json.dumps(out)[:40]} output tokens for a successful request"
            out = None
        records.append(record(obj["start_times"][i], obj["ttfts"][i], gaps, obj["latencies"][i],
                              out, error=err, prompt_tokens=inputs[i] if i < len(inputs) else None,
                              where=f"{where}, request {i}"))
    return records


#: a ``vllm bench sweep serve`` run folder: its serve-parameter set (None: the unmodified command)
_SWEEP_FOLDER = re.compile(r"^SERVE--(?P<serve>.*?)(?:-BENCH--.*)?$")


def _objects(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The run objects of ``path``: a ``--save-result`` file, or a sweep folder's ``summary.json``
    (a JSON list of them); a sweep's ``summary.csv`` is refused naming the files to give."""
    if path.suffix.lower() == ".csv":
        raise BadInput(f"{path}: vllm bench sweep's summary.csv flattens every folder's runs into one table; pass "
                       "each SERVE-… folder's summary.json (or its run=N.json files) as one arm instead")
    if path.name == "summary.json":
        try:
            runs = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise BadInput(f"{path}: cannot be read as vllm bench sweep's summary.json ({type(exc).__name__})") from None
        if isinstance(runs, list) and runs and all(isinstance(r, dict) for r in runs):
            return [(i + 1, r) for i, r in enumerate(runs)]
    return read_json_objects(path)


def sweep_serve(path: Path) -> str | None:
    """The serve-parameter set of a ``vllm bench sweep serve`` run file (its folder's ``SERVE--``
    part, ``""`` for the unmodified command), or None for a file outside such a folder."""
    m = _SWEEP_FOLDER.match(path.parent.name)
    return m.group("serve") if m else None


def read(path: Path) -> ToolRun:
    """One ``--save-result`` file (a JSON object, or JSON lines from ``--append-result``), or a
    ``vllm bench sweep serve`` folder's ``summary.json``."""
    levels = []
    model, version = None, None
    ids: dict[str, str] = {}
    workload: dict[str, Any] = {}
    notes: list[str] = []
    for line, obj in _objects(path):
        where = f"{path}, line {line}" if line > 1 else str(path)
        if "output_throughput" not in obj or "duration" not in obj:
            raise BadInput(f"{where}: no 'output_throughput'/'duration': not a vllm bench serve --save-result file")
        refuse_foreign(obj, where, "vllm")
        conc = concurrency_of(obj.get("max_concurrency"), where, "max_concurrency")
        detailed = all(isinstance(obj.get(k), list) for k in _DETAIL)
        figures, level_ids = _figures(obj, where, detailed)
        ids.update(level_ids)
        requests = _level_requests(obj, where) if detailed else None
        if requests is not None:
            ok = [r for r in requests if not r.error]
            counted = sum(r.output_tokens or 0 for r in ok)
            total = number(obj, "total_output_tokens", where)
            if total == total and counted != total:
                notes.append(f"{where}: total_output_tokens {total:.0f} differs from the sum of output_lens "
                             f"({counted}); the per-request figures were used")
        levels.append(Level(conc, figures, requests, where,
                            headline=tool_headline(HEADLINE, lambda key: number(obj, key, where))  # noqa: B023 - called at once
                            if requests is not None else {}))
        model = model or obj.get("model_id")
        version = version or obj.get("vllm_version") or obj.get("version")
        workload.setdefault("num_prompts", obj.get("num_prompts"))
        if obj.get("request_rate") not in (None, "inf"):
            notes.append(f"{where}: request_rate {obj['request_rate']} (a rate limit on top of max_concurrency)")
    if not any(lv.requests is not None for lv in levels):
        notes.append(f"{path}: no per-request arrays (written without --save-detailed): vLLM's level figures "
                     "only; the per-user speed is 1 / mean TPOT")
    return ToolRun(tool=TOOL, version=str(version) if version else None, levels=levels, source=path,
                   model=str(model) if model else None, workload={"kind": "vllm bench serve (dataset not recorded in the file)"},
                   definitions=dict(DEFINITIONS, user_tok_s_mean=USER_FROM_MEAN_TPOT) if ids else dict(DEFINITIONS),
                   definition_ids=ids, warnings=[WARNING], notes=notes, reader=READER,
                   server={"sweep_serve": serve} if (serve := sweep_serve(path)) is not None else {})
