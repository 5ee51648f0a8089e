"""Read guidellm's ``benchmarks.json`` (``guidellm run --output kind=json``; older releases
``guidellm benchmark --outputs benchmarks.json``) into :class:`~specsweep.importers.common.ToolRun`.

Written against guidellm 0.8.1 (the release that wrote the fixtures, ``metadata.version`` 2) and
its source at commit ee7a77457ba668b4b5ccb40f110518829893b36a
(``src/guidellm/schemas/request_stats.py``, ``src/guidellm/benchmark/schemas/``). A file holds
one benchmark per strategy; specsweep reads the closed-loop ones (``concurrent``: one per
``streams`` value; ``synchronous``: concurrency 1). What guidellm's figures mean there:

- Per request (``requests.successful[]`` / ``errored[]``): ``info.timings.request_start``,
  ``first_token_iteration``, ``last_token_iteration``, ``request_end`` (epoch seconds) and
  ``token_iterations`` (stream chunks that carried tokens). ``output_tokens`` is the server's usage
  figure (``output_metrics.total_tokens``, asked for with ``continuous_usage_stats``), or, when the
  server sent none, the number of chunks.
- ``time_per_output_token_ms`` = (last token − request start) / output tokens: **it includes the
  first token** (and the wait for it), unlike specsweep's TPOT = (e2e − TTFT)/(tokens − 1).
- ``inter_token_latency_ms`` = (last − first token)/(output tokens − 1): one value per request,
  which is specsweep's TPOT, not a distribution over token gaps.
- ``output_tokens_per_second``: a rate distribution over the measured window, not Σ tokens / window.

The level's specsweep figures are computed from the per-request rows (TTFT, e2e, TPOT, tokens
per chunk; no chunk timeline, so no inter-chunk or token-normalised ITL); guidellm's own summary
figures are kept as ``guidellm_*``.
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
    read_json_objects,
    record,
    token_count,
    tool_headline,
)

TOOL = "guidellm"
READER = "specsweep.importers.guidellm (guidellm 0.8.1; source at commit ee7a77457ba668b4b5ccb40f110518829893b36a)"
DEFINITIONS: dict[str, str] = {
    "guidellm_tpot_mean_s": "guidellm 'TPOT', mean: (last token − request start) / output tokens, so it includes the "
                            "first token and the wait for it (not specsweep's TPOT)",
    "guidellm_itl_mean_s": "guidellm 'ITL', mean over requests of (last − first token) / (output tokens − 1) "
                           "(= specsweep's TPOT per request)",
    "guidellm_output_tok_s_mean": "guidellm output_tokens_per_second, mean of its rate distribution over the window",
}
WARNING = ("Imported from guidellm: its 'TPOT' includes the first token ((last token − start) / tokens) and is kept "
           "as guidellm_tpot_*, not as specsweep's TPOT; its 'ITL' is one per-request average (specsweep's TPOT), not "
           "a distribution over token gaps. specsweep's figures here are recomputed from guidellm's per-request "
           "timings; there is no chunk timeline, so no inter-chunk or token-normalised ITL.")


def _dig(obj: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def _concurrency(bench: dict[str, Any], where: str) -> int | None:
    strategy = _dig(bench, "config", "strategy") or {}
    kind = strategy.get("type_")
    if kind == "synchronous":
        return 1
    if kind == "concurrent":
        return concurrency_of(strategy.get("streams", strategy.get("max_concurrency")), where, "strategy.streams")
    return None


def _request(req: dict[str, Any], where: str, failed: bool) -> Any:
    t = _dig(req, "info", "timings") or {}
    start = _num(t.get("request_start")) or _num(req.get("request_start_time"))
    if start is None:
        raise BadInput(f"{where}: a request has no info.timings.request_start; the file was edited or truncated")
    end = _num(t.get("request_end")) or _num(req.get("request_end_time"))
    first, last = _num(t.get("first_token_iteration")), _num(t.get("last_token_iteration"))
    if failed or first is None:
        err = _dig(req, "info", "error") or ("errored" if failed else "no token received")
        return record(start, None, None, (end - start) if end else None, None, error=str(err), where=where), None
    usage = _num(_dig(req, "output_metrics", "total_tokens"))
    chunks = token_count(t.get("token_iterations"), "info.timings.token_iterations", where) or 0
    tokens = usage if usage is not None else float(chunks)
    last = last if last is not None else first
    rec = record(start, first - start, [last - first] if last > first else [], (end - start) if end else None,
                 tokens, prompt_tokens=_num(req.get("prompt_tokens")),
                 token_source="usage" if usage is not None else "chunks", where=where)
    return rec, chunks


_RATE = ("guidellm's is the mean of its output_tokens_per_second (requests_per_second) distribution over its "
         "benchmark window; specsweep's is Σ / its window, from the first request sent to the last finished")
_MEDIAN = "guidellm's median (its own percentile estimate) over the same requests"
#: specsweep column -> ((guidellm metric, statistic over successful requests), seconds or tok/s per unit, why
#: the two can differ)
HEADLINE: dict[str, tuple[Any, float, str]] = {
    "output_tok_s": (("output_tokens_per_second", "mean"), 1.0, _RATE),
    "request_per_s": (("requests_per_second", "mean"), 1.0, _RATE),
    "ttft_p50_s": (("time_to_first_token_ms", "median"), 1e-3, _MEDIAN),
    "tpot_p50_s": (("inter_token_latency_ms", "median"), 1e-3, _MEDIAN + "; its ITL per request is specsweep's TPOT"),
    "e2e_p50_s": (("request_latency", "median"), 1.0, _MEDIAN + "; its request latency ends at request_end (the "
                  "response closed), specsweep's e2e at the last token"),
}


def _headline(metrics: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """guidellm's own summary figures of a benchmark (its ``metrics``, successful requests) under the specsweep columns."""
    return tool_headline(HEADLINE, lambda key: _num(_dig(metrics, key[0], "successful", key[1])))


def _own_warnings(bench: dict[str, Any], conc: int, path: Path) -> list[str]:
    """guidellm's own warnings of a benchmark (``warnings[]``: its checks of its own client, e.g.
    requests generated or dispatched late), each as a client-bound warning of the level."""
    out = []
    for w in bench.get("warnings") or []:
        if isinstance(w, dict) and (w.get("message") or w.get("code")):
            said = " ".join(str(w.get(k) or "")[:300] for k in ("message", "note")).strip() or str(w.get("code"))[:80]
            out.append(f"guidellm at concurrency {conc} ({path.name}) warned about its own client ({str(w.get('code'))[:80]}"
                       f"): {said} Its client may be {CLIENT_BOUND} there: its throughput and latencies may describe "
                       "the client, not the server.")
    return out


def _check_sampled(bench: dict[str, Any], reqs: dict[str, Any], where: str) -> None:
    """Refuse a benchmark whose file keeps fewer request rows than it ran (``--metrics …
    sample_size=N``): figures recomputed from a sample's rows over the whole window would be too
    low, and guidellm's own aggregates are rate distributions, not specsweep's figures."""
    for group in ("successful", "errored"):
        ran = _num(_dig(bench, "metrics", "request_totals", group))
        kept = len(reqs.get(group) or [])
        if ran is not None and kept < ran:
            raise BadInput(f"{where}: the file keeps {kept} of the {int(ran)} {group} requests guidellm ran (a request "
                           "sample limit, --metrics … sample_size=N), so throughput recomputed from them would be too "
                           "low; re-run guidellm without sample_size")


def _document(path: Path) -> tuple[dict[str, Any], list[Any]]:
    """The report in ``path``: JSON, or YAML (``--outputs yaml`` writes the same document); a CSV or
    HTML output (a summary table, not the requests) is refused naming the file to give instead."""
    suffixes = [x.lower() for x in path.suffixes]
    if {".csv", ".html", ".htm"} & set(suffixes):
        raise BadInput(f"{path}: guidellm's CSV and HTML outputs hold summary tables, not the per-request samples; "
                       "pass the benchmarks.json (or .yaml) the same run wrote (guidellm --outputs json)")
    if {".yaml", ".yml"} & set(suffixes):
        import yaml  # deferred: only YAML reports need it

        try:
            text = path.read_text(encoding="utf-8")
            doc = yaml.safe_load(text)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise BadInput(f"{path}: cannot be read as guidellm's YAML report ({type(exc).__name__})") from None
        if not isinstance(doc, dict):
            raise BadInput(f"{path}: holds no YAML mapping; pass guidellm's benchmarks.yaml or benchmarks.json")
        return doc, []
    (_, doc), *rest = read_json_objects(path)
    return doc, rest


def _refuse_sweep(path: Path, skipped: list[str], levels: list[Level]) -> None:
    """Refuse a file whose only closed-loop benchmark is the synchronous one beside open-loop ones
    (guidellm's default ``--profile sweep``: synchronous, throughput, then constant rates): it would
    import as a single level at concurrency 1, which is no sweep over concurrency."""
    if skipped and all(lv.concurrency == 1 for lv in levels):
        kinds = ", ".join(sorted(set(skipped)))
        raise BadInput(f"{path}: a guidellm rate sweep (--profile sweep: synchronous, then {kinds} benchmarks), not "
                       "concurrency levels; only its synchronous benchmark is closed-loop, one level at concurrency "
                       "1. Run guidellm with --profile concurrent --rate 1,4,16,... (one benchmark per concurrency)")


def read(path: Path) -> ToolRun:
    """One ``benchmarks.json`` (or the same report as ``benchmarks.yaml``): a level per closed-loop benchmark."""
    doc, rest = _document(path)
    if rest or not isinstance(doc.get("benchmarks"), list):
        raise BadInput(f"{path}: no 'benchmarks' list: not a guidellm benchmarks.json")
    version = _dig(doc, "metadata", "guidellm_version")
    levels, notes, skipped, tool_warnings = [], [], [], []
    workload: dict[str, Any] = {}
    for i, bench in enumerate(doc["benchmarks"]):
        where = f"{path}, benchmarks[{i}]"
        if not isinstance(bench, dict):
            raise BadInput(f"{where}: not an object")
        conc = _concurrency(bench, where)
        if conc is None:
            skipped.append(str(_dig(bench, "config", "strategy", "type_")))
            continue
        reqs: dict[str, Any] = bench["requests"] if isinstance(bench.get("requests"), dict) else {}
        records, chunks = [], []
        for group, failed in (("successful", False), ("errored", True)):
            members = reqs.get(group)
            for k, req in enumerate(members if isinstance(members, list) else []):
                rec, n = _request(req, f"{where}, requests.{group}[{k}]", failed)
                records.append(rec)
                chunks.append(n)
        if not records:
            raise BadInput(f"{where}: no per-request samples (requests.successful is empty); re-run guidellm without "
                           "a request sample limit")
        _check_sampled(bench, reqs, where)
        m = bench.get("metrics") or {}
        fig = {
            "guidellm_tpot_mean_s": (_num(_dig(m, "time_per_output_token_ms", "successful", "mean")) or math.nan) / 1000,
            "guidellm_itl_mean_s": (_num(_dig(m, "inter_token_latency_ms", "successful", "mean")) or math.nan) / 1000,
            "guidellm_output_tok_s_mean": _num(_dig(m, "output_tokens_per_second", "successful", "mean")) or math.nan,
        }
        incomplete = len(reqs.get("incomplete") or [])
        if incomplete:
            notes.append(f"{where}: {incomplete} incomplete request(s) (cancelled at the end of the benchmark) left out")
        tool_warnings += _own_warnings(bench, conc, path)
        levels.append(Level(conc, {k: v for k, v in fig.items() if v == v}, records, where, chunks=chunks,
                            headline=_headline(m)))
        data = _dig(bench, "config", "requests") or {}
        workload.setdefault("source", data)
    _refuse_sweep(path, skipped, levels)
    if skipped:
        notes.append(f"{path}: benchmarks of open-loop strategies ({', '.join(sorted(set(skipped)))}) left out; "
                     "specsweep compares closed-loop concurrency levels")
    if not levels:
        raise BadInput(f"{path}: no concurrent or synchronous benchmark; run guidellm with --profile kind=concurrent")
    spec_data = _dig(doc, "config", "spec", "data") or []
    data0 = spec_data[0] if spec_data and isinstance(spec_data[0], dict) else {}
    wl: dict[str, Any] = {"kind": f"guidellm:{data0.get('kind', 'unknown')}"}
    if isinstance(data0.get("output_tokens"), int):
        wl["output_tokens"] = data0["output_tokens"]
    if isinstance(data0.get("prompt_tokens"), int):
        wl["input_tokens"] = data0["prompt_tokens"]
    target = _dig(doc, "config", "spec", "backend", "target")
    model = _dig(doc, "config", "spec", "backend", "model") or None
    return ToolRun(tool=TOOL, version=str(version) if version else None, levels=levels, source=path, model=model,
                   workload=wl, definitions=dict(DEFINITIONS), warnings=[WARNING, *tool_warnings], notes=notes, reader=READER,
                   server={"endpoint": target} if target else {})
