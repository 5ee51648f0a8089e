"""The common writer of imported result sets: what each tool's reader returns, and how it becomes
an ordinary result set (``store``: ``meta.json``, ``levels.parquet``, ``requests.parquet``).

A reader turns one result file of a peer tool into a :class:`ToolRun`: its levels (one per
concurrency, and per repeat where one file holds several runs of a level), each either with the
per-request samples the file holds (as :class:`~specsweep.results.records.RequestRecord`, absolute times in
seconds) or with the tool's own level figures only.

Definitions are kept exact (:mod:`specsweep.analyze.metrics` states specsweep's):

- Where a level has per-request samples, every specsweep-named column (``output_tok_s``,
  ``tpot_p50_s``, ``chunk_gap_p99_s`` …) is computed from them by :mod:`specsweep.analyze.metrics`, so it
  means what it means in a specsweep run; the tool's own summary figures are kept beside them
  under a tool prefix (``vllm_itl_mean_s``), with the tool's definition in ``metric_definitions``.
- Where a level has the tool's figures only, a figure goes under a specsweep name only when the
  tool's formula is specsweep's; where it differs (a token count that may be the requested
  length, a TPOT that includes the first token, 1/mean TPOT instead of mean 1/TPOT), the column's
  entry in ``metric_definition_ids`` names the tool's definition. :func:`specsweep.analyze.compare.compare`
  compares a metric between two arms only where their ids agree (absent: specsweep's own), and
  says which metrics it left out and why.
- Everything the reader finds that a reader of the page must know (chunk-counted ITL, a token
  count that may come from a client tokenizer …) goes to ``meta.json`` ``warnings``, which the
  report shows at the top.

``meta.json`` names the source tool, its version where the file says it, each source file's
SHA-256 digest and size, and the reader that read it (``import``).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from specsweep.analyze.metrics import level_metrics, requests_frame
from specsweep.errors import InputError
from specsweep.results.atomic import replace_dir
from specsweep.results.meta import Meta
from specsweep.results.records import MAX_COUNT, RequestRecord
from specsweep.results.store import (
    MAX_KEY,
    MAX_METRIC,
    SCHEMA_VERSION,
    RunLocked,
    SchemaError,
    exclusive_lock,
    holder_text,
    level_problems,
    read_meta,
    request_problems,
    validation_problems,
    write_frame,
    write_meta,
)
from specsweep.results.untrusted import decode_utf8, env_limit, parse_json, read_bounded


class BadInput(InputError, ValueError):
    """A result file cannot be imported; the message names the file (and line) and what to do."""


@dataclass
class Level:
    """One measured level of a tool's file: concurrency, the tool's figures, and its requests."""

    concurrency: int
    #: level columns (specsweep names where the definitions agree, tool-prefixed otherwise); seconds, tok/s
    figures: dict[str, float] = field(default_factory=dict)
    #: per-request samples (absolute times, seconds) or None when the file holds level figures only
    requests: list[RequestRecord] | None = None
    #: where in the source this level came from (file, line), for messages
    where: str = ""
    #: token-carrying chunks per request where the records' chunk times are not the real timeline
    #: (None: each record's ``chunk_times`` are the chunks the tool saw)
    chunks: list[int | None] | None = None
    #: the tool's own headline figures for specsweep-named columns (column -> (figure in the column's
    #: unit, what the tool's figure is and why it can differ)): where the column is recomputed from
    #: the requests and differs by more than :data:`HEADLINE_TOLERANCE`, an import note names it
    headline: dict[str, tuple[float, str]] = field(default_factory=dict)


@dataclass
class ToolRun:
    """What one result file of a peer tool says (see the module docstring)."""

    tool: str
    version: str | None
    levels: list[Level]
    source: Path
    model: str | None = None
    workload: dict[str, Any] = field(default_factory=dict)
    #: column -> the tool's definition of it (shown on the page beside specsweep's)
    definitions: dict[str, str] = field(default_factory=dict)
    #: column -> an id of the tool's definition, where it is not specsweep's (see the module docstring)
    definition_ids: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)
    #: the reader module and the peer source it was written against (commit / version)
    reader: str = ""


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, as 64 hex digits."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: where an import writes its result set before putting it in place (``<arm>~XXXX``, beside the
#: arm's lock file ``<arm>.lock``): inside the out folder (one file system, so the swap is a
#: rename) and two levels down, where no reader looks for result sets
STAGING = ".specsweep-import"
#: the most bytes an import reads from one file (decompressed for ``.gz``); the environment variable raises it
MAX_BYTES = 256 << 20
MAX_BYTES_ENV = "SPECSWEEP_IMPORT_MAX_BYTES"
#: the most levels one import holds (table rows, JSON lines, benchmarks, all files together): a
#: sweep has tens; the environment variable raises it
MAX_LEVELS = 10_000
MAX_LEVELS_ENV = "SPECSWEEP_IMPORT_MAX_LEVELS"


def read_text(path: Path) -> str:
    """A result file's text (through gzip for ``.gz``), at most :data:`MAX_BYTES` bytes read in
    blocks; :class:`BadInput` naming the file when it is larger, unreadable or not UTF-8."""
    limit = env_limit(MAX_BYTES_ENV, MAX_BYTES, BadInput)
    packed = "decompressed " if path.name.endswith(".gz") else ""
    data = read_bounded(path, limit, BadInput,
                        too_big=f"holds more than {limit:,} {packed}bytes, the most an import reads from one file; "
                                f"if this is the tool's result file, set {MAX_BYTES_ENV}=N (bytes) to raise the limit")
    return decode_utf8(data, path, BadInput, fix="pass the file the tool wrote, unedited")


def check_levels(count: int, where: object) -> None:
    """:class:`BadInput` when ``count`` levels (rows, lines, benchmarks) exceed :data:`MAX_LEVELS`."""
    limit = env_limit(MAX_LEVELS_ENV, MAX_LEVELS, BadInput)
    if count > limit:
        raise BadInput(f"{where}: more than {limit:,} levels (table rows, result lines or benchmarks), the most one "
                       f"import holds; a sweep has tens. If these are the tool's results, set {MAX_LEVELS_ENV}=N "
                       "to raise the limit")


def nonblank_lines(text: str, path: Path, *, extra: int = 0) -> list[tuple[int, str]]:
    """(line number, line) of the non-blank lines of ``text``, taken one at a time and refused
    (:func:`check_levels`) past :data:`MAX_LEVELS` + ``extra`` (header lines): a file of millions
    of lines is never split whole."""
    limit = env_limit(MAX_LEVELS_ENV, MAX_LEVELS, BadInput) + extra
    out: list[tuple[int, str]] = []
    start, n = 0, 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line, start, n = text[start:end].rstrip("\r"), end + 1, n + 1
        if line.strip():
            out.append((n, line))
            if len(out) > limit:
                check_levels(len(out) - extra, path)
    return out


def read_json_objects(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a file that holds one JSON object or JSON lines, as (line, object);
    a ``.gz`` file is read through gzip (:func:`read_text`: bounded in bytes; lines bounded by
    :func:`check_levels`).

    :class:`BadInput` naming the file and line when it is neither.
    """
    text = read_text(path)
    stripped = text.strip()
    if not stripped:
        raise BadInput(f"{path}: the file is empty; pass the result file the tool wrote")
    try:
        whole = parse_json(stripped, path, BadInput)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        return [(1, whole)]
    if whole is not None:
        raise BadInput(f"{path}: holds a JSON {type(whole).__name__}, not an object; pass the tool's result file")
    out: list[tuple[int, dict[str, Any]]] = []
    for n, line in nonblank_lines(text, path):
        try:
            obj = parse_json(line, f"{path}, line {n}", BadInput)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path}, line {n}: not valid JSON ({exc.msg}); pass the file the tool wrote, unedited") from None
        if not isinstance(obj, dict):
            raise BadInput(f"{path}, line {n}: holds a JSON {type(obj).__name__}, not an object")
        out.append((n, obj))
    return out


def number(obj: dict[str, Any], key: str, where: str, *, required: bool = False) -> float:
    """``obj[key]`` as a finite float (NaN when absent and not required); a clear error when malformed."""
    value = obj.get(key)
    if value is None:
        if required:
            raise BadInput(f"{where}: field '{key}' is missing; is this the tool's result file?")
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"{where}: field '{key}' must be a number, found {json.dumps(value)[:60]}")
    value = finite_float(value, where, key)
    if not math.isfinite(value):
        if required:
            raise BadInput(f"{where}: field '{key}' is {value}, not a finite number")
        return math.nan
    return value


def finite_float(value: int | float, where: str, key: str) -> float:
    """A JSON number as a float; an integer too long for a float (hundreds of digits) is :class:`BadInput`."""
    try:
        return float(value)
    except OverflowError:
        raise BadInput(f"{where}: field '{key}' holds a {len(str(abs(int(value))))}-digit number, beyond any "
                       "measurement; pass the file the tool wrote, unedited") from None


def concurrency_of(value: Any, where: str, key: str) -> int:
    """A concurrency claim checked: a whole number in [1, :data:`~specsweep.results.store.MAX_KEY`]."""
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and 1 <= value <= MAX_KEY and value == int(value))  # comparisons first: int() of inf or NaN raises
    if not ok:
        shown = json.dumps(value) if not isinstance(value, int) or abs(value) < 10**30 else \
            f"a {len(str(abs(value)))}-digit number"
        raise BadInput(f"{where}: '{key}' is {shown[:60]}; specsweep compares closed-loop levels and needs a whole "
                       f"concurrency from 1 to {MAX_KEY:,} (re-run the tool with a fixed concurrency, e.g. "
                       "--max-concurrency N)")
    return int(value)


#: keys that only one tool's result lines hold, by the tool's ``specsweep import`` name: vLLM's
#: ``serve.py`` ``result_json`` and SGLang's ``serving.py`` ``result`` share most field names
OWN_KEYS: dict[str, frozenset[str]] = {
    "vllm": frozenset({"endpoint_type", "tokenizer_id", "model_id", "mean_e2el_ms", "median_e2el_ms", "rtfx"}),
    "sglang": frozenset({"mean_e2e_latency_ms", "median_e2e_latency_ms", "total_output_tokens_retokenized",
                         "random_range_ratio", "sharegpt_output_len", "accept_length"}),
}


def refuse_foreign(obj: dict[str, Any], where: str, tool: str) -> None:
    """:class:`BadInput` when ``obj`` holds another tool's own keys (:data:`OWN_KEYS`) and none of
    ``tool``'s: a file is read only by the importer of the tool that wrote it, whatever its
    ``backend`` field says (both tools' clients can talk to either server)."""
    keys = set(obj)
    if keys & OWN_KEYS[tool]:
        return
    for other, own in OWN_KEYS.items():
        found = sorted(keys & own)
        if other != tool and found:
            raise BadInput(f"{where}: a {other} result (it holds {', '.join(repr(k) for k in found[:3])}, which "
                           f"{tool} never writes), not a {tool} one; import it with `specsweep import {other}`")


def section(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` where it is a JSON object, else an empty one (absent, null or another type)."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def ms(obj: dict[str, Any], key: str, where: str) -> float:
    """A millisecond figure as seconds (NaN when absent)."""
    return number(obj, key, where) / 1000.0


def slug(text: str) -> str:
    """A folder-safe name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "imported"


def _records_frame(level: Level, run_id: str, arm: str, repeat: int) -> pd.DataFrame:
    records = level.requests or []
    t0 = min((r.t_sent for r in records), default=0.0)
    frame = requests_frame(records, t0=t0, run_id=run_id, arm=arm, concurrency=level.concurrency, repeat=repeat,
                           keep_chunks=level.chunks is None)
    if level.chunks is not None and not frame.empty:
        # the tool gave first and last token times and a chunk count, not each chunk's time
        chunks = pd.Series([float(c) if c else math.nan for c in level.chunks], index=frame.index)
        frame["chunks"] = chunks.fillna(frame["chunks"].astype(float))
        frame["tokens_per_chunk_mean"] = frame["output_tokens"] / frame["chunks"].where(frame["chunks"] > 0)
        for col in ("itl_mean_s", "itl_p99_s", "chunk_gap_mean_s", "chunk_gap_p99_s"):
            frame[col] = math.nan
    return frame


def build_frames(runs: Sequence[ToolRun], run_id: str, arm: str) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(levels, requests) of the runs: one level row per (concurrency, repeat); a concurrency seen
    again (another file, another line) becomes the next repeat. Requests only when every level has them."""
    with_requests = all(lv.requests is not None for r in runs for lv in r.levels)
    seen: dict[int, int] = {}
    level_rows, request_frames = [], []
    for run in runs:
        for lv in run.levels:
            repeat = seen.get(lv.concurrency, 0)
            seen[lv.concurrency] = repeat + 1
            row: dict[str, Any] = {"run_id": run_id, "arm": arm, "concurrency": lv.concurrency, "repeat": repeat}
            if with_requests:
                frame = _records_frame(lv, run_id, arm, repeat)
                if frame.empty:
                    raise BadInput(f"{lv.where}: the level at concurrency {lv.concurrency} holds no requests")
                measured = level_metrics(frame, lv.concurrency)
                row.update(measured)
                request_frames.append(frame)
            # the tool's own figures: under specsweep names only where no measured value exists
            for k, v in lv.figures.items():
                if k not in row or (isinstance(row[k], float) and math.isnan(row[k])):
                    row[k] = v
            level_rows.append(row)
    levels = pd.DataFrame(level_rows).sort_values(["concurrency", "repeat"], kind="stable").reset_index(drop=True)
    if "output_tok_s" not in levels or levels["output_tok_s"].isna().all():
        raise BadInput(f"{runs[0].source}: no aggregate output throughput in the file; nothing to compare")
    requests = pd.concat(request_frames, ignore_index=True) if with_requests and request_frames else None
    if requests is not None:
        requests["request_index"] = requests.groupby(["concurrency", "repeat"]).cumcount()
        requests["prompt_id"] = requests["request_index"]
    return levels, requests


#: the relative difference between a recomputed figure and the tool's own beyond which an import note names it
HEADLINE_TOLERANCE = 1e-3


def tool_headline(spec: dict[str, tuple[Any, float, str]], value: Callable[[Any], float | None]
                  ) -> dict[str, tuple[float, str]]:
    """:attr:`Level.headline` from a reader's ``spec`` (column -> (the tool's key, column units per
    unit of it, why the two can differ)) and ``value`` (a key's figure in the file, None or NaN when absent)."""
    out = {}
    for col, (key, scale, why) in spec.items():
        figure = value(key)
        if figure is not None and figure == figure:
            out[col] = (figure * scale, why)
    return out


def headline_notes(runs: Sequence[ToolRun], levels: pd.DataFrame) -> list[str]:
    """One note per file and column whose recomputed figure differs from the tool's own headline
    figure (:attr:`Level.headline`) by more than :data:`HEADLINE_TOLERANCE` at some level, naming
    the levels, the range of the difference (%) and why. ``levels``: :func:`build_frames`' rows."""
    by_key = {(int(r["concurrency"]), int(r["repeat"])): r for r in levels.to_dict("records")}
    seen: dict[int, int] = {}
    out = []
    for run in runs:
        found: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for lv in run.levels:
            repeat = seen.get(lv.concurrency, 0)
            seen[lv.concurrency] = repeat + 1
            row = by_key.get((lv.concurrency, repeat), {})
            for col, (theirs, why) in lv.headline.items():
                ours = row.get(col)
                if isinstance(ours, float) and math.isfinite(ours) and theirs and math.isfinite(theirs) \
                        and abs(ours / theirs - 1) > HEADLINE_TOLERANCE:
                    found.setdefault((col, why), []).append((lv.concurrency, (ours / theirs - 1) * 100))
        for (col, why), diffs in found.items():
            pcts = [d for _, d in diffs]
            span = f"{min(pcts):+.2f}%" if len(pcts) == 1 else f"{min(pcts):+.2f}% to {max(pcts):+.2f}%"
            out.append(f"{run.source}: specsweep's {col} differs from {run.tool}'s own figure by {span} at "
                       f"concurrency {', '.join(str(c) for c, _ in diffs)}: {why}")
    return out


def _merge_unique(items: Iterable[str]) -> list[str]:
    out: list[str] = []
    for s in items:
        if s and s not in out:
            out.append(s)
    return out


def unique_names(paths: Sequence[Path]) -> dict[Path, str]:
    """Each path as the fewest trailing parts (the same number for all) that tell the files apart:
    ``profile_export_aiperf.json`` alone, ``mtp-c8/profile_export_aiperf.json`` where several share a name."""
    depth = max((len(p.parts) for p in paths), default=1)
    for k in range(1, depth + 1):
        names = {p: "/".join(p.parts[-k:]) for p in paths}
        if len(set(names.values())) == len(set(paths)):
            return names
    return {p: str(p) for p in paths}


def _without_folders(notes: Iterable[str], runs: Sequence[ToolRun]) -> list[str]:
    """``notes`` with the imported files' folders taken out (a note names the file by
    :func:`unique_names`, never by a local path)."""
    names = unique_names([r.source for r in runs])
    folders = sorted({str(r.source.parent) + os.sep for r in runs if str(r.source.parent) not in ("", ".")},
                     key=len, reverse=True)
    out = []
    for note in notes:
        for path in sorted(names, key=lambda q: len(str(q)), reverse=True):
            note = note.replace(str(path), names[path])
        for folder in folders:
            note = note.replace(folder, "")
        out.append(note)
    return out


def _check_lengths(workload: dict[str, Any], source: Path) -> None:
    """Refuse a request length (tokens) no request can have: beyond :data:`MAX_COUNT`."""
    for key in ("output_tokens", "input_tokens"):
        n = workload.get(key)
        if isinstance(n, int) and n > MAX_COUNT:
            raise BadInput(f"{source}: {n:.3g} {key.replace('_', ' ')} per request (--{key.replace('_', '-')} "
                           f"or the file) is more than any request can have ({MAX_COUNT:,}); give the real length")


def _provenance(runs: Sequence[ToolRun]) -> list[dict[str, Any]]:
    """Each source file by its :func:`unique_names` name, SHA-256 and size (bytes)."""
    names = unique_names([r.source for r in runs])
    return [{"path": names[r.source], "sha256": file_digest(r.source), "bytes": r.source.stat().st_size} for r in runs]


def _import_notes(runs: Sequence[ToolRun], levels: pd.DataFrame, derived: str | None) -> list[str]:
    """The readers' notes, the headline differences (:func:`headline_notes`) and ``derived``, each once, without folders."""
    return _merge_unique(_without_folders([*(n for r in runs for n in r.notes), *headline_notes(runs, levels),
                                           derived or ""], runs))


def build_meta(runs: Sequence[ToolRun], run_id: str, arm: str, levels: pd.DataFrame, *, level_only: bool,
               label: str | None = None, output_tokens: int | None = None, input_tokens: int | None = None,
               workload_kind: str | None = None) -> Meta:
    """``meta.json`` of an imported result set (see the module docstring)."""
    first = runs[0]
    tools = {(r.tool, r.version) for r in runs}
    if len({t for t, _ in tools}) > 1:
        raise BadInput("the files come from different tools (" + ", ".join(sorted(t for t, _ in tools)) +
                       "); import each tool's files as their own arm")
    workload: dict[str, Any] = {}
    for r in runs:
        for k, v in r.workload.items():
            workload.setdefault(k, v)
    if workload_kind:
        workload["kind"] = workload_kind
    workload.setdefault("kind", f"{slug(first.tool)}:unknown")
    if input_tokens is not None:
        workload["input_tokens"] = input_tokens
    if output_tokens is not None:
        workload["output_tokens"] = output_tokens
    derived_note = None
    if not isinstance(workload.get("output_tokens"), int) and {"output_tokens", "n_ok"} <= set(levels.columns):
        per = (levels["output_tokens"] / levels["n_ok"].where(levels["n_ok"] > 0)).dropna()
        if len(per):
            workload["output_tokens"] = max(1, int(round(float(per.median()))))
            derived_note = (f"The file does not record the requested output length; {workload['output_tokens']} "
                            "tokens per request is the median over levels of output tokens per successful request "
                            "(pass --output-tokens N to state it).")
    if not isinstance(workload.get("output_tokens"), int) or workload["output_tokens"] < 1:
        raise BadInput(f"{first.source}: the file does not say how many output tokens each request asked for; "
                       "pass --output-tokens N")
    _check_lengths(workload, first.source)
    if workload.get("input_tokens") is not None and (not isinstance(workload["input_tokens"], int)
                                                     or workload["input_tokens"] < 1):
        workload["input_tokens"] = None
    workload.setdefault("input_tokens", None)
    definitions: dict[str, str] = {}
    ids: dict[str, str] = {}
    for r in runs:
        definitions.update(r.definitions)
        ids.update(r.definition_ids)
    versions = sorted({str(v) for _, v in tools if v})
    files = _provenance(runs)
    concurrency = sorted({int(c) for c in levels["concurrency"]})
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "reference" if level_only else "run",
        "run_id": run_id,
        "arm": arm,
        "label": label,
        "complete": True,
        "level_only": level_only,
        "imported": True,
        "source": {
            "tool": first.tool,
            "version": ", ".join(versions) if versions else None,
            "files": files,
            "reader": first.reader,
            "citation": (f"{first.tool}{' ' + ', '.join(versions) if versions else ''} result file(s) "
                         + ", ".join(f"{f['path']} (SHA-256 {f['sha256'][:12]}…)" for f in files)
                         + f", imported by {first.reader or 'specsweep.importers'}"),
        },
        "tool": {"name": first.tool, "version": ", ".join(versions) if versions else None, "git_commit": None},
        "model": first.model,
        "server": dict(first.server),
        "workload": workload,
        "sweep": {"concurrency": concurrency, "repeats": int(levels.groupby("concurrency")["repeat"].nunique().max()),
                  "requests_per_level": None, "warmup_requests": None, "closed_loop": True},
        "metric_definitions": definitions,
        "metric_definition_ids": ids,
        "warnings": _merge_unique(w for r in runs for w in r.warnings),
        "notes": _import_notes(runs, levels, derived_note),
        **({"level_only_note": f"Imported from {first.tool} result files holding level figures only: no per-request "
                               "samples, so no per-request bootstrap; each figure means what the tool's definition "
                               "says (see the definitions)."} if level_only else {}),
    }
    try:
        return Meta.model_validate(meta)
    except ValidationError as exc:
        raise BadInput(f"{first.source}: the imported metadata is invalid: {validation_problems(exc)}") from None


def _check_one_server_setting(runs: Sequence[ToolRun]) -> None:
    """Refuse files of different server settings as one arm (a sweep tool's serve-parameter sets,
    ``server["sweep_serve"]``): their levels would become repeats of each other."""
    settings: dict[str, list[str]] = {}
    for r in runs:
        if "sweep_serve" in r.server:
            settings.setdefault(str(r.server["sweep_serve"]) or "(unmodified)", []).append(r.source.name)
    if len(settings) > 1:
        raise BadInput("these files come from different server settings (" + "; ".join(
            f"SERVE--{k}: {', '.join(v)}" for k, v in settings.items()) + "); import each setting as its own --arm")


def _check_free(run_dir: Path, force: bool) -> None:
    """Refuse ``run_dir`` unless it is absent, empty, or (with ``force``) an imported result set:
    a folder with data but no ``meta.json`` may be a sweep that stopped early, so never replaced."""
    if (run_dir / "meta.json").exists():
        try:
            imported = read_meta(run_dir).imported
        except SchemaError:
            imported = False
        if not force or not imported:
            raise BadInput(f"{run_dir}: a result set is already there; choose another --out or --arm"
                           + (", or pass --force to replace this imported one" if imported else ""))
    elif run_dir.is_dir() and any(run_dir.iterdir()):
        held = sorted(p.name for p in run_dir.iterdir())
        raise BadInput(f"{run_dir}: holds {', '.join(held[:3])}{' …' if len(held) > 3 else ''} but no meta.json (a "
                       "sweep that stopped early?); --force never replaces it: move it away, or choose another "
                       "--out or --arm")
    elif run_dir.exists() and not run_dir.is_dir():
        raise BadInput(f"{run_dir}: a file, not a folder; choose another --out or --arm")


def _where(runs: Sequence[ToolRun], concurrency: int, repeat: int) -> str:
    """The source (file, line) of the level ``(concurrency, repeat)`` as :func:`build_frames` numbers repeats."""
    found = [lv.where or str(r.source) for r in runs for lv in r.levels if lv.concurrency == concurrency]
    return found[repeat] if repeat < len(found) else str(runs[0].source)


def refuse_impossible(runs: Sequence[ToolRun], levels: pd.DataFrame, requests: pd.DataFrame | None) -> None:
    """:class:`BadInput` naming the file, the level (and request) and the column of the first row
    that loading would drop as impossible (:func:`~specsweep.results.store.validate_values`)."""
    bad = request_problems(requests) if requests is not None else {}
    if bad:
        row = requests.iloc[min(bad)]  # type: ignore[union-attr]
        c, r = int(row["concurrency"]), int(row["repeat"])
        raise BadInput(f"{_where(runs, c, r)}: request {int(row['request_index'])} of the level at concurrency {c}: "
                       f"{bad[min(bad)]}; no measurement has that ({len(bad)} such request(s)): pass the file the "
                       "tool wrote, unedited")
    bad = level_problems(levels)
    if bad:
        row = levels.iloc[min(bad)]
        c, r = int(row["concurrency"]), int(row["repeat"])
        raise BadInput(f"{_where(runs, c, r)}: the level at concurrency {c}: {bad[min(bad)]}; no measurement has "
                       f"that ({len(bad)} such level(s)): pass the file the tool wrote, unedited")


def write_result_set(runs: Sequence[ToolRun], arm: str, out_dir: str | Path, *, label: str | None = None,
                     output_tokens: int | None = None, input_tokens: int | None = None,
                     workload_kind: str | None = None, force: bool = False) -> Path:
    """Write the runs of one arm as a result set ``out_dir/arm`` and return its path.

    An existing folder there is replaced only with ``force`` and only when it is an imported
    result set (never a measured run's folder, nor one with data but no ``meta.json``). Everything
    is checked first (levels, requests, metadata), then written to a staging folder beside it and
    put in place in one step (:func:`~specsweep.results.atomic.replace_dir`): a failed import
    leaves the old result set whole.
    """
    if not runs:
        raise BadInput("no result files given")
    _check_one_server_setting(runs)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", arm):
        raise BadInput(f"--arm {arm!r}: use letters, digits, '.', '_' and '-' (it names a folder), e.g. baseline or mtp")
    run_dir = Path(out_dir) / arm
    _check_free(run_dir, force)
    check_levels(sum(len(r.levels) for r in runs), ", ".join(str(r.source) for r in runs[:3]))
    run_id = f"imported-{slug(runs[0].tool)}-{arm}"
    levels, requests = build_frames(runs, run_id, arm)
    refuse_impossible(runs, levels, requests)
    meta = build_meta(runs, run_id, arm, levels, level_only=requests is None, label=label,
                      output_tokens=output_tokens, input_tokens=input_tokens, workload_kind=workload_kind)
    staging = Path(out_dir) / STAGING
    staging.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(staging / f"{arm}.lock", lambda holder: RunLocked(
            f"{run_dir}: another import is writing this arm ({holder_text(holder)}); wait for it to finish")):
        _check_free(run_dir, force)  # again: another import may have finished meanwhile
        for stale in staging.glob(f"{arm}~*"):  # left by an import that was killed ('~' is in no arm name)
            shutil.rmtree(stale, ignore_errors=True)
        stage = Path(tempfile.mkdtemp(prefix=f"{arm}~", dir=staging))
        try:
            _write_staged(stage, run_dir, meta, levels, requests)
        finally:
            shutil.rmtree(stage, ignore_errors=True)  # the new set on failure, else the old one
    return run_dir


def _write_staged(stage: Path, run_dir: Path, meta: Meta, levels: pd.DataFrame, requests: pd.DataFrame | None) -> None:
    """Write the result set into ``stage`` (metadata first: validated before any frame) and swap it in at ``run_dir``."""
    try:
        write_meta(stage, meta)
    except SchemaError as exc:
        raise BadInput(str(exc).replace(str(stage), str(run_dir))) from None
    if requests is not None:
        write_frame(stage, "requests", requests)
    write_frame(stage, "levels", levels)
    replace_dir(stage, run_dir)


def _opt_number(value: Any, name: str, where: str) -> float | None:
    """A per-request figure: None when absent, else a float (NaN and inf pass; the caller judges
    them); :class:`BadInput` for another type (text, a list, an object) or an over-long integer."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise BadInput(f"{where}: {name} must be a number, found {json.dumps(value, default=str)[:60]}")
    return finite_float(value, where, name)  # type: ignore[arg-type]


def token_count(value: Any, name: str, where: str) -> int | None:
    """A token count: None when absent or NaN, else a whole number in [0, MAX_COUNT]."""
    x = _opt_number(value, name, where)
    if x is None or x != x:
        return None
    if not 0 <= x <= MAX_COUNT or x != int(x):
        raise BadInput(f"{where}: {name} is {x:g}; a token count is a whole number from 0 to {MAX_COUNT:,}")
    return int(x)


def _gaps(gaps: Sequence[float] | None, where: str) -> np.ndarray:
    """Gaps between token-carrying chunks (seconds): finite, >= 0, at most MAX_METRIC each."""
    if gaps is None:
        return np.empty(0)
    if not isinstance(gaps, (list, tuple, np.ndarray)):
        raise BadInput(f"{where}: the chunk gaps must be a list of seconds, found {json.dumps(gaps, default=str)[:60]}")
    out = np.asarray([_opt_number(g, "a chunk gap", where) for g in gaps], dtype=float)
    bad = ~np.isfinite(out) | (out < 0) | (out > MAX_METRIC)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadInput(f"{where}: chunk gap {i} is {float(out[i])!r}; gaps are finite, non-negative seconds")
    return out


def record(t_sent: float, ttft: float | None, gaps: Sequence[float] | None, latency: float | None,
           output_tokens: float | None, *, error: str | None = None, prompt_tokens: float | None = None,
           token_source: str = "usage", chunk_tokens: Sequence[int] | None = None, where: str = "") -> RequestRecord:
    """A :class:`RequestRecord` from a tool's per-request figures (seconds): the first token-carrying
    chunk at ``t_sent + ttft``, then one chunk after each of ``gaps``; the request ends at
    ``t_sent + latency`` (or at the last chunk). A failed request (``error``) keeps no chunks.
    A figure of the wrong type, a token count out of range or a gap that is no duration is
    :class:`BadInput` naming ``where`` (file and request)."""
    where = where or "a request"
    start = _opt_number(t_sent, "the start time", where)
    if start is None or not math.isfinite(start):
        raise BadInput(f"{where}: the start time is {t_sent!r}; a request needs a finite start time")
    first, lat = _opt_number(ttft, "the time to first token", where), _opt_number(latency, "the latency", where)
    if error or first is None or not math.isfinite(first):
        end = start + (lat if lat and math.isfinite(lat) else 0.0)
        return RequestRecord(t_sent=start, t_end=end, http_status=None, error=error or "no first token recorded")
    times = start + first + np.concatenate([[0.0], np.cumsum(_gaps(gaps, where))])
    end = start + lat if lat is not None and math.isfinite(lat) else float(times[-1])
    end = max(end, float(times[-1]))
    return RequestRecord(
        t_sent=start, t_end=end, http_status=200, chunk_times=times,
        chunk_tokens=None if chunk_tokens is None else np.asarray(
            [token_count(t, "a chunk's token count", where) or 0 for t in chunk_tokens], dtype=np.int32),
        prompt_tokens=token_count(prompt_tokens, "the prompt token count", where),
        output_tokens=token_count(output_tokens, "the output token count", where),
        token_source=token_source, finish_reason=None)  # type: ignore[arg-type]
