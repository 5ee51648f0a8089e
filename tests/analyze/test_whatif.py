"""What-if predictions on synthetic data drawn from several noise models, the seed's level-only data,
refusals and bad parameters (no server: see ``test_whatif_refserver.py`` for ground truth)."""
from __future__ import annotations

import gc
import math
from pathlib import Path

import numpy as np
import pytest

from helpers import SEED, write_level_only, write_measured
from specsweep.analyze import whatif
from specsweep.analyze.compare import compare
from specsweep.analyze.whatif.decompose import decompose
from specsweep.analyze.whatif.observe import observe
from specsweep.analyze.whatif.setting import model_for
from specsweep.analyze.whatif.validate import loo, loo_summary
from specsweep.report import whatif_section as section
from specsweep.results.store import load_result_set, load_result_sets

pytestmark = [pytest.mark.fast, pytest.mark.usefixtures("chart_defaults")]  # charts as the notebooks draw them

LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]


def truth(c: float, cap: float, fixed: float, per: float, accept: float) -> tuple[float, float]:
    """A closed loop whose server runs n = min(C, cap) requests at per-user speed accept / (fixed + per × n)."""
    n = min(c, cap)
    user = accept / (fixed + per * n)
    return n * user, user


def noisy(rng: np.random.Generator, model: str, sd: float) -> float:
    if model == "gauss":
        return 1 + sd * rng.standard_normal()
    if model == "lognormal":
        return float(np.exp(sd * rng.standard_normal()))
    if model == "student3":  # heavy tails, same scale
        return 1 + sd * rng.standard_t(3) / math.sqrt(3)
    raise AssertionError(model)


def level_only_case(tmp: Path, rng: np.random.Generator, model: str, sd: float, levels: list[int]):
    cap = float(rng.choice([24, 40, 48]))
    fixed, per, accept = rng.uniform(5e-3, 12e-3), rng.uniform(5e-5, 3e-4), 1.0
    rows = {}
    for c in levels:
        a, u = truth(c, cap, fixed, per, accept)
        rows[c] = (a * noisy(rng, model, sd), u * noisy(rng, model, sd))
    folder = write_level_only(tmp, "mtp", rows, server={"max_running_requests": 64, "speculative_algorithm": "EAGLE"})
    base = write_level_only(tmp.parent / (tmp.name + "-b"), "baseline", {c: truth(c, 1e9, fixed, per, 1.0) for c in levels})
    sets = [load_result_set(base), load_result_set(folder)]
    return compare(sets), sets, (cap, fixed, per, accept)


@pytest.mark.parametrize("model", ["gauss", "lognormal", "student3"])
def test_unmeasured_levels_fall_in_the_band_across_noise_models(tmp_path: Path, model: str) -> None:
    """Predicting the levels a sweep skipped (level-only data, 3 % noise): the truth lies inside the band
    in most draws, and the error stays near the noise."""
    rng = np.random.default_rng({"gauss": 1, "lognormal": 2, "student3": 3}[model])
    covered, errors = [], []
    for k in range(15):
        comp, sets, (cap, fixed, per, accept) = level_only_case(tmp_path / f"{model}{k}", rng, model, 0.03,
                                                                [1, 4, 16, 64, 128])
        p = whatif.predict(comp, "mtp", concurrency=[8, 32, 96], sets=sets, n_boot=100)
        for row in p.to_dict("records"):
            assert not row["refused"], row["why"]
            a, _ = truth(row["concurrency"], cap, fixed, per, accept)
            covered.append(row["aggregate_tok_s_lo"] <= a <= row["aggregate_tok_s_hi"])
            errors.append(abs(row["aggregate_tok_s"] / a - 1) * 100)
    assert np.mean(covered) >= 0.8, np.mean(covered)
    assert np.median(errors) < 6.0, np.median(errors)


def test_noise_free_level_only_data_are_predicted_almost_exactly(tmp_path: Path) -> None:
    """Without noise the leave-one-level-out error is the interpolation's alone: small on average; the level
    where the limit starts to bind (level-only data cannot tell it from the trend) is the worst."""
    rng = np.random.default_rng(7)
    for k in range(10):
        comp, sets, (cap, fixed, per, accept) = level_only_case(tmp_path / f"c{k}", rng, "gauss", 0.0, LEVELS)
        table = loo(model_for(comp, "mtp", sets, n_boot=20))
        s = loo_summary(table)
        assert s["aggregate_tok_s_mean_abs_pct"] < 3.0 and s["user_tok_s_mean_abs_pct"] < 3.0, table
        # the smallest batch has no neighbour below it: refused, never extrapolated
        assert bool(table.iloc[0]["refused"]) and "extrapolation" in table.iloc[0]["why"]


def test_a_measured_level_is_predicted_by_its_measurement(tmp_path: Path) -> None:
    levels = {c: {"tokens": 40, "step_s": 0.002 + 0.0002 * c, "ttft_s": 0.01, "tokens_per_chunk": 1}
              for c in (1, 4, 16)}
    rs = load_result_set(write_measured(tmp_path / "b", "baseline", levels))
    comp = compare([rs])
    p = whatif.predict(comp, "baseline", sets=[rs])
    lv = comp.arm_levels("baseline")
    assert np.allclose(p["aggregate_tok_s"], lv["output_tok_s"]) and np.allclose(p["user_tok_s"], lv["user_tok_s_mean"])
    assert p["measured"].all() and (p["aggregate_tok_s_lo"] <= p["aggregate_tok_s"]).all()
    assert (p["aggregate_tok_s_hi"] >= p["aggregate_tok_s"]).all()
    # between measured levels the per-user speed lies between its neighbours' (monotone interpolation)
    mid = whatif.predict(comp, "baseline", concurrency=[2, 8], sets=[rs]).set_index("concurrency")
    u = lv.set_index("concurrency")["user_tok_s_mean"]
    assert u[4] <= mid.at[2.0, "user_tok_s"] <= u[1] and u[16] <= mid.at[8.0, "user_tok_s"] <= u[4]


def seed() -> tuple:
    sets = load_result_sets(SEED)
    return compare(sets), sets


def test_the_seed_cap_question_is_answered_with_its_assumption() -> None:
    comp, sets = seed()
    p = whatif.predict(comp, "mtp", max_running_requests=128, concurrency=[48, 64, 96, 128], sets=sets)
    assert not p["refused"].any() and (p["limited_by"] == "KV pool").all()
    measured = comp.arm_levels("mtp").set_index("concurrency")["output_tok_s"]
    # the arm never ran more than ~25 of its 48 allowed requests, so raising the cap changes nothing
    assert p["running_requests"].max() < 48
    assert p.iloc[-1]["aggregate_tok_s_lo"] <= measured[128] <= p.iloc[-1]["aggregate_tok_s_hi"]
    md = section.markdown(comp, sets)
    assert "would raising max_running_requests from 48 to 128" in md and "by assumption" in md
    assert "per-request tok/s is taken to exclude queueing" in md
    nxt = section.next_experiment(comp, sets)
    assert nxt is not None and nxt["arm"] == "mtp" and nxt["sentence"] in md
    assert nxt["prediction"]["refused"] or (
        nxt["prediction"]["aggregate_tok_s_lo"] <= nxt["baseline_aggregate_tok_s"] <= nxt["prediction"]["aggregate_tok_s_hi"])
    # the validation figures on the page are the computed ones
    s = loo_summary(loo(model_for(comp, "mtp", sets, n_boot=20)))
    assert f"{s['aggregate_tok_s_mean_abs_pct']:,.2f} %" in md or f"{s['aggregate_tok_s_mean_abs_pct']:,.1f} %" in md


def test_decomposition_factors_multiply_to_the_aggregate_ratio() -> None:
    comp, sets = seed()
    d = decompose(comp, "mtp", sets)
    assert len(d) == 6 and d["split"].all()
    ratio = 1 + d["aggregate_delta_pct"] / 100
    product = d["running_factor"] * d["batch_factor"] * d["spec_factor"] * d["other_factor"]
    assert np.allclose(ratio, product)
    points = d[["running_points", "batch_points", "spec_points", "other_points"]].sum(axis=1)
    assert np.allclose(points, d["aggregate_delta_pct"])
    spec = section.chart(comp, sets).to_dict()
    assert spec["mark"] == {"type": "bar"} and len(next(iter(spec["datasets"].values()))) == 6 * 4
    at128 = d.set_index("concurrency").loc[128.0]
    # at 128 the fewer running requests cost more than the whole loss; speculation itself still gains
    assert at128["running_points"] < at128["aggregate_delta_pct"] < 0 < at128["spec_points"]


@pytest.mark.parametrize("kwargs, match", [
    ({"max_running_requests": 0}, "max_running_requests=0"),
    ({"max_running_requests": 2.5}, "max_running_requests=2.5"),
    ({"mem_fraction_static": 1.5}, "mem_fraction_static=1.5"),
    ({"max_total_num_tokens": 100, "mem_fraction_static": 0.8}, "not both"),
    ({"concurrency": [0]}, "concurrency="),
    ({"mem_fraction_static": 0.8}, "mem_fraction_static=0.8"),
])
def test_bad_parameters_name_themselves(kwargs: dict, match: str) -> None:
    comp, sets = seed()
    with pytest.raises(whatif.WhatIfError, match=match):
        whatif.predict(comp, "mtp", sets=sets, **kwargs)


@pytest.mark.parametrize("name", ["max_running_requests", "max_total_num_tokens", "mem_fraction_static",
                                  "gpu_mem_gib", "accept_length", "output_tokens", "concurrency"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e308, 10**400, True, False, np.bool_(True), "8"])
def test_non_finite_huge_and_boolean_parameters_are_whatif_errors(name: str, value: object) -> None:
    comp, sets = seed()
    kwargs = {name: [value] if name == "concurrency" else value}
    if name == "gpu_mem_gib":
        kwargs["mem_fraction_static"] = 0.8
    with pytest.raises(whatif.WhatIfError, match=f"{name}="):
        whatif.predict(comp, "mtp", sets=sets, **kwargs)


def test_offered_concurrency_far_beyond_the_measured_levels_is_refused() -> None:
    """The seed measured up to 128: the queue beyond the running requests is not extrapolated without end."""
    comp, sets = seed()
    p = whatif.predict(comp, "mtp", concurrency=[1e6, 1e9, 257, 256], max_running_requests=4, sets=sets)
    assert p["refused"].tolist()[:3] == [True, True, True]
    assert all("beyond 2× the largest level arm 'mtp' measured (128)" in why for why in p["why"][:3])
    assert p[["ttft_p50_s", "e2e_p50_s", "aggregate_tok_s"]].iloc[:3].isna().all().all()
    with pytest.raises(whatif.WhatIfError, match=r"concurrency=1000000000000.0: must lie in \(0, 1e\+09\]"):
        whatif.predict(comp, "mtp", concurrency=[1e12], max_running_requests=4, sets=sets)
    with pytest.raises(whatif.WhatIfError, match="concurrency=16: give a list"):
        whatif.predict(comp, "mtp", concurrency=16, sets=sets)


def test_unknown_arm_lists_the_arms() -> None:
    comp, sets = seed()
    with pytest.raises(whatif.WhatIfError, match=r"arm='nope' is not in the comparison; its arms: baseline, mtp"):
        whatif.predict(comp, "nope", sets=sets)


def test_refusals_say_why() -> None:
    comp, sets = seed()
    p = whatif.predict(comp, "baseline", concurrency=[256, 0.5 + 0.5], sets=sets)
    assert bool(p.iloc[0]["refused"]) and "outside the batch sizes" in p.iloc[0]["why"]
    assert math.isnan(p.iloc[0]["aggregate_tok_s"])
    p = whatif.predict(comp, "baseline", concurrency=[16], accept_length=2.0, sets=sets)
    assert bool(p.iloc[0]["refused"]) and "does not speculate" in p.iloc[0]["why"]
    p = whatif.predict(comp, "mtp", concurrency=[16], accept_length=2.0, sets=sets)
    assert bool(p.iloc[0]["refused"]) and "no measured accept length" in p.iloc[0]["why"]
    p = whatif.predict(comp, "mtp", concurrency=[16], output_tokens=2000, sets=sets)
    assert bool(p.iloc[0]["refused"]) and "longer than the 1000 measured" in p.iloc[0]["why"]


def test_untrusted_arm_names_are_escaped_in_the_section(tmp_path: Path) -> None:
    evil = "<img src=x onerror=alert(1)>*x*"
    rows = {c: truth(c, 30, 0.01, 1e-4, 1.0) for c in LEVELS}
    b = write_level_only(tmp_path / "b", "baseline", {c: truth(c, 1e9, 0.01, 1e-4, 1.0) for c in LEVELS})
    a = write_level_only(tmp_path / "a", evil, rows, server={"max_running_requests": 48, "speculative_algorithm": "EAGLE"})
    sets = [load_result_set(b), load_result_set(a)]
    md = section.markdown(compare(sets), sets, n_boot=20)
    import re

    assert re.findall(r"(?<!\\)<img", md) == [] and "\\<img" in md, md


def test_a_new_model_never_reads_a_dead_ones_validation_error() -> None:
    """Models made and dropped in turn reuse addresses; each one's leave-one-level-out error (which sets
    the bands, and so the page's next-experiment line) must be its own. An ``id()``-keyed cache failed
    this about once in 13 models and made the seed page's sentence differ between two builds."""
    from specsweep.analyze.whatif.validate import loo_rms
    comp, sets = seed()
    ref = {a: dict(loo_rms(model_for(comp, a, sets, n_boot=20))) for a in comp.arms}
    gc.collect()
    seen = []
    for _ in range(30):
        for a in comp.arms:
            m = model_for(comp, a, sets, n_boot=20)
            seen.append(loo_rms(m) == ref[a])
            del m
    assert all(seen), f"{seen.count(False)} of {len(seen)} models read another model's error"


def test_a_llamacpp_arm_is_modelled_on_tokens_per_target_step_not_per_drafted_step() -> None:
    """The real-engine reference run recorded llama.cpp's per-drafted-step accept length as the level's
    figure and tokens per target step beside it; the model's tokens per step must be the latter (what a
    step of the engine yields, comparable with every other server), or step times come out ~4× long."""
    root = Path(__file__).resolve().parents[2] / "data" / "reference" / "real-llamacpp-smollm2"
    sets = [load_result_set(root / arm) for arm in ("baseline", "ngram")]
    comp = compare(sets, baseline="baseline", n_boot=20)
    data = observe(comp, "ngram", sets, n_boot=20)
    per_step = comp.levels[comp.levels["arm"] == "ngram"].set_index("concurrency")["spec_tokens_per_step"]
    assert data.accept_length == pytest.approx(per_step.loc[data.concurrency].to_numpy())
    assert (data.accept_length < 2.0).all()


@pytest.mark.fast
@pytest.mark.parametrize("shape", ["convex", "concave", "flat", "linear", "falling"])
def test_step_lines_have_non_negative_costs_and_are_the_constrained_least_squares(shape: str) -> None:
    """Many synthetic step-time curves, several shapes and two noise models: the summary line's costs
    are never negative, it is the least-squares line over non-negative costs (scipy's NNLS as the
    oracle), it is the plain least-squares line wherever that one is non-negative, and says so otherwise."""
    from scipy.optimize import nnls

    from specsweep.analyze.whatif.model import step_line

    rng = np.random.default_rng(7)
    curves = {"convex": lambda n: 0.5 + 0.08 * n ** 1.6, "concave": lambda n: 4.0 + 3.0 * np.sqrt(n),
              "flat": lambda n: 6.0 + 0 * n, "linear": lambda n: 2.0 + 0.3 * n, "falling": lambda n: 9.0 - 0.2 * n}
    for draw in range(200):
        batch = np.array(sorted(rng.choice([1, 2, 4, 8, 12, 16], size=rng.integers(2, 6), replace=False)), float)
        clean = curves[shape](batch)
        noisy = clean * (np.exp(rng.normal(0, 0.1, batch.size)) if draw % 2 else 1 + rng.uniform(-0.2, 0.2, batch.size))
        fit = step_line(batch, noisy)
        assert fit["fixed_ms"] >= 0 and fit["per_request_ms"] >= 0
        (want_fixed, want_slope), _ = nnls(np.column_stack([np.ones_like(batch), batch]), noisy)
        assert (fit["fixed_ms"], fit["per_request_ms"]) == pytest.approx((want_fixed, want_slope), abs=1e-6)
        slope, icpt = np.polyfit(batch, noisy, 1)
        assert (fit["note"] == "") == (slope >= 0 and icpt >= 0)
    refused = step_line(np.array([1.0, 4.0]), np.array([2.0, -1.0]))
    assert math.isnan(refused["fixed_ms"]) and refused["note"].startswith("refused")


def test_an_older_llamacpp_result_set_is_compared_on_tokens_per_target_step() -> None:
    """The reference run recorded llama.cpp's per-drafted-step figure as the level's accept length:
    read back, the comparison's accept length is tokens per target step, with the draft share from
    the step counts (verification ÷ verification + plain), and the diagnostics name both."""
    from specsweep.report import diagnostics_markdown

    root = Path(__file__).resolve().parents[2] / "data" / "reference" / "real-llamacpp-smollm2"
    sets = [load_result_set(root / arm) for arm in ("baseline", "ngram")]
    raw = sets[1].levels
    comp = compare(sets, baseline="baseline", n_boot=20)
    lv = comp.levels[comp.levels["arm"] == "ngram"].set_index("concurrency")
    by_level = raw.groupby("concurrency")
    assert lv["spec_accept_length"].to_numpy() == pytest.approx(by_level["spec_tokens_per_step"].mean().to_numpy())
    share = raw["spec_verify_steps_counters"] / (raw["spec_verify_steps_counters"] + raw["spec_plain_steps"])
    assert lv["spec_draft_share"].to_numpy() == pytest.approx(share.groupby(raw["concurrency"]).mean().to_numpy())
    assert (lv["spec_accept_length_counters"] > 3).all() and (lv["spec_accept_length"] < 2).all()
    assert "per drafted step" in diagnostics_markdown(comp)


def test_a_control_arm_gets_no_cap_question_or_advice_only_the_noise_floor(tmp_path: Path) -> None:
    """The real-engine study with a control arm, every arm's slots recorded as 8 (so its level 16 lies
    above the cap, as on a server started with fewer slots): the what-if asks the cap question of the
    speculative arms, and of the control (the baseline measured again) says only its noise floor;
    no recommendation gives it advice or a next experiment."""
    import json
    import shutil

    from specsweep.decide import recommend
    from specsweep.decide.profiles import DEFAULT_PROFILES

    root = tmp_path / "real"
    shutil.copytree(Path(__file__).resolve().parents[2] / "data" / "reference" / "real-llamacpp-smollm2", root)
    for meta_path in root.glob("*/meta.json"):
        meta = json.loads(meta_path.read_text())
        for server in (meta["server"], meta["server"].get("launch", {})):
            server.update({k: 8 for k in ("max_running_requests", "parallel_slots", "total_slots") if k in server})
        meta_path.write_text(json.dumps(meta))
    sets = load_result_sets([root])
    comp = compare(sets)
    assert comp.controls == ["control"] and comp.caps["control"] == 8
    built = section.build(comp, sets, n_boot=20)
    asked = [a for a in comp.arms if f"**{a}: would raising max_running_requests" in built.markdown]
    assert asked == ["ngram", "self-draft"], asked  # the question is asked: the test can see a control get it
    assert "control" not in built.cap_predictions and "control" not in built.decompositions
    assert built.next_experiment is None or built.next_experiment["arm"] != "control"
    floor = next(p for p in built.markdown.split("\n\n") if "control is the baseline's configuration" in p)
    assert "noise floor" in floor and "no cap question" in floor, floor
    for text in built.markdown.split("\n\n"):
        assert not text.startswith("**control"), text
        assert "measure control with" not in text, text
    for profile in DEFAULT_PROFILES:
        rec = recommend(comp, profile)
        assert rec.arm != "control"
        advice = [c for c in rec.claims if c.arm == "control" and c.kind in ("advice", "experiment", "cap")]
        assert advice == [], advice
        for sentence in (*rec.reasons, *rec.next_experiments):
            assert "control with" not in sentence and "control's max_running_requests" not in sentence, sentence
