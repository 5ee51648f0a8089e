"""Unit tests of the performance model (no sockets): step times, cap, pool, acceptance."""
from __future__ import annotations

import random
import statistics

import pytest

from specsweep.refserver.faults import FaultConfig
from specsweep.refserver.model import (
    FINISHED,
    RESERVE_CLIP_TOKENS,
    AcceptanceModel,
    EngineCore,
    SimRequest,
    Step,
    frac_experts_touched,
    request_seed,
    resolve,
    simulate_closed_loop,
)
from specsweep.refserver.profiles import ProfileError, available_profiles, load_profile
from specsweep.refserver.tokens import output_indices, render_output, text_prompt_tokens

SEED_PROFILE = "qwen3.5-122b-a10b-4x-rtxpro6000"


def _req(index: int, prompt: int, out: int, rng_seed: int = 0) -> SimRequest:
    return SimRequest(index=index, prompt_tokens=prompt, max_new_tokens=out, target_tokens=out,
                      arrival_t=0.0, rng=random.Random(rng_seed + index))


def test_shipped_profiles_load() -> None:
    assert {"tiny", SEED_PROFILE} <= set(available_profiles())
    for name in available_profiles():
        prof = load_profile(name)
        for section in ("hardware", "model", "decode", "prefill", "memory", "speculative"):
            assert getattr(prof, section).notes or name == "tiny", (name, section)
        resolve(prof, "off")
        resolve(prof, "mtp")


def test_overrides_validate_and_name_the_problem() -> None:
    prof = load_profile("tiny", ["decode.fixed_ms=5", "speculative.num_steps=2"])
    assert prof.decode.fixed_ms == 5
    assert prof.speculative.num_draft_tokens == 3  # follows num_steps with topk 1
    with pytest.raises(ProfileError, match="unknown key 'decode.nope'"):
        load_profile("tiny", ["decode.nope=1"])
    with pytest.raises(ProfileError, match="no section"):
        load_profile("tiny", ["nope.x=1"])
    with pytest.raises(ProfileError, match="decode.fixed_ms"):
        load_profile("tiny", ["decode.fixed_ms=-1"])
    with pytest.raises(ProfileError, match="mean_accept_length"):
        load_profile("tiny", ["speculative.mean_accept_length=9"])
    with pytest.raises(ProfileError, match="valid profiles: .*tiny"):
        load_profile("no-such-profile")


@pytest.mark.parametrize("name", [SEED_PROFILE, "tiny"])
@pytest.mark.parametrize("spec", [False, True])
def test_step_time_is_monotone_in_batch(name: str, spec: bool) -> None:
    cfg = resolve(load_profile(name), spec)
    times = [cfg.step_ms(b) for b in range(1, 257)]
    assert all(b >= a for a, b in zip(times, times[1:]))
    assert times[0] > 0


def test_memory_bound_small_compute_bound_large() -> None:
    cfg = resolve(load_profile("tiny"), False)
    # small batch: weight reads dominate, the step barely grows
    assert cfg.mem_ms(1) > cfg.compute_ms(1)
    assert cfg.decode_step_ms(8) - cfg.decode_step_ms(1) < 0.2
    # large batch: compute dominates and the step grows linearly
    assert cfg.compute_ms(128) > cfg.mem_ms(128)
    slope = (cfg.decode_step_ms(256) - cfg.decode_step_ms(128)) / 128
    assert slope == pytest.approx(cfg.compute_ms_per_token + cfg.profile.decode.per_token_ms)


def test_moe_reads_more_experts_as_batch_grows() -> None:
    assert frac_experts_touched(1, 256, 8) == pytest.approx(8 / 256)
    assert frac_experts_touched(10, 256, 8) == pytest.approx(1 - (1 - 8 / 256) ** 10)
    skewed = [frac_experts_touched(n, 256, 8, 0.3, 0.95) for n in (1, 4, 16, 64, 128, 1024)]
    assert skewed[0] == pytest.approx(8 / 256)
    assert all(b > a for a, b in zip(skewed, skewed[1:]))
    assert skewed[-1] <= 1.0
    cfg = resolve(load_profile(SEED_PROFILE), False)
    # the MoE profile's decode step grows with batch because more expert weights are read
    assert cfg.mem_ms(64) - cfg.mem_ms(1) > 5.0
    assert cfg.mem_ms(64) > cfg.compute_ms(64)


def test_seed_profile_step_shape() -> None:
    cfg = resolve(load_profile(SEED_PROFILE), False)
    assert 8.3 < cfg.decode_step_ms(1) < 10.1  # ~110 tok/s for one user
    assert 20 < cfg.decode_step_ms(64) < 30
    spec = resolve(load_profile(SEED_PROFILE), True)
    assert spec.spec_step_ms(1) > cfg.decode_step_ms(1)
    assert spec.num_draft_tokens == 2 and spec.num_steps == 1 and spec.eagle_topk == 1


def test_running_cap_defaults_and_override() -> None:
    prof = load_profile("tiny")
    assert resolve(prof, True).max_running_requests == 48
    assert resolve(prof, True).max_running_requests_arg == 48
    assert resolve(prof, True, 7).max_running_requests == 7
    assert resolve(prof, True, 100).max_running_requests == 100
    off = resolve(prof, False)
    assert off.max_running_requests_arg is None  # left unset, as SGLang reports it
    assert off.max_running_requests >= 2048  # SGLang's rule, capped by pool // 2
    assert resolve(prof, False, 5).max_running_requests == 5
    tiny_pool = load_profile("tiny", ["memory.max_total_num_tokens=100"])
    assert resolve(tiny_pool, False).max_running_requests == 50  # pool // 2


def test_spec_pool_is_smaller_than_baseline_pool() -> None:
    prof = load_profile(SEED_PROFILE)
    off, on = resolve(prof, False), resolve(prof, True)
    assert on.max_total_num_tokens < off.max_total_num_tokens / 2
    assert on.mem_fraction_static == 0.75


def test_cap_limits_admission() -> None:
    cfg = resolve(load_profile("tiny"), True, 3)
    core = EngineCore(cfg)
    for i in range(5):
        core.add(_req(i, 10, 50))
    step = core.plan(0.0)
    assert step is not None and step.kind == Step.PREFILL
    assert core.num_admitted == 3 and len(core.waiting) == 2


def test_pool_admission_fifo_and_release() -> None:
    prof = load_profile("tiny", ["memory.max_total_num_tokens=1000"])
    cfg = resolve(prof, False)
    core = EngineCore(cfg)
    reqs = [_req(i, 100, 200) for i in range(5)]  # each reserves 300 tokens
    for r in reqs:
        assert core.check_fits(r.prompt_tokens, r.max_new_tokens) is None
        core.add(r)
    core.plan(0.0)
    assert core.num_admitted == 3 and core.pool_reserved == 900
    # run to completion of the first wave; the 4th and 5th only get in after a finish
    t = 0.0
    admitted_later = None
    while core.has_work():
        step = core.plan(t)
        assert step is not None
        t += step.duration_s
        core.commit(step, t)
        if reqs[3].admitted_t is not None and admitted_later is None:
            admitted_later = reqs[3].admitted_t
            assert reqs[0].state == FINISHED
    assert all(r.generated == 200 and r.state == FINISHED for r in reqs)
    assert core.pool_reserved == 0 and core.kv_tokens == 0
    assert core.check_fits(100, 5000) is not None  # can never fit
    assert RESERVE_CLIP_TOKENS == 4096


def test_prefill_first_and_chunked() -> None:
    cfg = resolve(load_profile("tiny"), False)  # chunked_prefill_size 2048
    core = EngineCore(cfg)
    big = _req(0, 5000, 4)
    core.add(big)
    kinds = []
    t = 0.0
    while big.first_token_t is None:
        step = core.plan(t)
        assert step is not None
        kinds.append((step.kind, step.tokens))
        t += step.duration_s
        out = core.commit(step, t)
    assert kinds == [("prefill", 2048), ("prefill", 2048), ("prefill", 904)]
    assert out == [big] and big.generated == 1 and big.new_tokens == 1
    # a newly admitted request's prefill pre-empts decoding of the running one
    core.add(_req(1, 10, 4))
    assert core.plan(t).kind == Step.PREFILL


def test_acceptance_model_mean_and_support() -> None:
    for k, mean in [(1, 1.87), (3, 2.0), (3, 3.5), (5, 1.2)]:
        acc = AcceptanceModel(k, mean)
        assert AcceptanceModel.expected_length(acc.p, k) == pytest.approx(mean, abs=1e-9)
        assert sum(acc.pmf()) == pytest.approx(1.0)
        rng = random.Random(1)
        draws = [acc.draw(rng) for _ in range(200_000)]
        assert min(draws) >= 1 and max(draws) <= k + 1
        assert statistics.fmean(draws) == pytest.approx(mean, rel=0.01)
    with pytest.raises(ValueError):
        AcceptanceModel(2, 3.5)


def test_engine_mean_accept_length_over_many_steps() -> None:
    cfg = resolve(load_profile("tiny"), True)  # 3 drafts, mean 2.0
    core = EngineCore(cfg)
    reqs = [_req(i, 20, 4000) for i in range(8)]
    for r in reqs:
        core.add(r)
    t = 0.0
    per_chunk: list[int] = []
    while core.has_work():
        step = core.plan(t)
        assert step is not None
        t += step.duration_s
        for r in core.commit(step, t):
            per_chunk.append(r.new_tokens)
    assert all(r.generated == 4000 for r in reqs)
    assert max(per_chunk) == 4 and min(per_chunk) == 1
    assert core.avg_spec_accept_length == pytest.approx(2.0, rel=0.02)
    # SGLang's per-request figure: completion_tokens / verify_ct
    for r in reqs:
        assert r.generated / r.verify_ct == pytest.approx(2.0, rel=0.05)


def test_virtual_simulator_tiny_sanity() -> None:
    prof = load_profile("tiny")
    base = simulate_closed_loop(prof, "off", 4, 16, 100, 200)
    spec = simulate_closed_loop(prof, "mtp", 4, 16, 100, 200)
    assert base.total_output_tokens == spec.total_output_tokens == 16 * 200
    assert base.mean_admitted == pytest.approx(4, rel=0.05)
    assert spec.accept_length == pytest.approx(2.0, rel=0.05)
    assert spec.mean_user_tok_s > base.mean_user_tok_s  # speculation pays at low batch here
    # deterministic under the seed
    again = simulate_closed_loop(prof, "mtp", 4, 16, 100, 200)
    assert again.window_s == spec.window_s


def test_tokens_deterministic_and_counted() -> None:
    assert text_prompt_tokens("The capital of  France\nis") == 5
    a = render_output(12345, 50)
    b = render_output(12345, 50)
    assert a.text == b.text and a.ids == b.ids
    assert a.text_prefix(3) + a.text_slice(3, 50) == a.text
    assert a.id_list(50) == [int(x) for x in a.ids.decode().split(",")]
    assert len(a.text.decode().split()) == 50
    assert list(output_indices(12345, 20)) == list(output_indices(12345, 50)[:20])
    assert render_output(12345, 20, nonce=7).text != render_output(12345, 20).text


def test_fault_plans_are_deterministic() -> None:
    cfg = FaultConfig(seed=3, error_rate=0.2, drop_rate=0.2, stall_rate=0.2, malformed_rate=0.2)
    plans = [cfg.plan(i) for i in range(2000)]
    assert plans == [FaultConfig(seed=3, error_rate=0.2, drop_rate=0.2, stall_rate=0.2,
                                 malformed_rate=0.2).plan(i) for i in range(2000)]
    for attr in ("error_status", "drop_at", "stall_at", "malformed_at"):
        frac = sum(getattr(p, attr) is not None for p in plans) / len(plans)
        assert 0.17 < frac < 0.23, attr
    assert {p.error_status for p in plans} == {None, 500, 503}
    assert request_seed(1, 2, "x") == request_seed(1, 2, "x") != request_seed(1, 3, "x")
    with pytest.raises(ValueError):
        FaultConfig(error_rate=1.5)
