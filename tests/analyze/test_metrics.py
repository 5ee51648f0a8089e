"""The metric definitions of :mod:`specsweep.analyze.metrics` checked on hand-computed timelines."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specsweep.analyze.metrics import (
    level_metrics,
    request_metrics,
    requests_frame,
    steady_span,
    token_normalised_itl,
    tokens_in_span,
)
from specsweep.results.records import RequestRecord

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def rec(t_sent: float, times: list[float], tokens: list[int] | None, out: int | None = None, **kw) -> RequestRecord:
    total = out if out is not None else sum(tokens or [])
    return RequestRecord(t_sent=t_sent, t_end=times[-1] if times else t_sent, http_status=200, chunk_times=times,
                         chunk_tokens=tokens, output_tokens=total, token_source="usage", **kw)


def test_request_metrics_multi_token_chunks() -> None:
    # sent at 10.0; chunks at +0.5 (1 tok), +0.6 (2), +0.8 (1), +1.0 (3): 7 tokens
    m = request_metrics(rec(10.0, [10.5, 10.6, 10.8, 11.0], [1, 2, 1, 3]))
    assert m.ttft_s == pytest.approx(0.5)
    assert m.e2e_s == pytest.approx(1.0)
    assert m.tpot_s == pytest.approx(0.5 / 6)
    assert m.user_tok_s == pytest.approx(12.0)
    assert m.request_tok_s == pytest.approx(7.0)
    assert m.chunks == 4
    assert m.tokens_per_chunk_mean == pytest.approx(1.75)
    assert m.chunk_gap_mean_s == pytest.approx((0.1 + 0.2 + 0.2) / 3)
    # token-normalised: 0.1 over 2 tokens, 0.2 over 1, 0.2 over 3 -> 6 observations
    assert m.itl_mean_s == pytest.approx(0.5 / 6)
    assert m.itl_p99_s == pytest.approx(np.percentile([0.05, 0.05, 0.2, 0.2 / 3, 0.2 / 3, 0.2 / 3], 99))


def test_token_normalised_itl_observations() -> None:
    obs = token_normalised_itl([0.0, 0.1, 0.3, 0.5], [1, 2, 1, 3])
    assert obs.tolist() == pytest.approx([0.05, 0.05, 0.2, 0.2 / 3, 0.2 / 3, 0.2 / 3])
    # no per-chunk counts: spread output tokens evenly (8 tokens over 4 chunks = 2 per chunk)
    assert token_normalised_itl([0.0, 0.1, 0.3, 0.5], None, 8).tolist() == pytest.approx([0.05, 0.1, 0.1])
    with pytest.raises(ValueError):
        token_normalised_itl([0.0, 0.1], [1, 0])


def test_single_token_and_empty_requests() -> None:
    one = request_metrics(rec(0.0, [0.25], [1]))
    assert one.ttft_s == one.e2e_s == pytest.approx(0.25)
    assert math.isnan(one.tpot_s) and math.isnan(one.user_tok_s)
    none = request_metrics(RequestRecord(t_sent=0.0, t_end=1.0, error="HTTP 503"))
    assert none.chunks == 0 and math.isnan(none.ttft_s)


def level_requests(keep_chunks: bool = True) -> pd.DataFrame:
    records = [
        rec(0.0, [1.0, 2.0, 3.0], [1, 4, 5]),        # ttft 1, e2e 3
        rec(0.0, [1.0, 2.0], [1, 9]),                 # ttft 1, e2e 2
        rec(2.0, [2.5, 3.5, 4.5], [1, 4, 5]),         # ttft 0.5, e2e 2.5
        RequestRecord(t_sent=2.0, t_end=2.2, http_status=500, error="HTTP 500: boom"),
    ]
    return requests_frame(records, t0=0.0, run_id="r", arm="a", concurrency=2, repeat=0, keep_chunks=keep_chunks)


def test_level_metrics_hand_computed() -> None:
    lv = level_metrics(level_requests(), concurrency=2)
    assert lv["n_requests"] == 4 and lv["n_ok"] == 3 and lv["error_rate"] == pytest.approx(0.25)
    assert lv["window_s"] == pytest.approx(4.5)
    assert lv["output_tok_s"] == pytest.approx(30 / 4.5)
    assert lv["request_per_s"] == pytest.approx(3 / 4.5)
    # Little's law: in flight (3 + 2 + 2.5 + 0.2) / 4.5; decoding (2 + 1 + 2) / 4.5
    assert lv["effective_concurrency"] == pytest.approx(7.7 / 4.5)
    assert lv["decoding_concurrency"] == pytest.approx(5 / 4.5)
    # steady span: 2nd start (0.0) to the (N - C + 1) = 3rd end among [2, 2.2, 3, 4.5] -> 3.0
    assert lv["steady_window_s"] == pytest.approx(3.0)
    # tokens arriving in [0, 3]: 10 + 10 + 1 (the third request's first chunk at 2.5)
    assert lv["steady_output_tok_s"] == pytest.approx(21 / 3)
    assert lv["ttft_p50_s"] == pytest.approx(1.0)
    assert lv["e2e_mean_s"] == pytest.approx(7.5 / 3)
    tpots = [2 / 9, 1 / 9, 2 / 9]
    assert lv["tpot_p99_s"] == pytest.approx(np.percentile(tpots, 99))
    assert lv["user_tok_s_mean"] == pytest.approx(np.mean([4.5, 9.0, 4.5]))
    assert lv["tokens_per_chunk_mean"] == pytest.approx(30 / 8)
    assert lv["token_source"] == "usage"


def test_steady_tokens_fall_back_to_even_spreading() -> None:
    req = level_requests(keep_chunks=False)
    ok = req[req["error"].isna()]
    # r0: 1 + 9*(2/2); r1: 1 + 9*(1/1); r2: first at 2.5 in span + 9*(0.5/2)
    assert tokens_in_span(ok, 0.0, 3.0) == pytest.approx(10 + 10 + 1 + 2.25)


def test_steady_span_edge_cases() -> None:
    assert all(math.isnan(v) for v in steady_span([0, 0], [1, 2], 3))  # N < C
    assert steady_span([0, 0, 1], [1, 2, 3], 2) == (0, 2)


def test_tpot_is_undefined_when_all_tokens_came_in_one_chunk() -> None:
    m = request_metrics(rec(0.0, [0.5], [6]))
    assert m.ttft_s == m.e2e_s == pytest.approx(0.5)
    assert math.isnan(m.tpot_s) and math.isnan(m.user_tok_s)


def test_llamacpp_requests_that_drafted_nothing_count_as_zero_drafts() -> None:
    """llama.cpp omits draft_n from a request that drafted nothing; the level's acceptance must not
    be computed over the drafting requests only."""
    from specsweep.results.records import RequestRecord

    def rec(server: dict[str, float]) -> RequestRecord:
        return RequestRecord(t_sent=0.0, t_end=1.0, http_status=200, chunk_times=[0.1, 0.5], chunk_tokens=None,
                             output_tokens=40, token_source="usage", server=server)

    drafted = rec({"timings_predicted_n": 40, "spec_draft_tokens": 8, "spec_accepted_tokens": 2,
                   "spec_verify_ct": 38, "spec_accept_length": 40 / 38})
    idle = rec({"timings_predicted_n": 40})
    frame = requests_frame([drafted, idle], t0=0.0, run_id="r", arm="a", concurrency=2, repeat=0)
    assert frame["spec_verify_ct"].tolist() == [38.0, 40.0]
    assert frame["spec_draft_tokens"].tolist() == [8.0, 0.0]
    lv = level_metrics(frame, 2)
    assert lv["spec_draft_acceptance_rate"] == 2 / 8
    assert frame["output_tokens"].sum() / frame["spec_verify_ct"].sum() == 80 / 78  # not 40 / 38
    # a baseline server (no request drafted) gets no speculation figures at all
    base = requests_frame([idle, idle], t0=0.0, run_id="r", arm="a", concurrency=2, repeat=0)
    assert base["spec_verify_ct"].isna().all() and "spec_draft_acceptance_rate" not in level_metrics(base, 2)


def test_frame_in_place_uses_the_records_own_arrays() -> None:
    """in_place: each row's chunk_t_s is its record's chunk_times shifted to t0, not a copy; the values
    are those of the copying frame, to the bit."""
    def records() -> list[RequestRecord]:
        return [rec(10.0, [10.5, 10.6, 10.9], [1, 2, 1]), rec(10.2, [10.7], [3]),
                RequestRecord(t_sent=10.3, t_end=10.4, http_status=500, error="HTTP 500")]

    copied = requests_frame(records(), t0=10.0, run_id="r", arm="a", concurrency=2, repeat=0)
    mine = records()
    shifted = requests_frame(mine, t0=10.0, run_id="r", arm="a", concurrency=2, repeat=0, in_place=True)
    chunk_cols = ["chunk_t_s", "chunk_tokens"]
    pd.testing.assert_frame_equal(shifted.drop(columns=chunk_cols), copied.drop(columns=chunk_cols), check_exact=True)
    for r, a, b in zip(mine, copied["chunk_t_s"], shifted["chunk_t_s"]):
        assert b.dtype == np.float64 and np.array_equal(a, b)
    assert shifted["chunk_t_s"][0] is mine[0].chunk_times and shifted["chunk_t_s"][1] is mine[1].chunk_times
    assert [t.tolist() for t in shifted["chunk_tokens"]] == [[1, 2, 1], [3], []]
    assert mine[0].chunk_times.tolist() == [10.5 - 10.0, 10.6 - 10.0, 10.9 - 10.0]


def test_pooled_level_percentiles_are_numpys_over_all_observations() -> None:
    """The level's ITL and chunk-gap figures are np.mean/np.percentile over every observation of every
    successful request, in request order, exactly (the pooled array is filled and partitioned in place)."""
    rng = np.random.default_rng(7)
    records = []
    for i in range(60):
        n = int(rng.integers(1, 200))
        times = (i + np.cumsum(rng.exponential(0.02, n) * rng.choice([1e-3, 1.0, 7.0], n))).tolist()
        tokens = rng.integers(1, 5, n).tolist() if i % 3 else None
        records.append(rec(float(i), times, tokens, out=None if tokens else 2 * n))
    frame = requests_frame(records, t0=0.0, run_id="r", arm="a", concurrency=4, repeat=0)
    lv = level_metrics(frame, 4)
    itl = np.concatenate([token_normalised_itl(r.chunk_times, r.chunk_tokens, r.output_tokens) for r in records])
    gaps = np.concatenate([np.diff(r.chunk_times) for r in records])
    for kind, values in (("itl", itl), ("chunk_gap", gaps)):
        assert lv[f"{kind}_mean_s"] == float(np.mean(values))
        for p in (50, 90, 99):
            assert lv[f"{kind}_p{p}_s"] == float(np.percentile(values, p)), (kind, p)
