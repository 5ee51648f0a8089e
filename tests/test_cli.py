"""The ``specsweep`` console script (``specsweep.cli``): help from the notebook's parameters cell,
exit codes 0 / 1 / 2, and each subcommand running the real thing (papermill, the reference
server on 127.0.0.1, the importers)."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from specsweep.cli import main
from specsweep.results.store import load_result_set

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "importers"


def _script() -> list[str]:
    exe = shutil.which("specsweep", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "specsweep.cli"]


def _parameter_lines() -> list[tuple[str, str, str]]:
    """(name, type, help) of each parameter line of notebooks/sweep.ipynb, read here independently."""
    nb = json.loads((ROOT / "notebooks" / "sweep.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    out = []
    for line in "".join(cell["source"]).splitlines():
        if "# type:" in line and "=" in line.split("#")[0]:
            name = line.split("=")[0].strip()
            kind, _, text = line.split("# type:")[1].strip().partition("  ")
            out.append((name, kind, text.strip()))
    return out


def test_sweep_help_lists_every_notebook_parameter_with_its_type_and_unit(capsys):
    assert main(["sweep", "--help"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    params = _parameter_lines()
    assert len(params) >= 20
    for name, kind, help_text in params:
        flag = "--" + name.replace("_", "-")
        assert f"{flag} {kind.upper()}" in text, flag
        assert re.sub(r"\s+", " ", help_text)[:40] in text, flag
    assert "seconds before one request counts as failed" in text  # a unit, from request_timeout_s


@pytest.mark.parametrize("argv, message", [
    ([], "COMMAND"),
    (["sweep", "--repeats", "three"], "--repeats"),
    (["sweep", "--concurrency", "[1, many]"], "--concurrency"),
    (["import", "nosuchtool", "f.json", "--arm", "a"], "TOOL"),
    (["import", "vllm", "no-such-file.json", "--arm", "a"], "no-such-file.json: no such file"),
    (["import", "table", str(FIX / "table" / "seed.md"), "--arm", "mtp", "--output-tokens", "0"], "--output-tokens"),
    (["report", "no-such-folder", "--name", "x"], "no-such-folder"),
])
def test_bad_input_exits_2_with_a_message_naming_it(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_import_then_report_arguments_checked_before_the_notebook_runs(tmp_path, capsys):
    out = tmp_path / "imported"
    for arm in ("baseline", "mtp"):
        files = [str(p) for p in sorted((FIX / "vllm").glob(f"{arm}-c*.json.gz"))]
        assert main(["import", "vllm", *files, "--arm", arm, "--out", str(out)]) == 0
    assert f"wrote {out / 'mtp'}" in capsys.readouterr().out
    assert load_result_set(out / "mtp").meta.source["tool"] == "vllm bench serve"
    # an unknown baseline is bad input, said before any report is built
    assert main(["report", str(out), "--name", "x", "--baseline", "nope", "--out-dir", str(tmp_path)]) == 2
    assert "--baseline 'nope'" in capsys.readouterr().err
    # arms whose tools define every compared figure differently cannot be compared: bad input, named
    llama = tmp_path / "llama"
    assert main(["import", "llamacpp", str(FIX / "llamacpp" / "baseline.jsonl"), "--arm", "baseline", "--out",
                 str(llama)]) == 0
    assert main(["report", str(llama / "baseline"), str(out / "mtp"), "--name", "x", "--out-dir", str(tmp_path),
                 "--allow-workload-mismatch"]) == 2
    assert "is not compared" in capsys.readouterr().err
    # the same import again is refused (exit 2) unless --force
    files = [str(p) for p in sorted((FIX / "vllm").glob("mtp-c*.json.gz"))]
    assert main(["import", "vllm", *files, "--arm", "mtp", "--out", str(out)]) == 2
    assert main(["import", "vllm", *files, "--arm", "mtp", "--out", str(out), "--force"]) == 0


def test_serve_llamacpp_says_what_to_do_when_the_engine_is_not_installed(capsys):
    if importlib.util.find_spec("specsweep.engines") is not None and \
            importlib.util.find_spec("specsweep.engines.llamacpp") is not None:
        assert main(["serve", "llamacpp", "--help"]) == 0
        return
    assert main(["serve", "llamacpp", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "specsweep.engines.llamacpp" in err and "not installed" in err


@pytest.mark.parametrize("profile, model", [(["--profile", "tiny"], "specsweep-sim/tiny"),
                                            ([], "specsweep-sim/qwen3.5-122b-a10b-4x-rtxpro6000")])
def test_serve_starts_the_reference_server_on_127_0_0_1(profile, model):
    """Without --profile it serves the profile calibrated to the seed measurement."""
    proc = subprocess.Popen([*_script(), "serve", *profile, "--port", "0", "--health-delay-s", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for _ in range(50):
            line = proc.stdout.readline()
            if not line:
                break
            m = re.search(r"ready: (http://127\.0\.0\.1:\d+)", line)
            if m:
                url = m.group(1)
                break
        assert url, proc.stderr.read() if proc.poll() is not None else "no ready line"
        models = httpx.get(f"{url}/v1/models", timeout=10).json()
        assert models["data"][0]["id"] == model
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("command", [["study"], ["serve"]])
def test_pass_through_help_names_the_specsweep_command(command, capsys):
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: specsweep {command[0]} ") and "python -m" not in out.split("\n\n")[0]


def test_study_dry_run_passes_through(capsys):
    assert main(["study", str(ROOT / "data" / "studies" / "demo.yaml"), "--dry-run"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["study", "--no-such-option"]) == 2


@pytest.mark.fast
@pytest.mark.parametrize("option, message", [
    (["--concurrency", "-4"], "--concurrency: levels must be >= 1, got [-4] — give a list of integers, e.g. "
                              "--concurrency '[1, 4, 16]'"),
    (["--repeats", "0"], "--repeats: Input should be greater than or equal to 1"),
    (["--endpoint", "gpu-host"], "--endpoint: give scheme://host:port"),
    (["--target-moe-pct", "0"], "--target-moe-pct: Input should be greater than 0"),
    (["--max-requests-per-level", "50"], "--max-requests-per-level: applies only with target_moe_pct"),
])
def test_sweep_refuses_a_bad_option_before_a_kernel_starts(option, message, tmp_path, capsys):
    """The notebook's own check, run first and in the command's own syntax: no kernel, no notebook written."""
    assert main(["sweep", *option, "--out-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsweep sweep: ") and message in err and "papermill" not in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_sweep_runs_the_notebook_and_writes_a_result_set(tmp_path):
    """The console script end to end: papermill runs notebooks/sweep.ipynb on the embedded server."""
    out = tmp_path / "runs"
    proc = subprocess.run([*_script(), "sweep", "--arm", "baseline", "--embedded-profile", "tiny",
                           "--concurrency", "[2]", "--requests-per-level", "4", "--output-tokens", "16",
                           "--input-tokens", "32", "--out-dir", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = [p for p in out.iterdir() if (p / "meta.json").exists()]
    rs = load_result_set(run)
    assert list(rs.levels["concurrency"]) == [2]
    assert (rs.requests["output_tokens"] == 16).all()
    assert (out / "sweep-baseline.ipynb").exists()
    # a parameter the notebook rejects is bad input (2), named in the message
    bad = subprocess.run([*_script(), "sweep", "--arm", "baseline", "--embedded-profile", "tiny",
                          "--workload", "no-such-file.jsonl", "--out-dir", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert bad.returncode == 2, bad.stderr[-3000:]
    assert "no-such-file.jsonl" in bad.stderr


def test_import_help_lists_every_tool(capsys):
    from specsweep.importers import TOOLS

    assert main(["import", "--help"]) == 0
    text = capsys.readouterr().out
    for tool in TOOLS:
        assert f"  {tool} " in text
    assert "--arm" in text and "--out" in text


# ------------------------------------------------------------- names and folders that become paths


def test_an_arm_name_that_climbs_out_of_the_out_dir_writes_nothing(tmp_path, capsys):
    """papermill writes OUT_DIR/sweep-ARM.ipynb before the notebook checks ARM: checked before it runs."""
    victim = tmp_path / "notebooks" / "sweep.ipynb"
    victim.parent.mkdir()
    victim.write_text("the project's own notebook")
    out = tmp_path / "data" / "runs"
    out.mkdir(parents=True)
    assert main(["sweep", "--arm", "../../../notebooks/sweep", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--arm" in err and "'../../../notebooks/sweep'" in err and len(err.splitlines()) == 1
    assert victim.read_text() == "the project's own notebook"
    assert list(out.iterdir()) == []


def test_an_output_notebook_that_is_a_project_notebook_is_refused(capsys):
    notebook = ROOT / "notebooks" / "sweep.ipynb"
    before = notebook.read_bytes()
    try:
        assert main(["sweep", "--output-notebook", str(notebook)]) == 2
        assert "--output-notebook" in capsys.readouterr().err
        assert notebook.read_bytes() == before
    finally:  # should it be overwritten, the checkout gets its notebook back
        notebook.write_bytes(before)


@pytest.mark.parametrize("where", ["a file", "under a file", "under /proc"])
@pytest.mark.parametrize("command, option", [
    (["sweep"], "--out-dir"),
    (["sweep", "--output-notebook"], "--output-notebook"),
    (["report", "DATA", "--name", "x"], "--out-dir"),
    (["import", "vllm", "FILE", "--arm", "mtp"], "--out"),
])
def test_an_out_folder_that_cannot_be_written_is_one_named_line_exit_2(command, option, where, tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    folder = {"a file": blocker, "under a file": blocker / "sub", "under /proc": Path("/proc/specsweep-test/x")}[where]
    value = str(folder / "out.ipynb") if option == "--output-notebook" else str(folder)
    if option == "--output-notebook" and where == "a file":
        value = str(tmp_path / "blocker" / "x.ipynb")  # its folder is the file
    argv = [str(ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b") if a == "DATA" else
            str(next((FIX / "vllm").glob("mtp-c*.json.gz"))) if a == "FILE" else a for a in command]
    argv = argv + [value] if option == "--output-notebook" else argv + [option, value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and option in err and "Traceback" not in err
    assert blocker.read_text() == "a file"


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "x\n"])
def test_a_report_name_that_is_not_a_plain_name_exits_2(name, tmp_path, capsys):
    seed = ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b"
    assert main(["report", str(seed), "--name", name, "--out-dir", str(tmp_path / "reports")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specsweep report: --name") and len(err.splitlines()) == 1
    assert not (tmp_path / "x.html").exists() and not (tmp_path / "reports").exists()


def test_the_report_module_refuses_a_bad_name_and_folder_with_exit_2(tmp_path):
    seed = str(ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b")
    for extra in (["--name", "../x"], ["--name", "a/b"], ["--name", "ok", "--out-dir", "/proc/specsweep-test/x"]):
        proc = subprocess.run([sys.executable, "-m", "specsweep.report", "--result-set", seed, *extra],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and extra[-1] in proc.stderr


@pytest.mark.parametrize("option", ["--out-dir", "--report-dir"])
def test_a_study_folder_that_cannot_be_written_is_one_named_line_exit_2(option, tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    other = "--report-dir" if option == "--out-dir" else "--out-dir"
    assert main(["study", str(ROOT / "data" / "studies" / "demo.yaml"), option, str(blocker / "sub"),
                 other, str(tmp_path / "fine")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and option in err and "Traceback" not in err


def test_a_report_of_the_baseline_alone_says_a_second_arm_is_needed(tmp_path, capsys):
    seed = ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b"
    assert main(["report", str(seed / "baseline"), "--name", "one", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "only the baseline arm 'baseline'" in err and "second arm" in err
    proc = subprocess.run([sys.executable, "-m", "specsweep.report", "--result-set", str(seed / "mtp"), "--name", "one",
                           "--baseline", "mtp", "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "only the baseline arm 'mtp'" in proc.stderr and "second arm" in proc.stderr


@pytest.mark.parametrize("argv, option", [
    (["serve", "--profile", "tiny", "--emit-log", "BLOCKER/x.json"], "--emit-log"),
    (["serve", "llamacpp", "--model", "smollm2", "--slots", "1", "--settings-json", "BLOCKER/x.json"], "--settings-json"),
])
def test_a_file_a_server_writes_later_is_checked_before_it_starts(argv, option, tmp_path, capsys):
    if "llamacpp" in argv and importlib.util.find_spec("xllamacpp") is None:
        pytest.skip("the llama.cpp engine is not installed")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    # as a user runs it, in its own process: a check that failed would start a server, which the
    # timeout ends, instead of a server left running inside the test process
    proc = subprocess.run([sys.executable, "-m", "specsweep.cli", *(a.replace("BLOCKER", str(blocker)) for a in argv)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"{option} {blocker}: exists and is not a folder" in proc.stderr and "Traceback" not in proc.stderr


def test_publish_checks_its_out_dir_before_measuring(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    proc = subprocess.run([sys.executable, "-m", "specsweep.publish", "--only", "demo", "--out-dir", str(blocker)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "--out-dir" in proc.stderr


def test_a_report_with_an_arm_whose_every_request_failed_names_it_exit_2(tmp_path, capsys):
    from specsweep.measure.sweep import run_sweep

    common = {"embedded_profile": "tiny", "concurrency": [1, 2], "input_tokens": 32, "output_tokens": 16,
              "requests_per_level": 4, "out_dir": str(tmp_path / "runs")}
    base = run_sweep({**common, "arm": "baseline"}, progress=False, log=lambda _: None)
    # the server answers the preflight, then fails every request: the run completes with 100 % errors
    failed = run_sweep({**common, "arm": "mtp", "embedded_args": ["--fault-errors-after", "1"]}, progress=False,
                       log=lambda _: None)
    assert failed.complete and failed.levels["n_ok"].eq(0).all()
    assert main(["report", str(base.run_dir), str(failed.run_dir), "--name", "x", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "arm 'mtp': every request failed (100 % errors)" in err
    # the module entry point says the same, with the same exit status
    proc = subprocess.run([sys.executable, "-m", "specsweep.report", "--result-set", str(base.run_dir), "--result-set",
                           str(failed.run_dir), "--name", "y", "--out-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "every request failed (100 % errors)" in proc.stderr
