"""The decision rows a report computed, carried out of its notebook so nothing computes them twice.

The report notebook displays its decision rows — each with the flip chance it estimated
(:mod:`specsweep.decide.flip`), the costly part — as an output of MIME type :data:`DECISIONS_MIME`,
which the page does not show; the build takes it out of the executed notebook and writes it beside
the executed notebook (:func:`decisions_beside`), where :mod:`specsweep.publish` reads the published
reports' decision table instead of deciding and resampling every study again.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsweep.decide.decisions import DecisionRow, from_json, row_of, to_json
from specsweep.decide.result import Recommendation

#: the MIME type of the notebook output that carries the decision rows (JSON, as ``decisions.json`` rows)
DECISIONS_MIME = "application/x-specsweep-decisions+json"


def decisions_output(recs: Sequence[Recommendation]) -> None:
    """Display the recommendations' decision rows as a :data:`DECISIONS_MIME` output (hidden, taken by the build)."""
    from IPython.display import display

    display({DECISIONS_MIME: to_json([row_of(r) for r in recs])}, raw=True)


def take_decisions(nb: Any) -> list[DecisionRow] | None:
    """The decision rows an executed report notebook carries (None where it carries none), their
    output removed from ``nb`` so the page does not hold it."""
    rows = None
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            data = (out.get("data") or {}).get(DECISIONS_MIME)
            if data is not None and rows is None:
                rows = from_json(json.loads(data) if isinstance(data, str) else data)
        cell.outputs = [o for o in cell.get("outputs", []) if DECISIONS_MIME not in (o.get("data") or {})]
    return rows


def decisions_beside(page: Path) -> Path:
    """Where the build keeps the decision rows of the page ``page`` (``<out_dir>/<name>.html``):
    ``<out_dir>/_build/<name>.decisions.json``, beside its executed notebook."""
    return page.parent / "_build" / f"{page.stem}.decisions.json"


def write_carried(rows: list[DecisionRow] | None, page: Path) -> None:
    """Write ``rows`` where :func:`decisions_beside` says (a stale file removed where there are none)."""
    path = decisions_beside(page)
    if rows is None:
        path.unlink(missing_ok=True)
        return
    path.write_text(json.dumps(to_json(rows), indent=1) + "\n", encoding="utf-8")


def read_carried(page: Path) -> list[DecisionRow] | None:
    """The decision rows the build of ``page`` kept, or None where it kept none."""
    path = decisions_beside(page)
    return from_json(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None
