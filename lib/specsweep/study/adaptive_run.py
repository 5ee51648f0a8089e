"""Running an adaptive study: the policy (:mod:`specsweep.study.adaptive`) step by step, each run
measured by the serial executor (:func:`specsweep.study.arm.run_arm`), every choice recorded.

Each step is one level (new or repeated) on every arm still measured; its runs are grouped per
(arm, repeat) into sweep runs of the levels they share (the coarse step: one run per arm of every
coarse level), each a run folder ``_runs/<arm>/r<index>`` like any study's, so the study's merge,
report and resume work unchanged: :attr:`specsweep.study.file.Study.adaptive_runs` is the schedule
so far. A step is written to ``adaptive.json`` (:mod:`specsweep.study.adaptive_record`) before it is
measured; on ``--resume`` the recorded steps are replayed first — runs that are complete are
skipped, never measured again — and the policy continues from the data.

Cost: a run's seconds are its levels' measured windows (``window_s``); server starts and warm-up
requests are not counted (they are the same per run in the full grid and here, but an adaptive
study has more runs: on servers that take minutes to start, count them into the budget).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specsweep.decide import DEFAULT_PROFILES, Profile, parse_profile
from specsweep.measure.config import SERVER_OUTPUT_TOKENS, SweepConfig
from specsweep.report.study_page import adaptive_line
from specsweep.results.store import ResultSet, load_result_set
from specsweep.results.study_record import ArmOutcome
from specsweep.study.adaptive import (
    Measured,
    Plan,
    Step,
    Stop,
    full_grid_s,
    next_step,
    plan_for,
    skipped_levels,
)
from specsweep.study.adaptive_record import AdaptiveRecord, read_record, write_record
from specsweep.study.arm import complete_run, run_arm
from specsweep.study.file import ASSUMED_STREAM_TOK_S, Arm, Slot, Study, StudyError
from specsweep.study.replay import run_seconds

#: runs of one arm at one level an adaptive study allows where neither its file nor its repeats say more
DEFAULT_MAX_REPEATS = 3


def study_profiles(study: Study) -> list[Profile]:
    """The profiles whose decisions must settle: those the adaptive block names, else every one the report judges."""
    assert study.spec.adaptive is not None
    every = list(study.spec.profiles) if study.spec.profiles is not None else [parse_profile(p) for p in DEFAULT_PROFILES]
    names = study.spec.adaptive.profiles
    return [p for p in every if names is None or p.name in names]


def max_repeats(study: Study) -> int:
    """Most runs of one arm at one level: the adaptive block's, else the study's repeats (at least 3)."""
    assert study.spec.adaptive is not None
    return study.spec.adaptive.max_repeats or max(study.spec.repeats, DEFAULT_MAX_REPEATS)


def _prior_cost_s(study: Study) -> float:
    """A run's seconds before any was measured, as the study's rough duration counts them (mean over levels)."""
    cfg = SweepConfig.model_validate(study.spec.sweep)
    out = cfg.output_tokens if isinstance(cfg.output_tokens, int) else SERVER_OUTPUT_TOKENS
    per = [math.ceil(cfg.requests_for(c) / c) * out / ASSUMED_STREAM_TOK_S for c in cfg.concurrency]
    return sum(per) / len(per)


def study_plan(study: Study) -> Plan:
    """The policy's :class:`Plan` of an adaptive study file."""
    spec = study.spec.adaptive
    if spec is None:
        raise StudyError("this study has no 'adaptive' block")
    cfg = SweepConfig.model_validate(study.spec.sweep)
    reps = max_repeats(study)
    return plan_for(cfg.concurrency, study.baseline, [a.name for a in study.arms],
                    [a.name for a in study.arms if study.is_control(a)], study_profiles(study),
                    lambda arm, level: reps, budget_s=spec.budget_device_minutes * 60,
                    target_flip=spec.target_flip_pct / 100, coarse=spec.coarse_levels,
                    requests=cfg.requests_per_level if isinstance(cfg.requests_per_level, int) else None,
                    prior_cost_s=_prior_cost_s(study))


def step_runs(step: Step, next_index: dict[str, int]) -> list[dict[str, Any]]:
    """The sweep runs of a step: one per (arm, repeat), its levels, at the arm's next run index."""
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for ch in step.choices:
        run = runs.get((ch.arm, ch.repeat))
        if run is None:
            run = runs[(ch.arm, ch.repeat)] = {"arm": ch.arm, "index": next_index.get(ch.arm, 0), "repeat": ch.repeat,
                                               "levels": []}
            next_index[ch.arm] = run["index"] + 1
        run["levels"].append(ch.level)
    return list(runs.values())


def step_record(step: Step, next_index: dict[str, int]) -> dict[str, Any]:
    """A step as ``adaptive.json`` holds it."""
    return {"reason": step.reason, "est_s": round(step.est_s, 3), "dropped": [list(d) for d in step.dropped],
            "runs": step_runs(step, next_index),
            "choices": [{"arm": c.arm, "level": c.level, "repeat": c.repeat, "requests": c.requests, "reason": c.reason}
                        for c in step.choices]}


def schedule_of(study: Study, record: AdaptiveRecord) -> list[tuple[Arm, Slot]]:
    """The recorded runs as the study's schedule (arm, slot), in the order measured."""
    arms = {a.name: a for a in study.arms}
    return [(arms[r["arm"]], Slot(int(r["index"]), int(r["repeat"]), tuple(int(c) for c in r["levels"])))
            for s in record.steps for r in s["runs"]]


#: merges an arm's complete runs into ``<out>/<arm>/`` (:func:`specsweep.study.runner.assemble_arm`)
Assemble = Callable[[Study, Arm, Path], Path | None]


def measured_sets(study: Study, out: Path, assemble_arm: Assemble) -> tuple[list[ResultSet], Measured]:
    """Every arm's complete runs merged (``<out>/<arm>/``) and loaded, and what they measured."""
    sets, measured = [], Measured()
    for arm in study.arms:
        if all(complete_run(out, arm.name, i) is None for i in study.run_indices(arm)):
            continue
        path = assemble_arm(study, arm, out)
        if path is None:
            continue
        rs = load_result_set(path)
        sets.append(rs)
        for _, row in rs.levels.iterrows():
            measured.add(arm.name, int(row["concurrency"]), run_seconds(row, 0.0))
    return sets, measured


def _measure_step(study: Study, out: Path, step: dict[str, Any], position: int, log: Callable[[str], None],
                  on_outcome: Callable[[ArmOutcome], None]) -> tuple[int, bool]:
    """Measure the runs of one recorded step (complete ones skipped); (next position, all complete)."""
    arms = {a.name: a for a in study.arms}
    ok = True
    for run in step["runs"]:
        log(f"[{position}] arm {run['arm']}, level(s) {', '.join(map(str, run['levels']))}, run {run['repeat']}: "
            f"{step['reason']}")
        outcome = run_arm(study, arms[run["arm"]], int(run["index"]), out, position=position, resume=True, log=log)
        on_outcome(outcome)
        ok &= outcome.status != "failed"
        position += 1
    return position, ok


def run_adaptive(study: Study, out: Path, *, resume: bool, log: Callable[[str], None],
                 on_outcome: Callable[[ArmOutcome], None], assemble: Assemble) -> AdaptiveRecord:
    """Run an adaptive study in ``out`` (see the module docstring); its record, with the summary.
    ``assemble``: the runner's merge of an arm's runs (passed in: the runner imports this module)."""
    plan = study_plan(study)
    record = (read_record(out) if resume else None) or AdaptiveRecord()
    study.adaptive_runs = schedule_of(study, record)
    next_index: dict[str, int] = {}
    for arm, slot in study.adaptive_runs:
        next_index[arm.name] = max(next_index.get(arm.name, 0), slot.index + 1)
    position, ok = 1, True
    for step in record.steps:  # a resumed study: what was chosen before, complete runs skipped
        position, done = _measure_step(study, out, step, position, log, on_outcome)
        ok &= done
    while ok and record.stop is None:
        sets, measured = measured_sets(study, out, assemble)
        choice = next_step(sets, plan, measured)
        if isinstance(choice, Stop):
            record.stop = {"reason": choice.reason, "detail": choice.detail}
            break
        record.steps.append(step_record(choice, next_index))
        write_record(out, record)  # recorded before it is measured: a killed study resumes this step
        study.adaptive_runs = schedule_of(study, record)
        position, ok = _measure_step(study, out, record.steps[-1], position, log, on_outcome)
    if not ok and record.stop is None:
        record.stop = {"reason": "failed", "detail": "a run failed (see the study's failures); --resume measures it again"}
    _, measured = measured_sets(study, out, assemble)
    record.summary = _summary(plan, measured, record)
    write_record(out, record)
    if record.stop is not None and record.stop["reason"] == "failed":
        record.stop = None  # a failed run is retried by --resume: the record must not say the study stopped
        write_record(out, record)
    log(f"adaptive study {study.name}: {adaptive_line(record.summary)}")
    return record


def _summary(plan: Plan, measured: Measured, record: AdaptiveRecord) -> dict[str, Any]:
    """What the page says about an adaptive study (:func:`adaptive_line`, the report's study section)."""
    stop = record.stop or {"reason": "failed", "detail": ""}
    skipped = skipped_levels(plan, measured, Stop(stop["reason"], stop["detail"])  # type: ignore[arg-type]
                             if stop["reason"] != "failed" else None)
    dropped = {a: why for s in record.steps for a, why in s.get("dropped", [])}
    return {"measured_s": round(measured.spent_s, 3), "full_grid_s": round(full_grid_s(plan, measured), 3),
            "levels": list(plan.levels), "arms": len(plan.arms), "max_repeats": plan.max_repeats(plan.baseline,
                                                                                               plan.levels[0]),
            "stop": stop["reason"], "stop_detail": stop["detail"], "steps": len(record.steps),
            "skipped": {str(c): why for c, why in skipped.items()}, "dropped": dropped,
            "profiles": [p.name for p in plan.profiles]}
