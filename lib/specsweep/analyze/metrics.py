"""Metric definitions (docs/method.md), as pure functions. Tests check them on hand-computed timelines.

Per request (measured requests only; warm-up excluded by the caller):

- ``ttft_s``: first chunk carrying >= 1 output token − request sent (seconds).
- ``e2e_s``: last token-carrying chunk − request sent (seconds).
- ``tpot_s`` = (e2e_s − ttft_s) / (output_tokens − 1), for output_tokens > 1 (seconds/token);
  undefined (NaN) when every token came in one chunk (no inter-token timing to measure).
- ``user_tok_s`` = 1 / tpot_s: the per-user decode speed (tok/s).
- ``request_tok_s`` = output_tokens / e2e_s (tok/s; includes queueing and prefill).
- ``chunks``: token-carrying chunks; ``tokens_per_chunk`` = output_tokens / chunks.
- Inter-chunk latency (``chunk_gap``): gaps between consecutive token-carrying chunks (seconds).
- Token-normalised ITL (``itl``): each chunk gap spread evenly over the tokens the later chunk
  carried, i.e. a gap g carrying k tokens gives k observations of g / k (seconds/token). Its mean
  over a request is (e2e_s − ttft_s) / (tokens after the first chunk). Where the server gives no
  per-chunk counts, k is output_tokens / chunks for every chunk.

Per level (one concurrency, one repeat) over the measured window
[first request sent, last request finished] (seconds):

- ``output_tok_s`` = Σ output_tokens of successful requests / window (aggregate tok/s).
- ``steady_output_tok_s``: tokens of successful requests that arrived while all C slots were busy
  / that span. The span starts when the C-th request is sent and ends when the first slot falls
  idle for good: the (N − C + 1)-th request to finish (after it, no request is left to send).
  Tokens are counted from chunk arrival times when available, else spread evenly between each
  request's first and last token. Undefined (NaN) when N < C.
- ``request_per_s`` = successful requests / window; ``error_rate`` = failed / measured.
- p50/p90/p99 and mean of ttft_s, tpot_s, e2e_s (numpy linear-interpolated percentiles);
  ``itl_*`` over all tokens of the level, ``chunk_gap_*`` over all gaps.
- ``user_tok_s_mean`` / ``_p50`` / ``_p10``: over requests of 1 / tpot_s; ``request_tok_s_mean``.
- ``effective_concurrency`` = Σ (t_end − t_start) / window (Little's law: the mean number of
  requests in flight from the client's side; in a closed loop close to C unless the client falls
  behind or ramp-up and drain dominate).
- ``decoding_concurrency`` = Σ (e2e_s − ttft_s) / window over successful requests: the mean
  number of requests between their first and last token. Far below C means requests wait before
  their first token (a server cap, a memory limit, a queue).

Speculative acceptance over a level (:func:`acceptance_from_requests`): tokens per verify step,
the bonus token included, summed from the server's per-request figures when every successful
request carries them (``spec_accept_length_source`` = :data:`SOURCE_PER_REQUEST`); otherwise the
sweep takes it from ``/metrics`` counter deltas (:data:`SOURCE_COUNTERS`).

Invariant: tokens are a record's ``output_tokens`` (its ``token_source`` says whose count), never
chunks counted here; a figure that is undefined is NaN, never 0.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from specsweep.results.columns import PERCENTILES
from specsweep.results.records import RequestRecord

_NO_TOKENS = np.empty(0, dtype=np.int32)
_NO_TOKENS.flags.writeable = False
#: a reference server whose steps woke on average more than this late (ms, ``sim_step_lag_mean_ms``)
#: fell behind its schedule: the level line and the page say so
SIM_LAG_WARN_MS: float = 1.0


# ------------------------------------------------------------------------------------ per request


@dataclass(frozen=True)
class RequestMetrics:
    """Per-request metrics (seconds, tokens, tok/s). NaN where undefined."""

    ttft_s: float
    e2e_s: float
    tpot_s: float
    user_tok_s: float
    request_tok_s: float
    chunks: int
    tokens_per_chunk_mean: float
    itl_mean_s: float
    itl_p99_s: float
    chunk_gap_mean_s: float
    chunk_gap_p99_s: float


def chunk_gaps(chunk_times: Sequence[float] | np.ndarray) -> np.ndarray:
    """Gaps between consecutive token-carrying chunks (seconds)."""
    times = np.asarray(chunk_times, dtype=float)
    return np.diff(times) if times.size > 1 else np.empty(0)


def token_normalised_itl(
    chunk_times: Sequence[float] | np.ndarray, chunk_tokens: Sequence[int] | np.ndarray | None,
    output_tokens: int | None = None,
) -> np.ndarray:
    """One observation per token after the first chunk: each gap / the tokens its chunk carried.

    ``chunk_tokens=None`` spreads ``output_tokens`` evenly over the chunks.
    """
    values, weights = weighted_itl(chunk_times, chunk_tokens, output_tokens)
    return values if weights is None else np.repeat(values, weights)


def weighted_itl(
    chunk_times: Sequence[float] | np.ndarray, chunk_tokens: Sequence[int] | np.ndarray | None,
    output_tokens: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`token_normalised_itl` without the repeats: each gap / the tokens k its chunk carried
    (seconds/token) and k, the observations it stands for (None when every k is 1 or the tokens are
    spread evenly)."""
    gaps = chunk_gaps(chunk_times)
    if gaps.size == 0:
        return np.empty(0), None
    if chunk_tokens is None:
        if not output_tokens:
            return gaps, None
        per_chunk = output_tokens / len(chunk_times)
        return gaps / per_chunk, None
    tokens = np.asarray(chunk_tokens[1:], dtype=np.int64)
    if tokens.size != gaps.size or (tokens < 1).any():
        raise ValueError("chunk_tokens must give >= 1 token for every token-carrying chunk")
    return gaps / tokens, (None if (tokens == 1).all() else tokens)


def _nan_percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else math.nan


def request_metrics(rec: RequestRecord) -> RequestMetrics:
    """Per-request metrics of one record (absolute perf_counter times in, durations out)."""
    n_chunks = len(rec.chunk_times)
    tokens = rec.output_tokens or 0
    if n_chunks == 0:
        nan = math.nan
        return RequestMetrics(nan, nan, nan, nan, nan, 0, nan, nan, nan, nan, nan)
    ttft = rec.chunk_times[0] - rec.t_sent
    e2e = rec.chunk_times[-1] - rec.t_sent
    # with a single token-carrying chunk there is no inter-token timing: TPOT is undefined, not 0
    tpot = (e2e - ttft) / (tokens - 1) if tokens > 1 and n_chunks > 1 else math.nan
    user = 1.0 / tpot if tpot and tpot > 0 else math.nan
    req_tok_s = tokens / e2e if e2e > 0 and tokens else math.nan
    itl = token_normalised_itl(rec.chunk_times, rec.chunk_tokens, tokens)
    gaps = chunk_gaps(rec.chunk_times)
    return RequestMetrics(
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=tpot,
        user_tok_s=user,
        request_tok_s=req_tok_s,
        chunks=n_chunks,
        tokens_per_chunk_mean=tokens / n_chunks if tokens else math.nan,
        itl_mean_s=float(itl.mean()) if itl.size else math.nan,
        itl_p99_s=_nan_percentile(itl, 99),
        chunk_gap_mean_s=float(gaps.mean()) if gaps.size else math.nan,
        chunk_gap_p99_s=_nan_percentile(gaps, 99),
    )


def requests_frame(
    records: Iterable[RequestRecord],
    *,
    t0: float,
    run_id: str,
    arm: str,
    concurrency: int,
    repeat: int,
    warmup: bool = False,
    first_index: int = 0,
    request_indices: Sequence[int] | None = None,
    prompt_ids: Sequence[int] | None = None,
    keep_chunks: bool = True,
    in_place: bool = False,
) -> pd.DataFrame:
    """Tidy per-request rows (docs/method.md, "A result set") with times relative to ``t0`` (the level's start, seconds).

    ``request_indices`` numbers the rows (default ``first_index``, ``first_index + 1``, …).
    With ``keep_chunks`` each row also carries its chunk timeline as numpy arrays: ``chunk_t_s``
    (float64 arrival times relative to ``t0``, seconds) and ``chunk_tokens`` (the record's int32
    tokens per chunk, empty when the server gave none; stored as list<int64>, see ``store``).
    ``in_place``: shift each record's own ``chunk_times`` array to ``t0`` and use it as
    ``chunk_t_s`` instead of a copy (8 bytes per chunk less for a big level); the records' chunk
    times are then level-relative, so build the frame only once from them.
    """
    records = list(records)
    # llama.cpp's timings leave the draft counts out of a request that drafted nothing: when others
    # of the level drafted (the server speculates), such a request drafted 0 and took one target
    # step per token — leaving it out would flatter the level's acceptance
    drafting = any("spec_draft_tokens" in rec.server for rec in records)
    level = {"run_id": run_id, "arm": arm, "concurrency": concurrency, "repeat": repeat}
    rows = []
    for i, rec in enumerate(records):
        index = request_indices[i] if request_indices is not None else first_index + i
        row = _request_row(rec, level, index, prompt_ids[i] if prompt_ids is not None else index, warmup, t0)
        if drafting:
            _undrafted(row, rec)
        if keep_chunks:
            _add_chunks(row, rec, t0, in_place)
        rows.append(row)
    return _typed(pd.DataFrame(rows))


def _request_row(rec: RequestRecord, level: dict[str, Any], index: int, prompt_id: int, warmup: bool,
                 t0: float) -> dict[str, Any]:
    """One request's row: the ``level``'s keys (run_id, arm, concurrency, repeat), its numbers, its
    times relative to ``t0`` (seconds), its metrics (:func:`request_metrics`) and the server's figures."""
    m = request_metrics(rec)
    return {
        **level,
        "request_index": index,
        "prompt_id": prompt_id,
        "warmup": warmup,
        "t_start_s": rec.t_sent - t0,
        "ttft_s": m.ttft_s,
        "e2e_s": m.e2e_s,
        "t_end_s": rec.t_end - t0,
        "tpot_s": m.tpot_s,
        "user_tok_s": m.user_tok_s,
        "request_tok_s": m.request_tok_s,
        "prompt_tokens": rec.prompt_tokens,
        "output_tokens": rec.output_tokens,
        "token_source": rec.token_source,
        "chunks": m.chunks,
        "itl_mean_s": m.itl_mean_s,
        "itl_p99_s": m.itl_p99_s,
        "chunk_gap_mean_s": m.chunk_gap_mean_s,
        "chunk_gap_p99_s": m.chunk_gap_p99_s,
        "tokens_per_chunk_mean": m.tokens_per_chunk_mean,
        "finish_reason": rec.finish_reason,
        "http_status": rec.http_status,
        "error": rec.error,
        "output_digest": rec.output_digest,
        "output_head": rec.output_head,
        "output_blocks": rec.output_blocks,
        "server_e2e_latency_s": rec.server.get("e2e_latency_s"),
        "spec_accept_length": rec.server.get("spec_accept_length"),
        "spec_verify_ct": rec.server.get("spec_verify_ct", _steps_from_rate(rec)),
        "spec_draft_tokens": rec.server.get("spec_draft_tokens"),
        "spec_accepted_tokens": rec.server.get("spec_accepted_tokens"),
        **{k: v for k, v in rec.server.items() if k.startswith("spec_accepted_pos_")},
    }


def _steps_from_rate(rec: RequestRecord) -> float | None:
    """A request's verify steps where the server gave only its tokens per step
    (``spec_tokens_per_iter``: TensorRT-LLM's ``avg_decoded_tokens_per_iter``): its completion
    tokens ÷ that figure; None otherwise."""
    rate = rec.server.get("spec_tokens_per_iter")
    if rate is None or rate <= 0 or not rec.output_tokens:
        return None
    return rec.output_tokens / rate


def _undrafted(row: dict[str, Any], rec: RequestRecord) -> None:
    """In a level whose server drafts: a request whose timings leave the draft counts out drafted
    nothing, so it took one verify step per token (accept length 1)."""
    if "timings_predicted_n" in rec.server and "spec_draft_tokens" not in rec.server:
        n = rec.server["timings_predicted_n"]
        row.update(spec_draft_tokens=0.0, spec_accepted_tokens=0.0, spec_verify_ct=n,
                   spec_accept_length=1.0 if n > 0 else None)


def _add_chunks(row: dict[str, Any], rec: RequestRecord, t0: float, in_place: bool) -> None:
    """The request's chunk timeline on its row: ``chunk_t_s`` (relative to ``t0``; the record's own
    array shifted where ``in_place`` allows) and ``chunk_tokens``."""
    times = rec.chunk_times
    if in_place and times.flags.writeable:
        times -= t0
    else:
        times = times - t0
    row["chunk_t_s"] = times
    row["chunk_tokens"] = rec.chunk_tokens if rec.chunk_tokens is not None else _NO_TOKENS


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """The request rows with their columns' types: counts and server figures float64, text as strings."""
    if frame.empty:
        return frame
    for col in ("output_tokens", "prompt_tokens", "http_status", "server_e2e_latency_s",
                "spec_accept_length", "spec_verify_ct", "spec_draft_tokens", "spec_accepted_tokens"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("float64")
    for col in ("token_source", "finish_reason", "error", "output_digest", "output_head"):
        frame[col] = frame[col].astype("string")
    frame["warmup"] = frame["warmup"].astype(bool)
    return frame


# -------------------------------------------------------------------------------------- per level


def _succeeded(requests: pd.DataFrame) -> pd.Series:
    return requests["error"].isna() & (requests["output_tokens"].fillna(0) > 0)


def steady_span(t_start: Sequence[float], t_end: Sequence[float], concurrency: int) -> tuple[float, float]:
    """The span (seconds) in which all ``concurrency`` slots of a closed loop were busy.

    From the C-th request sent to the (N − C + 1)-th request finished; (nan, nan) when N < C.
    """
    starts, ends = np.sort(np.asarray(t_start, float)), np.sort(np.asarray(t_end, float))
    n = starts.size
    if concurrency < 1 or n < concurrency:
        return math.nan, math.nan
    a, b = starts[concurrency - 1], ends[n - concurrency]
    return (a, b) if b > a else (math.nan, math.nan)


def tokens_in_span(requests: pd.DataFrame, a: float, b: float) -> float:
    """Output tokens (of the given rows) that arrived in [a, b] (seconds, level-relative).

    Uses each row's chunk timeline when present; otherwise one token at the first chunk and the
    rest spread evenly up to the last one.
    """
    total = 0.0
    has_chunks = "chunk_t_s" in requests.columns
    for row in requests.itertuples(index=False):
        out = float(row.output_tokens)
        times = np.asarray(row.chunk_t_s, float) if has_chunks and row.chunk_t_s is not None else None
        if times is not None and times.size:
            toks = np.asarray(row.chunk_tokens, float) if len(row.chunk_tokens) else np.full(times.size, out / times.size)
            total += float(toks[(times >= a) & (times <= b)].sum())
            continue
        first = row.t_start_s + row.ttft_s
        last = row.t_start_s + row.e2e_s
        if a <= first <= b:
            total += 1.0
        if out > 1 and last > first:
            overlap = max(0.0, min(b, last) - max(a, first))
            total += (out - 1) * overlap / (last - first)
        elif out > 1 and a <= last <= b:
            total += out - 1
    return total


def _pct(values: pd.Series, q: float) -> float:
    arr = values.dropna().to_numpy(float)
    return float(np.percentile(arr, q)) if arr.size else math.nan


# ------------------------------------------------------------------ pooled observations of a level

#: observations per batch when a level's ITLs are pooled: 256 Ki × 8 bytes, so the pooled figures
#: need a few MB however many tokens the level had
_POOL_BATCH = 1 << 18
#: a rank is found by sorting what is left of its candidates once at most this many remain
_POOL_GATHER = 1 << 16
_DIGIT_BITS = 16
_SIGN = np.uint64(1 << 63)

#: one batch of observations: values (float64) and how many times each occurs (None: once each)
Batch = tuple[np.ndarray, "np.ndarray | None"]


@dataclass(frozen=True)
class PooledStats:
    """Count, mean and percentiles of a level's pooled observations (seconds; NaN when none)."""

    count: int
    mean: float
    percentiles: dict[float, float]


def _order_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys whose unsigned order is the numeric order of float64 ``values`` (no NaN)."""
    u = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    return np.where(u >= _SIGN, ~u, u | _SIGN)


def _key_value(key: int) -> float:
    """The float64 whose :func:`_order_keys` key is ``key``."""
    k = np.array([key], dtype=np.uint64)
    u = np.where(k >= _SIGN, k & ~_SIGN, ~k)
    return float(u.view(np.float64)[0])


def _batched(batches: Iterable[Batch]) -> Iterator[Batch]:
    """Regroup batches into ones of about :data:`_POOL_BATCH` observations (fewer numpy calls)."""
    vals: list[np.ndarray] = []
    wts: list[np.ndarray | None] = []
    size = 0
    for v, w in batches:
        if not v.size:
            continue
        vals.append(v)
        wts.append(w)
        size += v.size
        if size >= _POOL_BATCH:
            yield _join(vals, wts)
            vals, wts, size = [], [], 0
    if vals:
        yield _join(vals, wts)


def _join(vals: list[np.ndarray], wts: list[np.ndarray | None]) -> Batch:
    v = vals[0] if len(vals) == 1 else np.concatenate(vals)
    if all(w is None for w in wts):
        return v, None
    w = np.concatenate([np.ones(len(x), np.int64) if y is None else np.asarray(y, np.int64)
                        for x, y in zip(vals, wts)])
    return v, w


def pooled_stats(batches: Callable[[], Iterable[Batch]], percentiles: Sequence[float]) -> PooledStats:
    """Count, mean and percentiles of every observation the batches hold, pooled — without holding
    them all at once.

    ``batches()`` yields ``(values, weights)``: float64 values and, per value, how many
    observations share it (int, ≥ 1; ``None``: one each); it is called once per pass (two to five
    passes), so it must give the same observations every time. Memory: a few MB whatever the
    number of observations (a level of 20 million tokens pooled into one array held 160 MB).

    Percentiles are exactly ``np.percentile(pooled, percentiles)`` (numpy's default ``linear``
    method) of the array that repeats each value its weight times, to the last bit: each needed
    order statistic is found by radix selection on an order-preserving 64-bit key of the values
    (16 bits a pass, counting with weights), then by sorting its last few candidates, and the two
    around each percentile are interpolated with numpy's own formula. The mean is Σ value × weight
    / count summed batch by batch (equal to ``np.mean`` to rounding, about 1e-15 relative).
    A NaN among the values makes every figure NaN, as with numpy.
    """
    n = 0
    total = 0.0
    has_nan = False
    top = np.zeros(1 << _DIGIT_BITS)
    shift0 = np.uint64(64 - _DIGIT_BITS)
    for v, w in _batched(batches()):
        n += int(v.size if w is None else w.sum())
        if has_nan or np.isnan(v).any():
            has_nan = True
            continue
        total += float(v.sum() if w is None else np.dot(v, w))
        top += np.bincount((_order_keys(v) >> shift0).astype(np.intp), weights=w, minlength=1 << _DIGIT_BITS)
    if n == 0 or has_nan:
        return PooledStats(n, math.nan, {float(p): math.nan for p in percentiles})
    qs = np.true_divide(np.asarray(percentiles, dtype=np.float64), 100)
    virtual = (n - 1) * qs  # numpy's "linear": the (virtual) index in the sorted pooled array
    prev = np.floor(virtual)
    nxt = prev + 1
    last = virtual >= n - 1
    prev[last] = -1  # numpy takes the last element there (and the gamma below uses -1, as it does)
    nxt[last] = -1
    gamma = virtual - prev
    wanted = {int(r) % n for r in np.concatenate((prev, nxt))}
    found = _select_ranks(batches, sorted(wanted), top)
    out: dict[float, float] = {}
    for p, a_rank, b_rank, t in zip(percentiles, prev, nxt, gamma):
        a, b = np.float64(found[int(a_rank) % n]), np.float64(found[int(b_rank) % n])
        diff = b - a
        out[float(p)] = float(b - diff * (1 - t)) if t >= 0.5 else float(a + diff * t)
    return PooledStats(n, total / n, out)


def _select_ranks(batches: Callable[[], Iterable[Batch]], ranks: list[int], top: np.ndarray) -> dict[int, float]:
    """The value of every 0-based rank of the pooled (weight-expanded) observations.

    Each rank narrows a key prefix 16 bits a pass (``top`` is the weighted count of the first 16
    bits, already counted); once its prefix holds at most :data:`_POOL_GATHER` observations, the
    next pass gathers them and the rank is read off their sorted order.
    """
    # per rank: (prefix, prefix bits, rank among the observations with that prefix, how many they are)
    state: dict[int, tuple[int, int, int, int]] = {}
    for r in ranks:
        state[r] = _descend(top, 0, 0, r)
    found: dict[int, float] = {}
    while True:
        for r, (prefix, bits, rem, count) in list(state.items()):
            if bits == 64:  # the whole key is known: that is the value
                found[r] = _key_value(prefix)
                del state[r]
        if not state:
            return found
        groups = sorted({(prefix, bits, count) for prefix, bits, _, count in state.values()})
        hists = {(p, b): np.zeros(1 << _DIGIT_BITS) for p, b, c in groups if c > _POOL_GATHER}
        gathered: dict[tuple[int, int], list[Batch]] = {(p, b): [] for p, b, c in groups if c <= _POOL_GATHER}
        for v, w in _batched(batches()):
            keys = _order_keys(v)
            for p, b, _ in groups:
                sel = (keys >> np.uint64(64 - b)) == np.uint64(p)
                if not sel.any():
                    continue
                k = keys[sel]
                kw = w[sel] if w is not None else None
                if (p, b) in hists:
                    digits = ((k >> np.uint64(64 - b - _DIGIT_BITS)) & np.uint64((1 << _DIGIT_BITS) - 1)).astype(np.intp)
                    hists[(p, b)] += np.bincount(digits, weights=kw, minlength=1 << _DIGIT_BITS)
                else:
                    gathered[(p, b)].append((k, kw))
        for r, (prefix, bits, rem, count) in list(state.items()):
            if (prefix, bits) in hists:
                state[r] = _descend(hists[(prefix, bits)], prefix, bits, rem)
            else:
                parts = gathered[(prefix, bits)]
                k, kw = _join([x for x, _ in parts], [y for _, y in parts])
                if kw is None:  # one observation each: the rank is an index
                    found[r] = _key_value(int(np.sort(k)[rem]))
                else:
                    order = np.argsort(k, kind="stable")
                    cum = np.cumsum(kw[order])
                    found[r] = _key_value(int(k[order][int(np.searchsorted(cum, rem, side="right"))]))
                del state[r]


def _descend(hist: np.ndarray, prefix: int, bits: int, rem: int) -> tuple[int, int, int, int]:
    """One radix step: the 16-bit digit under which the ``rem``-th observation of ``prefix`` lies."""
    cum = np.cumsum(hist)
    digit = int(np.searchsorted(cum, rem, side="right"))
    below = int(cum[digit - 1]) if digit else 0
    return (prefix << _DIGIT_BITS) | digit, bits + _DIGIT_BITS, rem - below, int(hist[digit])


def _observations(requests: pd.DataFrame, kind: Literal["itl", "chunk_gap"]) -> Iterator[Batch]:
    """A level's token-normalised ITL observations (or chunk gaps), request by request, as
    :func:`pooled_stats` batches (:func:`weighted_itl`: a chunk of k tokens gives its gap / k with
    weight k), computed from the chunk timelines."""
    for times, toks, out in requests[["chunk_t_s", "chunk_tokens", "output_tokens"]].itertuples(index=False):
        if len(times) < 2:
            continue
        if kind == "chunk_gap":
            yield chunk_gaps(times), None
        else:
            yield weighted_itl(times, toks if len(toks) else None, int(out))


def level_metrics(requests: pd.DataFrame, concurrency: int) -> dict[str, float]:
    """Per-level metrics (docs/method.md) from the measured requests of one (concurrency, repeat).

    ``requests`` is a :func:`requests_frame` (times relative to the level's start, seconds).
    """
    n = len(requests)
    ok = requests[_succeeded(requests)] if n else requests
    out: dict[str, float] = {"n_requests": float(n), "n_ok": float(len(ok)), "n_errors": float(n - len(ok))}
    out["error_rate"] = (n - len(ok)) / n if n else math.nan
    if n == 0:
        return out
    start, end = float(requests["t_start_s"].min()), float(requests["t_end_s"].max())
    window = end - start
    tokens = float(ok["output_tokens"].sum())
    out.update(window_s=window, output_tokens=tokens)
    out["output_tok_s"] = tokens / window if window > 0 else math.nan
    out["request_per_s"] = len(ok) / window if window > 0 else math.nan
    a, b = steady_span(requests["t_start_s"], requests["t_end_s"], concurrency)
    out["steady_window_s"] = b - a if not math.isnan(a) else math.nan
    out["steady_output_tok_s"] = tokens_in_span(ok, a, b) / (b - a) if not math.isnan(a) else math.nan
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        stem = name[:-2]
        out[f"{stem}_mean_s"] = float(ok[name].mean()) if len(ok) else math.nan
        for p in PERCENTILES:
            out[f"{stem}_p{p}_s"] = _pct(ok[name], p)
    user = ok["user_tok_s"]
    out["user_tok_s_mean"] = float(user.mean()) if user.notna().any() else math.nan
    out["user_tok_s_p50"] = _pct(user, 50)
    out["user_tok_s_p10"] = _pct(user, 10)
    out["request_tok_s_mean"] = float(ok["request_tok_s"].mean()) if len(ok) else math.nan
    chunks = float(ok["chunks"].sum())
    out["tokens_per_chunk_mean"] = tokens / chunks if chunks else math.nan
    if "chunk_t_s" in ok.columns and len(ok):
        for kind in ("itl", "chunk_gap"):
            st = pooled_stats(lambda kind=kind: _observations(ok, kind), PERCENTILES)  # type: ignore[misc]
            out[f"{kind}_mean_s"] = st.mean
            for p in PERCENTILES:
                out[f"{kind}_p{p}_s"] = st.percentiles[float(p)]
    in_flight = (requests["t_end_s"] - requests["t_start_s"]).sum()
    out["effective_concurrency"] = float(in_flight) / window if window > 0 else math.nan
    decoding = (ok["e2e_s"] - ok["ttft_s"]).sum()
    out["decoding_concurrency"] = float(decoding) / window if window > 0 else math.nan
    sources = set(ok["token_source"].dropna().astype(str))
    out["token_source"] = sources.pop() if len(sources) == 1 else ("mixed" if sources else None)  # type: ignore[assignment]
    if "spec_draft_tokens" in ok.columns and ok["spec_draft_tokens"].notna().any():
        drafted = float(ok["spec_draft_tokens"].sum())  # llama.cpp timings: Σ accepted / Σ drafted
        out["spec_draft_acceptance_rate"] = float(ok["spec_accepted_tokens"].sum()) / drafted if drafted else math.nan
    return out


# ------------------------------------------------------------------------- speculative acceptance

#: where a level's acceptance length came from (``spec_accept_length_source``)
SOURCE_PER_REQUEST = "per-request (server response)"
SOURCE_COUNTERS = "per-level counter deltas (/metrics)"
#: how per-request figures are summed over a level (``spec_accept_length_formula``)
FORMULA_ACCEPTED = "1 + Σ accepted draft tokens / Σ verify steps"
FORMULA_TOKENS = "Σ completion tokens / Σ verify steps"


@dataclass(frozen=True)
class LevelAcceptance:
    """A level's speculative acceptance, from one named source.

    ``accept_length``: output tokens per verify step, the bonus token included (tokens/step).
    ``source``: :data:`SOURCE_PER_REQUEST` or :data:`SOURCE_COUNTERS`; ``formula``: how, in words.
    ``detail``: ``spec_draft_acceptance_rate`` (accepted ÷ drafted tokens, a fraction) and
    ``spec_accept_rate_pos_<i>`` (verify steps whose i-th draft token was accepted ÷ verify steps)
    where this source has them.
    """

    accept_length: float
    source: str
    formula: str
    detail: dict[str, float]


def acceptance_from_requests(requests: pd.DataFrame) -> LevelAcceptance | None:
    """A level's acceptance from the servers' per-request figures, or None unless every
    successful request carries them (then the level falls back to counter deltas).

    ``requests``: :func:`requests_frame` rows of one level (or any subset, e.g. a category).
    Each row's ``spec_verify_ct`` is its verify steps (vLLM ``num_spec_steps``, SGLang
    ``spec_verify_ct``, llama.cpp predicted − accepted draft tokens). SGLang sends no figures for
    a request that never reached a verify step (its one token came from the prefill): a
    successful row without figures and with ≤ 1 output token counts as 0 steps.

    * Rows with accepted draft counts (vLLM ``num_accepted_draft_tokens``, llama.cpp
      ``draft_n_accepted``): :data:`FORMULA_ACCEPTED`, vLLM's definition, the same sums as its
      ``1 + Δaccepted / Δdrafts`` counters; for llama.cpp, whose steps are predicted − accepted,
      it equals Σ completion tokens / Σ steps.
    * Else (SGLang): :data:`FORMULA_TOKENS`, SGLang's ``spec_accept_length`` summed, the same sums
      as its ``Δgeneration tokens / Δspec_verify_calls`` (the prefill's token included).

    ``detail``: ``spec_draft_acceptance_rate`` = Σ accepted ÷ Σ drafted tokens where every row
    has both; ``spec_accept_rate_pos_<i>`` = Σ ``spec_accepted_pos_<i>`` ÷ Σ verify steps where
    every row that had a step has an acceptance histogram (a position a row's histogram does not
    reach counts 0 there), so 1 + Σ_i rate_i = :data:`FORMULA_ACCEPTED`.
    """
    if not len(requests) or "spec_verify_ct" not in requests.columns:
        return None
    ok = requests[_succeeded(requests)]
    if not len(ok):
        return None
    have = ok["spec_verify_ct"].notna()
    if not have.any() or not (have | (ok["output_tokens"] <= 1)).all():
        return None
    steps = ok["spec_verify_ct"].fillna(0.0)
    total_steps = float(steps.sum())
    if total_steps <= 0:
        return None
    detail: dict[str, float] = {}
    counted = "spec_accepted_tokens" in ok.columns and bool(ok.loc[have, "spec_accepted_tokens"].notna().all())
    if counted:
        accepted = float(ok["spec_accepted_tokens"].fillna(0.0).sum())
        length, formula = 1.0 + accepted / total_steps, FORMULA_ACCEPTED
        if "spec_draft_tokens" in ok.columns and ok.loc[have, "spec_draft_tokens"].notna().all():
            drafted = float(ok["spec_draft_tokens"].fillna(0.0).sum())
            if drafted > 0:
                detail["spec_draft_acceptance_rate"] = accepted / drafted
    else:
        length, formula = float(ok["output_tokens"].sum()) / total_steps, FORMULA_TOKENS
    positions = sorted(int(c.rsplit("_", 1)[1]) for c in ok.columns if c.startswith("spec_accepted_pos_"))
    stepped = steps > 0
    if positions and positions[0] == 0 and ok.loc[stepped, "spec_accepted_pos_0"].notna().all():
        for i in positions:
            detail[f"spec_accept_rate_pos_{i}"] = float(ok[f"spec_accepted_pos_{i}"].fillna(0.0).sum()) / total_steps
    return LevelAcceptance(length, SOURCE_PER_REQUEST, formula, detail)
