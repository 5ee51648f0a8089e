"""Recommendations computed from the data: verdicts, bands, reasons, caveats, next experiment."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import SEED, write_measured
from specsweep.compare import compare
from specsweep.recommend import DEFAULT_PROFILES, parse_profile, recommend
from specsweep.store import load_result_sets
from test_compare import scaled, study

THROUGHPUT = {"name": "batch", "objective": "throughput"}
LATENCY = {"name": "agentic", "objective": "latency"}
BALANCED = {"name": "both", "objective": "balanced"}


@pytest.fixture(scope="module")
def seed():
    return compare(load_result_sets(SEED))


def test_always_wins(tmp_path: Path) -> None:
    comp = compare(study(tmp_path, win=scaled({1: 1.2, 4: 1.15, 16: 1.1})))
    for profile in (THROUGHPUT, LATENCY, BALANCED):
        rec = recommend(comp, profile)
        assert rec.verdict == "enable" and rec.arm == "win"
        assert [b.outcome for b in rec.bands] == ["gain"]
        assert rec.headline.startswith("Enable WIN")


def test_always_loses(tmp_path: Path) -> None:
    comp = compare(study(tmp_path, lose=scaled({1: 0.9, 4: 0.8, 16: 0.7})))
    for profile in (THROUGHPUT, LATENCY, BALANCED):
        rec = recommend(comp, profile)
        assert rec.verdict == "disable" and rec.arm is None
        assert rec.headline.startswith("Keep speculation off")
        assert "lowers it (-10% at 1, -20% at 4, -30% at 16)" in rec.reasons[0]


def test_crosses_over_at_eight(tmp_path: Path) -> None:
    comp = compare(study(tmp_path, cross=scaled({1: 1.2, 4: 1.1, 16: 0.9}, {1: 1.3, 4: 1.3, 16: 1.3})))
    rec = recommend(comp, THROUGHPUT)
    assert rec.verdict == "enable_up_to"
    assert rec.up_to_concurrency == pytest.approx(8.0)
    assert "up to about 8 concurrent requests" in rec.headline
    assert [(b.c_from, b.c_to, b.outcome) for b in rec.bands] == [(1, 4, "gain"), (16, 16, "loss")]
    assert "crossover is at about 8" in rec.reasons[0]
    assert any("between 4 and 16" in e for e in rec.next_experiments)
    # per-user speed is up everywhere: the latency profile enables it outright
    assert recommend(comp, LATENCY).verdict == "enable"
    # balanced tolerates 5% aggregate loss: -10% at 16 is too much; the margin crosses between 4 and 16
    bal = recommend(comp, BALANCED)
    assert bal.verdict == "enable_up_to" and 4 < bal.up_to_concurrency < 16


def test_small_deltas_are_neutral_without_intervals(tmp_path: Path) -> None:
    comp = compare(study(tmp_path, same=scaled({1: 1.01, 4: 0.99, 16: 1.005})))
    rec = recommend(comp, THROUGHPUT)
    assert rec.verdict == "disable" and "no measurable difference" in rec.headline
    assert any("no confidence intervals" in c for c in rec.caveats)


def test_concurrency_range_limits_the_judgement(tmp_path: Path) -> None:
    comp = compare(study(tmp_path, cross=scaled({1: 1.2, 4: 1.1, 16: 0.9})))
    assert recommend(comp, {**THROUGHPUT, "concurrency_max": 4}).verdict == "enable"
    assert recommend(comp, {**THROUGHPUT, "concurrency_min": 16}).verdict == "disable"
    with pytest.raises(ValueError, match=r"no tested concurrency lies in its range 32–64 \(tested: 1, 4, 16\)"):
        recommend(comp, {**THROUGHPUT, "concurrency_min": 32, "concurrency_max": 64})


def test_profile_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"'objective'"):
        parse_profile({"name": "x", "objective": "speed"})
    with pytest.raises(ValueError, match=r"'min_user_tok_s'"):
        parse_profile({"name": "x", "objective": "latency", "min_user_tok_s": -1})
    with pytest.raises(ValueError, match=r"'colour'"):
        parse_profile({"name": "x", "objective": "latency", "colour": "red"})
    with pytest.raises(ValueError, match=r"concurrency_max \(2\) is below concurrency_min \(4\)"):
        parse_profile({"name": "x", "objective": "latency", "concurrency_min": 4, "concurrency_max": 2})


def test_seed_throughput_recommendation(seed) -> None:
    rec = recommend(seed, THROUGHPUT)
    assert rec.verdict == "enable_up_to" and rec.arm == "mtp"
    assert 32 < rec.up_to_concurrency < 64
    assert [(b.c_from, b.c_to, b.outcome) for b in rec.bands] == [(1, 32, "gain"), (64, 128, "loss")]
    text = " ".join(rec.reasons)
    for fragment in ("+12% at 1", "+40% at 4", "+38% at 16", "+11% at 32", "-32% at 64", "-42% at 128",
                     "between 32 and 64", "every tested level"):
        assert fragment in text, fragment
    # the cap is the leading hypothesis, and the data says why it may not be the whole story
    assert "max_running_requests = 48" in text and "leading hypothesis" in text
    assert "levels off at about 24–25" in text and "well below the cap of 48" in text
    assert "mem_fraction_static 0.75" in text
    nxt = rec.next_experiment
    assert nxt.startswith("Re-run MTP (NEXTN) with --max-running-requests 128")
    assert "about 24–25" in nxt and "well below 48" in nxt


def test_seed_latency_recommendation(seed) -> None:
    rec = recommend(seed, LATENCY)
    assert rec.verdict == "enable"
    text = " ".join(rec.reasons)
    assert "faster at every tested level" in text
    assert "1.7× the servers" in text  # 1 / (1 - 0.416) at concurrency 128
    caveats = " ".join(rec.caveats)
    assert "no confidence intervals" in caveats
    assert "not published" in caveats
    assert "synthetic token IDs" in caveats and "inflated" in caveats


def test_seed_slo_profile(seed) -> None:
    rec = recommend(seed, DEFAULT_PROFILES[2])  # >= 60 tok/s per user
    assert rec.verdict == "enable"
    text = " ".join(rec.reasons)
    assert "the baseline meets it at best at concurrency 16 (873 tok/s aggregate)" in text
    assert "at best at concurrency 128 (1,635 tok/s aggregate)" in text
    assert "1.87× the SLO-compliant throughput" in text
    assert rec.bands[-1].rule == "arm meets the SLOs, the baseline does not"


def test_slo_breach_turns_a_level_into_a_loss(seed) -> None:
    # an absurd TTFT SLO cannot be checked on level-only data: it is reported, not guessed
    rec = recommend(seed, {"name": "ttft", "objective": "throughput", "max_ttft_p99_s": 1.0})
    assert any("could not be checked" in r for r in rec.reasons)
    # a per-user floor of 120 tok/s: MTP meets it at 1 only, the baseline nowhere
    rec = recommend(seed, {"name": "fast", "objective": "throughput", "min_user_tok_s": 120})
    judged = rec.levels.set_index("concurrency")
    assert judged.at[1, "outcome"] == "gain" and judged.at[1, "rule"] == "arm meets the SLOs, the baseline does not"
    assert judged.at[4, "rule"] == "both break an SLO" and judged.at[4, "outcome"] == "neutral"


def test_markdown_has_every_part(seed) -> None:
    md = recommend(seed, THROUGHPUT).to_markdown()
    for part in ("### batch", "| concurrency | outcome |", "**Why**", "**Caveats**", "**Next experiment**"):
        assert part in md


def test_server_gauges_show_memory_not_the_cap(tmp_path: Path) -> None:
    """Measured arms: the spec arm loses above its cap of 8, but served ~4 at once with a full pool."""
    fast = {c: {"tokens": 30, "step_s": 0.01, "ttft_s": 0.02} for c in (2, 16, 32)}
    spec = {2: {"tokens": 30, "step_s": 0.007, "ttft_s": 0.02},
            # requests wait ~3x their decode time before the first token: few decode at once
            16: {"tokens": 30, "step_s": 0.006, "ttft_s": 0.9},
            32: {"tokens": 30, "step_s": 0.006, "ttft_s": 1.8}}
    gauges = {c: {"server_running_max": 5.0, "server_kv_usage_max": 0.97} for c in (16, 32)}
    study = tmp_path / "study"
    write_measured(study / "baseline", "baseline", fast)
    write_measured(study / "spec", "spec", spec, level_extra=gauges,
                   server={"max_running_requests": 8, "mem_fraction_static": 0.7})
    comp = compare(load_result_sets(study))
    rec = recommend(comp, THROUGHPUT)
    assert rec.verdict == "enable_up_to"
    text = " ".join(rec.reasons)
    assert "max_running_requests = 8" in text and "cannot be the whole story" in text
    assert "never ran more than 5 requests at once at 16, 32" in text
    assert "97% full there: memory, not the cap, limited admission" in text
    assert rec.next_experiment.startswith("The cap did not bind")
    assert "--mem-fraction-static (now 0.7)" in rec.next_experiment


def test_a_failed_level_counts_against_the_arm(tmp_path: Path) -> None:
    """No successful requests at a level (aggregate 0, no per-user figure) is a loss, not a gap."""
    import pandas as pd

    from helpers import write_level_only

    base = write_level_only(tmp_path / "baseline", "baseline", {1: (100.0, 100.0), 4: (300.0, 80.0), 16: (800.0, 60.0)})
    spec = write_level_only(tmp_path / "spec", "spec", {1: (120.0, 120.0), 4: (360.0, 96.0), 16: (0.0, 1.0)})
    frame = pd.read_csv(spec / "levels.csv")
    frame["request_tok_s_mean"] = frame["request_tok_s_mean"].astype(float)
    frame.loc[frame["concurrency"] == 16, "request_tok_s_mean"] = float("nan")
    frame["n_ok"] = [8, 8, 0]
    frame["error_rate"] = [0.0, 0.0, 1.0]
    frame.to_csv(spec / "levels.csv", index=False)
    comp = compare(load_result_sets([base, spec]))
    for profile in (THROUGHPUT, LATENCY):
        rec = recommend(comp, profile)
        judged = rec.levels.set_index("concurrency")
        assert judged.at[16, "outcome"] == "loss" and judged.at[16, "rule"] == "no successful requests"
        assert rec.verdict == "enable_up_to", profile
        assert any("At concurrency 16 SPEC counts as a loss: no successful requests" in r for r in rec.reasons)


def test_more_failures_lose_a_level(tmp_path: Path) -> None:
    import pandas as pd

    from helpers import write_level_only

    base = write_level_only(tmp_path / "baseline", "baseline", {1: (100.0, 100.0), 4: (300.0, 80.0)})
    spec = write_level_only(tmp_path / "spec", "spec", {1: (120.0, 120.0), 4: (360.0, 96.0)})
    frame = pd.read_csv(spec / "levels.csv")
    frame["error_rate"] = [0.0, 0.05]
    frame.to_csv(spec / "levels.csv", index=False)
    rec = recommend(compare(load_result_sets([base, spec])), LATENCY)
    judged = rec.levels.set_index("concurrency")
    assert judged.at[4, "outcome"] == "loss" and judged.at[4, "rule"] == "fails more requests (5.0% vs 0.0%)"


def test_headlines_name_gains_and_no_difference(tmp_path: Path) -> None:
    comp = compare(study(tmp_path, mostly=scaled({1: 1.2, 4: 1.01, 16: 1.0})))
    rec = recommend(comp, THROUGHPUT)
    assert rec.verdict == "enable"
    assert rec.headline == "Enable MOSTLY: it wins on aggregate throughput at concurrency 1 and makes no measurable difference at 4, 16."
    assert "+1.0% at 4 (no measurable difference)" in rec.reasons[1]  # per-user sentence respects the noise band
    rec = recommend(compare(study(tmp_path / "b", worse=scaled({1: 0.8, 4: 1.0, 16: 1.0}))), THROUGHPUT)
    assert rec.headline == ("Keep speculation off: it loses on aggregate throughput at concurrency 1 and makes no "
                            "measurable difference at 4, 16.")


def test_tight_interval_on_a_tiny_delta_is_not_a_gain() -> None:
    import pandas as pd

    from specsweep.recommend import _sign

    row = pd.Series({"delta_pct": 0.5, "ci_low_pct": 0.2, "ci_high_pct": 0.8, "ci_kind": "bootstrap", "better": "higher"})
    assert _sign(row, 2.0) == 0
    row = pd.Series({"delta_pct": 5.0, "ci_low_pct": -1.0, "ci_high_pct": 11.0, "ci_kind": "bootstrap", "better": "higher"})
    assert _sign(row, 2.0) == 0
    row = pd.Series({"delta_pct": 5.0, "ci_low_pct": 3.0, "ci_high_pct": 7.0, "ci_kind": "bootstrap", "better": "lower"})
    assert _sign(row, 2.0) == -1
