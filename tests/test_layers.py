"""The library's floor plan: packages by pipeline stage, each importing only from the layers below it.

Every import in ``lib/specsweep`` counts, at module level or inside a function (a deferred import
still runs, and a circle through one is still a circle). The layers, bottom first, are the ones
docs/layout.md draws; packages in one layer do not import each other.
"""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess

LIB = Path(__file__).resolve().parents[1] / "lib"
PKG = "specsweep"

#: bottom first; ``specsweep`` is the package's own ``__init__`` (its version)
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer) for layer in (
    {"specsweep", "paths", "errors", "runtime", "markup"},
    {"results"},
    {"servers", "engines", "notebooks"},
    {"workloads", "refserver"},
    {"analyze"},
    {"measure", "importers"},
    {"decide"},
    {"report"},
    {"study"},
    {"publish", "cli"},
))
#: at most this many modules directly in ``lib/specsweep`` (``__init__`` included); the rest live in packages
MAX_TOP_MODULES = 8


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the library by dotted name."""
    return {_module_name(p): p for p in sorted((LIB / PKG).rglob("*.py"))}


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The library modules ``node`` imports (a name imported from a package counts as the package)."""
    known = modules()
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == PKG]
    if node.level:
        base = module.split(".")
        if path.name != "__init__.py":
            base.pop()
        base = base[: len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source.split(".")[0] != PKG:
        return []
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]


@cache
def graph() -> dict[str, frozenset[str]]:
    """module -> the library modules it imports anywhere in its body."""
    out = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_targets(name, path, node))
        out[name] = frozenset(t for t in found if t != name)
    return out


def _area(module: str) -> str:
    """The package (or top-level module) a module belongs to: ``specsweep.analyze.compare`` -> ``analyze``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _layer(area: str) -> int:
    for i, layer in enumerate(LAYERS):
        if area in layer:
            return i
    raise AssertionError(f"{area!r} has no layer: add it to LAYERS here and to docs/layout.md")


def layer_violations() -> list[str]:
    """``a -> b`` for every import that goes up a layer or across to another package of the same layer."""
    bad = []
    for module, targets in graph().items():
        mine = _area(module)
        for target in sorted(targets):
            theirs = _area(target)
            if theirs == mine or theirs == PKG:
                continue
            if _layer(theirs) >= _layer(mine):
                bad.append(f"{module} -> {target} ({mine}: layer {_layer(mine)}, {theirs}: layer {_layer(theirs)})")
    return bad


def circles() -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_every_package_and_top_level_module_has_a_layer() -> None:
    for module in modules():
        _layer(_area(module))


def test_no_import_goes_up_a_layer_or_across_one() -> None:
    assert layer_violations() == []


def test_no_import_circle_even_through_a_deferred_import() -> None:
    assert circles() == []


def test_the_top_of_the_package_holds_few_modules() -> None:
    top = sorted(p.name for p in (LIB / PKG).glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_the_scan_sees_deferred_imports() -> None:
    # the scan must count an import inside a function body, or a circle could hide there
    tree = ast.parse("def f():\n    from specsweep.analyze import compare\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _targets("specsweep.results.store", LIB / PKG / "results" / "store.py", node) == [
        "specsweep.analyze.compare"]


def test_every_package_lists_its_public_names_and_nothing_private() -> None:
    for name, path in modules().items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        listed = None
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                listed = node.value
        assert listed is not None, f"{name}: its __init__ has no __all__"
        if isinstance(listed, (ast.List, ast.Tuple)):
            private = [e.value for e in listed.elts if isinstance(e, ast.Constant) and str(e.value).startswith("_")
                       and not str(e.value).startswith("__")]
            assert private == [], f"{name} exports private names: {private}"
