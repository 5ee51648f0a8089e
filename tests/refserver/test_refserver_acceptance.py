"""The reference server's content-dependent acceptance rule: deterministic, ordered by category
as documented, the profile's mean kept for prompts without a category, within [1, k + 1]."""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from specsweep.refserver import acceptance as acc
from specsweep.refserver.model import AcceptanceModel
from specsweep.workloads.datasets import builtin_prompts

PROFILES = Path(acc.__file__).parent / "profiles"
DOCUMENTED_ORDER = ["copy", "edit-file", "quote-answer", "code-edit", "extraction", "summarisation", "qa", "math",
                    "creative-writing"]
#: the shifts of the categories the demo studies measure: fixed, so their pages' decisions stay
OPEN_SHIFTS = {"code-edit": 1.0, "extraction": 0.8, "summarisation": 0.3, "qa": 0.0, "all": 0.0, "math": -0.2,
               "creative-writing": -1.0}


def _spec(profile: str) -> tuple[float, int]:
    spec = json.loads((PROFILES / f"{profile}.json").read_text())["speculative"]
    return spec["mean_accept_length"], spec["num_steps"]


def test_deterministic_and_jitter_is_seeded_per_prompt() -> None:
    text = "Rename x to y in: x = 1\nprint(x)"
    a = acc.expected_accept_length(text, "code-edit", 2.0, 3)
    assert a == acc.expected_accept_length(text, "code-edit", 2.0, 3)
    assert a == acc.expected_accept_length(text, "code-edit", 2.0, 3, jitter=0.0, seed=99)
    j1 = acc.expected_accept_length(text, "code-edit", 2.0, 3, jitter=0.5, seed=1)
    assert j1 == acc.expected_accept_length(text, "code-edit", 2.0, 3, jitter=0.5, seed=1)
    assert j1 != acc.expected_accept_length(text, "code-edit", 2.0, 3, jitter=0.5, seed=2)
    assert j1 != acc.expected_accept_length(text + " ", "code-edit", 2.0, 3, jitter=0.5, seed=1)
    with pytest.raises(ValueError, match="jitter"):
        acc.expected_accept_length(text, "qa", 2.0, 3, jitter=-1.0)


@pytest.mark.parametrize("base_mean, k", [(2.0, 3), (1.89, 1), (1.3, 2), (3.5, 4), (1.05, 5)])
def test_categories_are_ordered_as_documented(base_mean: float, k: int) -> None:
    means = acc.category_means(base_mean, k)
    ordered = [means[c] for c in DOCUMENTED_ORDER]
    assert ordered == sorted(ordered, reverse=True)
    assert means["code-edit"] > means["summarisation"] > means["creative-writing"]
    assert max(means.values()) == means["copy"] and min(means.values()) == means["creative-writing"]
    assert means["all"] == pytest.approx(base_mean, abs=1e-9)  # no category: the profile's own mean
    assert all(1.0 <= m <= k + 1 for m in means.values())


def test_the_documented_table_matches_the_rule() -> None:
    doc = acc.__doc__ or ""
    rows = re.findall(r"^([a-z-]+)\s+([+-]?\d\.\d)\s+(\d\.\d\d)\s+(\d\.\d\d)\s*$", doc, re.M)
    assert [r[0] for r in rows] == ["copy", "edit-file", "quote-answer", "code-edit", "extraction", "summarisation",
                                    "qa", "all", "math", "creative-writing"]
    tiny, seed = acc.category_means(*_spec("tiny")), acc.category_means(*_spec("qwen3.5-122b-a10b-4x-rtxpro6000"))
    for cat, shift, t, s in rows:
        assert acc.CATEGORY_SHIFT[cat] == float(shift)
        assert tiny[cat] == pytest.approx(float(t), abs=0.006)
        assert seed[cat] == pytest.approx(float(s), abs=0.006)


def test_repetitiveness_hand_computed_and_it_raises_acceptance() -> None:
    assert acc.repetitiveness("a b c a b c") == pytest.approx(0.25)  # trigrams abc bca cab abc: 1 of 4 repeats
    assert acc.repetitiveness("one two three four five") == 0.0
    assert acc.repetitiveness("") == 0.0 and acc.repetitiveness("too short") == 0.0
    plain = acc.expected_accept_length("the cat sat on a mat today", "qa", 2.0, 3)
    repeated = acc.expected_accept_length("the cat sat the cat sat the cat sat", "qa", 2.0, 3)
    assert repeated > plain == pytest.approx(2.0)


def test_bounds_and_errors() -> None:
    assert acc.expected_accept_length("x", "qa", 1.0, 3) == pytest.approx(1.0)  # no drafts accepted ever
    top = acc.expected_accept_length("a b c " * 50, "code-edit", 4.0, 3)
    assert top <= 4.0 and acc.accept_probability("a b c " * 50, "code-edit", 4.0, 3) == acc.P_MAX
    with pytest.raises(ValueError, match=r"base_mean .* within \[1, 4\] for k=3, got 4.5"):
        acc.expected_accept_length("x", "qa", 4.5, 3)
    with pytest.raises(ValueError, match="k \\(draft tokens per step\\)"):
        acc.expected_accept_length("x", "qa", 2.0, 0)


def test_engine_acceptance_model_reproduces_the_mean() -> None:
    """The engine draws per step from AcceptanceModel; given this rule's mean it solves back the
    same per-draft probability."""
    text = builtin_prompts(["extraction"])[0].text()
    mean = acc.expected_accept_length(text, "extraction", 2.0, 3)
    model = AcceptanceModel(3, mean)
    assert model.p == pytest.approx(acc.accept_probability(text, "extraction", 2.0, 3), abs=1e-9)
    assert sum(j * q for j, q in enumerate(model.pmf(), 1)) == pytest.approx(mean)


def test_builtin_set_category_averages_follow_the_order_and_are_recognised() -> None:
    by_cat: dict[str, list[float]] = {}
    for r in builtin_prompts():
        assert acc.category_of_prompt(r.text()) == r.category
        by_cat.setdefault(r.category, []).append(acc.expected_accept_length(r.text(), r.category, 2.0, 3))
    means = [statistics.mean(by_cat[c]) for c in DOCUMENTED_ORDER]
    assert means == sorted(means, reverse=True)
    first = builtin_prompts(["code-edit"])[0].text()
    assert acc.category_of_prompt("  " + first.replace("\n", "\n ") + "\n") == "code-edit"  # whitespace-insensitive
    assert acc.category_of_prompt("A prompt the built-in set does not have.") == "all"
    assert acc.category_of_prompt("") == "all"


def test_category_acceptance_is_recovered_from_per_request_counts() -> None:
    """Draw verify steps for every built-in prompt from the engine's AcceptanceModel at this
    rule's mean (as the reference server will), record per-request tokens and verify counts like
    SGLang's meta_info, and recover each category's mean with specsweep's per-category metrics:
    within 5 % of the category's configured mean (seeded, so the check is exact to reproduce)."""
    import random

    from specsweep.analyze.categories import category_metrics
    from specsweep.analyze.metrics import requests_frame
    from specsweep.results.records import RequestRecord
    from specsweep.workloads import datasets as ds

    recs = builtin_prompts()
    k, base, steps = 3, 2.0, 40
    rng = random.Random(7)
    records, configured = [], {}
    for i, r in enumerate(recs):
        mean = acc.expected_accept_length(r.text(), r.category, base, k)
        configured.setdefault(r.category, []).append(mean)
        model = AcceptanceModel(k, mean)
        tokens = sum(model.draw(rng) for _ in range(steps))
        t0 = float(i)
        records.append(RequestRecord(t_sent=t0, t_end=t0 + 1.0, http_status=200, chunk_times=[t0 + 0.1, t0 + 1.0],
                                     chunk_tokens=[1, tokens - 1], output_tokens=tokens, token_source="usage",
                                     server={"spec_verify_ct": steps}))
    frame = requests_frame(records, t0=0.0, run_id="r", arm="mtp", concurrency=1, repeat=0)
    out = category_metrics(ds.with_category(frame, recs)).set_index("category")
    for cat, means in configured.items():
        expected = statistics.mean(means)
        assert out.loc[cat, "spec_accept_length"] == pytest.approx(expected, rel=0.05), cat
    got = [out.loc[c, "spec_accept_length"] for c in DOCUMENTED_ORDER]
    assert got[0] > got[2] > got[-1]  # code edit above summarisation above creative writing


@pytest.mark.parametrize("base_mean, k", [(2.0, 3), (1.89, 1), (1.3, 2), (3.5, 4), (1.05, 5)])
def test_input_grounded_categories_accept_more_the_more_the_answer_copies_the_prompt(base_mean: float, k: int) -> None:
    """The input-grounded categories (the answer repeats a span of the prompt) get the documented copy
    rule: a log-odds shift of COPY_WEIGHT × the share of the answer copied, so copy > edit-file >
    quote-answer > code-edit (the most predictable of the others); the open categories keep their
    shifts exactly (the demo studies' decisions rest on them)."""
    from specsweep.workloads.datasets import INPUT_GROUNDED

    assert set(acc.GROUNDED_COPY_SHARE) == set(INPUT_GROUNDED)
    for cat, share in acc.GROUNDED_COPY_SHARE.items():
        assert 0 < share <= 1 and acc.CATEGORY_SHIFT[cat] == pytest.approx(acc.COPY_WEIGHT * share)
    assert {c: s for c, s in acc.CATEGORY_SHIFT.items() if c not in INPUT_GROUNDED} == OPEN_SHIFTS
    means = acc.category_means(base_mean, k)
    grounded = [means[c] for c in ("copy", "edit-file", "quote-answer", "code-edit")]
    assert grounded == sorted(grounded, reverse=True)
    if base_mean > 1.05:  # a profile whose drafts are ever accepted: copied text is accepted more, not equally
        assert grounded[0] > grounded[-1]
    # every built-in prompt of a grounded category is recognised and beats the set's open prompts on average
    for cat in INPUT_GROUNDED:
        texts = [r.text() for r in builtin_prompts([cat])]
        assert all(acc.category_of_prompt(t) == cat for t in texts)
        mean = statistics.mean(acc.expected_accept_length(t, cat, base_mean, k) for t in texts)
        assert mean >= acc.expected_accept_length("", "code-edit", base_mean, k) - 1e-9
