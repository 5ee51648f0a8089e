"""A CPU engine's share of the CPU: the normalised aggregate, the basis a comparison decides on, stalls."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from helpers import base_meta, write_measured
from specsweep.analyze.compare import compare
from specsweep.analyze.enginecpu import (
    BASIS_CPU,
    STALL_FACTOR,
    STARVED_PCT,
    cpu_figures,
    engine_threads,
    normalise_aggregate,
    stall_sentence,
    stalled_requests,
)
from specsweep.report import diagnostics_markdown
from specsweep.results.meta import Meta
from specsweep.results.store import load_result_set

LEVELS = [1, 2, 4, 8, 16]


def _meta(arm: str, threads: int | None) -> Meta:
    server: dict[str, Any] = {"name": "llamacpp"}
    if threads is not None:
        server["launch"] = {"engine": "llama.cpp (xllamacpp)", "threads": threads}
    return Meta.model_validate(base_meta(arm, server=server))


def _arm(rng: np.random.Generator, true: np.ndarray, threads: int, starved: set[int], noise: str) -> pd.DataFrame:
    """Level rows of an engine whose true tok/s at full CPU is ``true``: quiet levels get their
    threads' CPU (±3 %), ``starved`` ones 30–60 % of it; wall tok/s follows the CPU it got, with
    run-to-run noise (lognormal or uniform, about 3 %) on the engine's own speed."""
    rows = []
    for repeat in range(3):
        for i, c in enumerate(LEVELS):
            share = rng.uniform(0.30, 0.60) if (c, repeat) in starved else rng.uniform(0.97, 1.03)
            own = math.exp(rng.normal(0, 0.03)) if noise == "lognormal" else rng.uniform(0.95, 1.05)
            rows.append({"concurrency": c, "repeat": repeat, "server_cpu_cores": threads * share,
                         "output_tok_s": true[i] * own * min(share, 1.0)})
    return pd.DataFrame(rows)


@pytest.mark.fast
@pytest.mark.parametrize("noise", ["lognormal", "uniform"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_control_arm_that_lost_cpu_agrees_with_the_baseline_once_normalised(noise: str, threads: int) -> None:
    """Many draws of a baseline and a control configured alike, where another process took CPU from
    some of the control's levels: wall-clock tok/s shows a deviation of 35 % or more there, tok/s at
    the engine's full CPU stays within five standard deviations of the two engines' own noise and the
    CPU reading (about 4.5 % in logs); a quiet machine changes nothing."""
    rng = np.random.default_rng(11)
    metas = {"baseline": _meta("baseline", threads), "control": _meta("control", threads)}
    for _ in range(100):
        true = 40.0 * np.array(LEVELS) ** 0.3
        starved = {(int(rng.choice(LEVELS)), int(rng.integers(0, 3))) for _ in range(3)}
        raw = {"baseline": _arm(rng, true, threads, set(), noise), "control": _arm(rng, true, threads, starved, noise)}
        out, note = normalise_aggregate(raw, metas)
        assert note is not None and BASIS_CPU in note and f"under {STARVED_PCT:.0f} %" in note
        b, k = (out[a].set_index(["concurrency", "repeat"]) for a in ("baseline", "control"))
        hit = list(starved)
        assert (np.abs(np.log(k.loc[hit, "output_tok_s_wall"] / b.loc[hit, "output_tok_s_wall"])) > 0.3).all()
        assert (np.abs(np.log(k["output_tok_s"] / b["output_tok_s"])) < 0.22).all()
        quiet = {"baseline": raw["baseline"], "control": _arm(rng, true, threads, set(), noise)}
        same, none = normalise_aggregate(quiet, metas)
        assert none is None and (same["control"]["output_tok_s"] == quiet["control"]["output_tok_s"]).all()
        assert same["control"]["server_cpu_got_pct"].between(96, 104).all()


@pytest.mark.fast
def test_only_cpu_engines_with_every_levels_figure_are_normalised() -> None:
    lv = pd.DataFrame({"concurrency": [1, 4], "repeat": [0, 0], "output_tok_s": [50.0, 60.0],
                       "server_cpu_cores": [0.5, 1.0]})
    gpu = {"baseline": _meta("baseline", None), "spec": _meta("spec", 1)}
    out, note = normalise_aggregate({"baseline": lv, "spec": lv}, gpu)
    assert note is None and (out["spec"]["output_tok_s"] == lv["output_tok_s"]).all()
    assert engine_threads(gpu["baseline"]) is None and engine_threads(gpu["spec"]) == 1
    unread = lv.assign(server_cpu_cores=[math.nan, 1.0])
    _, note = normalise_aggregate({"baseline": unread, "spec": lv}, {"baseline": _meta("baseline", 1), "spec": gpu["spec"]})
    assert note is None
    figs = cpu_figures(lv, 2)  # hand-computed: 0.5 of 2 threads' cores is 25 %; 50 tok/s over 0.5 CPU-s/s
    assert figs["server_cpu_got_pct"].tolist() == [25.0, 50.0] and figs["output_tok_per_cpu_s"].tolist() == [100.0, 60.0]


@pytest.mark.fast
def test_a_stalled_request_is_named_with_its_level() -> None:
    """Levels of requests with TPOTs around their own median (several noise models), one request
    per chosen level stalled 3.5–6×: exactly those are found, each with its level."""
    rng = np.random.default_rng(5)
    for draw in range(60):
        rows, want = [], set()
        for c in (1, 4, 16):
            for repeat in (0, 1):
                base = rng.uniform(0.01, 0.1)
                n = max(2 * c, 8)
                tpot = base * (np.exp(rng.normal(0, 0.15, n)) if draw % 2 else rng.uniform(0.7, 1.4, n))
                if rng.random() < 0.3:
                    tpot[int(rng.integers(0, n))] = base * rng.uniform(3.5 * 1.4, 6.0 * 1.4)
                    want.add((c, repeat))
                rows += [{"arm": "ngram", "concurrency": c, "repeat": repeat, "request_index": i, "tpot_s": t}
                         for i, t in enumerate(tpot)]
        found = stalled_requests(pd.DataFrame(rows))
        assert {(int(r.concurrency), int(r.repeat)) for r in found.itertuples()} == want
        assert (found["tpot_s"] >= STALL_FACTOR * found["level_tpot_p50_s"]).all()
        text = stall_sentence(found)
        assert (text is None) == (not want)
        for c, r in want:
            assert f"ngram at {c} (repeat {r}): 1 request(s)" in (text or "")


def test_a_comparison_of_cpu_engines_decides_on_the_normalised_aggregate_and_says_so(tmp_path: Path) -> None:
    """Two arms configured alike; the control's engine got half its thread's CPU at 4: the
    comparison's aggregate there is wall tok/s ÷ 0.5, the wall figure is kept, the basis is named in
    the notes and Diagnostics show the CPU the engine got and tok/s per engine CPU-second."""
    server = {"name": "llamacpp", "launch": {"engine": "llama.cpp (xllamacpp)", "threads": 1}}
    spec = {c: {"tokens": 32, "step_s": 0.02, "ttft_s": 0.05} for c in (1, 4)}
    quiet = {c: {"server_cpu_cores": 1.0} for c in (1, 4)}
    base = write_measured(tmp_path / "b", "baseline", spec, repeats=2, seed=1, level_extra=quiet, server=server)
    ctrl = write_measured(tmp_path / "c", "control", spec, repeats=2, seed=1,
                          level_extra={1: {"server_cpu_cores": 1.0}, 4: {"server_cpu_cores": 0.5}}, server=server)
    comp = compare([load_result_set(base), load_result_set(ctrl)], baseline="baseline", n_boot=20)
    assert comp.aggregate_basis == BASIS_CPU and any(BASIS_CPU in n for n in comp.notes)
    lv = comp.levels.set_index(["arm", "concurrency"])
    assert lv.loc[("control", 4), "output_tok_s"] == pytest.approx(2 * lv.loc[("control", 4), "output_tok_s_wall"])
    assert lv.loc[("control", 4), "server_cpu_got_pct"] == pytest.approx(50.0)
    text = diagnostics_markdown(comp)
    assert "Engine CPU" in text and "tok/s per engine CPU-second" in text and "50 %" in text
    plain = compare([load_result_set(base)], baseline="baseline", n_boot=20)
    assert plain.aggregate_basis is None


def test_the_stall_line_says_whether_another_process_could_have_caused_the_stalls() -> None:
    """A stall at a level where the engine got its whole core is the engine's own, said so; one at a
    starved level names that level and its CPU; without CPU figures the line claims no cause; arms
    with no stalled request are named."""
    stalled = pd.DataFrame([{"arm": "ngram", "concurrency": 8, "repeat": 1, "request_index": 3,
                             "tpot_s": 0.2, "level_tpot_p50_s": 0.05}])
    quiet = stall_sentence(stalled, {("ngram", 8, 1): 98.0, ("baseline", 8, 1): 99.0}, ["baseline", "ngram", "control"])
    assert quiet is not None and "98 % or more" in quiet and "the stalls are the engine's own" in quiet
    assert "No stalled request in baseline, control." in quiet and "took its core there" not in quiet
    starved = stall_sentence(stalled, {("ngram", 8, 1): 52.0}, ["baseline", "ngram"])
    assert starved is not None and "ngram at 8 (repeat 1, 52 %): another process took its core there" in starved
    assert "engine's own" not in starved
    unknown = stall_sentence(stalled)
    assert unknown is not None and "engine's own" not in unknown and "took its core there" not in unknown
    assert "No stalled request" not in unknown
