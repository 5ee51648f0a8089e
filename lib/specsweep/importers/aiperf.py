"""Read aiperf's ``profile_export_aiperf.json`` (one ``aiperf profile`` run: one concurrency)
into :class:`~specsweep.importers.common.ToolRun`.

Written against aiperf 0.13.0 (the release that wrote the fixtures, ``schema_version`` 1.4) and
its metric definitions in ai-dynamo/aiperf ``aiperf/metrics/types/*.py``. What the file means:

- ``input_config.phases[]`` (kind ``profiling``, type ``concurrency``): the closed-loop
  concurrency; older files: ``input_config.loadgen.concurrency``.
- ``output_sequence_length`` (OSL) per request: output (+ reasoning) tokens counted **by aiperf's
  client tokenizer** unless ``input_config.endpoint.use_server_token_count`` is true (then the
  server's ``usage.completion_tokens``). Every token-based figure follows that count.
- ``output_token_throughput`` = Σ OSL / ``benchmark_duration`` (tok/s), kept as
  ``aiperf_output_tok_s``. Where the per-request export is read, specsweep's ``output_tok_s`` is
  recomputed over its own window (first request sent → last finished), which is shorter than
  aiperf's (its whole profiling phase), so specsweep's reads higher by tenths of a percent to
  several percent; an import note names each difference beyond 0.1 % (``HEADLINE``).
- ``inter_token_latency`` = (request_latency − TTFT)/(OSL − 1) per request: specsweep's TPOT;
  ``output_token_throughput_per_user`` = mean over requests of 1/ITL: specsweep's per-user speed.
- ``request_latency``: request sent → last *content* response (usage-only chunks left out,
  ``request_latency_metric.py``): specsweep's e2e.
- ``inter_chunk_latency``: raw gaps between stream responses (kept as ``aiperf_icl_*``).
- ``effective_concurrency``: time-weighted requests in flight (specsweep's effective concurrency).

Statistics: ``avg``, ``p50``, ``p90``, ``p99`` (and ``p10`` for the per-user speed) of each metric.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from specsweep.analyze.client_bound import CLIENT_BOUND
from specsweep.importers.common import (
    BadInput,
    Level,
    ToolRun,
    concurrency_of,
    finite_float,
    read_json_objects,
    record,
    tool_headline,
)

TOOL = "aiperf"
READER = "specsweep.importers.aiperf (aiperf 0.13.0, profile_export_aiperf.json schema 1.4)"
CLIENT_TOKENS = "output tokens counted by aiperf's client tokenizer"
DEFINITIONS: dict[str, str] = {
    "aiperf_icl_mean_s": "aiperf inter-chunk latency, mean: raw gaps between stream responses",
    "aiperf_icl_p99_s": "aiperf inter-chunk latency, p99",
    "aiperf_output_tok_s": "aiperf's own output_token_throughput: Σ output tokens / benchmark_duration (its window, "
                           "not specsweep's first-sent to last-finished)",
    "aiperf_request_per_s": "aiperf's own request_throughput: requests / benchmark_duration",
}
WARNING = ("Imported from aiperf: its 'ITL' is (latency − TTFT)/(OSL − 1) per request, i.e. specsweep's TPOT, and "
           "appears here as TPOT (not as a distribution over token gaps); its per-user tok/s is the mean of 1/ITL, "
           "specsweep's per-user speed.")
WARNING_CLIENT = ("aiperf counted output tokens with its client tokenizer ({tokenizer}), not the server's usage "
                  "figures (run aiperf with --use-server-token-count): aggregate throughput, TPOT and per-user speed "
                  "are compared only with arms whose tokens were counted the same way.")

#: specsweep column stem -> (aiperf metric, seconds per unit)
STATS: dict[str, tuple[str, float]] = {
    "ttft": ("time_to_first_token", 1e-3),
    "tpot": ("inter_token_latency", 1e-3),
    "e2e": ("request_latency", 1e-3),
}
TOKEN_BASED = ("output_tok_s", "user_tok_s_mean", "user_tok_s_p50", "user_tok_s_p10", "tpot_mean_s", "tpot_p50_s",
               "tpot_p90_s", "tpot_p99_s")


def _stat(doc: dict[str, Any], metric: str, stat: str, where: str) -> float:
    entry = doc.get(metric)
    if entry is None:
        return math.nan
    if not isinstance(entry, dict):
        raise BadInput(f"{where}: '{metric}' must be an object with 'avg', 'p50' …")
    value = entry.get(stat)
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"{where}: '{metric}.{stat}' must be a number, found {value!r}")
    return finite_float(value, where, f"{metric}.{stat}")


def _concurrency(cfg: dict[str, Any], where: str) -> int:
    for phase in cfg.get("phases") or []:
        if isinstance(phase, dict) and phase.get("kind", "profiling") == "profiling":
            if phase.get("type") not in (None, "concurrency"):
                raise BadInput(f"{where}: the profiling phase ran at a request rate ({phase.get('type')}); specsweep "
                               "compares closed-loop levels: run aiperf with --concurrency N")
            return concurrency_of(phase.get("concurrency"), where, "input_config.phases[].concurrency")
    loadgen = cfg.get("loadgen") or {}
    return concurrency_of(loadgen.get("concurrency"), where, "input_config.loadgen.concurrency")


def _seconds(ms: Any) -> Any:
    """A millisecond figure as seconds; anything else as it is (``record`` refuses what is no number)."""
    return ms / 1000 if isinstance(ms, (int, float)) and not isinstance(ms, bool) else ms


#: aiperf's per-request export, written beside profile_export_aiperf.json
RECORDS = ("profile_export.jsonl", "profile_export.jsonl.gz")


def _record_names(path: Path) -> list[str]:
    """Where aiperf wrote the per-request export beside the summary ``path``: ``P.jsonl`` beside
    ``P_aiperf.json`` (``--profile-export-prefix P``; ``profile_export`` by default), then the default names."""
    stem = path.name.removesuffix("_aiperf.json")
    own = [f"{stem}.jsonl", f"{stem}.jsonl.gz"] if stem != path.name else []
    return list(dict.fromkeys([*own, *RECORDS]))


def _records(path: Path, server_counts: bool) -> tuple[list[Any], Path] | None:
    """The profiling requests of ``profile_export.jsonl`` beside ``path`` as records, or None when absent.

    Per record: ``metadata.request_start_ns`` (epoch ns), ``metrics.time_to_first_token``,
    ``request_latency`` and ``inter_chunk_latency`` (ms; one gap per token-carrying response after
    the first), ``output_sequence_length`` (the count aiperf used), ``error``.
    """
    sibling = next((path.parent / n for n in _record_names(path) if (path.parent / n).is_file()), None)
    if sibling is None:
        return None
    out = []
    for line, rec in read_json_objects(sibling):
        where = f"{sibling}, line {line}"
        meta, metrics = rec.get("metadata") or {}, rec.get("metrics") or {}
        if meta.get("benchmark_phase", "profiling") != "profiling" or meta.get("was_cancelled"):
            continue

        def value(name: str) -> Any:
            entry = metrics.get(name)  # noqa: B023 - called only within this iteration
            return entry.get("value") if isinstance(entry, dict) else None

        start = meta.get("request_start_ns")
        if isinstance(start, bool) or not isinstance(start, (int, float)):
            raise BadInput(f"{where}: no metadata.request_start_ns; the file was edited or truncated")
        error = rec.get("error")
        err = (error.get("message") or error.get("type") or "error") if isinstance(error, dict) else error
        gaps = value("inter_chunk_latency")
        ttft, lat, osl = value("time_to_first_token"), value("request_latency"), value("output_sequence_length")
        out.append(record(start / 1e9, _seconds(ttft), [_seconds(g) for g in gaps] if isinstance(gaps, list) else gaps,
                          _seconds(lat), osl, error=str(err) if err else None,
                          prompt_tokens=value("input_sequence_length"),
                          token_source="usage" if server_counts else "tokenize", where=f"{where} (a request)"))
    return (out, sibling) if out else None


_WINDOW = ("aiperf divides by its benchmark_duration (its whole profiling phase); specsweep by its window, from the "
           "first request sent to the last finished")
#: specsweep column -> ((aiperf metric, statistic), seconds or tok/s per unit, why the two can differ)
HEADLINE: dict[str, tuple[Any, float, str]] = {
    "output_tok_s": (("output_token_throughput", "avg"), 1.0, _WINDOW),
    "request_per_s": (("request_throughput", "avg"), 1.0, _WINDOW),
    "ttft_p50_s": (("time_to_first_token", "p50"), 1e-3, "aiperf's median over the same requests"),
    "tpot_p50_s": (("inter_token_latency", "p50"), 1e-3, "aiperf's median ITL, (latency − TTFT)/(OSL − 1) per "
                   "request"),
    "e2e_p50_s": (("request_latency", "p50"), 1e-3, "aiperf's median over the same requests"),
}


def read(path: Path) -> ToolRun:
    """One ``profile_export_aiperf.json``: one level."""
    if path.suffix.lower() == ".csv":
        raise BadInput(f"{path}: aiperf's CSV export is a summary table without its configuration; pass the "
                       f"{path.name.removesuffix('.csv')}.json the same run wrote beside it")
    (line, doc), *rest = read_json_objects(path)
    where = str(path)
    if rest or "output_token_throughput" not in doc or not isinstance(doc.get("input_config"), dict):
        raise BadInput(f"{where}: no 'output_token_throughput'/'input_config': not an aiperf profile_export_aiperf.json")
    if doc.get("was_cancelled") or doc.get("is_complete") is False:
        raise BadInput(f"{where}: the aiperf run was cancelled or did not complete; re-run it")
    cfg = doc["input_config"]
    conc = _concurrency(cfg, where)
    f: dict[str, float] = {
        "output_tok_s": _stat(doc, "output_token_throughput", "avg", where),
        # aiperf's own headline figures, kept beside specsweep's (recomputed from the rows where they exist)
        "aiperf_output_tok_s": _stat(doc, "output_token_throughput", "avg", where),
        "aiperf_request_per_s": _stat(doc, "request_throughput", "avg", where),
        "request_per_s": _stat(doc, "request_throughput", "avg", where),
        "n_ok": _stat(doc, "completed_request_count", "avg", where),
        "output_tokens": _stat(doc, "total_output_tokens", "avg", where),
        "effective_concurrency": _stat(doc, "effective_concurrency", "avg", where),
        "user_tok_s_mean": _stat(doc, "output_token_throughput_per_user", "avg", where),
        "user_tok_s_p50": _stat(doc, "output_token_throughput_per_user", "p50", where),
        "user_tok_s_p10": _stat(doc, "output_token_throughput_per_user", "p10", where),
        "aiperf_icl_mean_s": _stat(doc, "inter_chunk_latency", "avg", where) * 1e-3,
        "aiperf_icl_p99_s": _stat(doc, "inter_chunk_latency", "p99", where) * 1e-3,
    }
    err = _stat(doc, "request_error_rate", "avg", where)
    if err == err:
        f["error_rate"] = err / 100.0
    for stem, (metric, scale) in STATS.items():
        f[f"{stem}_mean_s"] = _stat(doc, metric, "avg", where) * scale
        for p in (50, 90, 99):
            f[f"{stem}_p{p}_s"] = _stat(doc, metric, f"p{p}", where) * scale
    if math.isnan(f["output_tok_s"]):
        raise BadInput(f"{where}: 'output_token_throughput.avg' is missing; the run produced no tokens")
    endpoint = cfg.get("endpoint") or {}
    server_counts = bool(endpoint.get("use_server_token_count"))
    ids: dict[str, str] = {}
    warnings = [WARNING]
    definitions = dict(DEFINITIONS)
    if not server_counts:
        tokenizer = (cfg.get("tokenizer") or {}).get("name") or "the model's"
        for col in TOKEN_BASED:
            ids[col] = f"{col} with {CLIENT_TOKENS}"
            definitions[col] = f"as specsweep's, but with {CLIENT_TOKENS} ({tokenizer})"
        warnings.append(WARNING_CLIENT.format(tokenizer=tokenizer))
    datasets = cfg.get("datasets") or [{}]
    prompts = (datasets[0] or {}).get("prompts") or {}
    wl: dict[str, Any] = {"kind": f"aiperf:{(datasets[0] or {}).get('type', 'unknown')}"}
    osl, isl = (prompts.get("osl") or {}).get("mean"), (prompts.get("isl") or {}).get("mean")
    if isinstance(osl, (int, float)) and osl >= 1:
        wl["output_tokens"] = int(round(osl))
    if isinstance(isl, (int, float)) and isl >= 1:
        wl["input_tokens"] = int(round(isl))
    models = [m.get("name") for m in (cfg.get("models") or {}).get("items", []) if isinstance(m, dict)]
    notes = []
    if f.get("tpot_p50_s") == 0.0:
        warnings.append(f"aiperf at concurrency {conc} ({path.name}): the median time per output token is 0 ms, so "
                        f"most tokens reached the client in bursts, so it looks {CLIENT_BOUND}: the client, not the "
                        "server, likely limited this level (re-run it on a less loaded client machine); its "
                        "throughput and latencies describe the client.")
    mismatch = _stat(doc, "osl_mismatch_count", "avg", where)
    if mismatch == mismatch and mismatch > 0:
        notes.append(f"{where}: aiperf counted {mismatch:.0f} request(s) whose output length differs from the requested one")
    records = _records(path, server_counts)
    if records is not None:
        notes.append(f"{path}: per-request rows from {records[1].name} beside it; specsweep's figures were "
                     "recomputed from them")
    return ToolRun(tool=TOOL, version=str(doc.get("aiperf_version") or "") or None,
                   levels=[Level(conc, {k: v for k, v in f.items() if v == v}, records[0] if records else None,
                                 where, headline=tool_headline(HEADLINE, lambda key: _stat(doc, key[0], key[1], where))
                                 if records else {})], source=path,
                   model=models[0] if models else None, workload=wl, definitions=definitions, definition_ids=ids,
                   warnings=warnings, notes=notes, reader=READER,
                   server={"endpoint": (endpoint.get("urls") or [None])[0]})
