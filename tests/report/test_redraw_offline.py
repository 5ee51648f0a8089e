"""docs/reading-a-report.md's redraw snippet, run whole in a real kernel as a reader runs it: its
chart loads nothing from the network (the chart library is inlined into the notebook)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat

from helpers import ROOT
from specsweep.notebooks.execute import execute_notebook

#: where a notebook would fetch a chart library from
NETWORK = re.compile(r"(cdn\.jsdelivr|cdnjs|unpkg\.com|googleapis|require\.js|<script[^>]+src=)", re.I)


def test_the_redraw_snippet_renders_offline_in_a_notebook(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "reading-a-report.md").read_text()
    m = re.search(r"<!-- redraw-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert m
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell(m.group(1))]
    source, out = tmp_path / "snippet.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, str(source))
    execute_notebook(source, out, {}, cwd=ROOT)
    outputs = nbformat.read(str(out), as_version=4).cells[0].outputs
    html = [str(o.get("data", {}).get("text/html", "")) for o in outputs]
    assert any("vegaEmbed" in h for h in html), json.dumps(outputs)[:2000]  # the chart is drawn in the page
    assert any("window.vegaEmbed" in h for h in html)  # ... by the library inlined before it
    for h in html:
        assert not NETWORK.search(h), NETWORK.search(h)
