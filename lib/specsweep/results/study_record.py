"""What a study folder's ``study.json`` says about how to show it: its title and its arms' order.

:mod:`specsweep.study.runner` writes ``study.json`` (the plan, every outcome, the fingerprint). A report
rebuilt from the study folder (``specsweep report DIR``) reads the title and the arms' order from
it, so that it gives the page the study's own build gave. Standard library only: the report builder
reads it before its kernel starts, and must not load pandas first.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _study_record(path: Path) -> dict[str, Any]:
    """A study folder's ``study.json``, or {} without a readable one."""
    try:
        doc = json.loads((path / "study.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def study_arm_order(path: str | os.PathLike[str]) -> list[str]:
    """The arms of the study folder at ``path`` in the study file's order, the order its own report
    gives them in: the keys of ``study.json``'s ``fingerprint.arms`` (``Study.fingerprint``, written
    in ``Study.arms`` order); [] where there is no ``study.json`` with one."""
    fingerprint = _study_record(Path(path)).get("fingerprint")
    arms = fingerprint.get("arms") if isinstance(fingerprint, dict) else None
    return [name for name in arms if isinstance(name, str)] if isinstance(arms, dict) else []


def study_title(paths: Sequence[str | os.PathLike[str]]) -> str | None:
    """The title in ``study.json`` when ``paths`` is one study folder that has one, else None."""
    if len(paths) != 1:
        return None
    title = _study_record(Path(paths[0])).get("title")
    return title if isinstance(title, str) and title.strip() else None
