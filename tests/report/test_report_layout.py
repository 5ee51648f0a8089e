"""The report template's layout in a real headless browser: a table wider than the page scrolls
inside its own box, so the page itself never scrolls sideways in a 1400 px window, and that box
fits the window, so its scroll bars are on screen while the table is (not at the foot of a table
thousands of pixels long), with the header row kept in view as it scrolls.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from browser import chromium_dump
from specsweep.report import export_html

#: what the page reports about itself once loaded: the page's width, and the wide table's and its
#: nearest scrolling box's geometry (px)
MEASURE = """<script>
window.addEventListener('load', () => {
  const table = document.querySelector('table.dataframe');
  let box = table.parentElement;
  while (box && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) box = box.parentElement;
  const r = box ? box.getBoundingClientRect() : null;
  const th = table.querySelector('thead th');
  const before = th.getBoundingClientRect().top;
  if (box) box.scrollTop = 400;
  const after = th.getBoundingClientRect().top;
  document.body.setAttribute('data-measure', JSON.stringify({
    page_scroll_width: document.documentElement.scrollWidth,
    window_width: window.innerWidth,
    table_width: table.getBoundingClientRect().width,
    box_right: r ? r.right : null,
    box_client_width: box ? box.clientWidth : null,
    box_scroll_width: box ? box.scrollWidth : null,
    box_height: r ? r.height : null,
    window_height: window.innerHeight,
    table_height: table.getBoundingClientRect().height,
    header_moved_px: after - before,
  }));
});
</script>"""


def wide_notebook() -> nbformat.NotebookNode:
    """A report-like notebook: a heading and a 40-column, 80-row table of long names and numbers."""
    frame = pd.DataFrame({f"column with a long name {i}": [123456.789 * (i + 1) + r for r in range(80)]
                          for i in range(40)})
    heading = nbformat.v4.new_output("display_data", data={"text/html": "<h1>Wide table</h1>"})
    table = nbformat.v4.new_output("display_data", data={"text/html": frame.to_html(border=0)})
    cells = [nbformat.v4.new_code_cell("", outputs=[heading]), nbformat.v4.new_code_cell("", outputs=[table])]
    return nbformat.v4.new_notebook(cells=cells)


def measure(html: Path, tmp_path: Path, width: int = 1400) -> dict:
    page = html.read_text(encoding="utf-8")
    end = page.rindex("</body>")
    page = page[:end] + MEASURE + page[end:]
    probe = tmp_path / "probe.html"
    probe.write_text(page, encoding="utf-8")
    dom = chromium_dump(probe.resolve().as_uri(), tmp_path, f"--window-size={width},900", budget_ms=10000)
    m = re.search(r"data-measure=\"([^\"]*)\"", dom)
    assert m, "the page did not report its layout"
    return json.loads(m.group(1).replace("&quot;", '"'))


@pytest.mark.browser
def test_wide_tables_scroll_inside_their_box(tmp_path: Path) -> None:
    got = measure(export_html(wide_notebook(), tmp_path / "wide.html"), tmp_path)
    assert got["table_width"] > got["window_width"], got  # the table really is wider than the page
    assert got["page_scroll_width"] <= got["window_width"], f"the page scrolls sideways: {got}"
    assert got["box_scroll_width"] is not None, f"no box around the table scrolls: {got}"
    assert got["box_scroll_width"] > got["box_client_width"], got  # its box scrolls …
    assert got["box_right"] <= got["window_width"], got  # … and fits in the window,
    assert got["table_height"] > got["window_height"], got
    assert got["box_height"] <= got["window_height"], f"the table's scroll bar is off screen: {got}"
    assert abs(got["header_moved_px"]) < 1, f"the header row scrolled away: {got}"
