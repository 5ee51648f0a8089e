"""Every sentence template rendered with every shape of arm name: a plain name, a noun phrase, one that
starts with a verb. Fails on grammar such as "is looks" / "is takes", and on any page claim the
consistency check rejects."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cases import BALANCED, BASE, LATENCY, THROUGHPUT, cross8, plain, scaled
from helpers import write_level_only, write_measured
from specsweep.analyze.compare import compare
from specsweep.decide import DEFAULT_PROFILES, recommend
from specsweep.decide.sentences import _headline, wait_sentence
from specsweep.decide.verdicts import DecisionKind, decision_class
from specsweep.report.consistency import check_page, grammar_errors
from specsweep.report.verdict import verdict_markdown
from specsweep.results.store import load_result_sets

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess

SHAPES = ["mtp", "MTP (tiny)", "Use EAGLE-3 draft"]
PROFILES = (THROUGHPUT, LATENCY, BALANCED, *DEFAULT_PROFILES)

#: level-only cases: (aggregate ratio, per-user ratio) as functions of concurrency
CASES = {
    "cross": (cross8, lambda c: 1.3),                          # gains, then losses; faster per user throughout
    "flat": (lambda c: 1.0, lambda c: 1.01),                   # within noise everywhere
    "win": (lambda c: 1.2, lambda c: 1.2),
    "lose": (lambda c: 0.8, lambda c: 0.8),
    "from": (lambda c: 2 - cross8(c), lambda c: 2 - cross8(c)),  # losses, then gains
    "mixed": (lambda c: 1.15 if c in (1, 2, 16, 32) else 0.85, lambda c: 1.0),
}


def page_text(comp, recs) -> str:
    parts = [verdict_markdown(comp, recs)]
    for rec in recs:
        parts += [rec.to_markdown(), rec.headline, *rec.reasons, *rec.caveats, *rec.next_experiments,
                  *(b.sentence for b in rec.bands)]
    return plain("\n".join(parts))


def test_grammar_check_fails_on_the_reported_sentences() -> None:
    """The check itself: the sentences the issue quotes are caught, their corrections are not."""
    assert grammar_errors("mtp is looks faster once running")
    assert grammar_errors("MTP (tiny) is takes longer end to end")
    assert grammar_errors("Use EAGLE-3 draft is makes no measurable difference")
    assert grammar_errors("it it wins")
    assert not grammar_errors("With mtp, each request looks faster once running")
    assert not grammar_errors("With MTP (tiny), each request takes longer end to end (e2e p99): +12% at 16")
    assert not grammar_errors("At 4 4 requests ran")  # repeated numbers are data, not doubled words


@pytest.mark.parametrize("shape", SHAPES)
def test_every_template_with_every_shape_of_name(tmp_path: Path, shape: str) -> None:
    for case, (fa, fu) in CASES.items():
        base = write_level_only(tmp_path / case / "baseline", "baseline", BASE)
        spec = write_level_only(tmp_path / case / "spec", shape, scaled(fa, fu))
        comp = compare(load_result_sets([base, spec]))
        recs = [recommend(comp, p) for p in PROFILES]
        text = page_text(comp, recs)
        assert not grammar_errors(text), (shape, case, grammar_errors(text))
        assert check_page(comp, recs) == [], (shape, case, [str(v) for v in check_page(comp, recs)])
        for rec in recs:
            if rec.verdict not in ("no_verdict",):
                assert shape in plain(rec.headline) or rec.headline.startswith(("Keep", "No measurable")), rec.headline
        if "once running" in text:
            assert f"With {shape}, each request " in text, text


@pytest.mark.parametrize("shape", SHAPES)
def test_cap_gauge_and_wait_templates_with_every_shape_of_name(tmp_path: Path, shape: str) -> None:
    """Measured arms with a cap, the server's gauges and longer waits: the cap, gauge and wait sentences."""
    fast = {c: {"tokens": 30, "step_s": 0.01, "ttft_s": 0.02} for c in (2, 16, 32)}
    spec = {2: {"tokens": 30, "step_s": 0.007, "ttft_s": 0.02}, 16: {"tokens": 30, "step_s": 0.006, "ttft_s": 0.9},
            32: {"tokens": 30, "step_s": 0.006, "ttft_s": 1.8}}
    for gauge, kv in ((5.0, 0.97), (8.0, 0.5)):  # agrees with the estimate (memory-bound); contradicts it
        folder = tmp_path / f"g{gauge}"
        write_measured(folder / "baseline", "baseline", fast)
        write_measured(folder / "spec", shape, spec, server={"max_running_requests": 8, "mem_fraction_static": 0.7},
                       level_extra={c: {"server_running_max": gauge, "server_kv_usage_max": kv} for c in (16, 32)})
        comp = compare(load_result_sets(folder))
        recs = [recommend(comp, p) for p in PROFILES]
        text = page_text(comp, recs)
        assert "max_running_requests = 8" in text
        assert not grammar_errors(text), (shape, grammar_errors(text))
        assert check_page(comp, recs) == [], [str(v) for v in check_page(comp, recs)]


@pytest.mark.parametrize("shape", SHAPES)
def test_headline_templates_for_every_verdict(shape: str) -> None:
    """Each verdict's headline, rendered directly, with each shape of name."""
    cs = [1, 4, 16, 64]
    for verdict, outcomes, up_to, from_c in (
            ("enable", ["gain"] * 4, None, None), ("enable", ["gain", "gain", "neutral", "neutral"], None, None),
            ("disable", ["neutral"] * 4, None, None), ("disable", ["loss"] * 4, None, None),
            ("disable", ["loss", "neutral", "loss", "loss"], None, None),
            ("enable_up_to", ["gain", "gain", "loss", "loss"], 8.0, None),
            ("enable_from", ["loss", "loss", "gain", "gain"], None, 8.0),
            ("mixed", ["gain", "loss", "gain", "loss"], None, None)):
        judged = pd.DataFrame({"concurrency": cs, "outcome": outcomes, "rule": [None] * 4,
                               "decided_by": ["output_tok_s"] * 4})
        claim = _headline(verdict, shape, "aggregate throughput", judged, "1–64", up_to, from_c, None)  # type: ignore[arg-type]
        assert shape in claim.sentence or claim.sentence.startswith(("Keep", "No measurable")), claim.sentence
        assert not grammar_errors(claim.sentence), claim.sentence
        assert claim.decision == decision_class(verdict, judged)
        assert claim.decision.words(claim.at).replace(" 8", " X") in tuple(DecisionKind)
    for note in ("is faster once running (+30% per-user at 8), but it takes longer end to end (e2e p99): +12% at 16",
                 "looks faster once running (+3.0% per-user at 8; within noise), but it waits longer for its first token"):
        assert not grammar_errors(wait_sentence(shape, note))
        assert wait_sentence(shape, note).startswith(f"With {shape}, each request ")
