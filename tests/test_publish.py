"""``make reports`` (specsweep.publish) runs a study fresh and shows each arm's and level's progress."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from specsweep.paths import REPO_ROOT
from specsweep.publish import PUBLISHED, Published, measure_studies, publish_study
from specsweep.study.file import load_study


def test_the_published_demo_is_the_demo_study() -> None:
    demo = next(p for p in PUBLISHED if p.study)
    study = load_study(REPO_ROOT / demo.study)
    assert study.name == "demo" and [a.name for a in study.arms] == ["baseline", "mtp", "mtp-cap128"]
    assert study.spec.sweep["concurrency"] == [1, 4, 16, 32, 64, 128]


def test_the_category_demo_is_published_and_measures_the_builtin_set() -> None:
    """``make reports`` also runs the category demo: baseline vs MTP on the built-in prompt set,
    every prompt at least once per level (so every category is at every level, enough for its own
    curve), and at every level at least two requests per slot (the ``auto`` rule)."""
    from specsweep.measure.config import parse_config
    from specsweep.report import MIN_CATEGORY_LEVELS
    from specsweep.workloads.datasets import load_spec

    pub = next(p for p in PUBLISHED if p.name == "demo-categories")
    study = load_study(REPO_ROOT / str(pub.study))
    assert study.name == pub.name and [a.name for a in study.arms] == ["baseline", "mtp"]
    sweep = study.spec.sweep
    prompts = len(load_spec(sweep["workload"]).records)
    assert sweep["workload"].startswith("builtin") and sweep["min_requests_per_level"] == prompts
    assert sweep.get("requests_per_level", "auto") == "auto" and len(sweep["concurrency"]) >= MIN_CATEGORY_LEVELS
    cfg = parse_config(sweep)
    assert [cfg.requests_for(c) for c in sweep["concurrency"]] == [max(prompts, 2 * c) for c in sweep["concurrency"]]
    for p in PUBLISHED:  # a study's report lands at reports/<its name>.html: the published name
        if p.study:
            assert load_study(REPO_ROOT / p.study).name == p.name


def test_a_published_study_runs_fresh_with_per_arm_and_per_level_progress(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    doc = {"title": "Progress", "name": "progress", "out_dir": str(tmp_path / "runs"),
           "sweep": {"concurrency": [1, 2], "input_tokens": 32, "output_tokens": 32},
           "arms": [{"name": "baseline", "embedded": {"profile": "tiny", "spec": "off"}},
                    {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}]}
    path = tmp_path / "progress.yaml"
    path.write_text(yaml.safe_dump(doc))
    pub = Published(name="progress", study=str(path))
    stale = tmp_path / "runs" / "_runs" / "baseline" / "r0" / "stale"
    for attempt in range(2):  # the second run starts over (fresh), it does not refuse the folder
        measure_studies([pub])
        report = publish_study(pub, tmp_path / "reports")
        assert report == tmp_path / "reports" / "progress.html" and report.is_file()
        if attempt == 0:
            stale.mkdir()
    assert not stale.exists()
    out = capfd.readouterr()
    terminal = out.out + out.err
    for i, arm in enumerate(("baseline", "mtp"), 1):  # each run: measured, then resumed (skipped) for the report
        assert terminal.count(f"[{i}/2] arm {arm}, repeat 0") == 4
        assert terminal.count(f"arm {arm} repeat 0: already complete") == 2
    for c in (1, 2):  # the sweep's per-level result lines: 2 arms × 2 runs (a warning about a
        # level starts with the same "C=2 repeat 0:", so only the lines that end "— saved" count)
        saved = re.findall(rf"C={c} repeat 0: [\d,]+ tok/s aggregate, [^\r\n]* — saved", terminal)
        assert len(saved) == 4, terminal[-3000:]
    assert terminal.count("C=2 r0:") >= 4 and "tok/s]" in terminal  # tqdm bars with live tok/s
    assert "without encryption" not in terminal

    # --skip-sweeps resumes: nothing measured again (neither by the measurement nor the report build)
    capfd.readouterr()
    measure_studies([pub], skip_sweeps=True)
    assert publish_study(pub, tmp_path / "reports") == report
    terminal = "".join(capfd.readouterr())
    assert "C=1 repeat 0:" not in terminal and terminal.count("already complete") == 4


@pytest.mark.parametrize("at_once", [1, 2, 5])
def test_studies_are_measured_at_most_at_once_at_a_time(monkeypatch: pytest.MonkeyPatch, at_once: int) -> None:
    """The scheduling alone (``run_study`` is timed, not run: the studies themselves are measured by the tests
    above): one study at a time by default, since each runs its own parallel sweeps and more at once put the
    simulated servers behind their schedule."""
    import threading
    import time

    from specsweep import publish

    lock, running, peak = threading.Lock(), [0], [0]

    def fake_run_study(study, **_: object) -> None:  # noqa: ANN001
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1

    monkeypatch.setattr(publish, "run_study", fake_run_study)
    pubs = [p for p in PUBLISHED if p.study] * 2  # the demo studies, twice over: at least three
    assert len(pubs) >= 3
    publish.measure_studies(pubs, at_once=at_once)
    assert peak[0] == min(at_once, len(pubs))
    assert publish.STUDIES_AT_ONCE == 1
    with pytest.raises(ValueError, match="at_once=0"):
        publish.measure_studies(pubs, at_once=0)


def test_studies_at_once_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    from specsweep import publish

    with pytest.raises(SystemExit):
        publish.main(["--studies-at-once", "0"])
    assert "--studies-at-once 0: must be at least 1" in capsys.readouterr().err


def test_make_reports_writes_beside_the_committed_pages_in_a_git_ignored_folder() -> None:
    """The committed pages stay as they are after ``make reports``: its folder is ignored and holds no committed file."""
    import subprocess

    from specsweep import publish

    fresh = publish.FRESH_DIR
    assert fresh.parent == REPO_ROOT / "reports"
    for name in ("demo.html", "demo.md", "decisions.json", "_build/demo.ipynb"):
        assert subprocess.run(["git", "check-ignore", "-q", str(fresh / name)], cwd=REPO_ROOT).returncode == 0, name
    tracked = subprocess.run(["git", "ls-files", str(fresh)], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert tracked.stdout == ""


def test_make_real_report_writes_its_page_beside_the_committed_one() -> None:
    """``make real-report`` runs the real-engine study with a report folder of its own, ignored like make reports'."""
    import shlex
    import subprocess

    recipe = (REPO_ROOT / "Makefile").read_text().split("\nreal-report:", 1)[1].split("\n\n", 1)[0]
    argv = shlex.split(recipe.splitlines()[1])
    assert "data/studies/real-llamacpp.yaml" in argv and "--report-dir" in argv
    folder = REPO_ROOT / argv[argv.index("--report-dir") + 1]
    for name in ("real-llamacpp.html", "real-llamacpp.md"):
        assert subprocess.run(["git", "check-ignore", "-q", str(folder / name)], cwd=REPO_ROOT).returncode == 0, name


def test_a_published_report_goes_beside_and_is_compared_with_the_committed_decisions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The seed's page (no measurement) with the default out dir: written to the fresh folder, its decisions
    compared with the committed file, which is left as it was."""
    import shutil

    from specsweep import publish

    committed = tmp_path / "committed" / "decisions.json"
    committed.parent.mkdir()
    shutil.copy(REPO_ROOT / "reports" / "decisions.json", committed)
    before = committed.read_bytes()
    monkeypatch.setattr(publish, "FRESH_DIR", tmp_path / "fresh", raising=False)
    monkeypatch.setattr(publish, "COMMITTED_DECISIONS", committed, raising=False)
    seed = "seed-qwen3.5-122b-a10b"
    assert publish.main(["--only", seed]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "fresh" / f"{seed}.html").is_file() and (tmp_path / "fresh" / f"{seed}.md").is_file()
    assert committed.read_bytes() == before
    assert f"decisions: the same as in {committed}" in out and f"{committed} is left as committed" in out
    fresh = json.loads((tmp_path / "fresh" / "decisions.json").read_text())
    assert set(fresh) == {seed}


def test_a_study_whose_report_fails_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """When a study's report cannot be built, publish names the reason the study gave (a failed build
    said 'the baseline arm has no complete run' although every arm had run)."""
    from specsweep import publish
    from specsweep.errors import RunError

    class Result:
        report = None
        report_error = "building it from baseline, mtp failed: OverflowError: math range error"

    monkeypatch.setattr(publish, "run_study", lambda *a, **k: Result())
    pub = next(p for p in publish.PUBLISHED if p.study)
    with pytest.raises(RunError) as err:
        publish.publish_study(pub, Path("/nonexistent-out"))
    assert "OverflowError: math range error" in str(err.value) and "no complete run" not in str(err.value)
