"""study.json: the typed record a study folder keeps, written and read only through its two functions."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsweep.results.study_record import (
    ArmOutcome,
    PlannedSweep,
    StudyRecord,
    read_study_record,
    write_study_record,
)

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def test_the_file_holds_what_the_runner_has_always_written(tmp_path: Path) -> None:
    """Key for key the document the runner wrote before the record existed; the optional keys only when set."""
    outcome = ArmOutcome(arm="mtp", repeat=0, position=2, status="failed", error="the server died")
    record = StudyRecord(study="demo", title="Demo", file="data/studies/demo.yaml", baseline="baseline", repeats=1,
                         plan=[PlannedSweep(1, 0, "baseline"), PlannedSweep(2, 0, "mtp")],
                         fingerprint={"sweep": {"seed": 0}, "arms": {"baseline": "d1", "mtp": "d2"}}, outcomes=[outcome])
    write_study_record(tmp_path, record)
    doc = json.loads((tmp_path / "study.json").read_text())
    assert list(doc) == ["study", "title", "file", "baseline", "repeats", "plan", "fingerprint", "outcomes"]
    assert doc["plan"] == [{"position": 1, "repeat": 0, "arm": "baseline"}, {"position": 2, "repeat": 0, "arm": "mtp"}]
    assert doc["outcomes"] == [{"arm": "mtp", "repeat": 0, "position": 2, "status": "failed", "run_dir": None,
                                "started_utc": None, "finished_utc": None, "error": "the server died",
                                "log_tail": None, "server_log": None, "notebook": None, "resumed": False}]
    assert read_study_record(tmp_path) == record
    record.missing_arms = ["mtp"]
    write_study_record(tmp_path, record)
    assert json.loads((tmp_path / "study.json").read_text())["missing_arms"] == ["mtp"]
    assert read_study_record(tmp_path) == record


def test_an_older_or_damaged_file_reads_with_the_models_defaults(tmp_path: Path) -> None:
    """An outcome without the fields added later reads with their defaults; entries that lack their
    keys, and fields of the wrong type, are left out or take the default; no file or no JSON object is None."""
    assert read_study_record(tmp_path) is None
    for broken in ("{", "[]", "3"):
        (tmp_path / "study.json").write_text(broken)
        assert read_study_record(tmp_path) is None
    (tmp_path / "study.json").write_text(json.dumps({
        "study": "old", "title": 7, "repeats": "two", "plan": [{"position": 1, "repeat": 0, "arm": "a"}, {"arm": "b"}],
        "fingerprint": {"arms": ["a"]},
        "outcomes": [{"arm": "a", "repeat": 0, "position": 1, "status": "complete", "run_dir": "r", "extra": 1},
                     {"arm": "b"}]}))
    record = read_study_record(tmp_path)
    assert record is not None
    assert (record.study, record.title, record.repeats, record.baseline) == ("old", None, None, None)
    assert record.plan == [PlannedSweep(1, 0, "a")]
    assert record.outcomes == [ArmOutcome(arm="a", repeat=0, position=1, status="complete", run_dir="r")]
    assert record.outcomes[0].resumed is False and record.missing_arms is None
    assert record.arm_order() == []  # the arms of a fingerprint are a mapping, name to digest


def test_a_study_json_that_is_no_record_refuses_a_resume_by_name(tmp_path: Path) -> None:
    """Resuming over a study.json that is not a JSON object stops with a StudyError naming it, before anything runs."""
    from specsweep.study.file import StudyError, parse_study
    from specsweep.study.runner import run_study

    study = parse_study(json.dumps({"name": "s", "title": "S", "sweep": {"concurrency": [1]},
                                    "arms": [{"name": "baseline", "endpoint": "http://127.0.0.1:9/v1"}]}), "s.yaml")
    (tmp_path / "study.json").write_text("[]")
    with pytest.raises(StudyError, match="study.json: cannot be read as a study record"):
        run_study(study, out_dir=tmp_path, resume=True, log=lambda line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".specsweep-study.lock", "study.json"]
