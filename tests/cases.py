"""Synthetic arm pairs with known answers, shared by the comparison, recommendation and page tests.

Level-only result sets written to a temporary folder: a seed-like baseline and arms that are the
baseline times a ratio per level, so the true delta at every level is known in advance.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from helpers import write_level_only
from specsweep.markup import markdown_html
from specsweep.results.store import load_result_sets

LEVELS = (1, 2, 4, 8, 16, 32, 64)
#: a seed-like baseline: aggregate 100 × C^0.8 tok/s, per-request 100 × C^−0.25 tok/s
BASE = {c: (100.0 * c ** 0.8, 100.0 * c ** -0.25) for c in LEVELS}
Ratio = float | Callable[[int], float]


def study(tmp_path: Path, base: dict[int, tuple[float, float]] | None = None, **arms: dict[int, tuple[float, float]]) -> list:
    sets = [write_level_only(tmp_path / "baseline", "baseline", base or BASE)]
    sets += [write_level_only(tmp_path / name, name, rows) for name, rows in arms.items()]
    return load_result_sets(sets)


def scaled(agg: Ratio, user: Ratio | None = None, levels: tuple[int, ...] = LEVELS) -> dict[int, tuple[float, float]]:
    """The baseline times a ratio (a constant or a function of concurrency) on each figure."""
    user = agg if user is None else user
    f = (lambda r: r if callable(r) else (lambda c: r))
    fa, fu = f(agg), f(user)
    return {c: (BASE[c][0] * fa(c), BASE[c][1] * fu(c)) for c in levels}


def cross8(c: int) -> float:
    """+10% at 4, 0 at 8, −10% at 16: −10% per doubling."""
    return 1.0 - 0.10 * (math.log2(c) - 3)


THROUGHPUT = {"name": "batch", "objective": "throughput"}
LATENCY = {"name": "agentic", "objective": "latency"}
BALANCED = {"name": "both", "objective": "balanced"}


def plain(md: str) -> str:
    """Markdown as the reader sees it (escapes resolved, tags stripped)."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", markdown_html(md)))
