"""Joins, deltas, the fitted delta curve and its band, crossovers, Little's law and Pareto."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cases import BASE, LEVELS, cross8, scaled, study
from helpers import SEED, base_meta, write_level_only, write_measured
from specsweep.analyze.compare import compare
from specsweep.analyze.crossover import curve_crossovers
from specsweep.analyze.curves import fit_delta_curve, smallest_detectable_pct
from specsweep.analyze.join import NoSharedLevelError
from specsweep.analyze.pareto import pareto_frontier
from specsweep.analyze.workload_match import WorkloadMismatchError
from specsweep.results.meta import Meta
from specsweep.results.store import load_result_sets

pytestmark = [pytest.mark.fast, pytest.mark.usefixtures("chart_defaults")]  # charts as the notebooks draw them

def test_deltas_always_win_always_lose(tmp_path: Path) -> None:
    comp = compare(study(tmp_path, win=scaled(1.2), lose=scaled(0.8)))
    assert comp.arms == ["baseline", "win", "lose"]
    assert comp.user_metric == "request_tok_s_mean"
    for arm, want, sign in (("win", 20.0, 1), ("lose", -20.0, -1)):
        d = comp.delta(arm, "output_tok_s")
        assert d["concurrency"].tolist() == list(LEVELS)
        assert d["delta_pct"].tolist() == pytest.approx([want] * 7)
        assert d["fit_delta_pct"].tolist() == pytest.approx([want] * 7)
        assert (d["credible"] == sign).all() and not d["within_noise"].any()
        assert d["ci_kind"].str.startswith("constant fit on log2(concurrency), noise from an assumed run-to-run "
                                           "noise of 3% per run").all()
        assert comp.crossover(arm).empty
    row = comp.delta("win", "output_tok_s").iloc[2]
    assert row["baseline_value"] == pytest.approx(BASE[4][0]) and row["arm_value"] == pytest.approx(1.2 * BASE[4][0])


def test_crossover_where_the_fitted_curve_crosses_zero(tmp_path: Path) -> None:
    sets = study(tmp_path, cross=scaled(cross8))
    # assumed noise (the default): the simplest curve within that noise, a line in log ratio, crosses near 8
    cx = compare(sets).crossover("cross")
    assert len(cx) == 1 and 6 <= cx.iloc[0].crossover_concurrency <= 9
    comp = compare(sets, assumed_noise_pct=None)  # residual noise: the exact curve, zero at 8
    cx = comp.crossover("cross")
    assert len(cx) == 1
    r = cx.iloc[0]
    assert (r.c_low, r.c_high, r.direction) == (4, 16, "gain_to_loss")
    assert r.crossover_concurrency == pytest.approx(8.0, rel=0.03)
    assert r.delta_low_pct == pytest.approx(10.0, abs=0.5) and r.delta_high_pct == pytest.approx(-10.0, abs=0.5)


def test_noise_alone_claims_no_crossover(tmp_path: Path) -> None:
    """Arms that differ by 3% run-to-run noise only: the old per-level rule found sign changes; the curve does not."""
    rng = np.random.default_rng(11)
    rows = {c: (BASE[c][0] * math.exp(0.03 * rng.standard_normal()), BASE[c][1] * math.exp(0.03 * rng.standard_normal()))
            for c in LEVELS}
    comp = compare(study(tmp_path, same=rows))
    d = comp.delta("same", "output_tok_s")
    signs = np.sign(d["delta_pct"].to_numpy())
    assert (signs[1:] != signs[:-1]).sum() >= 2  # the observed deltas do change sign several times
    assert comp.crossovers.empty
    assert (d["credible"] == 0).all()


def test_the_seed_with_assumed_noise_gains_at_4_to_16_and_loses_at_64_and_128() -> None:
    comp = compare(load_result_sets(SEED))
    d = comp.delta("mtp", "output_tok_s").set_index("concurrency")
    assert d["delta_pct"].round(0).tolist() == [12, 40, 38, 11, -32, -42]
    assert d["credible"].tolist() == [0, 1, 1, 0, -1, -1]  # +12% and +11% lie within 3% noise's band
    assert d["ci_kind"].str.contains("assumed run-to-run noise of 3% per run").all()
    cx = comp.crossover("mtp")
    assert len(cx) == 1 and (cx.iloc[0].c_low, cx.iloc[0].c_high) == (16, 64)
    assert 32 < cx.iloc[0].crossover_concurrency < 64
    assert comp.assumed_noise_pct == 3.0


def test_the_seed_supports_no_crossover_from_its_residuals() -> None:
    comp = compare(load_result_sets(SEED), assumed_noise_pct=None)
    d = comp.delta("mtp", "output_tok_s").set_index("concurrency")
    # six single runs and a bumpy curve: residual noise is large, no level is credible, no crossover
    assert comp.crossover("mtp").empty
    assert (d["credible"] == 0).all() and d.at[128, "ci_low_pct"] < -42 < d.at[128, "ci_high_pct"]
    curve = comp.curve("mtp", "output_tok_s")
    assert curve.noise.startswith("the residuals") and smallest_detectable_pct(curve) > 20
    # per-request speed is up at every level (+5.6% to +57%), but unevenly: not credible either
    u = comp.delta("mtp", "request_tok_s_mean")
    assert (u["delta_pct"] > 0).all() and (u["credible"] == 0).all()


def test_littles_law_estimate_for_level_only_data() -> None:
    comp = compare(load_result_sets(SEED))
    mtp = comp.arm_levels("mtp").set_index("concurrency")
    base = comp.arm_levels("baseline").set_index("concurrency")
    # W = C × output tokens ÷ aggregate tok/s
    assert mtp.at[128, "e2e_mean_est_s"] == pytest.approx(128 * 1000 / 1635)
    assert base.at[128, "e2e_mean_est_s"] == pytest.approx(128 * 1000 / 2800)
    d = comp.delta("mtp", "e2e_mean_est_s").set_index("concurrency")
    assert d.at[128, "delta_pct"] == pytest.approx((2800 / 1635 - 1) * 100)
    assert d.at[128, "better"] == "lower"
    assert (mtp["effective_concurrency_kind"] == "estimate").all()
    assert mtp.at[128, "concurrency_estimate"] == pytest.approx(1635 / 64.5)
    assert comp.caps == {"baseline": None, "mtp": 48}


def test_no_shared_level_fails_in_one_line(tmp_path: Path) -> None:
    base = write_level_only(tmp_path / "baseline", "baseline", {1: (100.0, 100.0), 2: (190.0, 95.0)})
    spec = write_level_only(tmp_path / "spec", "spec", {4: (300.0, 80.0), 8: (500.0, 70.0)})
    with pytest.raises(NoSharedLevelError) as err:
        compare(load_result_sets([base, spec]))
    msg = str(err.value)
    assert "\n" not in msg
    assert "arm 'spec' (concurrency 4, 8)" in msg and "baseline 'baseline' (concurrency 1, 2)" in msg
    assert "share no concurrency level" in msg


def test_workload_mismatch_refused_with_the_difference(tmp_path: Path) -> None:
    a = write_level_only(tmp_path / "baseline", "baseline", BASE)
    b = write_level_only(tmp_path / "spec", "spec", BASE, workload={"output_tokens": 200, "kind": "prompt-file"})
    sets = load_result_sets([a, b])
    with pytest.raises(WorkloadMismatchError) as err:
        compare(sets)
    msg = str(err.value)
    assert "kind 'prompt-file' vs 'random-ids'" in msg and "output_tokens 200 vs 100" in msg
    assert "allow_workload_mismatch=True" in msg
    comp = compare(sets, allow_workload_mismatch=True)
    assert any("explicitly allowed" in n for n in comp.notes)


def test_natural_and_fixed_output_lengths_are_not_compared_unless_allowed(tmp_path: Path) -> None:
    """A missing output_length is "fixed" (result sets written before it existed): an old set
    compares with a fixed one, never silently with a natural one."""
    old = write_level_only(tmp_path / "baseline", "baseline", BASE)  # no output_length recorded
    fixed = write_level_only(tmp_path / "fixed", "fixed", BASE, workload={"output_length": "fixed"})
    natural = write_level_only(tmp_path / "natural", "natural", BASE, workload={"output_length": "natural"})
    assert compare(load_result_sets([old, fixed])).arms == ["baseline", "fixed"]
    sets = load_result_sets([old, natural])
    with pytest.raises(WorkloadMismatchError, match=r"output_length 'natural' vs 'fixed'"):
        compare(sets)
    comp = compare(sets, allow_workload_mismatch=True)
    assert any("output_length 'natural' vs 'fixed'" in n and "explicitly allowed" in n for n in comp.notes)


def test_baseline_must_exist(tmp_path: Path) -> None:
    sets = study(tmp_path, win=scaled(1.2))
    with pytest.raises(ValueError, match=r"baseline arm 'base' is not among the result sets \(arms: baseline, win\)"):
        compare(sets, baseline="base")


def test_noise_from_repeats_and_from_requests(tmp_path: Path) -> None:
    fast = {c: {"tokens": 50, "step_s": 0.010, "ttft_s": 0.05, "jitter": 0.05} for c in (1, 4)}
    slow = {c: {"tokens": 50, "step_s": 0.020, "ttft_s": 0.05, "jitter": 0.05} for c in (1, 4)}
    # three repeats each: noise from the repeats; the arm is twice as fast, far outside the noise
    rep = load_result_sets([write_measured(tmp_path / "r" / "baseline", "baseline", slow, repeats=3),
                            write_measured(tmp_path / "r" / "spec", "spec", fast, repeats=3)])
    comp = compare(rep)
    assert comp.user_metric == "user_tok_s_mean"
    d = comp.delta("spec", "output_tok_s")
    assert d["ci_kind"].str.contains(r"noise from repeats \(3 vs 3 runs per level\)").all()
    assert (d["ci_low_pct"] > 0).all() and not d["within_noise"].any()
    assert not comp.single_run()
    # one repeat: per-request statistics get their noise from a bootstrap over requests, never less than
    # the assumed run-to-run noise; the aggregate has only the assumption
    one = load_result_sets([write_measured(tmp_path / "o" / "baseline", "baseline", slow, seed=7),
                            write_measured(tmp_path / "o" / "spec", "spec", slow, seed=7)])
    comp1 = compare(one)
    u = comp1.delta("spec", "user_tok_s_mean")
    assert u["ci_kind"].str.contains("bootstrap over each level's requests").all()
    assert u["ci_kind"].str.contains("at least the assumed run-to-run noise of 3%").all()
    assert u["within_noise"].all()  # identical samples: the band spans 0
    assert comp1.delta("spec", "output_tok_s")["ci_kind"].str.contains("assumed run-to-run noise").all()
    # without the assumption: within-run bootstrap only, and two single aggregate levels have no noise at all
    bare = compare(one, assumed_noise_pct=None)
    assert bare.delta("spec", "user_tok_s_mean")["ci_kind"].str.contains("within-run noise only").all()
    assert (bare.delta("spec", "output_tok_s")["ci_kind"] == "none").all()
    assert comp1.single_run() and comp1.levels["effective_concurrency_kind"].eq("measured").all()


def test_fit_picks_the_simplest_curve_the_noise_allows() -> None:
    cs = np.array(LEVELS, float)
    x = np.log2(cs)
    v = np.full(7, 2 / 3)  # 3 runs per arm
    # constant truth, noise known from repeats: a constant fit, one value everywhere
    flat = fit_delta_curve(cs, np.array([0.10, 0.11, 0.09, 0.10, 0.10, 0.11, 0.09]), v, 0.0004, 28)
    assert flat.model == "constant" and np.ptp(flat.fitted) == pytest.approx(0)
    # linear truth: a linear fit
    line = fit_delta_curve(cs, 0.3 - 0.1 * x, v, 0.0004, 28)
    assert line.model == "linear" and line.fitted == pytest.approx(0.3 - 0.1 * x)
    # a sharp step no cubic follows, with tight noise: the level values themselves
    step = fit_delta_curve(cs, np.array([0.1, 0.1, 0.1, 0.1, -0.3, -0.3, -0.3]), v, 0.0001, 28)
    assert step.model.startswith("level values") and step.fitted == pytest.approx([0.1] * 4 + [-0.3] * 3)
    assert step.predict(8 * 2 ** 0.5)[0] == pytest.approx(-0.1)  # halfway between 8 and 16 on log2
    # too few levels to estimate noise without repeats
    assert fit_delta_curve([1, 2], [0.1, 0.2]) is None


def test_band_is_simultaneous_over_levels_and_metrics() -> None:
    """Identical arms, noise only: with 7 levels the band covers 0 at every level in ≥ 95% of draws."""
    rng = np.random.default_rng(3)
    cs = np.array(LEVELS, float)
    misses = 0
    for _ in range(400):
        la, lb = 0.03 * rng.standard_normal((7, 3)), 0.03 * rng.standard_normal((7, 3))
        ss = float(((la - la.mean(1, keepdims=True)) ** 2).sum() + ((lb - lb.mean(1, keepdims=True)) ** 2).sum())
        curve = fit_delta_curve(cs, la.mean(1) - lb.mean(1), np.full(7, 2 / 3), ss / 28, 28)
        misses += bool((curve.credible != 0).any())
    assert misses / 400 <= 0.05
    wide = fit_delta_curve(cs, np.zeros(7) + 0.01, np.full(7, 2 / 3), 0.0009, 28, family=3)
    narrow = fit_delta_curve(cs, np.zeros(7) + 0.01, np.full(7, 2 / 3), 0.0009, 28, family=1)
    assert wide.crit > narrow.crit and "7 levels × 3 verdict metrics" in wide.method()


def test_crossover_needs_credible_levels_on_both_sides() -> None:
    cs = np.array(LEVELS, float)
    v = np.full(7, 2 / 3)
    # a step from +10% to −10% between 8 and 16 with tight noise: one crossover, between 8 and 16
    step = fit_delta_curve(cs, np.log([1.1] * 4 + [0.9] * 3), v, 0.0001, 28)
    (cx,) = curve_crossovers(step)
    assert (cx["c_low"], cx["c_high"], cx["direction"]) == (8, 16, "gain_to_loss")
    assert 8 < cx["crossover_concurrency"] < 16
    # the same shape buried in noise: no credible level on either side, no crossover
    noisy = fit_delta_curve(cs, np.log([1.01] * 4 + [0.99] * 3), v, 0.01, 28)
    assert curve_crossovers(noisy) == []


def test_chunk_counted_arms_and_meta_warnings_are_recorded(tmp_path: Path) -> None:
    slow = {c: {"tokens": 30, "step_s": 0.02, "ttft_s": 0.05, "jitter": 0.05} for c in (1, 4, 16)}
    base = write_measured(tmp_path / "baseline", "baseline", slow)
    spec = write_measured(tmp_path / "spec", "spec", slow, warnings=["the server restarted during level 16"])
    for name in ("levels.parquet", "requests.parquet"):
        frame = pd.read_parquet(spec / name)
        frame["token_source"] = "chunks"
        frame.to_parquet(spec / name)
    comp = compare(load_result_sets([base, spec]))
    assert comp.chunk_counted == {"spec": "levels and requests"}
    assert comp.warnings == [("spec", "the server restarted during level 16")]
    # no acceptance drawn for an arm whose tokens were counted from chunks
    from specsweep.report import charts

    levels = comp.levels.copy()
    levels["spec_accept_length"] = 1.5
    shown = dataclasses.replace(comp, levels=levels)
    assert charts.acceptance_chart(shown) is not None  # the baseline's (a made-up figure) still draws
    assert charts.acceptance_chart(dataclasses.replace(shown, levels=levels[levels["arm"] == "spec"])) is None


def test_pareto_frontier() -> None:
    pts = pd.DataFrame({"u": [10, 20, 15, 5, 20], "a": [100, 50, 40, 100, 60]})
    assert pareto_frontier(pts, "u", "a").tolist() == [True, False, False, False, True]


def test_delta_rows_agree_with_the_deltas_frame_also_after_a_selection() -> None:
    """``delta_rows`` (what verdicts read) holds exactly the rows of ``deltas``, and a comparison cut
    by ``charts.select`` after it was first read answers for the cut, not the whole."""
    from specsweep.analyze.compare import records
    from specsweep.report import charts

    comp = compare(load_result_sets([SEED]), "baseline")
    for (arm, metric), _ in comp.deltas.groupby(["arm", "metric"]):
        frame = {int(r["concurrency"]): r for r in records(comp.delta(arm, metric))}
        assert comp.delta_rows(arm, metric).keys() == frame.keys()
        for c, row in frame.items():
            got = comp.delta_rows(arm, metric)[c]
            assert got.keys() == row.keys()
            assert all(got[k] == v or (isinstance(v, float) and math.isnan(v) and math.isnan(got[k]))
                       for k, v in row.items()), (arm, metric, c)
    cut = charts.select(comp, levels=[4, 16])
    assert sorted(cut.delta_rows("mtp", "output_tok_s")) == [4, 16]
    assert sorted(comp.delta_rows("mtp", "output_tok_s")) == [1, 4, 16, 32, 64, 128]


def test_crossover_roots_match_a_reference_root_finder_on_many_curves() -> None:
    """zero_between solves its bracket exactly (polynomial roots, or the line piece of the level values);
    scipy's brentq on the same bracket is the reference, over random curves of both kinds."""
    from scipy.optimize import brentq

    from specsweep.analyze.crossover import zero_between

    rng = np.random.default_rng(1)
    kinds, n, worst = set(), 0, 0.0
    for trial in range(120):
        k = int(rng.integers(3, 8))
        c = 2.0 ** np.arange(k)
        y = rng.normal(0, 0.2, k) + np.linspace(0.3, -0.3, k) * rng.uniform(0.5, 2)
        nv = None if trial % 2 else 0.01
        cur = fit_delta_curve(c, y, noise_var=nv, noise_df=10 if nv else 0)
        if cur is None:
            continue
        for j in range(k - 1):
            z = zero_between(cur, c[j], c[j + 1])
            xs = np.linspace(math.log2(c[j]), math.log2(c[j + 1]), 201)
            vals = np.array([cur.predict(2 ** x)[0] for x in xs])
            idx = np.nonzero(np.sign(vals[:-1]) * np.sign(vals[1:]) <= 0)[0]
            assert (z is None) == (not len(idx))
            if z is None or vals[idx[0]] == 0 or vals[idx[0] + 1] == 0:
                continue
            i = int(idx[0])
            ref = brentq(lambda x: cur.predict(2 ** x)[0], xs[i], xs[i + 1], xtol=1e-13)  # noqa: B023 - used at once
            worst = max(worst, abs(math.log2(z) - ref))
            kinds.add(cur.poly is not None)
            n += 1
    assert n > 60 and kinds == {True, False}
    assert worst < 1e-9


def test_level_means_match_a_pandas_groupby_on_many_frames() -> None:
    """``join.aggregate_levels`` averages repeats in numpy; on random level frames (1-4 repeats
    a level, a repeat with two rows, levels out of order, missing values, a level missing a metric
    altogether, int and bool columns) its means and repeat counts are pandas' ``groupby().mean()``
    and ``nunique()``, to the last bits of a float sum; frames with pandas' nullable dtypes take
    pandas' own path."""
    from specsweep.analyze.join import aggregate_levels
    from specsweep.results.store import ResultSet

    def by_pandas(rs: ResultSet, lv: pd.DataFrame) -> pd.DataFrame:
        cols = [c for c in lv.columns if c not in {"run_id", "arm", "concurrency"}]
        agg = lv.groupby("concurrency", as_index=False)[cols].mean()
        agg["n_repeats"] = lv.groupby("concurrency")["repeat"].nunique().to_numpy()
        agg = agg.drop(columns=["repeat"])
        agg.insert(0, "arm", rs.arm)
        agg["has_requests"] = False
        return agg

    rng = np.random.default_rng(7)
    for case in range(200):
        levels = rng.permutation([1, 2, 4, 8, 16, 32, 64])[: rng.integers(1, 8)]
        rows = [(int(c), r) for c in levels for r in range(int(rng.integers(1, 5)))]
        rows += rows[: int(rng.integers(0, 3))]  # a repeat with two rows counts once
        rng.shuffle(rows)
        n = len(rows)
        lv = pd.DataFrame({
            "run_id": [f"r{r}" for _, r in rows], "arm": "spec",
            "concurrency": [c for c, _ in rows], "repeat": [r for _, r in rows],
            "output_tok_s": rng.lognormal(7, 2, n),
            "ttft_p99_s": np.where(rng.random(n) < 0.3, np.nan, rng.lognormal(-2, 1, n)),
            "errors": rng.integers(0, 3, n), "saturated": rng.random(n) < 0.5,
        })
        lv.loc[lv["concurrency"] == levels[0], "ttft_p99_s"] = np.nan  # one level with no value at all
        if case % 10 == 0:
            lv["errors"] = lv["errors"].astype("Int64")  # nullable: pandas' path
        rs = ResultSet(path=Path("spec"), meta=Meta.model_validate(base_meta("spec")), levels=lv)
        got, want = aggregate_levels(rs, lv), by_pandas(rs, lv)
        assert list(got.columns) == list(want.columns)
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-13, atol=0)


@pytest.mark.fast
def test_a_band_too_wide_for_a_float_is_unbounded_not_a_crash() -> None:
    """A curve fitted to a few wildly scattered runs can have a half-width in ln units beyond what e^z holds
    (a resampled rerun of a real llama.cpp study hit it); the delta row's band is then +inf, and the
    row's other figures stay finite."""
    from types import SimpleNamespace

    from specsweep.analyze.compare import _delta_row
    from specsweep.analyze.curves import pct_of_log_ratio

    assert pct_of_log_ratio(800.0) == math.inf
    assert pct_of_log_ratio(math.log(2.0)) == pytest.approx(100.0)
    curve = SimpleNamespace(fitted=np.array([0.1]), half_width=np.array([900.0]), credible=np.array([0]),
                            observed=np.array([0.12]), own_se=None, method=lambda: "fit")
    row = _delta_row("spec", "output_tok_s", 8, 100.0, 110.0, curve, 0)  # type: ignore[arg-type]
    assert row["fit_delta_pct"] == pytest.approx((math.exp(0.1) - 1) * 100)
    assert row["ci_high_pct"] == math.inf and math.isfinite(row["delta_pct"])
