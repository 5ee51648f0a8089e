"""Result sets on disk: write them atomically, read and validate them into tidy frames.

A result set is a folder (DESIGN §4)::

    <run_dir>/meta.json              what was measured, against what, how, by which tool, when
    <run_dir>/levels.parquet         one row per (concurrency, repeat): per-level metrics
    <run_dir>/requests.parquet       one row per request (absent for level-only reference data)
    <run_dir>/server_metrics.parquet polled server gauges (optional)

Hand-transcribed reference data may use ``levels.csv`` instead of ``levels.parquet``. A *study*
folder holds several result sets as sub-folders; :func:`load_result_sets` expands it.

Every reader error names the file and says what is missing or malformed.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

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


class SchemaError(ValueError):
    """A result-set file is missing, malformed, or does not match the schema."""


class Workload(BaseModel):
    """What each request asked for."""

    model_config = ConfigDict(extra="allow")
    kind: str = Field(description="random-ids | fixed-ids | prompt-file | ...")
    input_tokens: int | None = Field(ge=1, description="prompt length, tokens")
    output_tokens: int = Field(ge=1, description="requested output length, tokens")
    ignore_eos: bool | None = None
    seed: int | None = None
    dataset_digest: str | None = None


class Meta(BaseModel):
    """The metadata record beside every result set (``meta.json``)."""

    model_config = ConfigDict(extra="allow")
    schema_version: int
    kind: Literal["run", "reference"]
    run_id: str = Field(min_length=1)
    arm: str = Field(min_length=1)
    label: str | None = None
    complete: bool = True
    level_only: bool = False
    model: str | None = None
    server: dict[str, Any] = Field(default_factory=dict)
    workload: Workload
    sweep: dict[str, Any] = Field(default_factory=dict)
    metric_definitions: dict[str, str] = Field(default_factory=dict)


@dataclass
class ResultSet:
    """One arm's results, loaded and validated."""

    path: Path
    meta: dict[str, Any]
    levels: pd.DataFrame
    requests: pd.DataFrame | None = None
    server_metrics: pd.DataFrame | None = None
    #: what loading had to say (e.g. request rows of an unfinished level that were left out)
    notes: list[str] = field(default_factory=list)

    @property
    def arm(self) -> str:
        return str(self.meta["arm"])

    @property
    def run_id(self) -> str:
        return str(self.meta["run_id"])

    @property
    def label(self) -> str:
        return str(self.meta.get("label") or self.meta["arm"])


# --------------------------------------------------------------------------------------- reading


def _read_meta(path: Path) -> dict[str, Any]:
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
        Meta.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"field '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}" for err in exc.errors()
        )
        raise SchemaError(f"{meta_path}: {problems}") from exc
    if raw["schema_version"] > SCHEMA_VERSION:
        raise SchemaError(
            f"{meta_path}: schema_version {raw['schema_version']} is newer than this specsweep "
            f"understands ({SCHEMA_VERSION}); upgrade specsweep"
        )
    return raw


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
            frame[col] = pd.to_numeric(frame[col]).astype("int64")
        elif kind == "float":
            frame[col] = pd.to_numeric(frame[col]).astype("float64")
    frame.attrs["source"] = str(source)
    return frame


def load_result_set(path: str | os.PathLike[str]) -> ResultSet:
    """Load one result-set folder, validating ``meta.json`` and every data file."""
    path = Path(path)
    if not path.is_dir():
        raise SchemaError(f"{path}: not a folder; pass a result-set folder (with meta.json) or a study folder")
    meta = _read_meta(path)
    levels = _read_frame(path, "levels", LEVEL_REQUIRED, optional=False)
    assert levels is not None
    requests = _read_frame(path, "requests", REQUEST_REQUIRED, optional=True)
    server_metrics = _read_frame(path, "server_metrics", SERVER_METRICS_REQUIRED, optional=True)
    if levels.empty and meta.get("complete", True):
        raise SchemaError(f"{levels.attrs['source']}: has no rows, but meta.json says the run is complete")
    for frame in (levels, requests):
        if frame is None:
            continue
        arms = set(frame["arm"].astype(str))
        if arms - {meta["arm"]}:
            raise SchemaError(
                f"{frame.attrs['source']}: arm(s) {sorted(arms)} do not match meta.json arm '{meta['arm']}'"
            )
    dupes = levels.duplicated(["concurrency", "repeat"])
    if dupes.any():
        row = levels[dupes].iloc[0]
        raise SchemaError(
            f"{levels.attrs['source']}: duplicate level (concurrency={row['concurrency']}, repeat={row['repeat']})"
        )
    notes: list[str] = []
    finished = levels[["concurrency", "repeat"]].drop_duplicates()
    for name, frame in (("requests", requests), ("server_metrics", server_metrics)):
        if frame is None or frame.empty:
            continue
        keep = frame.merge(finished, on=["concurrency", "repeat"], how="left", indicator=True)["_merge"].eq("both")
        if not keep.all():
            # rows of a level interrupted between its writes: the level did not finish, so they don't count
            notes.append(f"{frame.attrs['source']}: {int((~keep).sum())} row(s) of unfinished levels left out")
            kept = frame[keep.to_numpy()].reset_index(drop=True)
            kept.attrs = frame.attrs
            if name == "requests":
                requests = kept
            else:
                server_metrics = kept
    if requests is None and not meta.get("level_only", False):
        raise SchemaError(
            f"{path / 'requests.parquet'}: missing; a measured run stores one row per request "
            f"(set level_only: true in meta.json for published level-only data)"
        )
    return ResultSet(path=path, meta=meta, levels=levels, requests=requests, server_metrics=server_metrics, notes=notes)


def find_result_sets(path: str | os.PathLike[str]) -> list[Path]:
    """The result-set folders at ``path``: itself if it has a meta.json, else its sub-folders that do."""
    path = Path(path)
    if (path / "meta.json").is_file():
        return [path]
    if not path.is_dir():
        raise SchemaError(f"{path}: no such folder; pass a result-set folder (with meta.json) or a study folder")
    found = sorted(p.parent for p in path.glob("*/meta.json"))
    if not found:
        raise SchemaError(f"{path}: neither a result set (no meta.json) nor a study (no sub-folder has one)")
    return found


def load_result_sets(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str]) -> list[ResultSet]:
    """Load every result set named by ``paths`` (result-set or study folders), in order.

    Two result sets with the same arm name are an error (rename one with its meta.json ``arm``).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    sets = [load_result_set(p) for given in paths for p in find_result_sets(given)]
    seen: dict[str, Path] = {}
    for rs in sets:
        if rs.arm in seen:
            raise SchemaError(
                f"{rs.path}: arm '{rs.arm}' is also the arm of {seen[rs.arm]}; each arm of a comparison needs a unique name"
            )
        seen[rs.arm] = rs.path
    if not sets:
        raise SchemaError("no result sets given")
    return sets


# --------------------------------------------------------------------------------------- writing


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` so readers see the old file or the new one, never a torn one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_meta(run_dir: Path, meta: dict[str, Any]) -> None:
    """Validate and atomically write ``meta.json``."""
    try:
        Meta.model_validate(meta)
    except ValidationError as exc:
        raise SchemaError(f"{run_dir / 'meta.json'}: refusing to write invalid metadata: {exc}") from exc
    atomic_write_bytes(run_dir / "meta.json", (json.dumps(meta, indent=2, default=str) + "\n").encode())


def write_frame(run_dir: Path, stem: str, frame: pd.DataFrame) -> None:
    """Atomically (re)write ``<stem>.parquet``."""
    import io

    buffer = io.BytesIO()
    frame.reset_index(drop=True).to_parquet(buffer, index=False)
    atomic_write_bytes(run_dir / f"{stem}.parquet", buffer.getvalue())


def append_level(
    run_dir: Path,
    level: pd.DataFrame,
    requests: pd.DataFrame,
    server_metrics: pd.DataFrame | None = None,
) -> None:
    """Add one finished level to a run folder, replacing any earlier rows for the same level.

    Each file is rewritten atomically, requests first and levels last: a level counts as finished
    only once its row is in ``levels.parquet``, so an interruption between the writes leaves at
    worst orphan request rows, which the next write of that level replaces.
    """
    keys = level[["concurrency", "repeat"]].drop_duplicates()

    def merged(stem: str, new: pd.DataFrame) -> pd.DataFrame:
        path = run_dir / f"{stem}.parquet"
        if not path.is_file():
            return new
        old = pd.read_parquet(path)
        if old.empty:
            return new
        drop = old.merge(keys, on=["concurrency", "repeat"], how="left", indicator=True)["_merge"] == "both"
        kept = old[~drop.to_numpy()]
        return pd.concat([kept, new], ignore_index=True) if not kept.empty else new

    write_frame(run_dir, "requests", merged("requests", requests))
    if server_metrics is not None:
        write_frame(run_dir, "server_metrics", merged("server_metrics", server_metrics))
    write_frame(run_dir, "levels", merged("levels", level))


def finished_levels(run_dir: Path) -> set[tuple[int, int]]:
    """The (concurrency, repeat) pairs already written to ``run_dir/levels.parquet``."""
    path = Path(run_dir) / "levels.parquet"
    if not path.is_file():
        return set()
    frame = pd.read_parquet(path, columns=["concurrency", "repeat"])
    return {(int(c), int(r)) for c, r in frame.itertuples(index=False)}
