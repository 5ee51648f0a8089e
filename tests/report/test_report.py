"""The report notebook run through papermill, exported to offline HTML, asserted on."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from helpers import SEED, write_level_only, write_measured
from specsweep.report import build_report

pytestmark = pytest.mark.usefixtures("chart_defaults")  # charts as the notebooks draw them

CDN = re.compile(r"(cdn\.jsdelivr|cdnjs|unpkg\.com|googleapis|require\.js|mathjax)", re.I)


def chart_count(html: str) -> int:
    return len(re.findall(r'class="specsweep-chart"', html))


@pytest.fixture(scope="module")
def seed_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    out = tmp_path_factory.mktemp("reports")
    path = build_report([SEED], "seed", title="Seed test report", out_dir=out)
    nb = nbformat.read(str(out / "_build" / "seed.ipynb"), as_version=4)
    assert nb.metadata.papermill.parameters["result_sets"] == [str(SEED)]
    text = (out / "seed.txt").read_text()  # the summary's plain text beside it, for chat tools
    assert text.startswith("Seed test report\n") and "Batch throughput — decision: enable up to 37; arm: mtp" in text
    assert "\\" not in text and "|" not in text and "**" not in text
    return path.read_text(), (out / "seed.md").read_text()


@pytest.fixture(scope="module")
def seed_report(seed_build: tuple[str, str]) -> str:
    return seed_build[0]


def page_text(page: str) -> str:
    import html

    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def test_seed_report_states_the_computed_findings(seed_report: str) -> None:
    from fractions import Fraction

    import expected
    from specsweep.analyze.compare import compare
    from specsweep.results.store import load_result_sets

    text = page_text(seed_report)
    assert "Seed test report" in text
    # every level's aggregate Δ, computed here from the seed's own table and rounded as a reader rounds
    d = {c: expected.delta(SEED / "mtp", SEED / "baseline", "output_tok_s", c) for c in (1, 4, 16, 32, 64, 128)}
    assert d[1] == Fraction(25, 2)  # 121.5 ÷ 108: +12.5%, shown as +13%
    for c, v in d.items():
        assert f"{expected.pct(v)} at {c}" in text, (c, v)
    # the Little's-law wait at 64 and 128: baseline aggregate ÷ arm aggregate − 1
    waits = ", ".join(f"{expected.pct(expected.wait_delta(SEED / 'mtp', SEED / 'baseline', c))} at {c}" for c in (64, 128))
    assert waits == "+48% at 64, +71% at 128"
    assert f"takes longer per request in total, queueing included (Little's-law estimate): {waits}" in text
    # "up to about X": X is where the fitted curve crosses 0 (not a tested level), named with the tested levels
    # bounding it; the deciding metric's measured Δ at both stands beside it
    x = compare(load_result_sets(SEED)).crossover("mtp").iloc[0].crossover_concurrency
    assert 32 < x < 64
    assert (f"Enable mtp up to about {x:.0f} concurrent requests, between the tested 32 and 64 (aggregate throughput: "
            f"{expected.pct(d[32])} [") in text
    for fragment in ("max_running_requests = 48", "leading hypothesis", "cannot be the whole story",
                     # the cap question's one next experiment: the what-if's (the profiles refer to it)
                     "the next experiment is the what-if section's", "Next experiment: measure mtp with --max-running-requests",
                     "Latency-sensitive (interactive, agentic)", "Batch throughput",
                     # one run per level: the noise is an assumption, said where the verdict is
                     "One run per level", "3% per run is assumed", "assumed_noise_pct",
                     # one definition per number, a glossary, the method named exactly
                     "Terms", "TPOT", "Accept length", "EAGLE", "n-gram", "Little's law",
                     "Bonferroni over", "noise from an assumed run-to-run noise of 3% per run",
                     "How often these verdicts are right", "For every profile",
                     # one category only: a one-line note; fixed token IDs: the synthetic-workload caveat
                     "single prompt category", "not representative of real traffic"):
        assert fragment in text, fragment
    assert "every tested level" not in text or "at every level both arms measured" not in text
    assert "(includes queueing and prefill)" not in text  # the seed's per-request definition is unknown, said once
    assert "percentile-bootstrap" not in text
    assert "gauge agrees" not in text  # the seed has no gauge: nothing to agree with


def test_seed_report_opens_with_the_decision(seed_build: tuple[str, str]) -> None:
    """The first screen: per profile the decision, where, the deciding metric with its band, how stable."""
    import expected

    page, summary = seed_build
    text = page_text(page)
    first = text[text.index("Seed test report"):text.index("Terms")]
    head = "profile decision arm enable at tested deciding metric [95% band] how stable"
    assert head in first
    rows = first.split(head)[1]
    d32 = expected.pct(expected.delta(SEED / "mtp", SEED / "baseline", "output_tok_s", 32))
    d64 = expected.pct(expected.delta(SEED / "mtp", SEED / "baseline", "output_tok_s", 64))
    assert "Batch throughput enable up to 37 mtp 1 to about 37 1–128 aggregate throughput: " + d32 in rows
    assert f"at 32 → {d64} [" in rows
    assert "Interactive SLO: at least 60 tok/s per user enable mtp 1–128 1–128" in rows
    assert "one run per level; noise assumed (3% per run)" in rows and "drift not measured" in rows
    # the long label is for Setup: the opening names the arm by its short name only
    assert "MTP (NEXTN)" not in first
    # the summary beside the page: the same table in Markdown, escaped only where Markdown needs it, with the key numbers
    assert summary.startswith("## Seed test report\n")
    assert "| Batch throughput | **enable up to 37** | mtp | 1 to about 37 | 1–128 | aggregate throughput: " in summary
    assert "| 1 | 108 | 122 | +13% [" in summary  # 121.5 tok/s, +12.5%: halves away from zero
    assert "- mtp: MTP (NEXTN) — server sglang" in summary


def test_seed_report_is_offline_and_codeless(seed_report: str) -> None:
    assert not CDN.search(seed_report), CDN.search(seed_report)
    assert not re.search(r"<script[^>]+src=", seed_report)
    assert not re.search(r"<link[^>]+stylesheet[^>]+http", seed_report)
    assert 'class="jp-CodeMirrorEditor' not in seed_report and "load_result_sets(" not in seed_report
    assert seed_report.count("window.vegaEmbed = vegaEmbed") == 1  # the bundle, inlined once
    assert chart_count(seed_report) == 8  # verdict strip, throughput, per-user, Δ, fitted Δ, Pareto, concurrency, what-if decomposition; no latency data
    assert '"tooltip"' in seed_report
    assert "Kernel is running over TCP" not in seed_report  # stderr is not published


def test_measured_report_has_latency_and_intervals(tmp_path: Path) -> None:
    slow = {c: {"tokens": 40, "step_s": 0.02, "ttft_s": 0.05, "jitter": 0.05} for c in (1, 4, 16)}
    fast = {1: {"tokens": 40, "step_s": 0.012, "ttft_s": 0.06, "jitter": 0.05, "tokens_per_chunk": 2},
            4: {"tokens": 40, "step_s": 0.015, "ttft_s": 0.06, "jitter": 0.05, "tokens_per_chunk": 2},
            16: {"tokens": 40, "step_s": 0.03, "ttft_s": 0.06, "jitter": 0.05, "tokens_per_chunk": 2}}
    study = tmp_path / "study"
    write_measured(study / "baseline", "baseline", slow, repeats=2)
    write_measured(study / "spec", "spec", fast, repeats=2, server={"max_running_requests": 8})
    html = build_report([study], "measured", out_dir=tmp_path / "out",
                        profiles=[{"name": "Only latency", "objective": "latency"}]).read_text()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "Only latency" in text and "Batch throughput" not in text
    assert "Time to first token" in text
    assert "noise from repeats (2 vs 2 runs per level)" in html
    assert chart_count(html) == 10  # + latency + tokens per chunk
    assert "Decoding concurrency" in text


def test_bad_parameters_fail_with_a_clear_message(tmp_path: Path) -> None:
    import papermill as pm

    with pytest.raises(pm.PapermillExecutionError, match=r"baseline arm 'nope' is not among the result sets"):
        build_report([SEED], "bad", baseline="nope", out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"report name .../escape.: use 1-64 letters"):
        build_report([SEED], "../escape", out_dir=tmp_path)


def test_top_of_report_warns_about_chunk_counts_and_meta_warnings(tmp_path: Path) -> None:
    import pandas as pd

    from specsweep.analyze.compare import compare
    from specsweep.decide import DEFAULT_PROFILES, recommend
    from specsweep.markup import markdown_html
    from specsweep.report import definitions_markdown, verdict_markdown
    from specsweep.results.store import load_result_sets

    slow = {c: {"tokens": 30, "step_s": 0.02, "ttft_s": 0.05, "jitter": 0.05} for c in (1, 4, 16)}
    base = write_measured(tmp_path / "baseline", "baseline", slow, repeats=2)
    spec = write_measured(tmp_path / "spec", "spec", slow, repeats=2,
                          warnings=["<script>alert(1)</script> server restarted at level 16"])
    for name in ("levels.parquet", "requests.parquet"):
        frame = pd.read_parquet(spec / name)
        frame["token_source"] = "chunks"
        frame.to_parquet(spec / name)
    comp = compare(load_result_sets([base, spec]))
    recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
    html = markdown_html(verdict_markdown(comp, recs))
    opening = html[: html.index("<ul>")]  # before the per-profile verdicts
    assert "token counts came from SSE chunks" in opening and "no throughput or acceptance verdict" in opening
    assert "server restarted at level 16" in opening and "<script>" not in html
    assert "No verdict: the token counts of spec came from SSE chunks" in html
    assert "Bonferroni over" in definitions_markdown(comp)


def test_a_warning_both_arms_recorded_is_said_once_naming_both(tmp_path: Path) -> None:
    from specsweep.analyze.compare import compare
    from specsweep.report import top_warnings
    from specsweep.results.store import load_result_sets

    slow = {c: {"tokens": 30, "step_s": 0.02, "ttft_s": 0.05, "jitter": 0.05} for c in (1, 4, 16)}
    same = "prompts repeat across levels"
    base = write_measured(tmp_path / "baseline", "baseline", slow, warnings=[same])
    spec = write_measured(tmp_path / "spec", "spec", slow, warnings=[same, "only here"])
    lines = top_warnings(compare(load_result_sets([base, spec])))
    assert sum(same in line for line in lines) == 1 and sum("only here" in line for line in lines) == 1
    both = next(line for line in lines if same in line)
    assert both.count("**") == 4 and "each one's meta.json" in both


def test_fitted_delta_chart_draws_the_model_or_nothing(tmp_path: Path) -> None:
    from helpers import write_level_only
    from specsweep.analyze.compare import compare
    from specsweep.report import charts
    from specsweep.results.store import load_result_sets

    comp = compare(load_result_sets([SEED]))
    spec = charts.delta_fit_chart(comp).to_dict()
    layer = spec["hconcat"][0]["layer"]
    assert [m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"] for m in layer] == ["rule", "area", "line", "point"]
    two = load_result_sets([write_level_only(tmp_path / "baseline", "baseline", {1: (100.0, 100.0), 2: (190.0, 95.0)}),
                            write_level_only(tmp_path / "spec", "spec", {1: (120.0, 120.0), 2: (200.0, 99.0)})])
    assert charts.delta_fit_chart(compare(two)) is not None  # two single runs: the assumed noise gives a band
    # two single runs and no assumption: no noise estimate, no curve
    assert charts.delta_fit_chart(compare(two, assumed_noise_pct=None)) is None


def test_arms_with_no_shared_level_fail_in_one_line(tmp_path: Path) -> None:
    """The CLI names both level lists in one line instead of a kernel traceback."""
    import subprocess
    import sys

    write_level_only(tmp_path / "study" / "baseline", "baseline", {1: (100.0, 100.0), 2: (180.0, 90.0)})
    write_level_only(tmp_path / "study" / "mtp", "mtp", {8: (500.0, 70.0), 16: (800.0, 60.0)})
    done = subprocess.run([sys.executable, "-m", "specsweep.report", "--result-set", str(tmp_path / "study"),
                           "--name", "x", "--out-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 1
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "Kernel" not in ln and "WARNING" not in ln]
    assert len(lines) == 1, done.stderr
    assert "NoSharedLevelError" in lines[0] and "concurrency 8, 16" in lines[0] and "concurrency 1, 2" in lines[0]
    assert "Traceback" not in done.stderr


def test_a_built_page_says_each_sentence_once_and_names_arms_by_short_name(seed_report: str) -> None:
    """No prose sentence of a freshly built page is repeated verbatim, and the prose names arms by their
    short names: an arm's full label stands once, in Setup (a table)."""
    from specsweep.report.consistency import page_sentences, repeated_sentences
    from specsweep.results.store import load_result_sets

    assert repeated_sentences(seed_report) == []
    if re.search(r"[+\-−]\d+ points\)", page_text(seed_report)):  # a unit the page uses is defined on it
        assert "Points (of the aggregate Δ)" in page_text(seed_report)
    labels = [rs.meta.label for rs in load_result_sets([SEED]) if rs.meta.label and rs.meta.label != rs.arm]
    assert labels
    for label in labels:
        assert not [s for s in page_sentences(seed_report) if label in s], label


def test_the_seed_source_reads_as_a_source(seed_report: str) -> None:
    """The Setup table's source is a citation a reader can follow, not an internal message id."""
    text = page_text(seed_report)
    assert "deployment log" in text and not re.search(r"\[msg \d+\]", text)
