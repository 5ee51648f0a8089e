"""Where to measure next: untested levels where a fitted delta's sign is least certain."""
from __future__ import annotations

import math
from collections.abc import Sequence

from specsweep.analyze.compare import Comparison


def _candidate_levels(tested: Sequence[int], lo: float, hi: float) -> list[int]:
    """Unmeasured integer levels between ``lo`` and ``hi``: geometric midpoints and powers of two."""
    out = set()
    for a, b in zip(tested, tested[1:]):
        for k in (1, 2, 3):
            out.add(int(round(2 ** (math.log2(a) + k * (math.log2(b) - math.log2(a)) / 4))))
    out |= {2 ** k for k in range(0, 14)}
    return sorted(c for c in out if lo < c < hi and c not in set(tested))


def _where_uncertain(comp: Comparison, arm: str, metric: str, lo: float, hi: float, n: int = 3) -> list[int]:
    """Up to ``n`` unmeasured levels in (lo, hi) where the fitted curve's sign is least certain (|fit| / se smallest)."""
    curve = comp.curve(arm, metric)
    cands = _candidate_levels(comp.shared_levels(arm), lo, hi)
    if curve is None or not cands:
        return cands[:n]
    def score(c: int) -> float:
        f, se = curve.predict(c)
        return abs(f) / se if se > 0 else math.inf
    return sorted(sorted(cands, key=score)[:n])
