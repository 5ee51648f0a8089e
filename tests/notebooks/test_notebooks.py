"""Hygiene: every committed notebook has no outputs and exactly one cell tagged 'parameters'; the documented
papermill commands write where git ignores."""
from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert {p.name for p in NOTEBOOKS} >= {"report.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean(path: Path) -> None:
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") for c in code), f"{path.name}: commit notebooks without outputs"
    assert all(c.get("execution_count") is None for c in code), f"{path.name}: has execution counts"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged 'parameters'"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_parameters_cell_documents_each_parameter(path: Path) -> None:
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    tree = ast.parse(cell.source)
    names = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)]
    assert names, "parameters cell defines nothing"
    lines = {line.split("=")[0].strip(): line for line in cell.source.splitlines() if "=" in line and not line.startswith("#")}
    for name in names:
        assert "# type:" in lines[name], f"{path.name}: parameter '{name}' needs a '# type: T  help' comment"


def test_the_documented_papermill_commands_write_only_where_git_ignores() -> None:
    """README's and the docs' papermill commands, run from the repository root, leave ``git status`` clean:
    each executed notebook goes to an ignored path."""
    import re
    import subprocess

    root = NOTEBOOKS[0].parents[1]
    texts = [root / "README.md", *sorted((root / "docs").glob("*.md")), *NOTEBOOKS]
    outputs = {(p.name, m) for p in texts for m in re.findall(r"papermill notebooks/\w+\.ipynb (\S+\.ipynb)", p.read_text())}
    assert len(outputs) >= 3
    for where, out in sorted(outputs):
        ignored = subprocess.run(["git", "check-ignore", "-q", out], cwd=root).returncode == 0
        assert ignored, f"{where}: papermill writes {out}, which git does not ignore"
