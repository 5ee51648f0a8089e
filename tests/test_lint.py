"""Functions stay small: none over the complexity limit or MAX_FUNCTION_LINES lines outside the allow-lists
in pyproject.toml's ``[tool.specsweep.lint]``, and those lists only shrink (an entry that no longer
needs its place fails too, so that it is taken off)."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib" / "specsweep"
MAX_FUNCTION_LINES = 80


def _allowed(key: str) -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["specsweep"]["lint"][key])


def _ruff() -> list[str]:
    if shutil.which("ruff", path=str(Path(sys.executable).parent)):
        return [sys.executable, "-m", "ruff"]
    if ci := os.environ.get("CI"):
        pytest.fail(f"ruff is not installed (CI={ci}): pip install -e '.[lint]'")
    pytest.skip("ruff is not installed here: pip install -e '.[lint]' (or make lint)")


def too_complex() -> set[str]:
    """``<path under specsweep>:<function>`` for every function over ruff's mccabe limit."""
    out = subprocess.run([*_ruff(), "check", "--select", "C901", "--output-format", "json", "--exit-zero",
                          str(LIB)], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    found = set()
    for item in json.loads(out):
        name = item["message"].split("`")[1]
        found.add(f"{Path(item['filename']).resolve().relative_to(LIB).as_posix()}:{name}")
    return found


def too_long() -> set[str]:
    """``<path under specsweep>:<function>`` for every function longer than MAX_FUNCTION_LINES lines."""
    found = set()
    for path in LIB.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:  # type: ignore[operator]
                found.add(f"{path.relative_to(LIB).as_posix()}:{node.name}")
    return found


def test_no_function_over_the_complexity_limit_outside_the_allow_list() -> None:
    found, allowed = too_complex(), _allowed("complexity-allow")
    assert sorted(found - allowed) == [], "split these (or, at worst, allow them in pyproject.toml)"
    assert sorted(allowed - found) == [], "these are simple enough now: take them off complexity-allow"


def test_no_function_over_the_length_limit_outside_the_allow_list() -> None:
    found, allowed = too_long(), _allowed("length-allow")
    assert sorted(found - allowed) == [], f"split these: over {MAX_FUNCTION_LINES} lines"
    assert sorted(allowed - found) == [], "these are short enough now: take them off length-allow"
