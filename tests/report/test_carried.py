"""The decision rows a report computed reach publish without a second computation: the page's
rows, flip chances included, kept beside its executed notebook; the report parameter
``flip_resamples`` chooses the resamples, 0 none (the page then says nothing about a flip chance)."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from helpers import SEED
from specsweep import publish
from specsweep.decide.decisions import DecisionRow, to_json
from specsweep.decide.verdicts import DecisionKind
from specsweep.report import build_report
from specsweep.report.carried import DECISIONS_MIME, decisions_beside, read_carried, take_decisions, write_carried

ROWS = [DecisionRow("Chat", DecisionKind.ENABLE, "mtp", flip_chance=0.25, flip_resamples=8),
        DecisionRow("Batch", DecisionKind.KEEP_OFF)]


def test_the_rows_leave_the_notebook_and_come_back_as_they_were(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("display_data", data={DECISIONS_MIME: to_json(ROWS)}),
                    nbformat.v4.new_output("display_data", data={"text/plain": "shown"})]
    nb.cells = [cell]
    rows = take_decisions(nb)
    assert rows == ROWS
    assert [o["data"] for o in nb.cells[0].outputs] == [{"text/plain": "shown"}]  # the page does not hold them
    page = tmp_path / "r.html"
    (tmp_path / "_build").mkdir()
    write_carried(rows, page)
    assert read_carried(page) == ROWS
    write_carried(None, page)  # a build that carried none leaves no stale table
    assert read_carried(page) is None


def test_publish_takes_the_built_pages_rows_and_decides_only_without_them(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "r.html"
    (tmp_path / "_build").mkdir()
    write_carried(ROWS, page)
    pub = publish.Published("shown-name", ("data/x",))
    monkeypatch.setattr(publish, "decision_tables", lambda pubs: pytest.fail("decided and resampled a second time"))
    assert publish.built_table(pub, page) == {"shown-name": ROWS}
    decisions_beside(page).unlink()
    monkeypatch.setattr(publish, "decision_tables", lambda pubs: {p.name: ROWS[1:] for p in pubs})
    assert publish.built_table(pub, page) == {"shown-name": ROWS[1:]}


def test_the_page_s_flip_chances_are_the_kept_rows_and_0_resamples_gives_none(tmp_path: Path) -> None:
    some = build_report([SEED], "some", out_dir=tmp_path, flip_resamples=6)
    rows = read_carried(some)
    assert rows and all(r.flip_resamples == 6 and r.flip_chance is not None for r in rows)
    assert some.read_text(encoding="utf-8").count("(6 resamples)") >= len(rows)
    assert DECISIONS_MIME not in some.read_text(encoding="utf-8")
    none = build_report([SEED], "none", out_dir=tmp_path, flip_resamples=0)
    rows = read_carried(none)
    assert rows and all(r.flip_chance is None and r.flip_resamples is None for r in rows)
    assert "flip chance" not in none.read_text(encoding="utf-8")
    assert "flip_chance" not in json.dumps(to_json(rows))


def test_a_negative_resample_count_is_refused_naming_the_parameter(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="flip_resamples"):
        build_report([SEED], "bad", out_dir=tmp_path, flip_resamples=-1)
