"""A real study on the reference server whose machine drifts while the arms do not differ.

Both arms run the tiny profile with speculation off (they differ only in a sampling seed, which
moves no step time); every server slows by 40 % per minute from one shared epoch (the drift
fault, ``--fault-drift-pct-per-min``), so the arm measured second is slower than the baseline
only because of the time. The study re-measures the baseline at both levels at the end (a
sentinel); the comparison must measure the drift from it, correct for it and find no
difference, and the page must say so and how large the drift was. The same runs without the
sentinel's rows are what the study would have measured without one: there the drift reads as a
loss, and the caveat must name that risk. (One study serves both: it runs in real time, and most
of this file's time is that study's.)
"""
from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from specsweep.analyze.compare import compare
from specsweep.decide import DEFAULT_PROFILES, recommend
from specsweep.results.store import ResultSet, load_result_set
from specsweep.study.file import load_study
from specsweep.study.runner import run_study


def _study(tmp_path: Path, sentinel: bool) -> Path:
    drift = ["--fault-drift-pct-per-min", "40", "--fault-drift-epoch-s", f"{time.time():.3f}",
             # 20 ms decode steps: the server, not a client starved by a busy machine, sets the pace, so
             # the drift shows in full at any load (with ~1 ms steps a loaded client diluted it)
             "--set", "decode.fixed_ms=20"]
    doc = {
        "title": "Drifting machine", "name": "drift", "baseline": "baseline",
        "sweep": {"concurrency": [1, 4], "input_tokens": 32, "output_tokens": 48, "requests_per_level": 12},
        "arms": [
            {"name": "baseline", "embedded": {"profile": "tiny", "spec": "off", "args": drift}},
            {"name": "same", "label": "Same server, other seed",
             "embedded": {"profile": "tiny", "spec": "off", "args": drift + ["--seed", "7"]}},
        ],
    }
    if sentinel:
        doc["sentinel"] = {"levels": [1, 4]}
    path = tmp_path / "drift.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[ResultSet]]:
    """The study with a sentinel, run once: (its folder, its result sets)."""
    tmp_path = tmp_path_factory.mktemp("drift")
    study = load_study(_study(tmp_path, sentinel=True))
    plan = [(a.name, s.sentinel) for a, s in study.schedule()]
    assert plan == [("baseline", False), ("same", False), ("baseline", True)]
    result = run_study(study, out_dir=tmp_path / "out", report_dir=tmp_path / "reports", log=lambda _: None)
    assert result.ok, result.outcomes
    return tmp_path, [load_result_set(p) for p in result.result_sets]


def _without_sentinel(rs: ResultSet) -> ResultSet:
    """The result set as a study without a sentinel would have written it: no sentinel rows."""
    def keep(frame: pd.DataFrame | None) -> pd.DataFrame | None:
        if frame is None or "sentinel" not in frame:
            return frame
        return frame[~frame["sentinel"].fillna(False).astype(bool)].drop(columns=["sentinel"]).reset_index(drop=True)

    return dataclasses.replace(rs, levels=keep(rs.levels), requests=keep(rs.requests))


def test_the_study_without_a_sentinel_plans_no_rerun(tmp_path: Path) -> None:
    study = load_study(_study(tmp_path, sentinel=False))
    assert [(a.name, s.sentinel) for a, s in study.schedule()] == [("baseline", False), ("same", False)]


@pytest.mark.slow
def test_a_drifting_machine_with_a_sentinel_reads_as_no_difference(measured: tuple[Path, list[ResultSet]]) -> None:
    tmp_path, sets = measured
    base = next(rs for rs in sets if rs.arm == "baseline")
    assert base.levels["sentinel"].sum() == 2  # both levels measured again, marked as such

    # the uncorrected figures: the second arm looks slower than the baseline (the machine slowed)
    raw = compare(sets, assumed_noise_pct=3.0)
    assert raw.drift is not None and raw.drift.corrected
    pct, se = raw.drift.total_pct("output_tok_s")
    assert pct < -5 and raw.drift.credible(), (pct, se)  # ~40 %/min of step time over the study
    for profile in DEFAULT_PROFILES:
        rec = recommend(raw, profile)
        # the drift made the second arm slower; corrected, nothing is lost. (The latency verdict also
        # reads TTFT p99 of 12 requests, whose spread on a shared CPU is no drift: not judged here.)
        if profile["objective"] != "latency":
            assert not (rec.levels["outcome"] == "loss").any(), rec.headline
            assert rec.verdict in ("disable", "no_verdict") and rec.headline.startswith("No measurable difference")
        assert any("Sentinel runs (baseline at 1, 4" in c and "show a drift of -" in c for c in rec.caveats)
    curve = raw.curve("same", "output_tok_s")
    assert "uncertainty of the drift correction" in curve.method()

    html = (tmp_path / "reports" / "drift.html").read_text()
    flat = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "No measurable difference" in flat
    assert "Sentinel runs" in flat and "corrected for it" in flat


@pytest.mark.slow
def test_the_same_drift_without_a_sentinel_is_named_as_a_risk(measured: tuple[Path, list[ResultSet]]) -> None:
    sets = [_without_sentinel(rs) for rs in measured[1]]
    base = next(rs for rs in sets if rs.arm == "baseline")
    assert sorted(base.levels["concurrency"]) == [1, 4]  # the two sentinel rows are gone
    comp = compare(sets)
    assert comp.drift is None
    rec = recommend(comp, DEFAULT_PROFILES[1])
    assert any("no sentinel run and no control arm" in c for c in rec.caveats)
    # the drift reads as a loss of the second arm: exactly the risk the caveat names
    assert (rec.levels["aggregate_delta_pct"] < -3).all(), rec.levels
