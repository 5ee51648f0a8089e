"""``study.json``, a study folder's record: the plan, every (arm, repeat) outcome, the fingerprint.

:mod:`specsweep.study.runner` writes it after each outcome (:func:`write_study_record`) and reads
it to resume or start over; a report rebuilt from the study folder (``specsweep report DIR``)
reads the title and the arms' order from it (:func:`study_title`, :func:`study_arm_order`), so
that it gives the page the study's own build gave. :func:`read_study_record` and
:func:`write_study_record` are the only code that touches the file; the defaults a file written
by an older specsweep lacks live in :class:`StudyRecord` and :class:`ArmOutcome`. Standard library
only: the report builder reads it before its kernel starts, and must not load pandas first.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from specsweep.results.atomic import atomic_write_bytes

STUDY_FILE = "study.json"


@dataclass
class ArmOutcome:
    """What happened to one (arm, repeat): ``complete``, ``skipped`` (already complete) or ``failed``."""

    arm: str
    repeat: int
    position: int
    status: Literal["complete", "skipped", "failed"]
    run_dir: str | None = None
    started_utc: str | None = None
    finished_utc: str | None = None
    error: str | None = None
    log_tail: str | None = None
    server_log: str | None = None
    notebook: str | None = None
    resumed: bool = False

    @classmethod
    def from_json(cls, doc: Any) -> ArmOutcome | None:
        """An outcome as ``study.json`` holds it; None for an entry without its arm, repeat,
        position and status. Fields the entry lacks take their defaults; unknown ones are ignored."""
        if not isinstance(doc, dict) or not {"arm", "repeat", "position", "status"} <= doc.keys():
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


@dataclass(frozen=True)
class PlannedSweep:
    """One sweep of the plan: its place in the study's time order (from 1), its repeat and arm."""

    position: int
    repeat: int
    arm: str

    @classmethod
    def from_json(cls, doc: Any) -> PlannedSweep | None:
        """A plan entry as ``study.json`` holds it; None for one without a whole position and repeat and an arm."""
        if not isinstance(doc, dict):
            return None
        position, repeat, arm = doc.get("position"), doc.get("repeat"), doc.get("arm")
        if not (isinstance(position, int) and isinstance(repeat, int) and isinstance(arm, str)):
            return None
        return cls(position, repeat, arm)


@dataclass
class StudyRecord:
    """What ``study.json`` holds. ``fingerprint`` is ``Study.fingerprint()``: the shared sweep
    parameters (``sweep``) and a digest of each arm's definition (``arms``, in the study file's
    order), which a resume must match. ``missing_arms`` is written once every sweep was tried,
    ``interrupted`` (UTC) when Ctrl-C stopped the study; both are left out of the file when None."""

    study: str = ""
    title: str | None = None
    file: str | None = None
    baseline: str | None = None
    repeats: int | None = None
    plan: list[PlannedSweep] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    outcomes: list[ArmOutcome] = field(default_factory=list)
    missing_arms: list[str] | None = None
    interrupted: str | None = None

    def arm_order(self) -> list[str]:
        """The arms in the study file's order (the keys of ``fingerprint.arms``); [] without them."""
        arms = self.fingerprint.get("arms")
        return [name for name in arms if isinstance(name, str)] if isinstance(arms, dict) else []

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        return {k: v for k, v in doc.items() if v is not None or k not in ("missing_arms", "interrupted")}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> StudyRecord:
        """The record of a parsed ``study.json``: a field of the wrong type (or absent) takes its default."""
        def typed(key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
            value = doc.get(key)
            return value if isinstance(value, kind) and not isinstance(value, bool) else default

        plan = [p for p in map(PlannedSweep.from_json, typed("plan", list, [])) if p is not None]
        outcomes = [o for o in map(ArmOutcome.from_json, typed("outcomes", list, [])) if o is not None]
        missing = typed("missing_arms", list)
        return cls(study=typed("study", str, ""), title=typed("title", str), file=typed("file", str),
                   baseline=typed("baseline", str), repeats=typed("repeats", int), plan=plan,
                   fingerprint=typed("fingerprint", dict, {}), outcomes=outcomes,
                   missing_arms=[str(a) for a in missing] if missing is not None else None,
                   interrupted=typed("interrupted", str))


def read_study_record(folder: str | os.PathLike[str]) -> StudyRecord | None:
    """The record in ``<folder>/study.json``; None where there is none or it is not a JSON object."""
    try:
        doc = json.loads((Path(folder) / STUDY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return StudyRecord.from_json(doc) if isinstance(doc, dict) else None


def write_study_record(folder: str | os.PathLike[str], record: StudyRecord) -> None:
    """Write ``record`` to ``<folder>/study.json`` atomically (a reader never sees half a file)."""
    atomic_write_bytes(Path(folder) / STUDY_FILE, (json.dumps(record.to_json(), indent=2) + "\n").encode())


def study_arm_order(path: str | os.PathLike[str]) -> list[str]:
    """The arms of the study folder at ``path`` in the study file's order, the order its own report
    gives them in (:meth:`StudyRecord.arm_order`); [] where there is no ``study.json`` with them."""
    record = read_study_record(path)
    return record.arm_order() if record is not None else []


def study_title(paths: Sequence[str | os.PathLike[str]]) -> str | None:
    """The title in ``study.json`` when ``paths`` is one study folder that has one, else None."""
    if len(paths) != 1:
        return None
    record = read_study_record(paths[0])
    title = record.title if record is not None else None
    return title if title and title.strip() else None
