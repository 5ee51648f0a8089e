"""The first screen (decision table, verdict prose) and the Markdown summary, built from the claims:
decision classes for known cases, figures derived from the data, untrusted names escaped."""
from __future__ import annotations

import re
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
    # and says over which levels, by what (the fitted margin, not the measured Δ it quotes)
    assert "(weakest fitted gain of the gains at 1, 2, 4, 8, 16, 32 and 64)" in row.deciding, row.deciding
    assert row.stability.startswith("7 of 7 levels credible")
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
    # escaped only where Markdown would act: the * of a name, the < that would open a tag
    assert "mtp\\*1" in summary and "\\<script>" in summary and "<script>" not in markdown_html(summary)


def test_summary_key_numbers_come_from_the_data(tmp_path: Path) -> None:
    comp, base, spec = two_arms(tmp_path, scaled(cross8))
    recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
    summary = summary_markdown(comp, recs, title="t", page="t.html")
    own = expected.levels(base)
    arm = expected.levels(spec)
    for c in (1, 4, 16, 64):
        b, a = own[c]["output_tok_s"], arm[c]["output_tok_s"]
        d = expected.pct((a / b - 1) * 100)
        want = f"| {c} | {round(float(b)):,} | {round(float(a)):,} | {d} "
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
    assert (tmp_path / "x.txt").read_text() == "title\n"  # its plain text beside it
    assert nbformat.read(str(path), as_version=4).cells[0].outputs == []  # the page does not carry it
    # a notebook without a summary leaves no stale one beside the page
    assert write_summary(path, tmp_path / "x.md") is None and not (tmp_path / "x.md").exists()
    assert not (tmp_path / "x.txt").exists()


def test_each_line_is_printed_once_across_the_profile_sections(tmp_path: Path) -> None:
    """Lines every profile carries are said once for all; a line two carry is printed under the first only,
    and the later profile says what of its own stands there (its topics), never a bare count of lines."""
    from specsweep.report.verdict import profile_sections, shared_lines

    comp, _, _ = two_arms(tmp_path, scaled(cross8, 1.3))
    recs = [recommend(comp, p) for p in (THROUGHPUT, {"name": "thr2", "objective": "throughput", "concurrency_max": 16},
                                         {"name": "lat", "objective": "latency"})]
    sections = profile_sections(comp, recs)
    shared = set(shared_lines(recs))
    for line in {x for r in recs for x in (*r.reasons, *r.caveats, *r.next_experiments)} - shared:
        assert sum(f"- {line}" in s or f". {line}" in s for s in sections) == 1, line
    refs = [ln for s in sections for ln in s.splitlines() if "given under" in ln]
    assert refs == ["*Also for thr2 — the note on what the objective weighs and the next experiment, given under batch "
                    "above.*", "*Also for lat — the finding on aggregate throughput, given under batch above.*"], refs
    assert not any(re.search(r"\b\d+ lines?\b", s) for s in sections)


def test_an_slo_decision_is_enabled_only_where_the_arm_meets_the_slo(tmp_path: Path) -> None:
    """Per-user speed 100 × C^−0.25: the baseline breaks 60 tok/s from 8, the arm (+30 %) from 32, where it
    also loses 15 % aggregate. The decision is 'enable', but its range stops where the arm misses the SLO
    and says so beside it, on the first screen and in the prose — never 'enable, 1–64'."""
    slo = {"name": "slo", "objective": "throughput", "min_user_tok_s": 60}
    comp, _, _ = two_arms(tmp_path, scaled(lambda c: 1.2 if c <= 16 else 0.85, 1.3))
    rec = recommend(comp, slo)
    (row,) = decision_rows(comp, [rec])
    assert row.decision == "enable", row
    meets = set(rec.levels.loc[rec.levels["arm_meets_slo"] == True, "concurrency"].astype(int))  # noqa: E712
    assert meets == {1, 2, 4, 8, 16}  # the oracle: 130 × C^−0.25 ≥ 60 up to C = 22
    # one run per level: at 1–4 (both keep the SLO) the +20 % is inside its band, so the range keeps them
    # (speculation costs nothing there) but says they show no difference — never read as a gain there
    neutral = set(rec.levels.loc[rec.levels["outcome"] == "neutral", "concurrency"].astype(int)) & meets
    assert neutral == {1, 2, 4}
    assert row.enable_at == "1–16 (no measurable difference at 1–4; misses the SLO at 32 and 64)", row.enable_at
    assert set(row.enable_levels) == meets
    assert ("**enable spec at 1–16 (no measurable difference at 1–4; misses the SLO at 32 and 64)**"
            in verdict_prose(comp, [rec]).replace("\\", ""))


def test_a_profile_that_keeps_it_off_beside_one_that_enables_says_why_there(tmp_path: Path) -> None:
    """Decoding faster (0.006 s vs 0.010 s a token) but 60 ms more to the first token: shorter end to end,
    so more aggregate throughput (throughput: enable), yet a TTFT longer by more than the minimum effect
    of the baseline's end-to-end time (latency: keep off). The prose gives the reason beside the two
    decisions, with the figure the first screen shows."""
    from helpers import write_measured

    levels = (2, 8, 16)
    write_measured(tmp_path / "baseline", "baseline", {c: {"tokens": 30, "step_s": 0.010, "ttft_s": 0.02} for c in levels})
    write_measured(tmp_path / "spec", "spec", {c: {"tokens": 30, "step_s": 0.006, "ttft_s": 0.08} for c in levels})
    comp = compare(load_result_sets(tmp_path))
    recs = [recommend(comp, {"name": "batch", "objective": "throughput"}),
            recommend(comp, {"name": "chat", "objective": "latency"})]
    rows = decision_rows(comp, recs)
    assert [r.decision for r in rows] == ["enable", "keep off"], rows
    prose = verdict_prose(comp, recs)
    lines = prose.split("\n\n")
    why = [x for x in lines if x.startswith("Why chat differs")]
    assert len(why) == 1 and rows[1].deciding_metric in why[0] and "batch does not weigh" in why[0], prose
    assert lines.index(why[0]) == len(lines) - 1  # right under the decisions it explains


def test_one_rounding_of_a_delta_everywhere_on_the_page() -> None:
    """The seed's MTP at 1: 121.5 ÷ 108 = +12.5 % (the oracle), written +13% in the key numbers as in every
    sentence and in the summary — never +12.5% in one place and +13% in another."""
    from fractions import Fraction

    from helpers import SEED
    from specsweep.report.verdict import key_numbers

    d1 = expected.delta(SEED / "mtp", SEED / "baseline", "output_tok_s", 1)
    assert d1 == Fraction(25, 2)
    comp = compare(load_result_sets([SEED]))
    row = key_numbers(comp).set_index("concurrency").loc[1]
    assert row["aggregate Δ%"] == expected.pct(d1) == "+13%"
    assert all("." not in str(row[k]).split("%")[0] or abs(float(str(row[k]).strip("+%"))) < 9.5
               for k in ("aggregate Δ%", "aggregate Δ% fitted"))
    assert f"| 1 | 108 | 122 | {expected.pct(d1)} [" in summary_markdown(comp, [recommend(comp, THROUGHPUT)], "t")


def test_one_next_experiment_per_question_the_whatifs_where_it_has_one() -> None:
    """The seed: the profiles advise re-running mtp with a higher cap, and the what-if section's next
    experiment measures mtp at another cap. The page keeps the what-if's (it predicts the setting, with
    a band); the profiles refer to it instead of giving a second cap experiment."""
    from helpers import SEED
    from specsweep.report import whatif_section
    from specsweep.report.verdict import answered_by_whatif, profile_sections, shared_markdown

    sets = load_result_sets([SEED])
    comp = compare(sets)
    recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
    advice = {c.sentence for r in recs for c in r.claims if c.kind == "advice"}
    assert any("--max-running-requests" in a for a in advice)
    nxt = whatif_section.build(comp, sets).next_experiment
    assert nxt is not None and nxt["arm"] == "mtp" and "max_running_requests" in nxt["setting"]
    refer = answered_by_whatif(recs, nxt)
    assert set(refer) == {a for a in advice if "--max-running-requests" in a}
    page = shared_markdown(comp, recs, refer) + "\n".join(profile_sections(comp, recs, refer))
    assert not any(a in page for a in refer)
    assert page.count("the next experiment is the what-if section's") == 1


def test_the_metric_named_at_a_level_is_the_one_the_table_says_decided_it(tmp_path: Path) -> None:
    """Latency: decoding 40 % faster per token throughout, the first token far later from 8. Level 4 is a gain
    decided by per-user speed, 8 a loss decided by a wait: X is 4, and the headline and the first screen
    quote level 4 on per-user speed (as the table does), never on the wait that decided 8. A sentence that
    names the wait at 4 fails the check."""
    import dataclasses
    import re

    from helpers import write_measured
    from specsweep.report.consistency import check_page

    lv = (2, 4, 8, 16)
    write_measured(tmp_path / "baseline", "baseline", {c: {"tokens": 30, "step_s": 0.010, "ttft_s": 0.02} for c in lv})
    write_measured(tmp_path / "spec", "spec", {c: {"tokens": 30, "step_s": 0.006,
                                                   "ttft_s": {2: 0.02, 4: 0.02, 8: 0.2, 16: 0.6}[c]} for c in lv})
    comp = compare(load_result_sets(tmp_path))
    rec = recommend(comp, {"name": "chat", "objective": "latency"})
    table = rec.levels.set_index("concurrency")
    assert table.at[4, "outcome"] == "gain" and table.at[4, "deciding_metric"] == comp.user_metric
    assert table.at[8, "outcome"] == "loss" and table.at[8, "deciding_metric"] != comp.user_metric
    (row,) = decision_rows(comp, [rec])
    assert row.deciding_figure.startswith("per-user decode speed: +") and row.deciding_figure.endswith(" at 4"), row
    assert "(measured there: per-user decode speed +" in rec.headline, rec.headline
    assert check_page(comp, [rec]) == []
    verdict = next(c for c in rec.claims if c.kind == "verdict")
    wrong = re.sub(r"\(measured there: [^)]*\)", f"({deciding_word_of(verdict.metric)}: -0.0% [-12%, +14%] at 4)",
                   verdict.sentence)
    bad = dataclasses.replace(rec, claims=[dataclasses.replace(verdict, sentence=wrong)])
    assert any(v.rule == "deciding-metric" for v in check_page(comp, [bad]))


def deciding_word_of(metric: str) -> str:
    from specsweep.decide.text import deciding_word

    return deciding_word(metric)


def test_a_control_arm_gets_no_speedup_explanation() -> None:
    """The real-engine reference has a control arm (configured like the baseline): the what-if section
    explains the speculative arms' speedups, not the control's noise as 'speculation at the same batch'."""
    from helpers import ROOT
    from specsweep.report import whatif_section

    sets = load_result_sets([ROOT / "data" / "reference" / "real-llamacpp-smollm2"])
    comp = compare(sets)
    assert comp.controls == ["control"]
    section = whatif_section.build(comp, sets)
    assert section.decompositions and "control" not in section.decompositions
    assert "control's aggregate" not in section.markdown


#: where the aggregate is named without the basis the comparison decides on (tok/s per engine CPU-second)
BARE_AGGREGATE = re.compile(r"aggregate (?:output )?throughput(?! per engine CPU-second)", re.I)


def cpu_starved_pair(tmp: Path, threads: int | None = 1):
    """A baseline and an n-gram arm on a CPU engine (``threads`` compute threads; None: not a CPU
    engine the launcher started), the arm faster at 1–2 and slower from 8; at 2 its engine got 60 %
    of its thread's CPU, so the comparison decides on tok/s per engine CPU-second."""
    from helpers import write_measured
    from specsweep.results.store import load_result_set

    server = {"name": "llamacpp", **({"launch": {"engine": "llama.cpp", "threads": threads}} if threads else {})}
    levels = (1, 2, 4, 8, 16)
    base = write_measured(tmp / "b", "baseline", {c: {"tokens": 32, "step_s": 0.02, "ttft_s": 0.05} for c in levels},
                          repeats=2, seed=1, level_extra={c: {"server_cpu_cores": 1.0} for c in levels}, server=server)
    spec = {c: {"tokens": 32, "step_s": 0.02 * (0.8 if c <= 2 else 1.25 if c >= 8 else 1.0), "ttft_s": 0.05}
            for c in levels}
    arm = write_measured(tmp / "n", "ngram", spec, repeats=2, seed=2, server=server,
                         level_extra={c: {"server_cpu_cores": 0.6 if c == 2 else 1.0} for c in levels})
    return compare([load_result_set(base), load_result_set(arm)], n_boot=50)


def page_texts(comp, recs) -> dict[str, str]:
    """Every text that names the deciding metric: the first screen, the verdict, the profile sections,
    the Markdown summary (profile descriptions, the user's own words, left out)."""
    from specsweep.report.verdict import profile_sections, shared_markdown, verdict_markdown

    texts = {"first screen": decision_markdown(comp, recs), "verdict prose": verdict_prose(comp, recs),
             "verdict": verdict_markdown(comp, recs), "shared": shared_markdown(comp, recs),
             "summary": summary_markdown(comp, recs, "t")}
    texts.update({f"section {r.profile.name}": s for r, s in zip(recs, profile_sections(comp, recs))})
    for r in recs:
        texts = {k: v.replace(r.profile.description or "\0", "") for k, v in texts.items()}
    return texts


def test_a_cpu_normalised_aggregate_is_named_by_its_basis_wherever_the_page_names_it(tmp_path: Path) -> None:
    """Where the comparison decides on tok/s per engine CPU-second, no sentence, table cell or
    heading calls that figure plain "aggregate throughput": the first screen's deciding cell, the
    verdict, every profile section and the Markdown summary name the basis; the same data on a
    machine that gave the engine its CPU say "aggregate throughput"."""
    from specsweep.analyze.enginecpu import BASIS_CPU

    comp = cpu_starved_pair(tmp_path / "cpu")
    assert comp.aggregate_basis == BASIS_CPU  # the premise
    recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
    texts = page_texts(comp, recs)
    for where, text in texts.items():
        bare = BARE_AGGREGATE.search(text)
        assert bare is None, (where, text[max(0, bare.start() - 120):bare.end() + 60])
    batch = next(r for r in decision_rows(comp, recs) if r.profile == "Batch throughput")
    assert batch.deciding.startswith("aggregate throughput per engine CPU-second: "), batch.deciding
    assert "(decided by aggregate throughput per engine CPU-second)" in texts["verdict prose"]
    assert "aggregate throughput per engine CPU-second" in texts["section Batch throughput"]

    plain = cpu_starved_pair(tmp_path / "gpu", threads=None)
    assert plain.aggregate_basis is None
    recs = [recommend(plain, p) for p in DEFAULT_PROFILES]
    assert not any("CPU-second" in t for t in page_texts(plain, recs).values())
    batch = next(r for r in decision_rows(plain, recs) if r.profile == "Batch throughput")
    assert batch.deciding.startswith("aggregate throughput: "), batch.deciding


#: a label with Markdown, HTML, an ANSI colour, a bidirectional override and a bell in it
HOSTILE_LABEL = "\x1b[31mred\x1b[0m \u202e<script>x</script> **b** [a](javascript:y) | `c`\x07"


def test_the_plain_text_summary_says_the_markdowns_sentences_with_no_markdown_and_nothing_to_inject(
        tmp_path: Path) -> None:
    """The .txt beside the .md: the same decision table cells and verdict sentences, no Markdown syntax
    (no table rule, emphasis, code or backslash escape), untrusted names shown literally and stripped
    of ANSI escapes and control characters."""
    from specsweep.markup import inert
    from specsweep.report.summary import summary_text

    comp, _, _ = two_arms(tmp_path, scaled(cross8), label=HOSTILE_LABEL, name="mtp*1")
    recs = [recommend(comp, {**p, "name": p["name"] + " <b>|</b> *x*"}) for p in DEFAULT_PROFILES]
    md, txt = summary_markdown(comp, recs, "t <i>", "t.html"), summary_text(comp, recs, "t <i>", "t.html")
    label = inert(HOSTILE_LABEL)
    assert label in txt and label == "red <script>x</script> **b** [a](javascript:y) | `c`"
    rest = txt.replace(label, "")
    for syntax in ("\\", "|---", "**", "`", "##", "\n- ", "\n* "):
        assert syntax not in rest, syntax
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", txt)
    for row in decision_rows(comp, recs):  # the first screen's cells, as the .md's table has them
        for cell in (row.profile, row.decision, row.arm_text(), row.enable_at, row.deciding, row.stability):
            assert cell in txt, cell
    for para in verdict_prose(comp, recs).split("\n\n"):  # the verdict's sentences, word for word
        assert re.sub(r"\\(.)", r"\1", para.replace("**", "")) in txt, para
    assert "mtp*1 raises aggregate throughput" in txt and "the full report: t.html" in txt
    assert txt.startswith("t <i>\n") and md.startswith("## t \\<i>")
