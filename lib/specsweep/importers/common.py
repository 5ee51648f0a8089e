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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from specsweep.analyze.metrics import level_metrics, requests_frame
from specsweep.errors import InputError
from specsweep.results.meta import Meta
from specsweep.results.records import RequestRecord
from specsweep.results.store import SCHEMA_VERSION, SchemaError, read_meta, write_frame, write_meta


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


def read_json_objects(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a file that holds one JSON object or JSON lines, as (line, object);
    a ``.gz`` file is read through gzip.

    :class:`BadInput` naming the file and line when it is neither.
    """
    try:
        if path.suffix == ".gz":
            import gzip

            with gzip.open(path, "rt", encoding="utf-8") as handle:
                text = handle.read()
        else:
            text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise BadInput(f"{path}: cannot be read as UTF-8 text ({exc})") from None
    stripped = text.strip()
    if not stripped:
        raise BadInput(f"{path}: the file is empty; pass the result file the tool wrote")
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        return [(1, whole)]
    if whole is not None:
        raise BadInput(f"{path}: holds a JSON {type(whole).__name__}, not an object; pass the tool's result file")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
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
    value = float(value)
    if not math.isfinite(value):
        if required:
            raise BadInput(f"{where}: field '{key}' is {value}, not a finite number")
        return math.nan
    return value


def concurrency_of(value: Any, where: str, key: str) -> int:
    """A concurrency claim checked: a whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 1 \
            or value != int(value):
        raise BadInput(f"{where}: '{key}' is {json.dumps(value)}; specsweep compares closed-loop levels and needs a "
                       "whole concurrency >= 1 (re-run the tool with a fixed concurrency, e.g. --max-concurrency N)")
    return int(value)


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


def _merge_unique(items: Iterable[str]) -> list[str]:
    out: list[str] = []
    for s in items:
        if s and s not in out:
            out.append(s)
    return out


def _without_folders(notes: Iterable[str], runs: Sequence[ToolRun]) -> list[str]:
    """``notes`` with the imported files' folders taken out (a note names the file, never a local path)."""
    folders = sorted({str(r.source.parent) + os.sep for r in runs if str(r.source.parent) not in ("", ".")},
                     key=len, reverse=True)
    out = []
    for note in notes:
        for folder in folders:
            note = note.replace(folder, "")
        out.append(note)
    return out


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
    files: list[dict[str, Any]] = [{"path": r.source.name, "sha256": file_digest(r.source), "bytes": r.source.stat().st_size} for r in runs]
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
        "notes": _merge_unique(_without_folders([*(n for r in runs for n in r.notes), derived_note or ""], runs)),
        **({"level_only_note": f"Imported from {first.tool} result files holding level figures only: no per-request "
                               "samples, so no per-request bootstrap; each figure means what the tool's definition "
                               "says (see the definitions)."} if level_only else {}),
    }
    try:
        return Meta.model_validate(meta)
    except ValidationError as exc:
        raise BadInput(f"{first.source}: the imported metadata is invalid: {exc}") from None


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


def write_result_set(runs: Sequence[ToolRun], arm: str, out_dir: str | Path, *, label: str | None = None,
                     output_tokens: int | None = None, input_tokens: int | None = None,
                     workload_kind: str | None = None, force: bool = False) -> Path:
    """Write the runs of one arm as a result set ``out_dir/arm`` and return its path.

    An existing folder there is replaced only with ``force`` (never a measured run's folder).
    """
    if not runs:
        raise BadInput("no result files given")
    _check_one_server_setting(runs)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", arm):
        raise BadInput(f"--arm {arm!r}: use letters, digits, '.', '_' and '-' (it names a folder), e.g. baseline or mtp")
    run_dir = Path(out_dir) / arm
    if (run_dir / "meta.json").exists():
        try:
            imported = read_meta(run_dir).imported
        except SchemaError:
            imported = False
        if not force or not imported:
            raise BadInput(f"{run_dir}: a result set is already there; choose another --out or --arm"
                           + (", or pass --force to replace this imported one" if imported else ""))
    run_id = f"imported-{slug(runs[0].tool)}-{arm}"
    levels, requests = build_frames(runs, run_id, arm)
    meta = build_meta(runs, run_id, arm, levels, level_only=requests is None, label=label,
                      output_tokens=output_tokens, input_tokens=input_tokens, workload_kind=workload_kind)
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("levels.parquet", "requests.parquet", "levels.csv"):
        (run_dir / stale).unlink(missing_ok=True)
    if requests is not None:
        write_frame(run_dir, "requests", requests)
    write_frame(run_dir, "levels", levels)
    try:
        write_meta(run_dir, meta)
    except SchemaError as exc:
        raise BadInput(str(exc)) from None
    return run_dir


def record(t_sent: float, ttft: float | None, gaps: Sequence[float] | None, latency: float | None,
           output_tokens: float | None, *, error: str | None = None, prompt_tokens: float | None = None,
           token_source: str = "usage", chunk_tokens: Sequence[int] | None = None) -> RequestRecord:
    """A :class:`RequestRecord` from a tool's per-request figures (seconds): the first token-carrying
    chunk at ``t_sent + ttft``, then one chunk after each of ``gaps``; the request ends at
    ``t_sent + latency`` (or at the last chunk). A failed request (``error``) keeps no chunks."""
    if error or ttft is None or not (isinstance(ttft, (int, float)) and math.isfinite(ttft)):
        end = t_sent + (latency if latency and math.isfinite(latency) else 0.0)
        return RequestRecord(t_sent=t_sent, t_end=end, http_status=None, error=error or "no first token recorded")
    times = t_sent + float(ttft) + np.concatenate([[0.0], np.cumsum(np.asarray(gaps or [], dtype=float))])
    end = t_sent + float(latency) if latency is not None and math.isfinite(latency) else float(times[-1])
    end = max(end, float(times[-1]))
    out = int(output_tokens) if output_tokens is not None and output_tokens == output_tokens else None
    return RequestRecord(
        t_sent=t_sent, t_end=end, http_status=200, chunk_times=times,
        chunk_tokens=None if chunk_tokens is None else np.asarray(chunk_tokens, dtype=np.int32),
        prompt_tokens=int(prompt_tokens) if prompt_tokens is not None and prompt_tokens == prompt_tokens else None,
        output_tokens=out, token_source=token_source, finish_reason=None)  # type: ignore[arg-type]
