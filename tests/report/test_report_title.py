"""The exported page's <title> is the report's own title (its first <h1>), escaped; never "Notebook"."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from specsweep.markup import markdown_html, md_text
from specsweep.report import export_html, page_title

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def _notebook(*htmls: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for h in htmls:
        cell = nbformat.v4.new_code_cell("x")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": h})]
        nb.cells.append(cell)
    return nb


def _title(page: str) -> str:
    found = re.findall(r"<title>(.*?)</title>", page, re.S)
    assert len(found) == 1
    return found[0]


def test_title_is_the_first_heading_escaped(tmp_path: Path) -> None:
    hostile = 'Spec <script>alert(1)</script> & "MTP" <b>x</b>'
    nb = _notebook("<p>intro</p>", markdown_html(f"# {md_text(hostile)}"), markdown_html("# Second"))
    assert page_title(nb) == hostile
    page = export_html(nb, tmp_path / "r.html").read_text()
    title = _title(page)
    assert "<script>" not in title and "<b>" not in title
    assert title.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("&quot;", '"') == hostile


def test_no_heading_keeps_the_exporters_default(tmp_path: Path) -> None:
    nb = _notebook("<p>no heading here</p>")
    assert page_title(nb) is None
    assert _title(export_html(nb, tmp_path / "r.html").read_text()) != ""
