"""Read SGLang ``bench_serving --output-file`` files (JSON lines, one per run; now
``python -m sglang.benchmark.serving``) into :class:`~specsweep.importers.common.ToolRun`.

Written against SGLang's writer at commit 00f9ec472ffef82714c0407b842ccb5bd254d130
(``python/sglang/benchmark/serving.py``: the ``result`` dict of ``benchmark`` and the request
functions); fixtures follow that documented shape (SGLang's client needs the sglang package and a
tokenizer, so it was not run here). What a line means there:

- ``max_concurrency``: the closed-loop concurrency; ``backend``: the request function used.
- ``output_throughput`` = Σ output_len / ``duration`` (tok/s). ``output_len`` is the server's
  count (native ``sglang`` backend: ``meta_info.completion_tokens``; OpenAI paths:
  ``usage.completion_tokens``) — but on the OpenAI paths, when a chunk carries no ``usage``, it
  **falls back to the requested length** (``request_func_input.output_len``), and the completions
  path does not ask for ``include_usage``. ``total_output_tokens_retokenized`` re-tokenises the text.
- TTFT, TPOT = (latency − TTFT)/(output_len − 1) and E2E as specsweep's (on the OpenAI
  completions path ``latency`` ends at the last line, ``[DONE]``, not the last token chunk).
- ``*_itl_ms``: the native backend spreads each chunk gap over the tokens it carried; the OpenAI
  backends keep one sample per chunk unless an accept length was found: not specsweep's ITL.
- ``accept_length``: ``/server_info`` ``avg_spec_accept_length`` read after the run, a cumulative
  average since the scheduler started (warm-up and earlier runs included), rank 0 only.
- ``concurrency`` = Σ E2E / duration (specsweep's effective concurrency).
- Per-request arrays (``--output-details``) carry no start times, so levels hold SGLang's figures only.
"""
from __future__ import annotations

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
    refuse_foreign,
    section,
)

TOOL = "sglang bench_serving"
READER = "specsweep.importers.sglang (SGLang benchmark/serving.py at commit 00f9ec472ffef82714c0407b842ccb5bd254d130)"
#: request functions that read SGLang's own completion counts
NATIVE_BACKENDS = frozenset({"sglang", "sglang-native"})
USER_FROM_MEAN_TPOT = "1 / mean TPOT (TPOT = (e2e − TTFT) / (output tokens − 1), mean over requests)"
REQUESTED_FALLBACK = ("output tokens: the server's usage.completion_tokens, or the requested length where a response "
                      "carried no usage (SGLang's OpenAI paths)")
DEFINITIONS: dict[str, str] = {
    "sglang_itl_mean_s": "SGLang 'ITL', mean: native backend: each chunk gap spread over the tokens it carried; OpenAI "
                         "backends: one sample per chunk unless an accept length was found",
    "sglang_itl_p50_s": "SGLang 'ITL', median (see sglang_itl_mean_s)",
    "sglang_itl_p99_s": "SGLang 'ITL', p99 (see sglang_itl_mean_s)",
    "sglang_accept_length": "SGLang /server_info avg_spec_accept_length read after the run: cumulative since the "
                            "scheduler started (warm-up and earlier runs included), rank 0 only",
    "sglang_peak_output_tok_s": "SGLang 'peak output token throughput': chunks (not tokens) per 1-second bucket",
    "sglang_output_tok_s_retokenized": "Σ re-tokenised output text / duration (tok/s)",
}
WARNING_BASE = ("Imported from SGLang bench_serving: its ITL is not specsweep's (native backend: gaps spread over "
                "tokens; OpenAI backends: one sample per chunk) and is kept as sglang_itl_*; its accept length is a "
                "server-wide cumulative average (warm-up and earlier runs mixed in), kept as sglang_accept_length, "
                "not as the level's acceptance.")
WARNING_OAI = ("SGLang bench_serving used backend '{backend}' (an OpenAI path): where a response carried no usage it "
               "counted the requested length as output tokens, so aggregate throughput and TPOT are compared only with "
               "arms that count tokens the same way.")


def read(path: Path) -> ToolRun:
    """One ``--output-file`` JSON-lines file: a level per line."""
    levels = []
    backends: set[str] = set()
    notes: list[str] = []
    version = None
    model = None
    workload: dict[str, Any] = {}
    for line, obj in read_json_objects(path):
        where = f"{path}, line {line}"
        if "output_throughput" not in obj or "duration" not in obj:
            raise BadInput(f"{where}: no 'output_throughput'/'duration': not an SGLang bench_serving --output-file line")
        refuse_foreign(obj, where, "sglang")
        conc = concurrency_of(obj.get("max_concurrency"), where, "max_concurrency")
        backend = str(obj.get("backend") or "sglang")
        backends.add(backend)
        f: dict[str, float] = {
            "output_tok_s": number(obj, "output_throughput", where, required=True),
            "request_per_s": number(obj, "request_throughput", where),
            "output_tokens": number(obj, "total_output_tokens", where),
            "n_ok": number(obj, "completed", where),
            "effective_concurrency": number(obj, "concurrency", where),
            "sglang_itl_mean_s": ms(obj, "mean_itl_ms", where),
            "sglang_itl_p50_s": ms(obj, "median_itl_ms", where),
            "sglang_itl_p99_s": ms(obj, "p99_itl_ms", where),
            "sglang_accept_length": number(obj, "accept_length", where),
            "sglang_peak_output_tok_s": number(obj, "max_output_tokens_per_s", where),
        }
        duration = number(obj, "duration", where, required=True)
        retok = number(obj, "total_output_tokens_retokenized", where)
        if retok == retok and duration > 0:
            f["sglang_output_tok_s_retokenized"] = retok / duration
            total = f["output_tokens"]
            if total == total and total > 0 and abs(retok / total - 1) > 0.05:
                notes.append(f"{where}: SGLang's output token count ({total:.0f}) and the re-tokenised text "
                             f"({retok:.0f}) differ by {abs(retok / total - 1) * 100:.0f}%")
        for stem, name in (("ttft", "ttft"), ("tpot", "tpot"), ("e2e_latency", "e2e")):
            f[f"{name}_mean_s"] = ms(obj, f"mean_{stem}_ms", where)
            f[f"{name}_p50_s"] = ms(obj, f"median_{stem}_ms", where)
            for p in (90, 99):
                f[f"{name}_p{p}_s"] = ms(obj, f"p{p}_{stem}_ms", where)
        tpot = f["tpot_mean_s"]
        if tpot == tpot and tpot > 0:
            f["user_tok_s_mean"] = 1.0 / tpot
        levels.append(Level(conc, {k: v for k, v in f.items() if v == v}, None, where))
        if isinstance(obj.get("ttfts"), list):
            notes.append(f"{where}: per-request arrays (--output-details) carry no start times, so SGLang's level "
                         "figures were used and no per-request rows were kept")
        info = section(obj, "server_info")
        version = version or info.get("version")
        model = model or info.get("served_model_name") or info.get("model_path")
        workload.setdefault("kind", f"sglang:{obj.get('dataset_name') or 'unknown'}")
        if isinstance(obj.get("random_output_len"), int) and str(obj.get("dataset_name", "")).startswith("random"):
            workload.setdefault("output_tokens", obj["random_output_len"])
            workload.setdefault("input_tokens", obj.get("random_input_len"))
            if obj.get("random_range_ratio") not in (None, 1, 1.0):
                notes.append(f"{where}: random_range_ratio {obj.get('random_range_ratio')}: SGLang draws lengths "
                             "uniformly in [max(1, ratio × L), L], so requests were not all of the stated length")
    if len(backends) > 1:
        raise BadInput(f"{path}: lines use different backends ({', '.join(sorted(backends))}); import each as its own arm")
    backend = backends.pop()
    oai = backend not in NATIVE_BACKENDS
    ids: dict[str, str] = {"user_tok_s_mean": USER_FROM_MEAN_TPOT + ("; " + REQUESTED_FALLBACK if oai else "")}
    definitions = dict(DEFINITIONS, user_tok_s_mean=ids["user_tok_s_mean"])
    warnings = [WARNING_BASE]
    if oai:
        for col in ("output_tok_s", "tpot_mean_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s"):
            ids[col] = f"{col} with {REQUESTED_FALLBACK}"
            definitions[col] = f"as specsweep's, but {REQUESTED_FALLBACK}"
        for col in ("e2e_mean_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s"):
            ids[col] = f"{col} to the stream's last line ([DONE]), SGLang OpenAI path"
            definitions[col] = "as specsweep's e2e, but timed to the stream's last line ([DONE]), not the last token"
        warnings.append(WARNING_OAI.format(backend=backend))
    # the file names the server's version (server_info), not bench_serving's: never the tool's
    return ToolRun(tool=TOOL, version=None, levels=levels, source=path,
                   model=str(model) if model else None, workload=workload, definitions=definitions,
                   definition_ids=ids, warnings=warnings, notes=notes, reader=READER,
                   server={"name": "sglang", "version": version})
