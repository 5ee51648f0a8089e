"""A study with a failed arm: the failure is said last and plainly, the report is built from the arms
that ran (when the baseline and one other did), and no false error follows the real one. The dry run
validates embedded arms' arguments with the reference server's own parser.

Real processes throughout: the embedded reference server (started by the sweep notebook), a ``serve``
command that exits at once like a server that cannot load its model, and the study CLI as a subprocess.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from specsweep.study.file import load_study
from specsweep.study.runner import run_study

BROKEN = {"name": "broken", "serve": {
    "argv": [sys.executable, "-c", "print('CUDA out of memory (simulated)'); raise SystemExit(3)"],
    "ready_url": "http://127.0.0.1:{port}/health", "start_timeout_s": 30}}
TINY = {"profile": "tiny", "spec": "off"}


def _study(tmp: Path, arms: list[dict]) -> Path:
    doc = {"title": "Failures", "name": "f", "baseline": "baseline",
           "sweep": {"concurrency": [1, 2], "input_tokens": 32, "output_tokens": 16, "requests_per_level": 6},
           "arms": arms}
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_only_the_baseline_ran_no_report_and_the_failure_is_said_last(tmp_path: Path) -> None:
    study = load_study(_study(tmp_path, [{"name": "baseline", "embedded": TINY}, BROKEN]))
    logged: list[str] = []
    result = run_study(study, out_dir=tmp_path / "out", report_dir=tmp_path / "reports", log=logged.append)
    assert result.report is None and result.missing == ["broken"] and not result.ok
    text = "\n".join(logged)
    assert "no tested concurrency" not in text  # before: the report was built from one arm and failed so
    assert any(line.startswith("no report: only the baseline arm 'baseline' has a complete run") for line in logged)
    # the reason travels with the result: make reports names it instead of guessing "no complete baseline"
    assert result.report_error is not None and result.report_error.startswith("only the baseline arm 'baseline'")
    tail = logged[-3:]
    assert tail[0] == "FAILED: 1 sweep(s) did not complete:"
    assert tail[1].startswith("  arm broken repeat 0: ") and "exited with status 3" in tail[1]
    assert "left out of the report: broken" in tail[2]
    assert not (tmp_path / "reports").exists()


def test_a_failed_arm_leaves_a_report_of_the_arms_that_ran(tmp_path: Path) -> None:
    study = load_study(_study(tmp_path, [{"name": "baseline", "embedded": TINY},
                                         {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}, BROKEN]))
    logged: list[str] = []
    result = run_study(study, out_dir=tmp_path / "out", report_dir=tmp_path / "reports", log=logged.append)
    assert result.report is not None and result.report.is_file()
    assert sorted(p.name for p in result.result_sets) == ["baseline", "mtp"]
    assert any("building the report f from 2 arm(s) (baseline, mtp; without broken)" in line for line in logged)
    assert logged[-3] == "FAILED: 1 sweep(s) did not complete:"
    assert logged[-2].startswith("  arm broken repeat 0: ") and "exited with status 3" in logged[-2]
    html = result.report.read_text()
    assert "broken" in html  # the page says the arm is missing


#: a ``serve`` arm whose server answers its first request (the sweep's preflight), then fails every
#: one, quoting GREETING — markup the page must show as text
ALL_FAIL = {"name": "allfail", "serve": {
    "argv": [sys.executable, "-m", "specsweep.refserver", "--profile", "tiny", "--port", "{port}", "--health-delay-s",
             "0.2", "--fault-errors-after", "1", "--fault-echo-env", "GREETING"],
    "env": {"GREETING": "<b>overloaded</b>"},
    "ready_url": "http://127.0.0.1:{port}/health", "start_timeout_s": 60, "stop_grace_s": 5}}


def test_an_arm_whose_every_request_failed_is_reported_with_100_percent_errors(tmp_path: Path) -> None:
    study = load_study(_study(tmp_path, [{"name": "baseline", "embedded": TINY},
                                         {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}, ALL_FAIL]))
    logged: list[str] = []
    result = run_study(study, out_dir=tmp_path / "out", report_dir=tmp_path / "reports", log=logged.append)
    assert [o.status for o in result.outcomes] == ["complete"] * 3 and result.ok  # measured, not failed
    said = next(line for line in logged if line.startswith("arm allfail: measured, but every request failed"))
    assert "100 % errors" in said and "HTTP 500" in said and "<b>overloaded</b>" in said  # the server's words
    assert any("building the report f from 2 arm(s) (baseline, mtp; without allfail)" in line for line in logged)
    html = result.report.read_text()
    assert "allfail: 100 % errors" in html and "&lt;b&gt;overloaded&lt;/b&gt;" in html
    assert "<b>overloaded</b>" not in html  # escaped wherever shown
    notebook = next((tmp_path / "out" / "_runs" / "allfail").rglob("sweep.ipynb")).read_text()
    assert "every request failed" in notebook and "No request succeeded" in notebook


def _dry_run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specsweep.study", str(path), "--dry-run"],
                          capture_output=True, text=True, timeout=120)


def test_dry_run_refuses_a_misspelled_embedded_profile_or_flag(tmp_path: Path) -> None:
    good = [{"name": "baseline", "embedded": TINY},
            {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp", "args": ["--max-running-requests", "8"]}}]
    ok = _dry_run(_study(tmp_path, good))
    assert ok.returncode == 0, ok.stderr
    bad_profile = [good[0], {"name": "mtp", "embedded": {"profile": "tinny", "spec": "mtp"}}]
    run = _dry_run(_study(tmp_path, bad_profile))
    assert run.returncode == 2
    assert "arm 'mtp'" in run.stderr and "'tinny'" in run.stderr and "unknown profile" in run.stderr
    assert "Traceback" not in run.stderr
    bad_flag = [good[0], {"name": "cap", "embedded": {"profile": "tiny", "spec": "mtp",
                                                      "args": ["--max-runing-requests", "8"]}}]
    run = _dry_run(_study(tmp_path, bad_flag))
    assert run.returncode == 2
    assert "arm 'cap'" in run.stderr and "unrecognized arguments: --max-runing-requests 8" in run.stderr
    bad_value = [good[0], {"name": "cap", "embedded": {"profile": "tiny", "spec": "mtp",
                                                       "args": ["--set", "speculative.mem_fraction_static=x"]}}]
    run = _dry_run(_study(tmp_path, bad_value))
    assert run.returncode == 2 and "arm 'cap'" in run.stderr, run.stderr
