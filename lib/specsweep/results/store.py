"""Result sets on disk: write them atomically, read and validate them into tidy frames.

A result set is a folder (docs/method.md, "A result set")::

    <run_dir>/meta.json              what was measured, against what, how, by which tool, when
    <run_dir>/levels.parquet         one row per (concurrency, repeat): per-level metrics
    <run_dir>/requests.parquet       one row per request (absent for level-only reference data)
    <run_dir>/server_metrics.parquet polled server gauges (optional)

Rows of a level measured again on resume stay in the files with ``superseded=True``; readers
leave them out of ``levels``/``requests`` and expose them as ``ResultSet.superseded_*``. While a
sweep writes a run folder it holds ``flock`` on ``.specsweep.lock`` there (:func:`lock_run`).
Files are written with the user's umask; the API key's value is masked in everything written.

Hand-transcribed reference data may use ``levels.csv`` instead of ``levels.parquet``. A *study*
folder holds several result sets as sub-folders; :func:`load_result_sets` expands it.

Every reader error names the file and says what is missing or malformed.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from specsweep.errors import InputError, RunError
from specsweep.results.atomic import atomic_file, atomic_write_bytes
from specsweep.results.meta import Meta
from specsweep.results.redact import redact, redact_frame
from specsweep.results.study_record import study_arm_order

SCHEMA_VERSION = 1


#: per-level columns every result set must have
LEVEL_REQUIRED: dict[str, str] = {
    "run_id": "string",
    "arm": "string",
    "concurrency": "int",
    "repeat": "int",
    "output_tok_s": "float",
}
#: per-request columns every ``requests.parquet`` must have
REQUEST_REQUIRED: dict[str, str] = {
    "run_id": "string",
    "arm": "string",
    "concurrency": "int",
    "repeat": "int",
    "request_index": "int",
    "warmup": "bool",
    "t_start_s": "float",
    "ttft_s": "float",
    "e2e_s": "float",
    "t_end_s": "float",
    "output_tokens": "float",
    "token_source": "string",
    "http_status": "float",
    "error": "string",
}
SERVER_METRICS_REQUIRED: dict[str, str] = {
    "concurrency": "int",
    "repeat": "int",
    "t_s": "float",
    "name": "string",
    "value": "float",
}


class SchemaError(InputError, ValueError):
    """A result-set file is missing, malformed, or does not match the schema."""


@dataclass
class ResultSet:
    """One arm's results, loaded and validated."""

    path: Path
    meta: Meta
    levels: pd.DataFrame
    requests: pd.DataFrame | None = None
    server_metrics: pd.DataFrame | None = None
    #: what loading had to say (e.g. request rows of an unfinished level that were left out)
    notes: list[str] = field(default_factory=list)
    #: rows of levels that were measured again on resume (after a crash); never part of a metric
    superseded_levels: pd.DataFrame | None = None
    superseded_requests: pd.DataFrame | None = None

    @property
    def arm(self) -> str:
        return self.meta.arm

    @property
    def run_id(self) -> str:
        return self.meta.run_id

    @property
    def label(self) -> str:
        return self.meta.shown_label


# --------------------------------------------------------------------------------------- reading


def validation_problems(exc: ValidationError) -> str:
    """A pydantic error as one line: ``field 'a.b': what is wrong; …`` (offending values cut short)."""
    return "; ".join(f"field '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}" for err in exc.errors())


def read_meta(path: Path) -> Meta:
    """``path/meta.json``, validated; :class:`SchemaError` naming the file when it is missing or malformed."""
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise SchemaError(f"{meta_path}: missing; every result set needs a meta.json beside its data")
    try:
        raw = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{meta_path}: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise SchemaError(f"{meta_path}: must hold a JSON object, found {type(raw).__name__}")
    try:
        meta = Meta.model_validate(raw)
    except ValidationError as exc:
        raise SchemaError(f"{meta_path}: {validation_problems(exc)}") from exc
    if meta.schema_version > SCHEMA_VERSION:
        raise SchemaError(
            f"{meta_path}: schema_version {meta.schema_version} is newer than this specsweep "
            f"understands ({SCHEMA_VERSION}); upgrade specsweep"
        )
    return meta


def _check_columns(frame: pd.DataFrame, required: dict[str, str], where: Path) -> None:
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise SchemaError(
            f"{where}: missing column(s) {', '.join(missing)} "
            f"(required: {', '.join(required)}; found: {', '.join(map(str, frame.columns))})"
        )
    for col, kind in required.items():
        series = frame[col]
        if kind in {"int", "float"}:
            converted = pd.to_numeric(series, errors="coerce")
            bad = series[converted.isna() & series.notna()]
            if len(bad):
                raise SchemaError(
                    f"{where}: column '{col}' must be numeric; row {bad.index[0]} holds {bad.iloc[0]!r}"
                )
            if kind == "int":
                nonint = converted[converted.notna() & (converted != converted.round())]
                if len(nonint) or converted.isna().any():
                    row = (nonint.index if len(nonint) else converted[converted.isna()].index)[0]
                    raise SchemaError(
                        f"{where}: column '{col}' must hold whole numbers; row {row} holds {series.loc[row]!r}"
                    )
        elif kind == "bool" and not pd.api.types.is_bool_dtype(series):
            raise SchemaError(f"{where}: column '{col}' must be boolean, found dtype {series.dtype}")


def _read_frame(path: Path, stem: str, required: dict[str, str], *, optional: bool) -> pd.DataFrame | None:
    parquet, csv = path / f"{stem}.parquet", path / f"{stem}.csv"
    if parquet.is_file():
        source = parquet
        try:
            frame = pd.read_parquet(parquet)
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise SchemaError(f"{parquet}: cannot be read as Parquet ({exc})") from exc
    elif csv.is_file():
        source = csv
        try:
            frame = pd.read_csv(csv)
        except Exception as exc:
            raise SchemaError(f"{csv}: cannot be read as CSV ({exc})") from exc
    elif optional:
        return None
    else:
        raise SchemaError(f"{parquet}: missing (neither {stem}.parquet nor {stem}.csv exists)")
    _check_columns(frame, required, source)
    for col, kind in required.items():
        if kind == "int":
            _check_int_range(frame, col, source)
            frame[col] = pd.to_numeric(frame[col]).astype("int64")
        elif kind == "float":
            frame[col] = pd.to_numeric(frame[col]).astype("float64")
    frame.attrs["source"] = str(source)
    return frame


#: the largest whole number a key column (concurrency, repeat, request_index) may hold: beyond it a
#: value is no level or request (1e308 as a concurrency would wrap to a negative int64)
MAX_KEY = 10**9
#: the largest magnitude a metric may have (1e15 tok/s, s, requests): anything beyond is no measurement
MAX_METRIC = 1e15
#: the largest rate (tok/s, requests/s) a level or request may have: a thousand times any server's
MAX_RATE = 1e9
#: the longest duration (seconds) a level or request may have: about four months
MAX_DURATION_S = 1e7
#: request columns that are durations (seconds from a request's start): never negative
REQUEST_DURATIONS = ("ttft_s", "e2e_s")
#: request columns that are times since the level's start (a warm-up request may start before it)
REQUEST_TIMES = ("t_start_s", "t_end_s")
#: slack of the order checks (ttft <= e2e, p50 <= p90 <= p99): float rounding, not measurement
ORDER_SLACK = 1e-9


def is_rate(name: str) -> bool:
    """A column of tokens or requests per second (``output_tok_s``, ``user_tok_s_p10``, ``request_per_s`` …)."""
    return "tok_s" in name or "per_s" in name or "throughput" in name


def is_duration(name: str) -> bool:
    """A column of seconds (``ttft_p99_s``, ``vllm_itl_mean_s``, ``window_s`` …), rates aside."""
    return name.endswith("_s") and not is_rate(name)


def _metric_bound(name: str) -> float:
    return MAX_RATE if is_rate(name) else MAX_DURATION_S if is_duration(name) else MAX_METRIC


def _check_int_range(frame: pd.DataFrame, col: str, source: Path) -> None:
    """Refuse a key column holding a whole number no level or request can have (negative or absurd)."""
    values = pd.to_numeric(frame[col])
    bad = values[(values < 0) | (values > MAX_KEY)]
    if len(bad):
        raise SchemaError(f"{source}: column '{col}' must hold whole numbers in [0, {MAX_KEY:,}]; row {bad.index[0]} "
                          f"holds {frame[col].loc[bad.index[0]]!r}; fix or remove that row")


def _metric_columns(frame: pd.DataFrame, names: Iterable[str]) -> list[str]:
    return [c for c in names if c in frame.columns and pd.api.types.is_numeric_dtype(frame[c])
            and not pd.api.types.is_bool_dtype(frame[c])]


def _values(frame: pd.DataFrame, col: str) -> np.ndarray:
    return frame[col].to_numpy(dtype=float, na_value=np.nan)


def _impossible_rows(frame: pd.DataFrame, columns: list[str], *, nan_bad: tuple[str, ...] = (),
                     signed: tuple[str, ...] = ()) -> dict[int, str]:
    """``{row position: why}`` of rows holding a value no measurement can have in ``columns``:
    ±inf, negative (except in ``signed``), beyond the column's bound (:data:`MAX_RATE` for rates,
    :data:`MAX_DURATION_S` for durations, else :data:`MAX_METRIC`), or NaN in one of ``nan_bad``."""
    out: dict[int, str] = {}
    for col in columns:
        v = _values(frame, col)
        bound = _metric_bound(col)
        bad = ~np.isfinite(v) if col in nan_bad else np.isinf(v)
        bad |= (np.abs(v) > bound) | ((v < 0) & (col not in signed))
        for i in np.flatnonzero(bad):
            if int(i) in out:
                continue
            x = float(v[i])
            why = ("no value (NaN)" if np.isnan(x) else "infinite" if np.isinf(x) else
                   f"beyond {bound:g}" if abs(x) > bound else "negative")
            out[int(i)] = f"column '{col}' holds {x!r} ({why})"
    return out


def _percentile_columns(frame: pd.DataFrame) -> dict[str, list[tuple[int, str]]]:
    """``{stem: [(percentile, column), …]}`` of numeric ``<stem>_p<P>[_s]`` columns, by percentile."""
    out: dict[str, list[tuple[int, str]]] = {}
    for col in _metric_columns(frame, [c for c in frame.columns if isinstance(c, str)]):
        m = re.fullmatch(r"(.+)_p(\d+)(_s)?", col)
        if m:
            out.setdefault(m.group(1) + (m.group(3) or ""), []).append((int(m.group(2)), col))
    return {k: sorted(v) for k, v in out.items() if len(v) > 1}


def _out_of_order(frame: pd.DataFrame, pairs: Iterable[tuple[str, str]], how: str) -> dict[int, str]:
    """``{row position: why}`` of rows where column ``a`` exceeds column ``b`` (both present) for a pair."""
    out: dict[int, str] = {}
    for a, b in pairs:
        va, vb = _values(frame, a), _values(frame, b)
        bad = (va > vb + ORDER_SLACK * np.maximum(np.abs(vb), 1.0)) & np.isfinite(va) & np.isfinite(vb)
        for i in np.flatnonzero(bad):
            out.setdefault(int(i), f"'{a}' {float(va[i])!r} exceeds '{b}' {float(vb[i])!r} ({how})")
    return out


def _disordered_percentiles(frame: pd.DataFrame) -> dict[int, str]:
    """Level rows whose percentiles of one figure fall as the percentile rises (p50 > p99 …)."""
    pairs = [(lo, hi) for cols in _percentile_columns(frame).values()
             for (_, lo), (_, hi) in zip(cols, cols[1:])]
    return _out_of_order(frame, pairs, "a lower percentile above a higher one")


def _impossible_chunks(frame: pd.DataFrame) -> dict[int, str]:
    """Request rows whose chunk times (``chunk_t_s``) are not finite, come before the request was
    sent (``t_start_s``) or lie beyond :data:`MAX_DURATION_S`."""
    if "chunk_t_s" not in frame.columns or frame.empty:
        return {}
    cells = [np.asarray(v, dtype=float) if v is not None and not _is_missing(v) else np.empty(0)
             for v in frame["chunk_t_s"]]
    sizes = np.fromiter((c.size for c in cells), np.int64, len(cells))
    flat = np.concatenate(cells) if sizes.sum() else np.empty(0)
    row = np.repeat(np.arange(len(cells)), sizes)
    start = np.nan_to_num(_values(frame, "t_start_s"), nan=-np.inf) if "t_start_s" in frame else np.full(len(cells), -np.inf)
    bad = ~np.isfinite(flat) | (flat < start[row] - ORDER_SLACK) | (np.abs(flat) > MAX_DURATION_S)
    out: dict[int, str] = {}
    for i in np.flatnonzero(bad):
        out.setdefault(int(row[i]), f"column 'chunk_t_s' holds {float(flat[i])!r} (a chunk time that is not finite, "
                                    "before the request was sent, or absurd)")
    return out


def _drop_rows(frame: pd.DataFrame, bad: dict[int, str], what: str) -> tuple[pd.DataFrame, list[str]]:
    """``frame`` without the rows ``bad`` names, and a note naming the file, rows and why."""
    if not bad:
        return frame, []
    rows = sorted(bad)
    shown = "; ".join(f"row {r}" + (f" (concurrency {frame['concurrency'].iloc[r]}, repeat {frame['repeat'].iloc[r]})"
                                   if what == "level" else "") + f": {bad[r]}" for r in rows[:5])
    more = f"; and {len(rows) - 5} more" if len(rows) > 5 else ""
    note = (f"{frame.attrs.get('source', what)}: {len(rows)} {what} row(s) with impossible values dropped "
            f"(validation on load) — {shown}{more}")
    kept = frame.drop(index=frame.index[rows]).reset_index(drop=True)
    kept.attrs = frame.attrs
    return kept, [note]


def level_problems(levels: pd.DataFrame) -> dict[int, str]:
    """``{row position: why}`` of level rows no measurement can have (see :func:`validate_values`)."""
    from specsweep.results.columns import METRICS

    names = list(dict.fromkeys([*METRICS, *(c for c in levels.columns if isinstance(c, str)
                                            and (c.endswith("_s") or c.startswith("n_") or is_rate(c)))]))
    return {**_disordered_percentiles(levels),
            **_impossible_rows(levels, _metric_columns(levels, names), nan_bad=("output_tok_s",))}


def request_problems(requests: pd.DataFrame) -> dict[int, str]:
    """``{row position: why}`` of request rows no measurement can have (see :func:`validate_values`)."""
    names = [c for c in requests.columns if isinstance(c, str) and (is_duration(c) or is_rate(c))]
    columns = _metric_columns(requests, [*REQUEST_DURATIONS, *names, "output_tokens"])
    return {**_impossible_chunks(requests),
            **_out_of_order(requests, [("ttft_s", "e2e_s")] if {"ttft_s", "e2e_s"} <= set(requests) else [],
                            "the first token after the last"),
            **_impossible_rows(requests, columns, signed=REQUEST_TIMES)}


def validate_values(levels: pd.DataFrame, requests: pd.DataFrame | None
                    ) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    """Drop level and request rows whose values no measurement can have; notes say what went.

    Level metrics (every column ``columns.METRICS`` names, every other numeric ``*_s``, ``n_*``
    or rate column) must be finite, >= 0 and within their bound (:data:`MAX_RATE` for rates,
    :data:`MAX_DURATION_S` for durations, else :data:`MAX_METRIC`), ``output_tok_s`` present (not
    NaN), and the percentiles of one figure must not fall as the percentile rises (p50 <= p90 <=
    p99); other NaN metrics mean "not measured" and stay. Requests: every duration and rate column
    the same (``t_start_s``/``t_end_s`` may be negative: a warm-up request may start before the
    level), ``ttft_s <= e2e_s``, chunk times finite and not before the request was sent,
    ``output_tokens`` not negative, infinite or absurd. Requests of a dropped level go with it.
    """
    levels, notes = _drop_rows(levels, level_problems(levels), "level")
    level_dropped = bool(notes)
    if requests is not None and not requests.empty:
        requests, more = _drop_rows(requests, request_problems(requests), "request")
        notes += more
        keys = levels[["concurrency", "repeat"]].drop_duplicates()
        keep = requests.merge(keys, on=["concurrency", "repeat"], how="left", indicator=True)["_merge"].eq("both")
        if level_dropped and not keep.all():
            notes.append(f"{requests.attrs.get('source', 'requests')}: {int((~keep).sum())} request row(s) of the "
                         "dropped level(s) left out")
            kept = requests[keep.to_numpy()].reset_index(drop=True)
            kept.attrs = requests.attrs
            requests = kept
    return levels, requests, notes


def level_notes(levels: pd.DataFrame) -> list[str]:
    """What the sweep recorded about its levels that a reader must be told: a prefix-cache flush that
    failed (the level may have read a warm cache) and requests refused for an impossible token count."""
    notes = []
    if "prefix_cache_flush" in levels.columns:
        failed = levels[levels["prefix_cache_flush"].astype("string").str.startswith("failed").fillna(False)]
        if len(failed):
            where = ", ".join(f"C={int(c)} repeat {int(r)}" for c, r in zip(failed["concurrency"], failed["repeat"]))
            notes.append(f"the prefix-cache flush failed before {where} ({failed['prefix_cache_flush'].iloc[0]}), so "
                         "these levels may have read a warm cache (prompts an earlier level left there: shorter TTFT)")
    if "implausible_counts" in levels.columns:
        n = pd.to_numeric(levels["implausible_counts"], errors="coerce").fillna(0)
        if (n > 0).any():
            notes.append(f"{int(n.sum())} request(s) claimed an impossible token count (more than they allowed, or "
                         "fewer than the chunks that arrived) and are counted as failed, not measured")
    if "suspect_counts" in levels.columns:
        n = pd.to_numeric(levels["suspect_counts"], errors="coerce").fillna(0)
        if (n > 0).any():
            notes.append(f"{int(n.sum())} request(s) claimed more tokens than the text that arrived has bytes; their "
                         "counts are kept (tokens that decode to nothing are possible) but are suspect")
    return notes


def load_result_set(path: str | os.PathLike[str]) -> ResultSet:
    """Load one result-set folder, validating ``meta.json`` and every data file."""
    path = Path(path)
    if not path.is_dir():
        raise SchemaError(f"{path}: not a folder; pass a result-set folder (with meta.json) or a study folder")
    meta = read_meta(path)
    levels = _read_frame(path, "levels", LEVEL_REQUIRED, optional=False)
    assert levels is not None
    rs = ResultSet(path=path, meta=meta, levels=levels,
                   requests=_read_frame(path, "requests", REQUEST_REQUIRED, optional=True),
                   server_metrics=_read_frame(path, "server_metrics", SERVER_METRICS_REQUIRED, optional=True))
    _set_aside_superseded(rs)
    _check_rows(rs)
    rs.notes += _drop_impossible_values(rs)
    rs.notes += level_notes(rs.levels)
    if rs.superseded_levels is not None and len(rs.superseded_levels):
        rs.notes.append(f"{rs.levels.attrs['source']}: {len(rs.superseded_levels)} superseded level row(s) "
                        "(re-measured on resume) left out; they are in ResultSet.superseded_levels")
    rs.notes += _drop_unfinished_levels(rs)
    if rs.requests is None and not meta.level_only:
        raise SchemaError(
            f"{path / 'requests.parquet'}: missing; a measured run stores one row per request "
            f"(set level_only: true in meta.json for published level-only data)"
        )
    return rs


def _set_aside_superseded(rs: ResultSet) -> None:
    """Move the rows of levels measured again on resume to ``superseded_levels``/``superseded_requests``."""
    if "superseded" in rs.levels.columns:
        rs.levels, rs.superseded_levels = _split_superseded(rs.levels)
    if rs.requests is not None and "superseded" in rs.requests.columns:
        rs.requests, rs.superseded_requests = _split_superseded(rs.requests)


def _check_rows(rs: ResultSet) -> None:
    """Refuse levels and requests that cannot be this result set's: no level of a complete run,
    rows of another arm than ``meta.json``'s, a level (concurrency, repeat) twice."""
    levels = rs.levels
    if levels.empty and rs.meta.complete:
        raise SchemaError(f"{levels.attrs['source']}: has no rows, but meta.json says the run is complete")
    for frame in (levels, rs.requests):
        if frame is None:
            continue
        arms = set(frame["arm"].astype(str))
        if arms - {rs.meta.arm}:
            raise SchemaError(
                f"{frame.attrs['source']}: arm(s) {sorted(arms)} do not match meta.json arm '{rs.meta.arm}'"
            )
    dupes = levels.duplicated(["concurrency", "repeat"])
    if dupes.any():
        row = levels[dupes].iloc[0]
        raise SchemaError(
            f"{levels.attrs['source']}: duplicate level (concurrency={row['concurrency']}, repeat={row['repeat']})"
        )


def _drop_impossible_values(rs: ResultSet) -> list[str]:
    """Drop level and request rows no measurement can have (:func:`validate_values`); the notes.
    A complete run left with no level is refused."""
    rs.levels, rs.requests, notes = validate_values(rs.levels, rs.requests)
    if rs.levels.empty and rs.meta.complete:
        raise SchemaError(f"{rs.levels.attrs['source']}: no level row holds possible values; {notes[0] if notes else ''}")
    return notes


def _drop_unfinished_levels(rs: ResultSet) -> list[str]:
    """Leave out request and server-metric rows of levels with no level row: a level interrupted
    between its writes did not finish, so they don't count. The notes say how many went."""
    finished = rs.levels[["concurrency", "repeat"]].drop_duplicates()
    notes = []
    for name in ("requests", "server_metrics"):
        frame = getattr(rs, name)
        if frame is None or frame.empty:
            continue
        keep = frame.merge(finished, on=["concurrency", "repeat"], how="left", indicator=True)["_merge"].eq("both")
        if not keep.all():
            notes.append(f"{frame.attrs['source']}: {int((~keep).sum())} row(s) of unfinished levels left out")
            kept = frame[keep.to_numpy()].reset_index(drop=True)
            kept.attrs = frame.attrs
            setattr(rs, name, kept)
    return notes


def _split_superseded(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(live rows, superseded rows) of a frame with a boolean ``superseded`` column, both without it."""
    flag = frame["superseded"].fillna(False).astype(bool).to_numpy()
    live = frame[~flag].drop(columns=["superseded"]).reset_index(drop=True)
    old = frame[flag].reset_index(drop=True)
    live.attrs = old.attrs = frame.attrs
    return live, old


def find_result_sets(path: str | os.PathLike[str]) -> list[Path]:
    """The result-set folders at ``path``: itself if it has a meta.json, else its sub-folders that do,
    in the study file's arm order where ``path`` is a study folder (:func:`study_arm_order`; other
    sub-folders after them), else by name."""
    path = Path(path)
    if (path / "meta.json").is_file():
        return [path]
    if not path.is_dir():
        raise SchemaError(f"{path}: no such folder; pass a result-set folder (with meta.json) or a study folder")
    rank = {name: i for i, name in enumerate(study_arm_order(path))}
    found = sorted((p.parent for p in path.glob("*/meta.json")), key=lambda p: (rank.get(p.name, len(rank)), p.name))
    if not found:
        raise SchemaError(f"{path}: neither a result set (no meta.json) nor a study (no sub-folder has one)")
    return found


def _never_measured(path: Path) -> bool:
    """True for a run folder whose meta.json says incomplete and that has no levels file at all."""
    if (path / "levels.parquet").exists() or (path / "levels.csv").exists():
        return False
    try:
        meta = read_meta(path)
    except SchemaError:
        return False
    return meta.kind == "run" and not meta.complete


def load_result_sets(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str]) -> list[ResultSet]:
    """Load every result set named by ``paths`` (result-set or study folders), in order.

    Two runs of one arm with the same configuration: the newest complete one is used (:func:`newest_per_arm`);
    otherwise two result sets with the same arm name are an error saying how to tell them apart.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    sets = []
    for given in paths:
        found = find_result_sets(given)
        for p in found:
            if len(found) > 1 and _never_measured(p):
                # a run stopped before its first level (older specsweep wrote the folder before its preflight)
                warnings.warn(f"{p}: an unfinished run with no finished level (only meta.json); left out of the study",
                              stacklevel=2)
                continue
            sets.append(load_result_set(p))
    sets = newest_per_arm(sets)
    if not sets:
        raise SchemaError("no result sets given")
    return sets


#: meta.json ``server`` fields that say how an arm's server was configured (besides the embedded server's arguments)
CONFIG_FIELDS: tuple[str, ...] = (
    "name", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "max_running_requests", "mem_fraction_static", "max_total_num_tokens", "tp_size", "draft_max", "draft_min",
    "speculative_types", "speculative_draft_model_path",
)
#: meta.json ``workload`` fields that must match for one run to supersede another
_WORKLOAD_FIELDS: tuple[str, ...] = ("kind", "input_tokens", "output_tokens", "dataset_digest", "output_length", "order")


def configuration(meta: Meta) -> dict[str, Any]:
    """What makes two runs measurements of one arm: the embedded server's profile, mode and arguments
    (else the server's reported settings, :data:`CONFIG_FIELDS`), the model, the workload and the levels."""
    workload = meta.workload.model_dump()
    return {
        "embedded": meta.embedded_server,
        "server": None if meta.embedded_server else {k: meta.server.get(k) for k in CONFIG_FIELDS},
        "model": meta.model,
        "workload": {k: workload.get(k) for k in _WORKLOAD_FIELDS},
        "concurrency": sorted(meta.sweep.concurrency or []),
    }


def _newest_key(rs: ResultSet) -> tuple[bool, str, str]:
    """Sort key of one arm's runs: complete ones last, then by start time (ISO 8601 UTC), then by path."""
    return rs.meta.complete, rs.meta.started_utc or "", str(rs.path)


def newest_per_arm(sets: Sequence[ResultSet]) -> list[ResultSet]:
    """The result sets with one per arm: where specsweep measured an arm again (runs, ``kind: run``) with
    the same configuration (:func:`configuration`), the newest complete run supersedes the older ones (a
    note on it names them); where two result sets share an arm name but not its configuration (or one is
    published data), a :class:`SchemaError` says how to tell them apart. Order: each arm where its first result set stood."""
    by_arm: dict[str, list[ResultSet]] = {}
    for rs in sets:
        by_arm.setdefault(rs.arm, []).append(rs)
    out = []
    for arm, group in by_arm.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        first = configuration(group[0].meta)
        other = next((rs for rs in group[1:] if configuration(rs.meta) != first or rs.meta.kind != "run"
                      or group[0].meta.kind != "run"), None)
        if other is not None:
            differ = [k for k, v in configuration(other.meta).items() if v != first[k]]
            how = (f", measured with a different {', '.join(differ)}" if differ else
                   " (published data, not a run specsweep measured again)")
            raise SchemaError(
                f"{other.path}: arm '{arm}' is also the arm of {group[0].path}{how}; each arm of a comparison needs a unique name. Give one of them another name "
                "(its meta.json 'arm', or the sweep's arm parameter when measuring), or pass only one of the two "
                "folders with --result-set. (Two runs of one arm with the same configuration are not an error: the "
                "newest complete one is used.)")
        ordered = sorted(group, key=_newest_key)
        keep, older = ordered[-1], ordered[:-1]
        keep.notes.append(
            f"measured again: this run ({keep.run_id}, started {keep.meta.started_utc or 'at an unrecorded time'})"
            f" is the newest complete run of the arm and supersedes {len(older)} older run(s) of the same "
            f"configuration, left out: {', '.join(rs.path.name for rs in older)}")
        out.append(keep)
    return out


# --------------------------------------------------------------------------------------- writing


def write_meta(run_dir: Path, meta: Meta) -> None:
    """Validate and atomically write ``meta.json`` (with the API key's value masked, see ``redact``):
    the fields it was read with and those set since, in order (:meth:`Meta.to_json_dict`)."""
    data = meta.to_json_dict()
    try:
        Meta.model_validate(data)
    except ValidationError as exc:
        raise SchemaError(f"{run_dir / 'meta.json'}: refusing to write invalid metadata: {validation_problems(exc)}") \
            from exc
    atomic_write_bytes(run_dir / "meta.json", (json.dumps(redact(data), indent=2, default=str) + "\n").encode())


#: array values (all array columns together) per Parquet row group when a frame is written in parts
PART_VALUES = 1 << 18


def _is_missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def array_columns(frame: pd.DataFrame) -> dict[str, pa.DataType]:
    """The object columns of ``frame`` whose cells are all 1-D numeric numpy arrays (or missing),
    such as the chunk timelines ``chunk_t_s`` and ``chunk_tokens``, with the Arrow element type
    they are stored as: float64 for float arrays, int64 for integer arrays of any width (as lists
    of Python ints always were). Other object columns are left to pyarrow's own inference.
    """
    out: dict[str, pa.DataType] = {}
    for col in frame.columns:
        if frame[col].dtype != object:
            continue
        kinds: set[str] = set()
        for value in frame[col]:
            if isinstance(value, np.ndarray) and value.ndim == 1:
                kinds.add(value.dtype.kind)
            elif not _is_missing(value):
                kinds = set()
                break
        if kinds and kinds <= {"f"}:
            out[col] = pa.float64()
        elif kinds and kinds <= {"i", "u"}:
            out[col] = pa.int64()
    return out


def _arrow_schema(frame: pd.DataFrame, arrays: dict[str, pa.DataType]) -> pa.Schema:
    """The schema ``frame.to_parquet(index=False)`` writes (pandas metadata and ``attrs`` included),
    with the ``arrays`` columns typed as lists without converting their cells.

    A column whose dtype fixes its Arrow type (numbers, flags, times, pandas' string and other
    extension dtypes) is typed from none of its rows, all such columns in one call; an ``object``
    column is inferred from its values one column at a time, as pyarrow infers them, so that only
    one column's Arrow copy is held at once (a level's text and digest columns hold tens of MB).
    Converting every column whole just to learn its type would cost time at every level file
    written, and a sweep writes several per level."""
    typed = [c for c, dtype in frame.dtypes.items() if c not in arrays and dtype != object]  # noqa: E721 - a numpy dtype, not a type
    known = dict(zip(typed, pa.Schema.from_pandas(frame[typed].iloc[:0], preserve_index=False))) if typed else {}
    fields = [pa.field(c, pa.list_(arrays[c])) if c in arrays else known[c] if c in known
              else pa.Schema.from_pandas(frame[c].to_frame(), preserve_index=False).field(c) for c in frame.columns]
    schema = pa.Table.from_pandas(frame.iloc[:0], schema=pa.schema(fields), preserve_index=False).schema
    if frame.attrs:  # as pandas' to_parquet stores them
        schema = schema.with_metadata({**schema.metadata, b"PANDAS_ATTRS": json.dumps(frame.attrs).encode()})
    return schema


def _list_array(cells: Iterable[object], value_type: pa.DataType) -> pa.ListArray:
    """Cells that are 1-D numpy arrays or missing (null) as one Arrow list array, built from their
    values concatenated once (as ``value_type``) and offsets: no Python object per value."""
    cells = list(cells)
    present = np.fromiter((isinstance(v, np.ndarray) for v in cells), bool, len(cells))
    offsets = np.zeros(len(cells) + 1, dtype=np.int32)
    np.cumsum([v.size if isinstance(v, np.ndarray) else 0 for v in cells], out=offsets[1:])
    dtype = value_type.to_pandas_dtype()
    flat = np.concatenate([v for v in cells if isinstance(v, np.ndarray)] or [np.empty(0, dtype)], dtype=dtype)
    mask = None if present.all() else pa.array(~present)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat), mask=mask)


def _table(frame: pd.DataFrame, schema: pa.Schema, arrays: dict[str, pa.DataType]) -> pa.Table:
    """``frame`` as an Arrow table of ``schema``: array columns by :func:`_list_array`, the rest by pyarrow."""
    rest = pa.Table.from_pandas(frame.drop(columns=list(arrays)), preserve_index=False,
                                schema=pa.schema([f for f in schema if f.name not in arrays]))
    columns = [_list_array(frame[f.name], arrays[f.name]) if f.name in arrays else rest[f.name] for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _parts(frame: pd.DataFrame, schema: pa.Schema, arrays: dict[str, pa.DataType]) -> Iterator[pa.Table]:
    """``frame`` as Arrow tables of consecutive rows holding about :data:`PART_VALUES` values of the
    ``arrays`` columns each (one table when there are none): one part's values are copied at a time."""
    sizes = np.zeros(len(frame), dtype=np.int64)
    for col in arrays:
        sizes += np.fromiter((v.size if isinstance(v, np.ndarray) else 0 for v in frame[col]), np.int64, len(frame))
    start, held = 0, 0
    for i, size in enumerate(sizes.tolist()):
        if held and held + size > PART_VALUES:
            yield _table(frame.iloc[start:i], schema, arrays)
            start, held = i, 0
        held += size
    if start < len(frame):
        yield _table(frame.iloc[start:], schema, arrays)


def _write_rows(target: Path, frame: pd.DataFrame, before: Iterable[pa.Table] = (),
                schema: pa.Schema | None = None) -> None:
    """Atomically write the tables ``before`` (of ``schema``), then ``frame``'s rows, as one Parquet
    file with pandas' defaults (snappy); ``schema``: the file's, by default ``frame``'s."""
    if schema is None and frame.empty:  # nothing to stream: pandas writes it
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        atomic_write_bytes(target, buffer.getvalue())
        return
    arrays = array_columns(frame)
    if schema is None:
        schema = _arrow_schema(frame, arrays)
    with atomic_file(target) as handle, pq.ParquetWriter(handle, schema, compression="snappy") as writer:
        for table in itertools.chain(before, _parts(frame, schema, arrays)):
            writer.write_table(table)


def write_frame(run_dir: Path, stem: str, frame: pd.DataFrame) -> None:
    """Atomically (re)write ``<stem>.parquet`` (with the API key's value masked in text cells).

    The file is what ``frame.to_parquet(index=False)`` writes (schema, pandas metadata and values),
    but numpy-array columns (:func:`array_columns`) reach their Arrow lists part by part
    (:data:`PART_VALUES` values per row group), straight into the file: writing a level of 20
    million chunks holds one part's copy of them, never the whole column's nor the file's bytes.
    """
    _write_rows(run_dir / f"{stem}.parquet", redact_frame(frame).reset_index(drop=True))


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    """Same column names, order and Arrow types (metadata aside)."""
    return a.names == b.names and a.remove_metadata().equals(b.remove_metadata())


def _kept_rows(stored: pq.ParquetFile, schema: pa.Schema, keys: set[tuple[int, int]],
               finished: set[tuple[int, int]]) -> Iterator[pa.Table]:
    """The stored rows :func:`append_level` keeps, part by part: rows of ``keys`` levels are marked
    superseded when their level had finished (``finished``) and dropped when it had not."""
    md = stored.metadata
    values = max((sum(md.row_group(g).column(j).num_values for g in range(md.num_row_groups))
                  for j in range(md.num_columns)), default=0)
    rows = max(1, PART_VALUES * md.num_rows // max(values, 1))
    for batch in stored.iter_batches(batch_size=rows):
        table = pa.Table.from_batches([batch])
        levels = list(zip(table["concurrency"].to_pylist(), table["repeat"].to_pylist()))
        same = np.fromiter((lv in keys for lv in levels), bool, len(levels))
        done = np.fromiter((lv in finished for lv in levels), bool, len(levels))
        superseded = table["superseded"].to_numpy() | (same & done)
        table = table.set_column(table.schema.get_field_index("superseded"), "superseded", pa.array(superseded))
        yield table.filter(pa.array(~same | done)).cast(schema)


def _add_level_rows(run_dir: Path, stem: str, new: pd.DataFrame, keys: set[tuple[int, int]],
                    finished: set[tuple[int, int]]) -> None:
    """Rewrite ``<stem>.parquet`` with one level's rows ``new`` added (see :func:`append_level`).

    When the stored file has the columns ``new`` brings, its rows are copied part by part as
    Arrow tables (memory of one part); otherwise (a file of an older specsweep, columns that came
    or went) the stored rows are read whole and combined with ``new`` by pandas.
    """
    new = redact_frame(new.assign(superseded=False)).reset_index(drop=True)
    path = run_dir / f"{stem}.parquet"
    if not path.is_file():
        _write_rows(path, new)
        return
    with pq.ParquetFile(path) as stored:
        if stored.metadata.num_rows == 0 or not stored.schema_arrow.names:
            _write_rows(path, new)
            return
        if not new.empty:
            arrays = array_columns(new)
            schema = _arrow_schema(new, arrays)
            if _same_columns(stored.schema_arrow, schema):
                _write_rows(path, new, _kept_rows(stored, schema, keys, finished), schema)
                return
    old = pd.read_parquet(path)
    if "superseded" not in old:
        old = old.assign(superseded=False)
    level = list(zip(old["concurrency"], old["repeat"]))
    same = np.fromiter((lv in keys for lv in level), bool, len(level))
    was_finished = np.fromiter((lv in finished for lv in level), bool, len(level))
    old.loc[same & was_finished, "superseded"] = True
    kept = old[~same | was_finished]
    _write_rows(path, redact_frame(pd.concat([kept, new], ignore_index=True)) if not kept.empty else new)


def append_level(
    run_dir: Path,
    level: pd.DataFrame,
    requests: pd.DataFrame,
    server_metrics: pd.DataFrame | None = None,
) -> None:
    """Add one finished level to a run folder.

    Rows already stored for the same (concurrency, repeat) are kept, marked ``superseded=True``,
    when that level had finished (a re-measurement on resume must not lose the first attempt);
    rows of a level that never finished (orphan request rows) are dropped. Readers
    (:func:`load_result_set`, :func:`finished_levels`) leave superseded rows out.

    Each file is rewritten atomically, requests first and levels last: a level counts as finished
    only once its row is in ``levels.parquet``, so an interruption between the writes leaves at
    worst orphan request rows, which the next write of that level replaces. Stored rows are copied
    part by part (:func:`_add_level_rows`), so memory does not grow with the levels already written.
    """
    keys = {(int(c), int(r)) for c, r in level[["concurrency", "repeat"]].itertuples(index=False)}
    finished: set[tuple[int, int]] = set()
    levels_path = run_dir / "levels.parquet"
    if levels_path.is_file():
        old_levels = pd.read_parquet(levels_path)
        if "superseded" in old_levels:
            old_levels = old_levels[~old_levels["superseded"].fillna(False).astype(bool).to_numpy()]
        finished = {(int(c), int(r)) for c, r in old_levels[["concurrency", "repeat"]].itertuples(index=False)} & keys
    _add_level_rows(run_dir, "requests", requests, keys, finished)
    if server_metrics is not None:
        _add_level_rows(run_dir, "server_metrics", server_metrics, keys, finished)
    _add_level_rows(run_dir, "levels", level, keys, finished)


def live_levels(run_dir: Path) -> pd.DataFrame:
    """The finished, not superseded rows of ``run_dir/levels.parquet`` (validated; empty when absent)."""
    frame = _read_frame(Path(run_dir), "levels", LEVEL_REQUIRED, optional=True)
    if frame is None:
        return pd.DataFrame(columns=list(LEVEL_REQUIRED))
    if "superseded" in frame.columns:
        frame, _ = _split_superseded(frame)
    return frame


def finished_levels(run_dir: Path) -> set[tuple[int, int]]:
    """The (concurrency, repeat) pairs already written to ``run_dir/levels.parquet`` (not superseded)."""
    frame = live_levels(run_dir)
    return {(int(c), int(r)) for c, r in frame[["concurrency", "repeat"]].itertuples(index=False)}


class RunLocked(RunError, RuntimeError):
    """Another sweep holds the run folder's lock; the message says who."""


LOCK_NAME = ".specsweep.lock"


@contextlib.contextmanager
def exclusive_lock(path: Path, busy: Callable[[dict[str, Any]], Exception]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``path`` (created if missing), recording pid, host and
    start time (UTC) of the holder in it; when another process holds it, raise ``busy(holder)``
    (holder: that record, ``{}`` if unreadable). The kernel drops the lock when the holder exits,
    however it exits. On a file system without ``flock`` the caller goes on unlocked."""
    import fcntl
    import socket

    from specsweep.results.provenance import utc_now

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
            except (ValueError, UnicodeDecodeError):
                holder = {}
            raise busy(holder if isinstance(holder, dict) else {}) from None
        except OSError:  # a file system without flock (some network mounts): go on unlocked, as before locks existed
            yield
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "started_utc": utc_now()}).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def holder_text(holder: dict[str, Any]) -> str:
    """"pid P on host H, since T" from a lock file's record (``?`` where unknown)."""
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, since {holder.get('started_utc', '?')}"


@contextlib.contextmanager
def lock_run(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``run_dir/.specsweep.lock`` while a sweep writes the folder
    (:func:`exclusive_lock`): a second sweep (or resume) of the same folder fails with
    :class:`RunLocked` naming the holder's pid, host and start time."""
    def busy(holder: dict[str, Any]) -> Exception:
        return RunLocked(f"{run_dir}: another sweep is writing this run folder ({holder_text(holder)}); wait for it "
                         "to finish or stop it, then resume")

    with exclusive_lock(Path(run_dir) / LOCK_NAME, busy):
        yield
