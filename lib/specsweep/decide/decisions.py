"""The decision table of a comparison: per profile, the decision class and the arm chosen, and
whether two tables (two measurements of one study, or a fresh ``make reports`` against the
committed one) reach the same decisions.

Decision classes, from the recommendation the report prints (:func:`specsweep.decide.recommend`):

- ``enable`` — speculation wins somewhere in the profile's range and loses nowhere;
- ``enable up to X`` / ``enable from X`` — it wins below (above) a crossover X and loses beyond;
  the table gives X and the two tested levels it lies between (its *bracket*);
- ``keep off`` — it loses somewhere and wins nowhere;
- ``no measurable difference`` — neither a win nor a loss at any level;
- ``not established`` — wins and losses interleave (``mixed``), or no verdict could be given.

A row is the recommendation the page prints (:func:`row_of`), not a second judgement: its class,
arm, *tied* arms (candidates not credibly different from it, :mod:`specsweep.decide.ties`; the
arm named is the simplest of them) and range are the first screen's, the Markdown summary's and
the console's. Two tables agree when every (report, profile) has the same class, the same arm, the
same tie set and the same range — the bracket of X (the tested levels it lies between); X itself
moves with noise inside its bracket. A change of the recommended arm inside a tie, or a tie
appearing or going, is a difference.

``python -m specsweep.decide.decisions RESULT_SET_OR_STUDY_DIR... [--baseline B] [--json]`` prints the
table of a comparison; ``--against FILE.json`` also compares it with a saved table (exit 1 on a
difference). :mod:`specsweep.publish` writes the published reports' table to
``reports/decisions.json`` and checks a fresh run against it with ``--decisions``.

That file holds ``{report name: [DecisionRow, ...]}``; :func:`read_decisions` and
:func:`write_decisions` are its only reader and writer, and :class:`DecisionRow` holds the defaults
for fields an older file lacks.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, field
from pathlib import Path
from typing import Any, cast

from pydantic import TypeAdapter
from pydantic.dataclasses import dataclass

from specsweep.analyze.compare import Comparison, compare
from specsweep.decide import DEFAULT_PROFILES, parse_profile, recommend
from specsweep.decide.decision import judgement
from specsweep.decide.profiles import Profile
from specsweep.decide.result import Recommendation
from specsweep.decide.text import tested_bracket
from specsweep.decide.verdicts import DecisionKind, Outcome, Verdict
from specsweep.results.store import load_result_sets

#: the decision tables' file in a reports folder
DECISIONS_FILE = "decisions.json"


@dataclass(frozen=True)
class DecisionRow:
    """One profile's decision, a row of ``decisions.json`` (validated: ``decision`` is a
    :class:`DecisionKind`, lists become tuples). ``x``: the crossover (concurrent requests) of
    ``enable up to/from X``, ``bracket``: the tested levels it lies between; ``tied``: candidate arms
    not credibly different from ``arm`` (the recommendation's tie set); ``outcomes``: (concurrency,
    outcome) per judged level."""

    profile: str
    decision: DecisionKind
    arm: str | None = None
    x: float | None = None
    bracket: tuple[int, int] | None = None
    tied: tuple[str, ...] = field(default_factory=tuple)
    outcomes: tuple[tuple[int, Outcome], ...] = field(default_factory=tuple)
    #: the estimated probability (0–1) that a rerun of the same design gives another class or an arm
    #: outside the tie, and of how many resampled reruns (:mod:`specsweep.decide.flip`); a statistic
    #: about the decision, not part of it: :func:`same_decision` ignores both
    flip_chance: float | None = None
    flip_resamples: int | None = None

    def text(self) -> str:
        """The decision in words, e.g. ``enable up to 49 (between 32 and 64)``."""
        where = f" (between {self.bracket[0]} and {self.bracket[1]})" if self.bracket and self.x is not None else ""
        return self.decision.words(self.x) + where

    def arm_text(self) -> str:
        """The arm as every place prints it: its short name and the arms tied with it ('—' for none)."""
        if not self.arm:
            return "—"
        return self.arm + (f" (tied with {', '.join(self.tied)})" if self.tied else "")


def _bracket(levels: Sequence[int], x: float | None) -> tuple[int, int] | None:
    return None if x is None or not levels else tested_bracket(levels, x)


def row_of(rec: Recommendation) -> DecisionRow:
    """The decision row of a recommendation: the same class, arm, tie set and range the page prints."""
    arm = rec.judged_arm
    lv = rec.levels[rec.levels["arm"] == arm] if arm is not None and not rec.levels.empty else rec.levels.iloc[0:0]
    outcomes = cast(tuple[tuple[int, Outcome], ...],
                    tuple((int(c), str(o)) for c, o in zip(lv.get("concurrency", []), lv.get("outcome", []))))
    x = rec.decision_at
    flip = rec.flip
    return DecisionRow(rec.profile.name, rec.decision, rec.arm, x, _bracket([c for c, _ in outcomes], x),
                       tuple(rec.tied_with), outcomes, None if flip is None else flip.chance,
                       None if flip is None else flip.resamples)


def decided_row(comp: Comparison, profile: dict[str, Any] | Profile) -> DecisionRow:
    """The row :func:`decision_row` gives, from the decision alone (no sentences: a fraction of the
    cost, for re-deciding many resampled studies); the same class, arm, tie set, range and outcomes."""
    d = judgement(comp, profile)
    if isinstance(d, Recommendation):
        return row_of(d)
    x = d.up_to if d.up_to is not None else d.from_c
    outcomes = cast(tuple[tuple[int, Outcome], ...],
                    tuple((int(c), str(o)) for c, o in zip(d.judged["concurrency"], d.judged["outcome"])))
    return DecisionRow(parse_profile(profile).name, d.decision, None if d.verdict == Verdict.DISABLE else d.arm, x,
                       _bracket([c for c, _ in outcomes], x), tuple(d.tied_with), outcomes)


def decision_row(comp: Comparison, profile: dict[str, Any]) -> DecisionRow:
    """The decision of one profile, as the report's recommendation makes it."""
    return row_of(recommend(comp, parse_profile(profile)))


def decision_table(comp: Comparison, profiles: Sequence[dict[str, Any]] | None = None) -> list[DecisionRow]:
    """One row per profile (default: the report's default profiles)."""
    return [decision_row(comp, p) for p in (profiles if profiles is not None else DEFAULT_PROFILES)]


def table_of(paths: Sequence[str | Path], baseline: str = "baseline",
             profiles: Sequence[dict[str, Any]] | None = None) -> list[DecisionRow]:
    """The decision table of result sets (or study folders), compared the way the report compares them
    (:func:`specsweep.decide.flip.table_with_flips` adds each row's flip chance)."""
    sets = load_result_sets([str(p) for p in paths])
    return decision_table(compare(sets, baseline=baseline, assumed_noise_pct=3.0), profiles)


def same_decision(a: DecisionRow, b: DecisionRow) -> bool:
    """Whether two rows of one profile make the same decision: the same class, arm, tie set and
    bracket of the crossover X (X itself may move inside it)."""
    return (a.decision, a.arm, sorted(a.tied), a.bracket) == (b.decision, b.arm, sorted(b.tied), b.bracket)


def differences(a: dict[str, list[DecisionRow]], b: dict[str, list[DecisionRow]]) -> list[str]:
    """What differs between two tables keyed by report name (empty: the same decisions): each
    profile whose class, arm, tie set or crossover bracket changed, with both sides."""
    out = []
    for report in sorted(set(a) | set(b)):
        rows_a = {r.profile: r for r in a.get(report, [])}
        rows_b = {r.profile: r for r in b.get(report, [])}
        for profile in sorted(set(rows_a) | set(rows_b)):
            ra, rb = rows_a.get(profile), rows_b.get(profile)
            if ra is None or rb is None:
                out.append(f"{report} / {profile}: only in {'the first' if rb is None else 'the second'} table")
            elif not same_decision(ra, rb):
                out.append(f"{report} / {profile}: {ra.text()} ({ra.arm_text()}) vs {rb.text()} ({rb.arm_text()})")
    return out


_ROWS: TypeAdapter[list[DecisionRow]] = TypeAdapter(list[DecisionRow])


#: optional fields left out of a row's JSON where unset (so a table without them reads as before)
_OPTIONAL: tuple[str, ...] = ("flip_chance", "flip_resamples")


def to_json(rows: Sequence[DecisionRow]) -> list[dict[str, Any]]:
    """A table as JSON-ready data (decisions as their words, tuples as lists once dumped; the flip
    chance only where it was estimated)."""
    return [{k: v for k, v in asdict(r).items() if not (k in _OPTIONAL and v is None)} for r in rows]


def from_json(data: Sequence[dict[str, Any]]) -> list[DecisionRow]:
    """A table from JSON data, validated; raises ``pydantic.ValidationError`` naming the bad field."""
    return _ROWS.validate_python(data)


def read_decisions(path: Path) -> dict[str, list[DecisionRow]]:
    """The decision tables saved in ``path`` by report name (empty when there is no such file)."""
    if not path.is_file():
        return {}
    return {k: from_json(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def write_decisions(path: Path, tables: dict[str, list[DecisionRow]]) -> None:
    """Write decision tables by report name to ``path`` (one-space indents, a final newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: to_json(v) for k, v in tables.items()}, indent=1) + "\n", encoding="utf-8")


def markdown_table(tables: dict[str, list[DecisionRow]]) -> str:
    """The tables as one Markdown table: report, profile, decision, arm (tied arms), outcome per level."""
    lines = ["| report | profile | decision | arm (tied) | outcome per level |", "|---|---|---|---|---|"]
    for report, rows in tables.items():
        for r in rows:
            levels = " ".join(f"{c}:{o}" for c, o in r.outcomes)
            lines.append(f"| {report} | {r.profile} | {r.text()} | {r.arm_text()} | {levels} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specsweep.decide.decisions", description=__doc__.split("\n\n")[0])
    parser.add_argument("result_sets", nargs="+", help="result-set or study folders (one comparison)")
    parser.add_argument("--baseline", default="baseline")
    parser.add_argument("--name", default="comparison", help="the report name the table is filed under")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.add_argument("--against", help="a saved table (JSON, as publish writes): exit 1 where the decisions differ")
    args = parser.parse_args(argv)
    tables = {args.name: table_of(args.result_sets, args.baseline)}
    print(json.dumps({k: to_json(v) for k, v in tables.items()}, indent=2) if args.json else markdown_table(tables))
    if args.against:
        saved = {k: v for k, v in read_decisions(Path(args.against)).items() if k == args.name}
        diff = differences(saved, tables)
        print("\n".join(["different decisions:", *diff]) if diff else "same decisions as " + args.against)
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
