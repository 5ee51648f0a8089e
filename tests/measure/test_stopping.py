"""Per-level stopping: the batch-means interval's coverage over many synthetic request streams from
several noise models, at a fixed count and at the count the stopping rule chose, and the rule's
decisions and wording."""
from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from specsweep.measure.stopping import StopRule, level_margin_pct, throughput_margin

#: output tokens of every synthetic request (a fixed-length workload)
TOKENS = 128
#: seconds per output token of the synthetic server, before noise
PER_TOKEN_S = 0.01
#: synthetic streams per noise model
DRAWS = 400

#: a noise model: (random generator, requests, concurrency) -> (tokens, durations, truth) in completion
#: order; truth is the expected Σ tokens ÷ Σ durations of the requests measured (tok/s per slot)
Stream = Callable[[np.random.Generator, int, int], tuple[np.ndarray, np.ndarray, float]]


def iid_lognormal(rng: np.random.Generator, n: int, c: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Independent requests, natural lengths: tokens and per-token time lognormal (σ 0.5 and 0.3)."""
    tokens = np.maximum(1, np.round(TOKENS * rng.lognormal(-0.125, 0.5, n)))
    durations = tokens * PER_TOKEN_S * rng.lognormal(0.0, 0.3, n)
    # E[tokens] / E[durations] with the per-token factor independent of the length
    return tokens, durations, 1 / (PER_TOKEN_S * math.exp(0.3**2 / 2))


def ar1(rng: np.random.Generator, n: int, c: int, phi: float = 0.7, sigma: float = 0.3
        ) -> tuple[np.ndarray, np.ndarray, float]:
    """Fixed lengths; the log per-token time of consecutive completions an AR(1) (φ 0.7, marginal σ 0.3)."""
    x = np.empty(n)
    x[0] = rng.normal(0, sigma)
    eps = rng.normal(0, sigma * math.sqrt(1 - phi**2), n)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + eps[i]
    durations = TOKENS * PER_TOKEN_S * np.exp(x)
    return np.full(n, float(TOKENS)), durations, 1 / (PER_TOKEN_S * math.exp(sigma**2 / 2))


def drift(rng: np.random.Generator, n: int, c: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Fixed lengths; the server slows by 15 % over the level (a warming device) with iid noise (σ 0.2)."""
    slow = 1 + 0.15 * np.linspace(0, 1, n)
    durations = TOKENS * PER_TOKEN_S * slow * rng.lognormal(0, 0.2, n)
    # the level's truth: its expected tokens over its expected time
    expected = TOKENS * PER_TOKEN_S * slow * math.exp(0.2**2 / 2)
    return np.full(n, float(TOKENS)), durations, float(TOKENS * n / expected.sum())


def closed_loop(rng: np.random.Generator, n: int, c: int, tau_s: float = 2.0, sigma: float = 0.25
                ) -> tuple[np.ndarray, np.ndarray, float]:
    """C slots in a closed loop sharing one server whose per-token time wanders in time (log AR(1),
    correlation time ``tau_s`` ≈ 1.5 requests, marginal σ 0.25), each request with its own iid
    factor (σ 0.2, its prefill and place in the batch): requests in flight together share the
    slow and fast spells, so consecutive completions are correlated."""
    dt = 0.05
    phi = math.exp(-dt / tau_s)
    x = rng.normal(0, sigma)
    own = rng.lognormal(0, 0.2, c)
    progress = np.zeros(c)
    sent = np.zeros(c)
    t = 0.0
    out: list[tuple[float, float]] = []
    while len(out) < n:
        t += dt
        x = phi * x + rng.normal(0, sigma * math.sqrt(1 - phi**2))
        speed = 1 / (PER_TOKEN_S * math.exp(x) * own)  # tokens per second of each slot in this step
        progress += dt * speed
        for j in np.flatnonzero(progress >= TOKENS):
            end = t - (progress[j] - TOKENS) / speed[j]  # when within the step it finished
            out.append((sent[j], end))
            own_next = rng.lognormal(0, 0.2)
            # the next request started at ``end``: the rest of the step is its own
            progress[j], sent[j] = (t - end) / (PER_TOKEN_S * math.exp(x) * own_next), end
            own[j] = own_next
    out = out[:n]
    durations = np.array([e - s for s, e in out])
    # per slot, tokens ÷ time is the time average of 1 / per-token time: E[exp(-x)] for the server's
    # spells (independent of the requests), 1 / E[own] for the requests' own factors (a slow request
    # holds its slot longer, so time weights them by their length)
    truth = math.exp(sigma**2 / 2) * math.exp(-0.2**2 / 2) / PER_TOKEN_S
    return np.full(n, float(TOKENS)), durations, truth


MODELS: dict[str, Stream] = {"iid lognormal": iid_lognormal, "AR(1)": ar1, "drift": drift, "closed loop, long spells": closed_loop,
                             "closed loop, short spells": functools.partial(closed_loop, tau_s=1.0)}


def _coverage(model: Stream, n: int, c: int, seed: int) -> tuple[float, float]:
    """(share of draws whose interval covers the truth, median margin %) at a fixed count."""
    rng = np.random.default_rng(seed)
    hits, pcts = [], []
    for _ in range(DRAWS):
        tokens, durations, truth = model(rng, n, c)
        m = throughput_margin(tokens, durations, c)
        assert m is not None
        hits.append(m.covers(truth))
        pcts.append(m.pct)
    return float(np.mean(hits)), float(np.median(pcts))


#: the least coverage each model must reach at a fixed count: 90 %, except where the server's slow
#: spells last longer than a request (2 s against 1.3 s), so that 200 requests at C=8 see only about
#: 16 independent stretches; docs/method.md gives the measured figures
FIXED_COUNT_COVERAGE = {"closed loop, long spells": 0.85}


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize(("n", "c"), [(60, 1), (200, 8)])
def test_the_interval_covers_the_truth_at_a_fixed_count(name: str, n: int, c: int) -> None:
    cover, pct = _coverage(MODELS[name], n, c, seed=zlib.crc32(f'{name} {n} {c}'.encode()))
    least = FIXED_COUNT_COVERAGE.get(name, 0.90)
    assert cover >= least, f"{name}, n={n}, C={c}: coverage {cover:.3f}, median margin {pct:.1f} %"


def _completions(tokens: np.ndarray, durations: np.ndarray) -> list[tuple[float, float, int | None]]:
    """A stream as the live rule sees it: (t_sent, t_end, tokens); only the duration and order matter."""
    ends = np.arange(1, len(tokens) + 1, dtype=float)
    return [(e - d, e, int(t)) for e, d, t in zip(ends, durations, tokens)]


@pytest.mark.parametrize(("name", "target", "least"), [("iid lognormal", 8.0, 0.90), ("AR(1)", 14.0, 0.85),
                                                        ("closed loop, short spells", 15.0, 0.80)])
def test_where_the_rule_stops_the_interval_still_covers_the_truth(name: str, target: float, least: float) -> None:
    """Stopping when the margin first reaches the target picks a lucky, narrow interval more often
    than a fixed count would (the rule asks for the margin with 90 % confidence in its own variance
    to blunt that); over many streams the interval at the stopping count covers the truth in at
    least 90 % for independent requests, and less where completions are correlated (docs/method.md
    gives the figures), and the rule stops before the maximum."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    c, most = 4, 400
    hits, used = [], []
    for _ in range(DRAWS // 2):
        tokens, durations, truth = MODELS[name](rng, most, c)
        rule = StopRule(concurrency=c, target_pct=target, min_requests=8, max_requests=most)
        done = _completions(tokens, durations)
        n = next((k for k in range(1, most + 1) if rule(done[:k])), most)
        m = throughput_margin(tokens[:n], durations[:n], c)
        assert m is not None
        hits.append(m.covers(truth))
        used.append(n)
        if rule.decided is not None:
            assert m.pct <= target and rule.decided == (pytest.approx(m.pct), n)
    assert np.mean(hits) >= least, f"{name}: coverage {np.mean(hits):.3f} at the stopping count"
    assert np.median(used) < most, f"{name}: the rule never stopped before the maximum"


def test_the_rule_checks_from_the_minimum_and_then_every_c_completions() -> None:
    rng = np.random.default_rng(7)
    tokens, durations, _ = iid_lognormal(rng, 400, 3)
    done = _completions(tokens, durations)
    rule = StopRule(concurrency=3, target_pct=1000.0, min_requests=20, max_requests=400)
    # a huge target is met by the first margin there is: at the minimum, not before
    assert not any(rule(done[:k]) for k in range(1, 20))
    assert rule(done[:20]) and rule.decided is not None and rule.decided[1] == 20
    assert rule.reason(5.0).startswith("margin reached (±") and rule.reason(5.0).endswith("after 20 requests)")
    # with fewer than 4 C completions there is no margin yet, whatever the target
    early = StopRule(concurrency=8, target_pct=1000.0, min_requests=4, max_requests=400)
    assert [k for k in range(1, 41) if early(done[:k])][0] == 36  # 4, 12, 20, 28: under 32; then 36
    never = StopRule(concurrency=3, target_pct=0.001, min_requests=20, max_requests=400)
    assert not any(never(done[:k]) for k in range(1, 401))
    assert never.reason(2.345) == "max requests (±2.3 %)"
    assert never.reason(math.nan) == "max requests (no margin: under 4 × 3 requests)"


def test_the_rule_reads_only_completions_with_a_known_count() -> None:
    rng = np.random.default_rng(3)
    tokens, durations, _ = iid_lognormal(rng, 200, 2)
    done = _completions(tokens, durations)
    unknown = [(s, e, None) for s, e, _ in done]
    rule = StopRule(concurrency=2, target_pct=1000.0, min_requests=8, max_requests=200)
    assert not any(rule(unknown[:k]) for k in range(1, 201))
    mixed = [d if i % 2 else u for i, (d, u) in enumerate(zip(done, unknown))]
    assert StopRule(concurrency=2, target_pct=1000.0, min_requests=8, max_requests=200)(mixed[:16])


def test_a_levels_margin_from_its_request_rows_counts_failures_as_no_tokens() -> None:
    rng = np.random.default_rng(11)
    tokens, durations, _ = iid_lognormal(rng, 80, 2)
    ends = np.cumsum(durations / 2)
    rows = pd.DataFrame({"t_start_s": ends - durations, "t_end_s": ends, "output_tokens": tokens,
                         "error": [None] * 80})
    clean = level_margin_pct(rows.sample(frac=1, random_state=1), 2)  # rows in any order: sorted by end
    assert clean == pytest.approx(throughput_margin(tokens, durations, 2).pct)
    failed = rows.assign(error=["boom" if i % 10 == 0 else None for i in range(80)])
    assert level_margin_pct(failed, 2) > clean  # a failure is a request with no tokens: more spread
    assert math.isnan(level_margin_pct(rows.head(7), 2))  # under 4 × C completions
    assert math.isnan(level_margin_pct(rows.iloc[:0], 2))
