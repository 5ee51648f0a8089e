"""Output agreement: text fingerprints and the position of the first difference.

The position is checked against the truth on many seeded random pairs (identical, one character
changed, truncated, appended to; ASCII and non-ASCII text; lengths 0–1,000 characters) rather
than on one example.
"""
from __future__ import annotations

import random

import pandas as pd
import pytest

from helpers import base_meta
from specsweep.analyze.agreement import agreement_markdown, first_difference, first_difference_example, output_agreement
from specsweep.results.meta import Meta, StudyMeta
from specsweep.results.records import BLOCK_CHARS, HEAD_CHARS, output_fingerprint
from specsweep.results.store import ResultSet

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def _truth(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _pair(rng: random.Random) -> tuple[str, str]:
    alphabet = rng.choice(["ab \n", "ab é✓\n", "x"])
    a = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 1000)))
    kind = rng.choice(["same", "change", "truncate", "extend"])
    if kind == "same" or not a:
        return a, a
    if kind == "truncate":
        return a, a[:rng.randint(0, len(a) - 1)]
    if kind == "extend":
        return a, a + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 100)))
    k = rng.randrange(len(a))
    return a, a[:k] + ("Z" if a[k] != "Z" else "Y") + a[k + 1:]


def test_first_difference_matches_the_truth_on_random_pairs() -> None:
    rng = random.Random(20261201)
    exact = late = 0
    for _ in range(3000):
        a, b = _pair(rng)
        true = _truth(a, b)
        da, ha, ba = output_fingerprint(a)
        db, hb, bb = output_fingerprint(b)
        assert ha == a[:HEAD_CHARS] and len(ba) == 8 * -(-len(a) // BLOCK_CHARS)
        got = first_difference(ha, ba, hb, bb)
        if true is None:
            assert got is None and da == db
            continue
        assert da != db and got is not None
        pos, is_exact = got
        if is_exact:
            exact += 1
            assert pos == true
        else:
            late += 1  # past the head: the start of the differing block (or the head's end), never after the truth
            assert true >= HEAD_CHARS and pos <= true < pos + BLOCK_CHARS
    assert exact > 500 and late > 500  # both branches were exercised
    # a difference inside the head is always placed exactly
    a = "q" * 150 + "A" + "q" * 500
    b = "q" * 150 + "B" + "q" * 500
    assert first_difference(*output_fingerprint(a)[1:], *output_fingerprint(b)[1:]) == (150, True)


def test_missing_fingerprints_give_an_unknown_position() -> None:
    _, h, b = output_fingerprint("abc")
    assert first_difference(None, None, h, b) is None and first_difference(h, b, h, None) is None


def _set(arm: str, texts: list[str]) -> ResultSet:
    rows = []
    for i, t in enumerate(texts):
        d, h, b = output_fingerprint(t)
        rows.append({"arm": arm, "concurrency": 4, "repeat": 0, "prompt_id": i, "warmup": False, "error": None,
                     "output_digest": d, "output_head": h, "output_blocks": b})
    return ResultSet(path=None, meta=Meta.model_validate(base_meta(arm, sweep={"temperature": 0.0})),  # type: ignore[arg-type]
                     requests=pd.DataFrame(rows),
                     levels=pd.DataFrame())


def test_table_median_and_example_from_fingerprints() -> None:
    base = ["hello world " * 30, "x" * 300, "<script>alert(1)</script> ok", "same"]
    spec = ["hello world " * 5 + "HELLO" + "hello world " * 20, "x" * 290, "<script>alert(1)</script> no", "same"]
    sets = [_set("baseline", base), _set("mtp", spec)]
    table = output_agreement(sets)
    row = table.iloc[0]
    assert (row.pairs, row.identical) == (4, 1) and row.flagged
    # positions: 60 (exact), 290 (truncated past the head: block start 256), 26 (exact) → median 60
    assert row.first_diff_median_chars == 60 and row.first_diff_exact == 2
    text = agreement_markdown(table)
    assert "C=4: character 60 or a little later" in text
    ex = first_difference_example(sets, "mtp")
    assert ex is not None and ex["position"] == 26 and ex["prompt_id"] == 2
    assert str(ex["arm"])[int(ex["offset"]):].startswith("no")



def test_study_page_shows_the_earliest_difference_escaped() -> None:
    from specsweep.markup import markdown_html
    from specsweep.study.runner import study_markdown

    sets = [_set("baseline", ["<b>bold</b> and *more*\nline two"]), _set("mtp<i>", ["<b>bold</b> and *less*\nline two"])]
    for rs in sets:
        rs.meta.study = StudyMeta(name="s", repeats=1, order="interleaved")
    md = study_markdown(sets)
    assert "Earliest difference of" in md and "character 17" in md
    html = markdown_html(md)
    assert "<b>" not in html and "<i>" not in html and "&lt;b&gt;bold&lt;/b&gt; and \\*▌more" not in html
    assert "&lt;b&gt;bold&lt;/b&gt; and *▌more*↵line two" in html
    assert "&lt;b&gt;bold&lt;/b&gt; and *▌less*↵line two" in html


def test_a_control_arms_difference_is_the_servers_nondeterminism_and_the_floor() -> None:
    """A control arm (configured like the baseline) that differs is the server's own nondeterminism —
    never told to 'measure the baseline against itself', which it is — and the other arms are read
    against it: within it, nondeterminism; well below it, a correctness problem."""
    base = [f"answer {i} " * 20 for i in range(20)]

    def changed(n: int) -> list[str]:
        return [t + ("late change" if i < n else "") for i, t in enumerate(base)]

    sets = [_set("baseline", base), _set("control", changed(4)), _set("mtp", changed(5)), _set("eagle", changed(12))]
    table = output_agreement(sets)
    text = agreement_markdown(table, "baseline", ["control"])
    lines = {line.split("*")[1]: line for line in text.splitlines() if line.startswith("- ")}
    assert "against itself" not in text
    assert "server's own nondeterminism" in lines["control"] and "⚠" not in lines["control"]
    assert "C=4: 80 % of 20" in lines["control"]
    assert "within 10 points" in lines["mtp"] and "⚠" not in lines["mtp"]
    assert text.count("consistent with the server's own nondeterminism") == 1  # said once, after the arms
    assert "5 of 20 pairs differ in all, the control's 4 of 20" in lines["mtp"] and "somewhat more often" in lines["mtp"]
    assert "not the speculative configuration" not in text
    assert "⚠" in lines["eagle"] and "C=4: 40 % (control 80 %)" in lines["eagle"] and "correctness" in lines["eagle"]
    # without a control the advice to measure the baseline against itself stands
    assert "against itself" in agreement_markdown(table[table["arm"] != "control"])
