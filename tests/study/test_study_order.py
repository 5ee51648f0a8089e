"""Run orders, sentinel runs and control arms of a study file (no servers started)."""
from __future__ import annotations

import pytest
import yaml

from specsweep.study.file import StudyError, parse_study

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def _text(**over: object) -> str:
    doc: dict[str, object] = {
        "title": "T", "sweep": {"concurrency": [1, 2, 4]},
        "arms": [{"name": "baseline", "embedded": {"profile": "tiny"}},
                 {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}],
    }
    doc.update(over)
    return yaml.safe_dump(doc, sort_keys=False)


def test_interleaved_without_sentinel_is_todays_plan() -> None:
    study = parse_study(_text(repeats=2))
    assert [(a.name, r) for r, a in study.plan()] == [("baseline", 0), ("mtp", 0), ("mtp", 1), ("baseline", 1)]
    assert all(s.levels is None and not s.sentinel and s.index == s.repeat for _, s in study.schedule())


def test_abba_alternates_the_arms_level_by_level() -> None:
    study = parse_study(_text(order="abba"))
    runs = [(a.name, s.levels) for a, s in study.schedule()]
    # A B | B A | A B at levels 1, 2, 4: consecutive levels of one arm share a run
    assert runs == [("baseline", (1,)), ("mtp", (1, 2)), ("baseline", (2, 4)), ("mtp", (4,))]
    mtp = study.arms[1]
    assert study.sweep_parameters(mtp, 1)["concurrency"] == [4]
    assert study.sweep_parameters(mtp, 1)["seed"] == 0  # one repeat: one prompt seed, arms paired


def test_sentinel_runs_come_last_with_the_first_repeats_prompts() -> None:
    study = parse_study(_text(repeats=2, sentinel={"levels": [1, 4]}))
    arm, slot = study.schedule()[-1]
    assert arm.name == "baseline" and slot.sentinel and slot.levels == (1, 4) and slot.index == 2
    params = study.sweep_parameters(arm, 2)
    assert params["concurrency"] == [1, 4] and params["seed"] == 0
    both = parse_study(_text(sentinel={"levels": [2], "arms": ["baseline", "mtp"]}))
    assert [a.name for a, s in both.schedule() if s.sentinel] == ["baseline", "mtp"]


def test_a_sentinel_level_outside_the_sweep_is_refused_by_name() -> None:
    with pytest.raises(StudyError, match=r"sentinel levels \[8\] are not among the sweep's concurrency levels"):
        parse_study(_text(sentinel={"levels": [8]}))


def test_control_arms_marked_or_defined_like_the_baseline() -> None:
    arms = [{"name": "baseline", "embedded": {"profile": "tiny"}},
            {"name": "again", "label": "Baseline, measured again", "embedded": {"profile": "tiny"}},
            {"name": "marked", "control": True, "embedded": {"profile": "tiny", "args": ["--seed", "3"]}},
            {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}]
    study = parse_study(_text(arms=arms))
    assert [study.is_control(a) for a in study.arms] == [False, True, True, False]
