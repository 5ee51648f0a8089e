"""An adaptive study's record: ``<out_dir>/adaptive.json``, every step it chose, in order, with why.

The runner writes a step here *before* measuring it, so a study killed mid-step resumes by
measuring the recorded step's runs that are not complete (complete ones are never measured again)
and only then asks the policy for the next. Once the policy stops, the record holds why, and the
summary the report prints (:func:`summary`): measurement seconds spent, the full grid's estimate,
the levels never measured and the arms no longer measured, each with why.

Shape::

    {"steps": [{"reason": str, "est_s": float, "dropped": [[arm, why], ...],
                "runs": [{"arm": str, "index": int, "repeat": int, "levels": [int, ...]}],
                "choices": [{"arm": str, "level": int, "repeat": int, "requests": int | null, "reason": str}]}],
     "stop": {"reason": "settled" | "budget" | "exhausted" | "failed", "detail": str} | null,
     "summary": {...} | null}
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsweep.results.atomic import atomic_write_bytes

ADAPTIVE_FILE = "adaptive.json"


@dataclass
class AdaptiveRecord:
    """The steps chosen so far (JSON-ready dicts, see the module docstring), why it stopped, its summary."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    stop: dict[str, str] | None = None
    summary: dict[str, Any] | None = None


def read_record(out_dir: Path) -> AdaptiveRecord | None:
    """The record in ``out_dir``, or None where there is none (or it is not a JSON object)."""
    path = Path(out_dir) / ADAPTIVE_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(raw, dict):
        return None
    return AdaptiveRecord(list(raw.get("steps") or []), raw.get("stop"), raw.get("summary"))


def write_record(out_dir: Path, record: AdaptiveRecord) -> None:
    """Write the record atomically (a reader never sees half a file)."""
    data = {"steps": record.steps, "stop": record.stop, "summary": record.summary}
    atomic_write_bytes(Path(out_dir) / ADAPTIVE_FILE, (json.dumps(data, indent=1) + "\n").encode())


def summary(out_dir: Path) -> dict[str, Any] | None:
    """The summary a finished adaptive study recorded in ``out_dir`` (for the arms' ``meta.json``), or None."""
    record = read_record(out_dir)
    return record.summary if record is not None else None
