"""The first screen (decision table, verdict prose) and the Markdown summary, built from the claims:
decision classes for known cases, figures derived from the data, untrusted names escaped."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

import expected
from cases import BASE, THROUGHPUT, cross8, scaled
from helpers import write_level_only
from specsweep.analyze.compare import compare
from specsweep.decide import DEFAULT_PROFILES, recommend
from specsweep.markup import markdown_html
from specsweep.report.decision import decision_markdown, decision_rows, first_screen_html, stability, verdict_prose
from specsweep.report.summary import SUMMARY_MIME, summary_markdown, write_summary
from specsweep.results.store import load_result_sets

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess

PAYLOAD = "<script>alert(1)</script> | **x** [a](javascript:y)"


def two_arms(tmp: Path, rows: dict, label: str = "SPEC", name: str = "spec"):
    base = write_level_only(tmp / "baseline", "baseline", BASE)
    spec = write_level_only(tmp / "spec", name, rows, label=label)
    return compare(load_result_sets([base, spec])), base, spec


@pytest.mark.parametrize("case, ratio, decision", [
    ("win", 1.2, "enable"),
    ("lose", 0.8, "keep off"),
    ("flat", 1.0, "no measurable difference"),
    ("cross", cross8, "enable up to"),
    ("from", lambda c: 2 - cross8(c), "enable from"),
])
def test_decision_classes(tmp_path: Path, case: str, ratio, decision: str) -> None:
    comp, _, _ = two_arms(tmp_path, scaled(ratio))
    (row,) = decision_rows(comp, [recommend(comp, THROUGHPUT)])
    assert row.decision.startswith(decision), row
    assert row.tested == "1–64"
    if decision == "enable up to":
        rec = recommend(comp, THROUGHPUT)
        assert row.decision == f"enable up to {rec.up_to_concurrency:.0f}"
        assert row.enable_at == f"1 to about {rec.up_to_concurrency:.0f}"
    if decision in ("keep off", "no measurable difference"):
        assert row.enable_at == "—"


def test_gains_and_losses_interleaved_or_no_verdict_are_not_established() -> None:
    import pandas as pd

    from specsweep.decide.verdicts import decision_class

    judged = pd.DataFrame({"concurrency": [1, 4, 16, 64], "outcome": ["gain", "loss", "gain", "loss"]})
    assert decision_class("mixed", judged) == "not established"
    assert decision_class("no_verdict", None) == "not established"


def test_the_deciding_figures_are_the_datas(tmp_path: Path) -> None:
    comp, base, spec = two_arms(tmp_path, scaled(1.2))
    rec = recommend(comp, THROUGHPUT)
    (row,) = decision_rows(comp, [rec])
    # the weakest gain: every level is +20% as measured (1.2 × the baseline), so it reads +20% with its band
    assert row.deciding.startswith("aggregate throughput: " + expected.pct(expected.delta(spec, base, "output_tok_s", 1)))
    assert "(weakest gain)" in row.deciding and row.stability.startswith("7 of 7 levels credible")
    assert "drift not excluded" in row.stability  # nothing guards these arms against drift: the first screen says so
    assert stability(comp).startswith("one run per level; noise assumed (3% per run)")
    assert "arms measured one after the other" in stability(comp)


def test_a_neutral_level_whose_band_excludes_zero_says_why_not_that_it_is_not_credible(tmp_path: Path) -> None:
    """Both arms miss a 60 tok/s per-user SLO at every level from 8 (the baseline's per-user speed is
    100 × C^−0.25, 59.5 at 8), the arm 30% slower everywhere: each level is neutral by the SLO rule
    while its band lies far below 0, so the first screen names the rule, not a band that is 'not credible'."""
    comp, _, _ = two_arms(tmp_path, scaled(0.7))
    slo = {"name": "slo", "objective": "throughput", "min_user_tok_s": 60, "concurrency_min": 8}
    rec = recommend(comp, slo)
    assert set(rec.levels["rule"]) == {"both break an SLO"}  # the premise: every level neutral by the SLO
    (row,) = decision_rows(comp, [rec])
    assert row.kind.value == "no measurable difference", row
    assert row.deciding.startswith("aggregate throughput: -30% [-3"), row  # a band clear of 0
    assert "not credible" not in row.deciding, row
    assert "(largest Δ, both arms miss the SLO here)" in row.deciding, row


def test_untrusted_names_are_escaped_on_the_screen_and_in_the_summary(tmp_path: Path) -> None:
    comp, base, spec = two_arms(tmp_path, scaled(1.2), label=PAYLOAD, name="mtp*1")
    recs = [recommend(comp, {**p, "name": p["name"] + " <b>|</b>"}) for p in DEFAULT_PROFILES]
    for md in (decision_markdown(comp, recs), summary_markdown(comp, recs, title=PAYLOAD), verdict_prose(comp, recs)):
        html = markdown_html(md)
        assert "<script>" not in html and "<b>" not in html and "javascript:" not in html.replace("javascript:y)", "")
    screen = first_screen_html(comp, recs)
    assert "<script>alert" not in screen and "<b>|</b>" not in screen
    summary = summary_markdown(comp, recs, title=PAYLOAD)
    # every table row keeps its column count: the | in a name is escaped
    table = [ln for ln in decision_markdown(comp, recs).splitlines() if ln.startswith("|")]
    assert len({ln.replace("\\|", "").count("|") for ln in table}) == 1
    assert "mtp\\*1" in summary and "\\<script\\>" in summary


def test_summary_key_numbers_come_from_the_data(tmp_path: Path) -> None:
    comp, base, spec = two_arms(tmp_path, scaled(cross8))
    recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
    summary = summary_markdown(comp, recs, title="t", page="t.html")
    own = expected.levels(base)
    arm = expected.levels(spec)
    for c in (1, 4, 16, 64):
        b, a = own[c]["output_tok_s"], arm[c]["output_tok_s"]
        d = expected.pct((a / b - 1) * 100)
        want = f"| {c} | {round(float(b)):,} | {round(float(a)):,} | {d.replace('+', chr(92) + '+')} "
        assert want in summary, (want, summary)
    assert summary.count("| profile | decision |") == 1
    assert "the full report: t.html" in summary


def test_write_summary_takes_it_from_the_executed_notebook_and_drops_it_there(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("summary")
    cell.outputs = [nbformat.v4.new_output("display_data", data={SUMMARY_MIME: "## title\n"})]
    nb.cells = [cell]
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, str(path))
    out = write_summary(path, tmp_path / "x.md")
    assert out is not None and out.read_text() == "## title\n"
    assert nbformat.read(str(path), as_version=4).cells[0].outputs == []  # the page does not carry it
    # a notebook without a summary leaves no stale one beside the page
    assert write_summary(path, tmp_path / "x.md") is None and not (tmp_path / "x.md").exists()


def test_each_line_is_printed_once_across_the_profile_sections(tmp_path: Path) -> None:
    """Lines every profile carries are said once for all; a line two carry is printed under the first only."""
    from specsweep.report.verdict import profile_sections, shared_lines

    comp, _, _ = two_arms(tmp_path, scaled(cross8, 1.3))
    recs = [recommend(comp, p) for p in (THROUGHPUT, {"name": "thr2", "objective": "throughput", "concurrency_max": 16},
                                         {"name": "lat", "objective": "latency"})]
    sections = profile_sections(comp, recs)
    shared = set(shared_lines(recs))
    for line in {x for r in recs for x in (*r.reasons, *r.caveats, *r.next_experiments)} - shared:
        assert sum(f"- {line}" in s or f". {line}" in s for s in sections) == 1, line
    assert any("given under batch above" in s for s in sections[1:])
