"""Expected figures derived independently from a result set's own files (import as ``expected``).

Tests that pin a page's text compute every figure they expect here, from levels.csv, with their
own arithmetic and their own rounding (half away from zero, as a reader rounds), never by copying
what the code printed.
"""
from __future__ import annotations

import csv
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path


def levels(folder: Path) -> dict[int, dict[str, Fraction]]:
    """{concurrency: {column: exact value}} of a level-only result set's levels.csv (one row per level)."""
    out: dict[int, dict[str, Fraction]] = {}
    with open(folder / "levels.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            out[int(row["concurrency"])] = {k: Fraction(v) for k, v in row.items()
                                            if k not in ("run_id", "arm", "concurrency", "repeat") and v != ""}
    return out


def delta(arm: Path, base: Path, column: str, c: int) -> Fraction:
    """Δ% of ``column`` at level ``c``: (arm ÷ baseline − 1) × 100, exactly."""
    a, b = levels(arm)[c][column], levels(base)[c][column]
    return (a / b - 1) * 100


def wait_delta(arm: Path, base: Path, c: int) -> Fraction:
    """Δ% of the Little's-law mean request time (C × output tokens ÷ aggregate tok/s) at level c: at the
    same concurrency and output length it is baseline aggregate ÷ arm aggregate − 1."""
    a, b = levels(arm)[c]["output_tok_s"], levels(base)[c]["output_tok_s"]
    return (b / a - 1) * 100


def pct(x: Fraction | float) -> str:
    """'+13%' (whole percent from 9.5 % up, halves away from zero), '+4.2%' below."""
    d = Decimal(x.numerator) / Decimal(x.denominator) if isinstance(x, Fraction) else Decimal(repr(x))
    q = Decimal(1) if abs(d) >= Decimal("9.5") else Decimal("0.1")
    r = d.quantize(q, rounding=ROUND_HALF_UP)
    return f"{'-' if d < 0 else '+'}{abs(r)}%"


def ratio(x: Fraction, places: int = 2) -> str:
    """A ratio with ``places`` decimals, halves away from zero."""
    d = Decimal(x.numerator) / Decimal(x.denominator)
    return str(d.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))
