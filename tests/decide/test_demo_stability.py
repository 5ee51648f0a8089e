"""The published demo's decisions are stable: two independent measurements of a
reduced copy of the demo design — two real studies on the embedded reference server, with different
prompt seeds, measured at the same time (``make reports`` measures one study at a time, so this is
the busier case) — reach the same decision per profile (class and arm), and the decision table tool
says so.

The reduced design keeps the demo's server (seed profile, MTP as SGLang's NEXTN), workload
(1300-token prompts, 256 output tokens) and method (``parallel`` arms), at three of its levels: two
where MTP gains clearly, one far past the KV pool where it loses (at 64 its −10 % is not credible from
one run at three levels: both measurements then say ``enable``, which hides the crossover). The expected crossover
bracket comes from the virtual-time simulator (specsweep.refserver.model), not from the measurement.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specsweep.decide import decisions
from specsweep.decide.decisions import read_decisions
from specsweep.publish import Published, measure_studies, record_decisions
from specsweep.refserver.model import simulate_closed_loop
from specsweep.refserver.profiles import load_profile

PROFILE = "qwen3.5-122b-a10b-4x-rtxpro6000"
LEVELS = [4, 16, 128]
INPUT, OUTPUT = 1300, 256


def _study(tmp: Path, name: str, seed: int) -> Published:
    doc = {"title": f"Demo stability ({name})", "name": name, "baseline": "baseline", "parallel": 2,
           "out_dir": str(tmp / "runs" / name),
           "sweep": {"concurrency": LEVELS, "input_tokens": INPUT, "output_tokens": OUTPUT, "seed": seed},
           "arms": [{"name": "baseline", "embedded": {"profile": PROFILE, "spec": "off"}},
                    {"name": "mtp", "embedded": {"profile": PROFILE, "spec": "mtp"}}]}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return Published(name=name, study=str(path))


def _model_bracket() -> tuple[int, int]:
    """The tested levels between which the simulator's aggregate Δ of MTP changes sign."""
    p = load_profile(PROFILE)
    sign = [simulate_closed_loop(p, "mtp", c, max(4, 2 * c), INPUT, OUTPUT).output_tok_s
            > simulate_closed_loop(p, "off", c, max(4, 2 * c), INPUT, OUTPUT).output_tok_s for c in LEVELS]
    i = sign.index(False)
    assert all(sign[:i]) and not any(sign[i:]), sign  # one crossover, gains below it
    return LEVELS[i - 1], LEVELS[i]


@pytest.mark.slow
def test_two_independent_measurements_of_the_demo_design_reach_the_same_decisions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _study(tmp_path, "stab-a", seed=0), _study(tmp_path, "stab-b", seed=1000)
    measure_studies([a, b], at_once=2)  # both at once: a busier machine than make reports' one study at a time
    tables = {}
    for pub in (a, b):
        runs = tmp_path / "runs" / pub.name
        status = json.loads((runs / "study.json").read_text())
        assert [o["status"] for o in status["outcomes"]] == ["complete", "complete"], status
        tables[pub.name] = decisions.table_of([runs / "baseline", runs / "mtp"])
    first, second = tables["stab-a"], tables["stab-b"]
    assert [r.profile for r in first] == [r.profile for r in second] and len(first) == 3
    diff = decisions.differences({"demo": first}, {"demo": second})
    assert diff == [], decisions.markdown_table(tables)
    batch = next(r for r in first if r.profile == "Batch throughput")
    assert batch.decision == "enable up to X" and batch.arm == "mtp", decisions.markdown_table(tables)
    assert batch.bracket == _model_bracket()
    assert all(r.decision != "not established" for r in first), decisions.markdown_table(tables)

    # the publish check: the first measurement saved as the committed table, the second compared with it
    saved = tmp_path / "decisions.json"
    record_decisions(saved, {"demo": first})
    assert record_decisions(saved, {"demo": second}) == []
    assert "decisions: the same as in" in capsys.readouterr().out
    assert [r.text() for r in read_decisions(saved)["demo"]] == [r.text() for r in second]


def test_a_changed_decision_is_reported_with_both_sides() -> None:
    """``differences`` names each profile whose class, arm, tie set or crossover bracket changed: the
    recommended arm moving inside a tie, or a tie appearing or going, is a change; X moving inside its
    bracket is not."""
    row = decisions.DecisionRow("Batch throughput", "enable up to X", "mtp", 49.0, (32, 64), ("mtp-cap128",))
    noisy_x = decisions.DecisionRow("Batch throughput", "enable up to X", "mtp", 55.0, (32, 64), ("mtp-cap128",))
    moved = decisions.DecisionRow("Batch throughput", "enable up to X", "mtp", 70.0, (64, 128), ("mtp-cap128",))
    other_arm = decisions.DecisionRow("Batch throughput", "enable up to X", "mtp-cap128", 57.0, (32, 64), ("mtp",))
    untied = decisions.DecisionRow("Batch throughput", "enable up to X", "mtp", 49.0, (32, 64))
    off = decisions.DecisionRow("Batch throughput", "keep off", None)
    assert decisions.differences({"r": [row]}, {"r": [noisy_x]}) == []
    assert decisions.differences({"r": [row]}, {"r": [other_arm]}) == [
        "r / Batch throughput: enable up to 49 (between 32 and 64) (mtp (tied with mtp-cap128)) vs "
        "enable up to 57 (between 32 and 64) (mtp-cap128 (tied with mtp))"]
    assert decisions.differences({"r": [row]}, {"r": [untied]}) == [
        "r / Batch throughput: enable up to 49 (between 32 and 64) (mtp (tied with mtp-cap128)) vs "
        "enable up to 49 (between 32 and 64) (mtp)"]
    assert decisions.differences({"r": [row]}, {"r": [moved]}) == [
        "r / Batch throughput: enable up to 49 (between 32 and 64) (mtp (tied with mtp-cap128)) vs "
        "enable up to 70 (between 64 and 128) (mtp (tied with mtp-cap128))"]
    assert decisions.differences({"r": [row]}, {"r": [off]}) == [
        "r / Batch throughput: enable up to 49 (between 32 and 64) (mtp (tied with mtp-cap128)) vs keep off (—)"]
    assert decisions.differences({"r": [row]}, {}) == ["r / Batch throughput: only in the first table"]
    assert decisions.from_json(decisions.to_json([row])) == [row]
