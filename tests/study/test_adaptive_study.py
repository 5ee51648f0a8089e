"""Adaptive studies: the study file's ``adaptive`` block, the schedule it feeds, the page's line, and
an adaptive study end to end on the embedded reference server — interrupted, then resumed without
measuring a complete run again."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from specsweep.report.study_page import adaptive_markdown
from specsweep.study.adaptive_record import read_record
from specsweep.study.file import Slot, StudyError, parse_study
from specsweep.study.runner import run_study


def _doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "title": "Adaptive", "name": "adt",
        "sweep": {"concurrency": [1, 2, 4, 8], "input_tokens": 32, "output_tokens": 16},
        "adaptive": {"budget_device_minutes": 5, "coarse_levels": 2, "max_repeats": 2},
        "arms": [{"name": "baseline", "embedded": {"profile": "tiny", "spec": "off"}},
                 {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}],
    }
    doc.update(over)
    return doc


def _text(**over: Any) -> str:
    return yaml.safe_dump(_doc(**over), sort_keys=False)


@pytest.mark.fast
@pytest.mark.parametrize("adaptive, words", [
    ({"coarse_levels": 2}, r"key 'adaptive.budget_device_minutes': required key is missing"),
    ({"budget_device_minutes": -1}, r"key 'adaptive.budget_device_minutes': Input should be greater than 0"),
    ({"budget_device_minutes": 5, "target_flip_pct": 80}, r"key 'adaptive.target_flip_pct'"),
    ({"budget_device_minutes": 5, "profiles": ["Nope"]}, r"adaptive.profiles: 'Nope' is not a profile of the study"),
    ({"budget_device_minutes": 5, "coarse": 3}, r"key 'adaptive.coarse': unknown key"),
])
def test_the_adaptive_block_is_validated_with_one_line_naming_the_key(adaptive: dict[str, Any], words: str) -> None:
    with pytest.raises(StudyError, match=words) as caught:
        parse_study(_text(adaptive=adaptive))
    assert "\n" not in str(caught.value)


@pytest.mark.fast
def test_an_adaptive_study_refuses_an_order_of_its_own_and_the_ray_backend(tmp_path: Path) -> None:
    with pytest.raises(StudyError, match="adaptive: an adaptive study chooses its own order.*remove order"):
        parse_study(_text(order="abba"))
    with pytest.raises(StudyError, match="remove sentinel"):
        parse_study(_text(sentinel={"levels": [1]}))
    with pytest.raises(StudyError, match="backend 'ray': an adaptive study"):
        run_study(parse_study(_text()), out_dir=tmp_path, backend="ray", log=lambda _: None)
    named = parse_study(_text(adaptive={"budget_device_minutes": 1, "profiles": ["Batch throughput"]}))
    assert named.spec.adaptive is not None and named.spec.adaptive.profiles == ["Batch throughput"]


@pytest.mark.fast
def test_the_schedule_of_an_adaptive_study_is_the_runs_it_chose() -> None:
    study = parse_study(_text())
    assert "adaptive: level by level" in study.dry_run(Path("out"), Path("reports"))
    base, mtp = study.arms
    study.adaptive_runs = [(base, Slot(0, 0, (1, 8))), (mtp, Slot(0, 0, (1, 8))), (mtp, Slot(1, 1, (8,)))]
    assert [(a.name, r) for r, a in study.plan()] == [("baseline", 0), ("mtp", 0), ("mtp", 1)]
    params = study.sweep_parameters(mtp, 1)
    assert params["concurrency"] == [8] and params["seed"] == 1  # the second run at 8: the next prompt seed
    assert study.run_indices(mtp) == [0, 1]


@pytest.mark.fast
def test_the_page_says_how_long_against_the_full_grid_why_it_stopped_and_what_it_skipped() -> None:
    summary = {"measured_s": 600.0, "full_grid_s": 2400.0, "levels": [1, 2, 4, 8], "arms": 2, "max_repeats": 3,
               "stop": "budget", "stop_detail": "still open: <b>x</b>", "skipped": {"2": "between 1 and 4, agree"},
               "dropped": {"mtp-cap128": "credibly different"}}
    text = adaptive_markdown(summary)
    assert ("decided in 10 min of measurement; the full grid of the same levels (4 levels × 3 runs × 2 arms) would "
            "have taken about 40 min") in text
    assert "It stopped on budget" in text and "still open: \\<b>x" in text  # escaped: the page is Markdown
    assert "Levels not measured: 2 (between 1 and 4, agree)" in text and "mtp-cap128 (credibly different)" in text
    assert "stopped settled" in adaptive_markdown(summary | {"stop": "settled"})


class _Interrupt:
    """A study log that raises Ctrl-C when the runner announces run number ``at``."""

    def __init__(self, at: int) -> None:
        self.at, self.lines = at, []  # type: list[str]

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if line.startswith(f"[{self.at}] "):
            raise KeyboardInterrupt


def _runs(out: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in sorted((out / "_runs").rglob("meta.json"))}


@pytest.mark.slow
def test_an_adaptive_study_runs_stops_writes_its_line_and_resumes_without_measuring_again(tmp_path: Path) -> None:
    path = tmp_path / "adt.yaml"
    path.write_text(_text())
    from specsweep.study.file import load_study

    study = load_study(path)
    out, reports = tmp_path / "out", tmp_path / "reports"
    stop = _Interrupt(at=3)  # the coarse step is runs 1 and 2 (one per arm, levels 1 and 8); stop before the third
    with pytest.raises(KeyboardInterrupt):
        run_study(study, out_dir=out, report_dir=reports, log=stop)
    record = read_record(out)
    assert record is not None and record.stop is None and len(record.steps) == 2  # the next step recorded, unmeasured
    coarse = record.steps[0]
    assert [(r["arm"], r["levels"]) for r in coarse["runs"]] == [("baseline", [1, 8]), ("mtp", [1, 8])]
    before = _runs(out)
    assert len(before) == 2

    logged: list[str] = []
    result = run_study(load_study(path), out_dir=out, report_dir=reports, resume=True, log=logged.append)
    assert [o.status for o in result.outcomes[:2]] == ["skipped", "skipped"]
    assert all(_runs(out)[p] == t for p, t in before.items())  # the complete runs were not measured again
    record = read_record(out)
    assert record is not None and record.stop is not None and record.stop["reason"] in ("settled", "budget", "exhausted")
    assert record.steps[1] == json.loads(json.dumps(record.steps[1]))  # the step recorded before the kill was measured
    measured = {(c["arm"], c["level"], c["repeat"]) for s in record.steps for c in s["choices"]}
    assert len(measured) == sum(len(s["choices"]) for s in record.steps)  # no run chosen twice
    assert all(rep < 2 for _, _, rep in measured)  # never beyond max_repeats
    summary = record.summary
    assert summary is not None and 0 < summary["measured_s"] <= summary["full_grid_s"] + 1e-9

    html = (reports / "adt.html").read_text()
    flat = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert re.search(r"Adaptive study: decided in [0-9.]+ s of measurement; the full grid of the same levels "
                     r"\(4 levels × 2 runs × 2 arms\) would have taken about [0-9.]+ s\. It stopped ", flat)
    # resuming a finished adaptive study measures nothing
    again = run_study(load_study(path), out_dir=out, report=False, resume=True, log=logged.append)
    assert {o.status for o in again.outcomes} == {"skipped"}
