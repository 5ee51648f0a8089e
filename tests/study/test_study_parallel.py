"""The local backend's ``parallel`` setting (specsweep.study.parallel): sweeps at once, in worker processes.

Real parts only: embedded reference servers started by the sweep notebook, and a ``serve`` arm whose
first attempt kills the worker process running it (a lost worker: killed, out of memory) before it
serves the reference server on resume.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from helpers import FLAKY_SERVER
from specsweep.results.store import load_result_set
from specsweep.study.file import StudyError, load_study, parse_study
from specsweep.study.runner import run_study


def _doc(**over: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "title": "Parallel study", "name": "p", "baseline": "baseline", "parallel": 3,
        "sweep": {"concurrency": [1, 2], "input_tokens": 32, "output_tokens": 16},
        "arms": [{"name": "baseline", "embedded": {"profile": "tiny", "spec": "off"}},
                 {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}],
    }
    doc.update(over)
    return doc


def test_parallel_is_validated_with_the_key_and_line_named() -> None:
    with pytest.raises(StudyError, match=r"s\.yaml line \d+: key 'parallel': Input should be greater than or equal to 1"):
        parse_study(yaml.safe_dump(_doc(parallel=0), sort_keys=False), "s.yaml")
    fixed = {"name": "real", "serve": {"argv": ["server", "--port", "30000"], "ready_url": "http://127.0.0.1:30000/health"}}
    doc = _doc()
    doc["arms"] = [*doc["arms"], fixed]  # type: ignore[list-item]
    with pytest.raises(StudyError, match=r"key 'study': parallel: 3 runs arms at once, but serve arm 'real' has a "
                                         r"fixed port .*use '\{port\}' there, or parallel: 1"):
        parse_study(yaml.safe_dump(doc, sort_keys=False), "s.yaml")
    fixed["serve"] = {"argv": ["server", "--port", "{port}"], "ready_url": "http://127.0.0.1:{port}/health"}
    assert parse_study(yaml.safe_dump(doc, sort_keys=False), "s.yaml").spec.parallel == 3
    del doc["parallel"]
    assert parse_study(yaml.safe_dump(doc, sort_keys=False), "s.yaml").spec.parallel == 1  # default: serial


@pytest.mark.slow
def test_parallel_arms_on_their_own_ports_a_lost_worker_keeps_the_others_and_resume_measures_it(tmp_path: Path) -> None:
    # the 'flaky' arm's first attempt kills the worker process that runs it (the server's parent is
    # the server guard, whose parent is the worker); on resume it serves the reference server
    marker = tmp_path / "first-attempt-happened"
    flaky = FLAKY_SERVER
    doc = _doc()
    doc["arms"] = [*doc["arms"], {"name": "flaky", "serve": {  # type: ignore[list-item]
        "argv": [sys.executable, "-c", flaky, "{port}", str(marker)],
        "ready_url": "http://127.0.0.1:{port}/health", "start_timeout_s": 60, "stop_grace_s": 5}}]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    study = load_study(path)
    out = tmp_path / "out"
    logged: list[str] = []
    result = run_study(study, out_dir=out, report=False, log=logged.append)

    assert [(o.arm, o.repeat, o.status) for o in result.outcomes] == [
        ("baseline", 0, "complete"), ("mtp", 0, "complete"), ("flaky", 0, "failed")]
    assert marker.exists()
    lost = result.outcomes[2]
    assert "its worker process exited with status -9 before reporting" in lost.error, lost.error
    assert "--resume continues them" in lost.error
    # the others' finished data is kept: complete runs, merged result sets, each server on its own port
    ports = set()
    for o in result.outcomes[:2]:
        meta = json.loads((Path(o.run_dir) / "meta.json").read_text())
        assert meta["complete"] and Path(o.run_dir).is_relative_to(out)
        assert (Path(o.run_dir) / "sweep.ipynb").is_file() and (Path(o.run_dir) / "server.log").is_file()
        ports.add(urlsplit(meta["endpoint"]).port)
    assert len(ports) == 2
    assert sorted(p.name for p in result.result_sets) == ["baseline", "mtp"] and result.missing == ["flaky"]
    status = json.loads((out / "study.json").read_text())
    assert [o["status"] for o in status["outcomes"]] == ["complete", "complete", "failed"]
    assert any(line.startswith("[baseline r0] ") for line in logged)  # a worker's lines come back, tagged
    merged = load_result_set(out / "mtp")
    assert "sweeps at once" in merged.meta.study.order

    again = run_study(study, out_dir=out, resume=True, report=False, log=logged.append)
    assert [(o.arm, o.status) for o in again.outcomes] == [("baseline", "skipped"), ("mtp", "skipped"),
                                                           ("flaky", "complete")]
    assert {o.run_dir for o in again.outcomes[:2]} == {o.run_dir for o in result.outcomes[:2]}
    assert again.ok and load_result_set(out / "flaky").meta.complete
