"""What one arm's result set says about its serving, level by level: the inputs of the what-if model.

Everything comes from measurements (a :class:`~specsweep.analyze.compare.Comparison`'s level figures and
meta records, and the arms' request rows where given); nothing is read from a simulator's
configuration. Per level (one concurrency ``C``):

- ``admitted`` (``n``): requests the server held at once — ``min(C, cap)``, or the running-requests
  gauge's maximum where it shows a lower limit that the client waited on (see :func:`gauge_limit`);
  for level-only data (no per-request rows) ``aggregate ÷ per-request tok/s`` (see
  :data:`LEVEL_ONLY_ASSUMPTIONS`).
- ``saturated``: ``n < C`` — clients waited in the server's queue.
- the figures the model needs: aggregate tok/s, per-user speed (mean 1/TPOT, or per-request tok/s
  for level-only data), TTFT and end-to-end mean and p50 (s), accept length (tokens per decode step
  per request: the server's figure, else tokens per SSE chunk, else 1).

``replicates`` holds a bootstrap over each level's requests (or, without requests, a parametric
draw with :data:`ASSUMED_NOISE_PCT` per level): row 0 is the measurement, rows 1.. the replicates,
so every fitted quantity downstream carries its own uncertainty. The levels are observed in
concurrency order from one generator seeded with ``seed``, so the same inputs give the same replicates.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.join import measured_requests
from specsweep.errors import InputError
from specsweep.results.meta import Meta
from specsweep.results.store import ResultSet
from specsweep.servers import dialect_of

__all__ = ["ArmData", "ASSUMED_NOISE_PCT", "LEVEL_ONLY_ASSUMPTIONS", "WhatIfError", "gauge_limit", "observe", "queue_margin", "server_setting"]

#: run-to-run noise (% per level, 1 sd) assumed where no per-request samples exist (level-only data)
ASSUMED_NOISE_PCT: float = 3.0
#: level-only data: a level whose running requests are within this factor of a lower level's is saturated
PLATEAU: float = 1.1
#: a level shows a server limit when its running + queued gauges reach this share of the clients
QUEUE_SEEN: float = 0.9
#: ... and its queue gauge at least this share of the clients (a queue of a few forms at any step boundary)
QUEUED_SHARE: float = 0.1
#: ... and never fewer than this many requests (at 16 clients, 10 % is one or two: a step boundary's queue)
QUEUED_MIN: float = 2.0
#: the figures each replicate carries, in this order
FIGURES: tuple[str, ...] = ("output_tok_s", "user_tok_s", "ttft_mean_s", "ttft_p50_s", "e2e_mean_s", "e2e_p50_s")
LEVEL_ONLY_ASSUMPTIONS: tuple[str, ...] = (
    "level-only data (no per-request rows): the per-request tok/s is taken to exclude queueing, so aggregate ÷ "
    "per-request tok/s is the number of requests the server ran at once",
    f"level-only data: a level is taken as saturated (a limit other than the clients held the running requests) "
    f"when its running requests are within {round((PLATEAU - 1) * 100)} % of a lower concurrency's",
    "level-only data: prefill is folded into the per-token time (no TTFT was published), and the mean end-to-end "
    "time is Little's law's C × output tokens ÷ aggregate tok/s",
    f"level-only data: the band assumes {ASSUMED_NOISE_PCT:g} % run-to-run noise per level (no repeats or samples "
    "were published), widened by the arm's own leave-one-level-out error",
)


class WhatIfError(InputError, ValueError):
    """A what-if question cannot be asked of these data (names the parameter or arm and what to do)."""


@dataclass
class ArmData:
    """One arm's per-level observations (sorted by concurrency) and their bootstrap replicates."""

    arm: str
    level_only: bool
    #: offered concurrency of each level
    concurrency: np.ndarray
    #: requests the server held at once at each level (n)
    admitted: np.ndarray
    saturated: np.ndarray
    #: tokens per decode step per request at each level (1 without speculation)
    accept_length: np.ndarray
    #: measured requests per level (per repeat)
    requests: np.ndarray
    #: share of a decoding request's time spent waiting on other requests' prompts: 1 − p50 ÷ mean of the
    #: gaps between its chunks (a prefill step makes the odd long gap); NaN where the level has no gaps
    stall_share: np.ndarray
    #: figure -> array (1 + n_boot, levels); row 0 is the measurement
    replicates: dict[str, np.ndarray]
    output_tokens: float
    prompt_tokens: float
    #: the running-request cap the server applied (None: none reported)
    cap: int | None
    #: the KV pool in tokens (max_total_num_tokens; None: not reported)
    pool_tokens: int | None
    #: tokens verified per request per step (num_draft_tokens; None: no speculation reported)
    draft_tokens: int | None
    speculative: bool
    mem_fraction_static: float | None
    memory_usage: dict[str, float]
    #: where n came from at each level: "gauge", "cap", "littles-law"
    admitted_source: list[str]
    #: True when every level's accept length was measured (server figure or tokens per chunk)
    accept_measured: bool = False
    assumptions: list[str] = field(default_factory=list)

    def subset(self, keep: np.ndarray) -> ArmData:
        """The same arm with only the levels where ``keep`` is True (for leave-one-level-out)."""
        return ArmData(
            arm=self.arm, level_only=self.level_only, concurrency=self.concurrency[keep],
            admitted=self.admitted[keep], saturated=self.saturated[keep], accept_length=self.accept_length[keep],
            requests=self.requests[keep], stall_share=self.stall_share[keep],
            replicates={k: v[:, keep] for k, v in self.replicates.items()}, output_tokens=self.output_tokens,
            prompt_tokens=self.prompt_tokens, cap=self.cap, pool_tokens=self.pool_tokens,
            draft_tokens=self.draft_tokens, speculative=self.speculative,
            mem_fraction_static=self.mem_fraction_static, memory_usage=self.memory_usage,
            admitted_source=[s for s, k in zip(self.admitted_source, keep) if k], assumptions=list(self.assumptions),
            accept_measured=self.accept_measured)


def _num(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def server_setting(meta: Meta, key: str) -> Any:
    """A server setting from meta.json: ``server.<key>``, else the trimmed ``/server_info`` snapshot
    (its top level, then its ``internal_states``)."""
    server = meta.server
    if server.get(key) is not None:
        return server[key]
    snap = server.get("server_info") or {}
    if isinstance(snap, dict):
        if snap.get(key) is not None:
            return snap[key]
        states = snap.get("internal_states") or []
        for state in states if isinstance(states, list) else [states]:
            if isinstance(state, dict) and state.get(key) is not None:
                return state[key]
    return None


def _cap(meta: Meta, comp_cap: int | None) -> int | None:
    for value in (comp_cap, dialect_of(str(meta.server.get("name") or "sglang")).running_cap(meta.server)):
        x = _num(value)
        if x is not None and x >= 1:
            return int(x)
    return None


#: the request column that measures each workload length where the workload fixes none
_MEASURED_LEN = {"input_tokens": "prompt_tokens", "output_tokens": "output_tokens"}


def _workload_len(comp: Comparison, meta: Meta, key: str, req: pd.DataFrame | None = None) -> float:
    """The workload's ``key`` length (tokens): as the workload fixed it, else (prompt files, built-in
    prompts, natural lengths) the mean the arm's own requests measured."""
    for source in (meta.workload, comp.workload):
        x = _num(getattr(source, key))
        if x is not None and x > 0:
            return x
    col = _MEASURED_LEN[key]
    if req is not None and col in req.columns:
        values = pd.to_numeric(req[col], errors="coerce")
        values = values[np.isfinite(values) & (values > 0)]
        if len(values):
            return float(values.mean())
    raise WhatIfError(f"arm '{meta.arm}': meta.json workload.{key} is missing; the what-if model needs the "
                      "prompt and output lengths of the measured workload")


def _level_value(row: pd.Series, *names: str) -> float:
    for name in names:
        if name in row.index:
            x = _num(row[name])
            if x is not None:
                return x
    return math.nan


def gauge_limit(c: float, n: float, *, gauge: float, queued: float, decoding: float = math.nan,
                in_flight: float = math.nan) -> float | None:
    """The server's limit on running requests at one level (requests), or None where the gauges show none.

    ``c``: the level's clients; ``n``: what the cap allows (``min(C, cap)``); ``gauge`` and ``queued``:
    the polled running- and queued-requests gauges' maxima; ``decoding`` and ``in_flight``: the
    client's time-averaged requests decoding and requests out (NaN where the result set has none).

    The gauges are claims to check. Polled gauges undersample (servers refresh them every few steps),
    and a queue of a few forms for a moment at every step boundary, more of them when the client or
    the server is short of CPU. So a maximum below ``n`` is a limit only where the server held fewer
    with the rest of the clients visibly waiting: running + queued ≥ :data:`QUEUE_SEEN` × C (× the
    client's mean requests out, where fewer: a client short of CPU sends the next one late) and
    queued ≥ :func:`queue_margin` on the server's gauges, no more requests decoding on average than
    the gauge's maximum (else the gauge missed them), and, where the client counted them, at least
    :func:`queue_margin` more requests out on average than the server ever ran or decoded: a limit
    the client never waited on holds nothing back.

    What these figures cannot tell apart: an undersampled gauge at a level whose requests spend
    :func:`queue_margin` or more of their time out but not decoding (slow prefill, a client short of
    CPU) looks like a limit with its queue."""
    if not (math.isfinite(gauge) and math.isfinite(queued) and 1 <= gauge < n - 0.5):
        return None
    out = min(c, in_flight) if math.isfinite(in_flight) else c  # the requests there were to hold
    if queued < queue_margin(c) or gauge + queued < QUEUE_SEEN * out:
        return None
    if decoding > gauge + 0.5:
        return None
    if in_flight - max(gauge, decoding if math.isfinite(decoding) else gauge) < queue_margin(c):
        # (False for NaN: no client count, no check)
        return None
    return gauge


def queue_margin(c: float) -> float:
    """The fewest waiting requests that show a limit at ``c`` clients: :data:`QUEUED_SHARE` × C, at
    least :data:`QUEUED_MIN`."""
    return max(QUEUED_SHARE * c, QUEUED_MIN)


def _bootstrap(req: pd.DataFrame, n_boot: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Replicates of one level's per-request statistics: mean user speed, TTFT/e2e mean and p50."""
    user = req["user_tok_s"].to_numpy(dtype=float) if "user_tok_s" in req else np.full(len(req), np.nan)
    ttft = req["ttft_s"].to_numpy(dtype=float)
    e2e = req["e2e_s"].to_numpy(dtype=float)
    m = len(req)
    idx = np.vstack([np.arange(m)[None, :], rng.integers(0, m, size=(n_boot, m))])
    out = {
        "user_tok_s": np.nanmean(user[idx], axis=1) if np.isfinite(user).any() else np.full(n_boot + 1, np.nan),
        "ttft_mean_s": ttft[idx].mean(axis=1), "ttft_p50_s": np.median(ttft[idx], axis=1),
        "e2e_mean_s": e2e[idx].mean(axis=1), "e2e_p50_s": np.median(e2e[idx], axis=1),
    }
    return out


def observe(comp: Comparison, arm: str, sets: Sequence[ResultSet] | None = None, *, n_boot: int = 200,
            seed: int = 0) -> ArmData:
    """The observations of ``arm`` in ``comp``; ``sets`` (the result sets ``comp`` was built from)
    adds the request rows that the bootstrap and the per-request figures need."""
    meta, lv = _levels_to_observe(comp, arm, n_boot)
    rs = next((s for s in (sets or []) if s.arm == arm), None)
    req = measured_requests(rs) if rs is not None else None
    level_only = meta.level_only or req is None and "e2e_mean_s" not in lv.columns
    rng = np.random.default_rng(seed)
    output_tokens = _workload_len(comp, meta, "output_tokens", req)
    prompt_tokens = _workload_len(comp, meta, "input_tokens", req)
    server = _server(comp, arm, meta)
    obs = _observe_levels(comp, arm, lv, req, level_only, server, output_tokens, n_boot, rng)
    conc = lv["concurrency"].to_numpy(dtype=float)
    mem = server_setting(meta, "memory_usage")
    return ArmData(
        arm=arm, level_only=level_only, concurrency=conc, admitted=obs.admitted,
        saturated=_saturated(conc, obs.admitted, level_only), accept_length=obs.accept,
        requests=_request_counts(lv, conc), stall_share=_stall_share(lv, level_only), replicates=obs.reps,
        output_tokens=output_tokens, prompt_tokens=prompt_tokens, cap=server.cap,
        pool_tokens=int(server.pool) if server.pool else None,
        draft_tokens=int(server.draft) if server.draft else None, speculative=server.spec,
        mem_fraction_static=_num(server_setting(meta, "mem_fraction_static")),
        memory_usage={k: float(v) for k, v in mem.items() if _num(v) is not None} if isinstance(mem, dict) else {},
        admitted_source=obs.sources, assumptions=_assumptions(obs, lv, level_only, server.spec),
        accept_measured=bool(server.spec and obs.accept_seen.all()))


def _levels_to_observe(comp: Comparison, arm: str, n_boot: int) -> tuple[Meta, pd.DataFrame]:
    """(the arm's meta.json record, its levels with an aggregate tok/s figure); a WhatIfError where the
    arm is not compared, ``n_boot`` is too small for a band, or no level has the figure."""
    if arm not in comp.arms:
        raise WhatIfError(f"arm={arm!r} is not in the comparison; its arms: {', '.join(comp.arms)}")
    if n_boot < 20:
        raise WhatIfError(f"n_boot={n_boot}: at least 20 bootstrap replicates are needed for a band")
    meta = comp.metas[arm]
    lv = comp.arm_levels(arm)
    lv = lv[lv["output_tok_s"].notna() & (lv["output_tok_s"] > 0)].reset_index(drop=True)
    if lv.empty:
        raise WhatIfError(f"arm '{arm}' has no level with an aggregate tok/s figure")
    return meta, lv


@dataclass
class _Server:
    """What the arm's meta.json says about its server."""

    #: the running-request cap (None: none reported)
    cap: int | None
    #: the KV pool in tokens (None: not reported)
    pool: float | None
    #: tokens verified per request per step (None: no speculation reported)
    draft: float | None
    spec: bool


def _server(comp: Comparison, arm: str, meta: Meta) -> _Server:
    """The arm's server settings: cap, KV pool, draft tokens, whether it speculates."""
    pool = _num(server_setting(meta, "max_total_num_tokens")) or _num(
        (server_setting(meta, "memory_usage") or {}).get("token_capacity") if isinstance(
            server_setting(meta, "memory_usage"), dict) else None)
    draft = _num(server_setting(meta, "speculative_num_draft_tokens"))
    spec = bool(server_setting(meta, "speculative_algorithm")) or arm in comp.spec_arms and draft is not None
    return _Server(cap=_cap(meta, comp.caps.get(arm)), pool=pool, draft=draft, spec=spec)


@dataclass
class _Observed:
    """Per level (in the order of the arm's levels): the figures' replicates and what the server ran."""

    #: figure -> array (1 + n_boot, levels); row 0 is the measurement
    reps: dict[str, np.ndarray]
    #: requests the server held at once
    admitted: np.ndarray
    #: where each level's ``admitted`` came from: "gauge", "cap", "littles-law"
    sources: list[str]
    #: tokens per decode step per request (1 where not measured) and where it was measured
    accept: np.ndarray
    accept_seen: np.ndarray
    #: True when some level had no request rows to bootstrap: its band assumes :data:`ASSUMED_NOISE_PCT`
    assumed_noise: bool = False


def _observe_levels(comp: Comparison, arm: str, lv: pd.DataFrame, req: pd.DataFrame | None, level_only: bool,
                    server: _Server, output_tokens: float, n_boot: int, rng: np.random.Generator) -> _Observed:
    """Each level's figures, replicates, accept length and running requests, in the levels' order (the
    random draws follow it)."""
    conc = lv["concurrency"].to_numpy(dtype=float)
    k = len(lv)
    obs = _Observed(reps={f: np.full((n_boot + 1, k), np.nan) for f in FIGURES}, admitted=np.empty(k), sources=[],
                    accept=np.ones(k), accept_seen=np.zeros(k, bool))
    user_col = "user_tok_s_mean" if not level_only and "user_tok_s_mean" in lv.columns else comp.user_metric
    for i, row in lv.iterrows():
        c = conc[i]
        a = float(row["output_tok_s"])
        u = _level_value(row, user_col, "user_tok_s_mean", "request_tok_s_mean")
        if not math.isfinite(u) or u <= 0:
            raise WhatIfError(f"arm '{arm}' at concurrency {int(c)}: no per-user speed to model from")
        if server.spec:
            # tokens per target step first: a llama.cpp level's own figure counts only drafted steps
            acc = _level_value(row, "spec_tokens_per_step", "spec_accept_length", "tokens_per_chunk_mean")
            obs.accept[i] = acc if math.isfinite(acc) and acc >= 1 else 1.0
            obs.accept_seen[i] = math.isfinite(acc) and acc >= 1
        if level_only:
            n = _observe_level_only(obs, i, c, a, u, output_tokens, n_boot, rng)
        else:
            sub = req[req["concurrency"] == int(c)] if req is not None else None
            n = _observe_measured(obs, i, row, (c, a, u), server.cap, sub, n_boot, rng)
            if not math.isfinite(obs.reps["e2e_mean_s"][0, i]):
                raise WhatIfError(f"arm '{arm}' at concurrency {int(c)}: the level has no e2e_mean_s figure; "
                                  "re-run compare on the result sets (with request rows)")
        obs.admitted[i] = max(1.0, n)
    return obs


def _observe_level_only(obs: _Observed, i: int, c: float, a: float, u: float, output_tokens: float, n_boot: int,
                        rng: np.random.Generator) -> float:
    """Level ``i`` of level-only data (aggregate ``a`` and per-user ``u`` tok/s at ``c`` clients): the
    running requests by Little's law, replicates drawn with :data:`ASSUMED_NOISE_PCT`."""
    # Little's law on a closed loop: every one of C clients always has a request out
    n = min(c, a / u)
    obs.sources.append("littles-law")
    reps = obs.reps
    noise = np.exp(rng.normal(0.0, ASSUMED_NOISE_PCT / 100, size=(n_boot, 2)))
    reps["output_tok_s"][:, i] = np.r_[a, a * noise[:, 0]]
    reps["user_tok_s"][:, i] = np.r_[u, u * noise[:, 1]]
    reps["e2e_mean_s"][:, i] = c * output_tokens / reps["output_tok_s"][:, i]
    return n


def _observe_measured(obs: _Observed, i: int, row: pd.Series, figures: tuple[float, float, float], cap: int | None,
                      sub: pd.DataFrame | None, n_boot: int, rng: np.random.Generator) -> float:
    """Level ``i`` with measured figures (``figures``: clients, aggregate and per-user tok/s): the
    running requests (the cap, or a lower limit the gauges show), the level's figures, and replicates
    from a bootstrap over its requests ``sub`` (else drawn with :data:`ASSUMED_NOISE_PCT`)."""
    c, a, u = figures
    n, src = (min(c, cap) if cap else c), "cap"
    limit = gauge_limit(c, n, gauge=_level_value(row, "server_running_max"),
                        queued=_level_value(row, "server_queued_max"),
                        decoding=_level_value(row, "decoding_concurrency"),
                        in_flight=_level_value(row, "client_mean_in_flight"))
    if limit is not None:
        n, src = limit, "gauge"
    obs.sources.append(src)
    reps = obs.reps
    reps["output_tok_s"][0, i] = a
    reps["user_tok_s"][0, i] = u
    for f in ("ttft_mean_s", "ttft_p50_s", "e2e_mean_s", "e2e_p50_s"):
        reps[f][0, i] = _level_value(row, f)
    if sub is not None and len(sub) >= 2:
        boot = _bootstrap(sub, n_boot, rng)
        for f, v in boot.items():
            if np.isfinite(v[0]):
                # the replicates move the level's own figure by the resampled ratio
                ref = reps[f][0, i]
                reps[f][:, i] = ref * v / v[0] if math.isfinite(ref) and v[0] > 0 else v
        ratio = boot["e2e_mean_s"][0] / boot["e2e_mean_s"]
        reps["output_tok_s"][:, i] = a * ratio  # aggregate ∝ C ÷ mean e2e (Little's law)
    else:
        noise = np.exp(rng.normal(0.0, ASSUMED_NOISE_PCT / 100, size=(n_boot, 1)))[:, 0]
        for f in FIGURES:
            reps[f][1:, i] = reps[f][0, i] * noise
        obs.assumed_noise = True
    return n


def _assumptions(obs: _Observed, lv: pd.DataFrame, level_only: bool, spec: bool) -> list[str]:
    """What the observations assume beyond the measurements, in the order the page lists them."""
    assumptions: list[str] = []
    if obs.assumed_noise:
        assumptions.append(f"levels without request rows: the band assumes {ASSUMED_NOISE_PCT:g} % noise per level")
    if level_only:
        assumptions.extend(LEVEL_ONLY_ASSUMPTIONS)
    if not level_only and "cap" in obs.sources:
        assumptions.append("no running-requests gauge at some levels: the server is taken to have run min(C, cap) "
                           "requests there, so a limit below the cap (the KV pool) cannot be seen")
    if spec and not (lv.get("spec_accept_length") is not None and lv["spec_accept_length"].notna().all()):
        assumptions.append("accept length not reported by the server at every level: tokens per SSE chunk (or 1) "
                           "stands in for it")
    if not level_only:
        conc = lv["concurrency"].to_numpy(dtype=float)
        inflight = lv["client_mean_in_flight"].to_numpy(dtype=float) if "client_mean_in_flight" in lv.columns \
            else np.full(len(lv), np.nan)
        short = inflight < 0.5 * conc
        if short.any():
            assumptions.append("at concurrency " + ", ".join(str(int(c)) for c in conc[short]) + " the client kept "
                               "fewer than half the requests in flight on average: those levels measure the client too")
    return assumptions


def _saturated(conc: np.ndarray, admitted: np.ndarray, level_only: bool) -> np.ndarray:
    """Per level: True where clients waited in the server's queue (it ran fewer requests than clients)."""
    if level_only:
        # no queue gauge: a level is saturated when running requests stopped growing with concurrency
        k = len(conc)
        return np.array([any(conc[j] < conc[i] and admitted[i] <= PLATEAU * admitted[j] for j in range(k))
                         for i in range(k)])
    return admitted < conc - 0.5


def _request_counts(lv: pd.DataFrame, conc: np.ndarray) -> np.ndarray:
    """Measured requests per level (per repeat); where not reported, 2 × C (the sweep's default)."""
    n_req = lv["n_ok"].to_numpy(dtype=float) if "n_ok" in lv.columns else np.full(len(lv), np.nan)
    return np.where(np.isfinite(n_req) & (n_req >= 1), n_req, 2.0 * conc)


def _stall_share(lv: pd.DataFrame, level_only: bool) -> np.ndarray:
    """Per level: 1 − p50 ÷ mean of the gaps between chunks, in [0, 0.95]; NaN without chunk gaps."""
    if {"chunk_gap_p50_s", "chunk_gap_mean_s"} <= set(lv.columns) and not level_only:
        return np.clip(1.0 - lv["chunk_gap_p50_s"].to_numpy(dtype=float) / lv["chunk_gap_mean_s"].to_numpy(dtype=float),
                       0.0, 0.95)
    return np.full(len(lv), np.nan)
