"""The consistency check: it passes on the published comparisons and on held-out draws from several
noise models, and it catches each kind of contradiction the reports used to print."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from cases import BASE, THROUGHPUT, scaled
from helpers import ROOT, SEED, write_level_only
from specsweep.analyze.compare import compare
from specsweep.decide import DEFAULT_PROFILES, draws, recommend
from specsweep.decide.claims import Claim
from specsweep.report.consistency import ConsistencyError, advice_error, assert_consistent, check_claim, check_page
from specsweep.results.store import load_result_sets

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


@pytest.fixture(scope="module")
def seed():
    comp = compare(load_result_sets(SEED))
    return comp, [recommend(comp, p) for p in DEFAULT_PROFILES]


def rules(violations) -> set[str]:
    return {v.rule for v in violations}


def test_the_seed_page_is_consistent(seed) -> None:
    comp, recs = seed
    assert check_page(comp, recs) == []
    assert_consistent(comp, recs)
    kinds = {c.kind for r in recs for c in r.claims}
    assert {"verdict", "gain", "loss", "no-difference", "crossover", "cap", "advice", "experiment"} <= kinds


@pytest.mark.parametrize("case", list(draws.CASES))
@pytest.mark.parametrize("form", list(draws.SEEDS))
def test_held_out_draws_are_consistent(case: str, form: str) -> None:
    """Fresh pairs from the stated noise model (3 runs per level or one averaged row): no violation."""
    rng = np.random.default_rng(1000 + len(case) * 7 + len(form))
    for _ in range(3):
        comp = compare(draws.draw_pair(case, form, rng), n_boot=0)
        recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
        assert check_page(comp, recs) == [], [str(v) for v in check_page(comp, recs)]


@pytest.mark.parametrize("case", list(draws.HARD_CASES))
def test_harder_noise_models_are_consistent(case: str) -> None:
    """Drift, 2x noise, growing noise, sentinels, control arms, a latency crossover: no violation."""
    rng = np.random.default_rng(77)
    comp = compare(draws.draw_study(case, rng), n_boot=0)
    recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
    assert check_page(comp, recs) == [], [str(v) for v in check_page(comp, recs)]


def test_it_catches_a_gauge_that_agrees_against_its_numbers(seed) -> None:
    comp, _ = seed
    bad = Claim(kind="gauge", arm="mtp", metric="server_running_max", levels=(64, 128), values=(48.0,),
                sentence="The server's own gauge agrees: mtp ran up to its cap of 48 requests at once at 64, 128.",
                extra={"gauge_max": 48, "cap": 48, "estimate_below": True})
    assert rules(check_claim(comp, bad)) == {"agreement"}
    good = dataclasses.replace(bad, sentence=bad.sentence.replace("agrees", "disagrees with that estimate"))
    assert check_claim(comp, good) == []


def test_it_catches_a_within_noise_level_listed_as_a_gain(seed) -> None:
    comp, _ = seed
    d = comp.delta_rows("mtp", "output_tok_s")
    # at 1 the seed's +12.5% has a band that spans 0 (one run, 3% assumed noise): not a gain
    assert d[1]["ci_low_pct"] < 0 < d[1]["ci_high_pct"]
    bad = Claim(kind="gain", arm="mtp", metric="output_tok_s", levels=(1, 4), values=(12.5, 40.0), credible=True,
                sentence="is faster once running (+13% at 1 (within noise), +40% at 4)")
    assert rules(check_claim(comp, bad)) == {"credibility"}
    said_as_gain = Claim(kind="no-difference", arm="mtp", metric="output_tok_s", levels=(1,), values=(12.5,),
                         sentence="is faster once running (+13% per-user at 1)")
    assert rules(check_claim(comp, said_as_gain)) == {"credibility"}
    assert check_claim(comp, dataclasses.replace(said_as_gain, sentence="is not credibly faster at 1 (+13%, within noise)")) == []


def test_it_catches_signs_grammar_and_levels_not_tested(seed) -> None:
    comp, _ = seed
    wrong_sign = Claim(kind="gain", arm="mtp", metric="output_tok_s", levels=(64,), values=(-32.5,), credible=True,
                       sentence="credibly raises aggregate output throughput (-32% at 64)")
    assert "sign" in rules(check_claim(comp, wrong_sign))
    assert rules(check_claim(comp, Claim(kind="cap", arm="mtp", sentence="mtp is looks faster"))) == {"grammar"}
    untested = Claim(kind="no-difference", arm="mtp", metric="output_tok_s", levels=(8,), values=(1.0,),
                     sentence="does not credibly change it (+1.0% at 8)")
    assert rules(check_claim(comp, untested)) == {"levels"}


def test_it_catches_a_point_between_levels_without_its_bounds(seed) -> None:
    comp, _ = seed
    unbounded = Claim(kind="verdict", arm="mtp", metric="output_tok_s", at=8.4, decision="enable up to 8",
                      sentence="Enable mtp up to about 8 concurrent requests.")
    assert rules(check_claim(comp, unbounded)) == {"levels"}
    unnamed = dataclasses.replace(unbounded, bounds=(4, 16))
    assert rules(check_claim(comp, unnamed)) == {"levels"}
    named = dataclasses.replace(unnamed, sentence="Enable mtp up to about 8 concurrent requests, between the tested 4 and 16.")
    assert check_claim(comp, named) == []
    wrong = dataclasses.replace(named, bounds=(16, 32))
    assert rules(check_claim(comp, wrong)) == {"levels"}


def test_it_catches_a_deciding_metric_not_shown_and_an_experiment_off_target(seed) -> None:
    comp, recs = seed
    lat = recs[0]
    assert lat.profile.objective == "latency"
    hidden = dataclasses.replace(lat, claims=[dataclasses.replace(lat.claims[0], metric="e2e_p99_s")])
    assert "deciding-metric" in rules(check_page(comp, [hidden]))
    off = Claim(kind="experiment", arm="mtp", metric="output_tok_s", levels=(27, 38, 45), profile=lat.profile.name,
                sentence="Measure at 27, 38, 45 to pin down the crossover of aggregate throughput.")
    assert rules(check_page(comp, [dataclasses.replace(lat, claims=[off])])) == {"experiment-metric"}
    on = dataclasses.replace(off, metric="e2e_mean_est_s")
    assert check_page(comp, [dataclasses.replace(lat, claims=[on])]) == []
    with pytest.raises(ConsistencyError, match=r"experiment-metric"):
        assert_consistent(comp, [dataclasses.replace(lat, claims=[off])])


def test_advice_is_checked_with_the_servers_own_flags() -> None:
    assert "rejects" in advice_error("refserver", ("--mem-fraction-static", "0.8"))
    assert advice_error("refserver", ("--set", "speculative.mem_fraction_static=0.80")) is None
    assert "rejects" in advice_error("refserver", ("--set", "speculative.no_such_key=1"))
    assert advice_error("refserver", ("--max-running-requests", "128")) is None
    assert advice_error("sglang", ("--mem-fraction-static", "0.8")) is None
    assert "sglang has no --max-num-seqs" in advice_error("sglang", ("--max-num-seqs", "128"))
    assert advice_error("vllm", ("--max-num-seqs", "128")) is None


def test_a_crossover_has_one_bracket_everywhere(tmp_path: Path) -> None:
    """A crossover near 9 between a credible gain at 4 and a credible loss at 16, with a neutral 8 between:
    the crossover sentence, the headline, the prose, the experiment and decisions.json all name the
    tested levels just around X (8 and 16), one bracket, never '4 and 16' beside it; a claim that
    brackets X with a tested level inside fails the check."""
    import re

    from specsweep.decide.decisions import row_of
    from specsweep.report.decision import verdict_prose

    base = write_level_only(tmp_path / "baseline", "baseline", BASE)
    # −12 % per doubling through 0 at 2^3.4 ≈ 10.6: +5 % at 8 (neutral), −7 % at 16
    spec = write_level_only(tmp_path / "spec", "spec", scaled(lambda c: 1 - 0.12 * (math.log2(c) - 3.4)))
    comp = compare(load_result_sets([base, spec]))
    rec = recommend(comp, THROUGHPUT)
    row = row_of(rec)
    assert row.decision == "enable up to X" and row.bracket == (8, 16), row
    assert dict(row.outcomes)[8] == "neutral" and dict(row.outcomes)[4] == "gain"
    lo, hi = row.bracket
    texts = [*rec.reasons, *rec.next_experiments, rec.headline, verdict_prose(comp, [rec])]
    named = {tuple(map(int, m)) for t in texts for m in re.findall(r"between the tested (\d+) and (\d+)", t)}
    assert named == {(lo, hi)}, (named, texts)
    assert check_page(comp, [rec]) == []
    cross = next(c for c in rec.claims if c.kind == "crossover")
    wide = dataclasses.replace(cross, bounds=(4, 16), sentence="crosses 0 between the tested 4 and 16")
    assert any("between them" in v.detail for v in check_claim(comp, wide))


@pytest.mark.parametrize("page", sorted((ROOT / "reports").glob("*.html")), ids=lambda p: p.stem)
def test_no_published_page_repeats_a_sentence(page: Path) -> None:
    """Say it once: no prose sentence of a published page is printed twice."""
    from specsweep.report.consistency import repeated_sentences

    assert repeated_sentences(page.read_text(encoding="utf-8")) == []


def test_repeated_sentences_are_found_in_prose_only() -> None:
    from specsweep.report.consistency import repeated_sentences

    page = ("<p>The cap did bind at 64 here. Something else is said here once.</p><ul><li>The cap did bind at 64 "
            "here.</li></ul><table><tr><td>MTP with a long label in a cell</td></tr><tr><td>MTP with a long label "
            "in a cell</td></tr></table><script>x = 'The cap did bind at 64 here.'</script>")
    assert repeated_sentences(page) == ["The cap did bind at 64 here."]
