"""Joins, deltas, intervals, crossover, Little's law and Pareto on hand-computed data."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import SEED, write_level_only, write_measured
from specsweep.compare import WorkloadMismatchError, bootstrap_ratio_ci, compare, pareto_frontier
from specsweep.store import load_result_sets

BASE = {1: (100.0, 100.0), 4: (300.0, 80.0), 16: (800.0, 60.0)}


def study(tmp_path: Path, **arms: dict[int, tuple[float, float]]) -> list:
    sets = [write_level_only(tmp_path / "baseline", "baseline", BASE)]
    sets += [write_level_only(tmp_path / name, name, rows) for name, rows in arms.items()]
    return load_result_sets(sets)


def scaled(agg: dict[int, float], user: dict[int, float] | None = None) -> dict[int, tuple[float, float]]:
    user = user or agg
    return {c: (BASE[c][0] * agg[c], BASE[c][1] * user[c]) for c in BASE}


def test_deltas_always_win_always_lose(tmp_path: Path) -> None:
    comp = compare(study(tmp_path, win=scaled({1: 1.2, 4: 1.2, 16: 1.2}), lose=scaled({1: 0.8, 4: 0.8, 16: 0.8})))
    assert comp.arms == ["baseline", "win", "lose"]
    assert comp.user_metric == "request_tok_s_mean"
    for arm, want in (("win", 20.0), ("lose", -20.0)):
        d = comp.delta(arm, "output_tok_s")
        assert d["concurrency"].tolist() == [1, 4, 16]
        assert d["delta_pct"].tolist() == pytest.approx([want] * 3)
        assert (d["ci_kind"] == "none").all() and d["within_noise"].isna().all()
        assert comp.crossover(arm).empty
    row = comp.delta("win", "output_tok_s").iloc[1]
    assert row["baseline_value"] == 300 and row["arm_value"] == pytest.approx(360)


def test_crossover_interpolated_in_log2(tmp_path: Path) -> None:
    # +20% at 1, +10% at 4, -10% at 16: the sign changes halfway between log2(4)=2 and log2(16)=4 -> 8
    comp = compare(study(tmp_path, cross=scaled({1: 1.2, 4: 1.1, 16: 0.9})))
    cx = comp.crossover("cross")
    assert len(cx) == 1
    r = cx.iloc[0]
    assert (r.c_low, r.c_high, r.direction) == (4, 16, "gain_to_loss")
    assert r.crossover_concurrency == pytest.approx(8.0)


def test_crossover_on_the_seed() -> None:
    comp = compare(load_result_sets(SEED))
    r = comp.crossover("mtp").iloc[0]
    assert (r.c_low, r.c_high) == (32, 64)
    # 32 -> +10.52%, 64 -> -32.49%: log2 x = 5 + 10.52 / (10.52 + 32.49)
    assert r.crossover_concurrency == pytest.approx(2 ** (5 + 10.5224 / (10.5224 + 32.4882)), rel=1e-4)
    d = comp.delta("mtp", "output_tok_s").set_index("concurrency")["delta_pct"]
    assert d.round(0).tolist() == [12, 40, 38, 11, -32, -42]
    u = comp.delta("mtp", "request_tok_s_mean")["delta_pct"]
    assert (u > 0).all()


def test_effective_concurrency_estimate_for_level_only_data() -> None:
    comp = compare(load_result_sets(SEED))
    mtp = comp.arm_levels("mtp").set_index("concurrency")
    assert (mtp["effective_concurrency_kind"] == "estimate").all()
    assert mtp.at[128, "concurrency_estimate"] == pytest.approx(1635 / 64.5)
    assert mtp.at[64, "concurrency_estimate"] == pytest.approx(1571 / 65.7)
    assert comp.caps == {"baseline": None, "mtp": 48}


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


def test_baseline_must_exist(tmp_path: Path) -> None:
    sets = study(tmp_path, win=scaled({1: 1.2, 4: 1.2, 16: 1.2}))
    with pytest.raises(ValueError, match=r"baseline arm 'base' is not among the result sets \(arms: baseline, win\)"):
        compare(sets, baseline="base")


def test_intervals_over_repeats_and_requests(tmp_path: Path) -> None:
    fast = {c: {"tokens": 50, "step_s": 0.010, "ttft_s": 0.05, "jitter": 0.05} for c in (1, 4)}
    slow = {c: {"tokens": 50, "step_s": 0.020, "ttft_s": 0.05, "jitter": 0.05} for c in (1, 4)}
    # three repeats each: intervals over repeats; the arm is twice as fast, far outside the noise
    rep = load_result_sets([write_measured(tmp_path / "r" / "baseline", "baseline", slow, repeats=3),
                            write_measured(tmp_path / "r" / "spec", "spec", fast, repeats=3)])
    comp = compare(rep)
    assert comp.user_metric == "user_tok_s_mean"
    d = comp.delta("spec", "output_tok_s")
    assert d["ci_kind"].str.startswith("Welch t over repeats (3 vs 3)").all()
    assert (d["ci_low_pct"] > 0).all() and not d["within_noise"].any()
    # one repeat: per-request statistics get intervals from the request samples, the aggregate none
    one = load_result_sets([write_measured(tmp_path / "o" / "baseline", "baseline", slow, seed=7),
                            write_measured(tmp_path / "o" / "spec", "spec", slow, seed=7)])
    comp1 = compare(one)
    u = comp1.delta("spec", "user_tok_s_mean")
    assert u["ci_kind"].str.startswith("bootstrap over requests").all()
    assert u["within_noise"].all()  # identical samples: the interval spans 0
    assert (comp1.delta("spec", "output_tok_s")["ci_kind"] == "none").all()
    assert comp1.levels["effective_concurrency_kind"].eq("measured").all()


def test_bootstrap_ratio_ci_brackets_the_truth() -> None:
    import numpy as np

    rng = np.random.default_rng(1)
    a, b = rng.normal(120, 5, 200), rng.normal(100, 5, 200)
    lo, hi = bootstrap_ratio_ci(a, b)
    assert lo < 20 < hi and hi - lo < 5
    assert all(np.isnan(bootstrap_ratio_ci(a[:1], b)))


def test_pareto_frontier() -> None:
    import pandas as pd

    pts = pd.DataFrame({"u": [10, 20, 15, 5, 20], "a": [100, 50, 40, 100, 60]})
    assert pareto_frontier(pts, "u", "a").tolist() == [True, False, False, False, True]


def test_welch_interval_is_honest_with_few_repeats() -> None:
    """Identical arms, noise only: a nominal 95% interval should exclude 0 about 5% of the time."""
    import numpy as np

    from specsweep.compare import welch_log_ratio_ci

    rng = np.random.default_rng(3)
    for n in (2, 3, 5):
        misses = 0
        trials = 2000
        for _ in range(trials):
            lo, hi = welch_log_ratio_ci(rng.normal(100, 5, n), rng.normal(100, 5, n))
            misses += not (lo <= 0 <= hi)
        assert misses / trials < 0.08, (n, misses / trials)
    lo, hi = welch_log_ratio_ci(np.array([110.0, 111, 109]), np.array([100.0, 101, 99]))
    assert 5 < lo < 10 < hi < 15
    assert all(np.isnan(welch_log_ratio_ci(np.array([1.0, 0.0]), np.array([1.0, 2.0]))))


def test_crossover_through_an_exact_zero() -> None:
    import pandas as pd

    from specsweep.compare import _crossovers

    def run(ds: list[float]) -> pd.DataFrame:
        return _crossovers(pd.DataFrame({"arm": "a", "metric": "m", "concurrency": [1, 4, 16], "delta_pct": ds}))

    assert run([5.0, 0.0, 5.0]).empty and run([-5.0, 0.0, -5.0]).empty
    cx = run([5.0, 0.0, -5.0])
    assert len(cx) == 1 and cx.iloc[0].crossover_concurrency == 4 and cx.iloc[0].direction == "gain_to_loss"
    assert run([-5.0, 0.0, 5.0]).iloc[0].direction == "loss_to_gain"
