"""Building reports: the page's Reproduce commands run as printed, the same inputs give the same
bytes, the CLI takes paths relative to the current directory, and the build is quiet."""
from __future__ import annotations

import html as htmllib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from helpers import ROOT, SEED, write_measured
from specsweep.report import build_report, human_number

# quotes of both kinds, $, backticks and a YAML-special colon: each broke or would break a naive command
TITLE = "It's \"MTP\": $HOME `uname` & <b>C=128</b> ```"
PROFILES = [{"name": "Chat: it's fast", "objective": "latency", "concurrency_max": 64}]


def code_blocks(page: str) -> list[str]:
    """The text of every ``<pre><code class="language-sh">`` block, as a reader would copy it."""
    return [htmllib.unescape(b).strip() for b in re.findall(r'<code class="language-sh">(.*?)</code>', page, re.S)]


def kernel_processes() -> list[psutil.Process]:
    """This process's live descendants that are Jupyter kernels (specsweep's launcher or ipykernel's)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if p.status() != psutil.STATUS_ZOMBIE and ("ipykernel_launcher" in cmd or "specsweep.notebooks.launcher" in cmd):
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture(scope="module")
def seed_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("built")
    return build_report([SEED], "repro", title=TITLE, profiles=PROFILES, out_dir=out)


def test_reproduce_section_has_no_machine_paths(seed_build: Path) -> None:
    page = seed_build.read_text()
    blocks = code_blocks(page)
    assert len(blocks) == 2, blocks
    for block in blocks:
        assert str(ROOT) not in block and str(seed_build.parent) not in block, block
        assert "data/reference/seed-qwen3.5-122b-a10b" in block
        assert not re.search(r"(^|\s|')/(work|home|tmp|root|Users)/", block), block
    assert "Built " not in page or "UTC" not in page.split("Reproduce")[-1]  # no build time on the page


def test_report_command_runs_as_printed_and_rebuilds_the_same_page(seed_build: Path, tmp_path: Path) -> None:
    """Paste the first command into bash at the repository root (with this interpreter standing in
    for ``.venv/bin/python`` and a temporary --out-dir); the page it writes equals the original."""
    command = code_blocks(seed_build.read_text())[0]
    assert command.startswith(".venv/bin/python -m specsweep.report ")
    assert subprocess.run(["bash", "-n", "-c", command]).returncode == 0
    runnable = shlex.quote(sys.executable) + command.removeprefix(".venv/bin/python") + " --out-dir " + shlex.quote(str(tmp_path))
    done = subprocess.run(["bash", "-c", runnable], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rebuilt = tmp_path / "repro.html"
    assert rebuilt.read_bytes() == seed_build.read_bytes(), "the Reproduce command built a different page"
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", rebuilt.read_text()))
    assert "Chat: it" in text  # the custom profile travelled through the command


def test_papermill_command_is_valid_shell_and_yaml_and_runs(seed_build: Path, tmp_path: Path) -> None:
    import papermill as pm

    command = code_blocks(seed_build.read_text())[1]
    assert subprocess.run(["bash", "-n", "-c", command]).returncode == 0
    argv = shlex.split(command)
    assert argv[:4] == [".venv/bin/papermill", "notebooks/report.ipynb", "out.ipynb", "-y"]
    params = yaml.safe_load(argv[4])
    assert params["title"] == TITLE and params["profiles"] == PROFILES
    assert params["result_sets"] == ["data/reference/seed-qwen3.5-122b-a10b"]
    declared = set(pm.inspect_notebook(str(ROOT / "notebooks" / "report.ipynb")))
    assert set(params) <= declared, set(params) - declared
    out = tmp_path / "out.ipynb"
    runnable = f"{shlex.quote(sys.executable)} -m papermill notebooks/report.ipynb {shlex.quote(str(out))} " \
               + " ".join(shlex.quote(a) for a in argv[3:]) + " --no-progress-bar"
    done = subprocess.run(["bash", "-c", runnable], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text())["metadata"]["papermill"]["parameters"]["title"] == TITLE


def test_cli_takes_paths_relative_to_the_current_directory(tmp_path: Path) -> None:
    """``--result-set mine/seed`` from another directory means ./mine/seed, not <repo>/mine/seed."""
    shutil.copytree(SEED, tmp_path / "mine" / "seed")
    done = subprocess.run([sys.executable, "-m", "specsweep.report", "--result-set", "mine/seed", "--name", "cwd",
                           "--out-dir", "pages"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "pages" / "cwd.html").is_file()
    assert not (ROOT / "pages").exists()


def test_same_inputs_give_byte_identical_html_and_no_tcp_warning(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A measured study (8 charts) built twice, on a kernel started early and on papermill's own: same
    bytes; no kernel left running; no kernel transport warning on the terminal."""
    lv = {c: {"tokens": 40, "step_s": 0.02, "ttft_s": 0.05, "jitter": 0.05} for c in (1, 4, 16)}
    write_measured(tmp_path / "study" / "baseline", "baseline", lv, repeats=2)
    write_measured(tmp_path / "study" / "spec", "spec", {c: {**v, "tokens_per_chunk": 2} for c, v in lv.items()},
                   repeats=2)
    first = build_report([tmp_path / "study"], "twice", out_dir=tmp_path / "a")
    with pytest.MonkeyPatch.context() as mp:  # papermill's own kernel, not the one started early
        mp.setenv("SPECSWEEP_EAGER_IMPORTS", "1")
        second = build_report([tmp_path / "study"], "twice", out_dir=tmp_path / "b")
    captured = capfd.readouterr()
    assert first.read_bytes() == second.read_bytes()
    # the early kernel is stopped with its build: no kernel process outlives build_report
    assert not kernel_processes()
    assert len(re.findall(r'class="specsweep-chart"', first.read_text())) >= 6
    assert "without encryption" not in captured.err + captured.out


def test_a_failing_export_still_stops_the_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel is stopped while the page is written; an export that raises still leaves no kernel
    running when build_report raises (and the kernel was running when the notebook had run)."""
    from specsweep.report import build

    seen: list[int] = []
    run = build.execute_notebook

    def counted(*args: object, **kwargs: object) -> object:
        nb = run(*args, **kwargs)
        seen.append(len(kernel_processes()))
        return nb

    def broken(*args: object, **kwargs: object) -> Path:
        raise RuntimeError("disk full (simulated)")

    monkeypatch.setattr(build, "execute_notebook", counted)
    monkeypatch.setattr(build, "export_html", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        build_report([SEED], "broken", out_dir=tmp_path)
    assert seen == [1]
    assert not kernel_processes()


@pytest.mark.parametrize(("value", "shown"), [
    (16380.2, "16,380"), (1.63812, "1.638"), (0.012345, "0.01235"), (48.0, "48"), (0.0, "0"),
    (1234567.8, "1,234,568"), (-12.34, "-12.34"), (float("nan"), "—"), (None, "—"), (3, "3"),
])
def test_human_number(value: object, shown: str) -> None:
    assert human_number(value) == shown


def test_table_formats_numbers_for_people_and_escapes_text() -> None:
    import pandas as pd

    from specsweep.report import table

    shown = table(pd.DataFrame({"arm <b>x</b>": ["<b>mtp</b>", "base"], "output_tok_s": [16380.24, 0.5],
                                "concurrency": [128, 4096]})).data
    assert "16,380" in shown and "4,096" in shown and "e+" not in shown
    assert "<b>" not in shown and "&lt;b&gt;mtp&lt;/b&gt;" in shown and "arm &lt;b&gt;x" in shown


def test_data_table_has_no_exponents(seed_build: Path) -> None:
    page = seed_build.read_text()
    full = page.split("Full data")[1].split("Definitions")[0]
    cells = re.findall(r"<td>(.*?)</td>", full)
    assert cells and not [c for c in cells if re.search(r"\de[+-]\d", c)]
    assert "1,635" in cells or "2,800" in cells  # thousands separators on aggregate tok/s


def test_sweep_commands_on_the_page_measure_the_arms_again(tmp_path: Path) -> None:
    """A study swept by specsweep (embedded tiny server): the page prints one sweep command per arm;
    each is valid shell with valid notebook parameters, and the baseline's runs as printed."""
    import papermill as pm

    from specsweep.measure.config import parse_config
    from specsweep.measure.sweep import run_sweep
    from specsweep.results.store import find_result_sets

    study = tmp_path / "study"
    small = {"embedded_profile": "tiny", "concurrency": [1, 2], "input_tokens": 32, "output_tokens": 24,
             "out_dir": str(study)}
    run_sweep({"arm": "baseline", **small}, progress=False, log=lambda _: None)
    run_sweep({"arm": "mtp", "label": "MTP: it's \"fast\"", "embedded_args": ["--max-running-requests", "2"], **small},
              progress=False, log=lambda _: None)
    page = build_report([study], "swept", out_dir=tmp_path / "out").read_text()
    blocks = code_blocks(page)
    assert len(blocks) == 4, blocks  # rebuild, notebook, the sweeps, the rebuild from the sweeps' new runs
    lines = blocks[2].splitlines()
    assert len(lines) == 2
    declared = set(pm.inspect_notebook(str(ROOT / "notebooks" / "sweep.ipynb")))
    for line in lines:
        assert subprocess.run(["bash", "-n", "-c", line]).returncode == 0, line
        argv = shlex.split(line)
        params = yaml.safe_load(argv[argv.index("-y") + 1])
        assert set(params) <= declared, set(params) - declared
        parse_config(params)  # the sweep's own validation accepts them
        assert params["out_dir"] == "data/runs/remeasured/swept" and params["concurrency"] == [1, 2]
    assert "--result-set data/runs/remeasured/swept" in blocks[3]
    mtp = yaml.safe_load(shlex.split(lines[1])[-1])
    assert mtp["label"] == "MTP: it's \"fast\"" and mtp["embedded_args"] == ["--max-running-requests", "2"]
    assert mtp["embedded_spec"] == "mtp" and mtp["output_tokens"] == 24
    argv = shlex.split(lines[0])
    assert argv[:3] == [".venv/bin/papermill", "notebooks/sweep.ipynb", "out-baseline.ipynb"]
    argv[:3] = [sys.executable, "-m", "papermill", "notebooks/sweep.ipynb", str(tmp_path / "out-baseline.ipynb")]
    remeasured = ROOT / "data" / "runs" / "remeasured" / "swept"
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "C=2 repeat 0:" in done.stdout  # progress reaches the terminal
        assert len(find_result_sets(remeasured)) == 1
    finally:
        shutil.rmtree(remeasured, ignore_errors=True)


def test_sweep_parameters_from_meta() -> None:
    """A remote arm with a prompt file and fixed requests per level: the command names the file
    relative to the repository, the endpoint and model; reference data and unknown files get none."""
    from specsweep.measure.config import parse_config
    from specsweep.report import sweep_parameters as from_dict
    from specsweep.results.meta import Meta

    def sweep_parameters(meta: dict, out_dir: str) -> dict | None:
        return from_dict(Meta.model_validate({"schema_version": 1, "run_id": "r", **meta}), out_dir)

    meta = {"kind": "run", "arm": "mtp", "label": "MTP", "endpoint": "http://gpu-host:30000", "model": "qwen",
            "sweep": {"concurrency": [1, 8], "requests_per_level": {"1": 16, "8": 16},
                      "requests_per_level_rule": "fixed", "repeats": 3, "seed": 7},
            "workload": {"kind": "prompt-file", "path": str(ROOT / "tests" / "prompts.jsonl"), "input_tokens": None,
                         "output_tokens": 128}}
    params = sweep_parameters(meta, "data/runs/study")
    assert params == {"arm": "mtp", "label": "MTP", "endpoint": "http://gpu-host:30000", "model": "qwen",
                      "concurrency": [1, 8], "output_tokens": 128, "workload": "tests/prompts.jsonl",
                      "requests_per_level": 16, "repeats": 3, "seed": 7, "out_dir": "data/runs/study"}
    parse_config(params)
    assert sweep_parameters({**meta, "workload": {"kind": "prompt-file", "input_tokens": None, "output_tokens": 128}},
                            "x") is None
    # the auto rule with a larger minimum is said again; with the default minimum nothing is
    auto = {**meta, "sweep": {**meta["sweep"], "requests_per_level": {"1": 145, "8": 145},
                              "requests_per_level_rule": "auto", "min_requests_per_level": 145}}
    again = sweep_parameters(auto, "data/runs/study")
    assert again["min_requests_per_level"] == 145 and "requests_per_level" not in again
    assert parse_config(again).requests_for(8) == 145
    auto["sweep"]["min_requests_per_level"] = 4
    assert "min_requests_per_level" not in sweep_parameters(auto, "data/runs/study")
    assert sweep_parameters({**meta, "kind": "reference"}, "x") is None


def test_the_report_kernel_starts_early_with_the_notebooks_modules_loaded() -> None:
    """``EarlyKernel``: a running kernel with the notebook's imports done before papermill asks, and
    gone after ``stop`` (the fast path of ``build_report``, which otherwise falls back silently)."""
    import asyncio

    from specsweep.notebooks.kernel import EarlyKernel
    from specsweep.paths import REPO_ROOT

    kernel = EarlyKernel(REPO_ROOT)
    assert kernel.km is not None and kernel.km.has_kernel
    pid = kernel.km.provisioner.process.pid

    async def loaded() -> str:
        kc = kernel.km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=60)
        out: list[str] = []
        await kc.execute_interactive("import os, sys; print(all(m in sys.modules for m in "
                                     "('pandas', 'altair', 'specsweep.report.charts', 'specsweep.analyze.compare')), os.getcwd())",
                                     output_hook=lambda msg: out.append(msg["content"].get("text", "")), timeout=60)
        return "".join(out)

    try:
        assert asyncio.run(loaded()).split() == ["True", str(REPO_ROOT)]
    finally:
        kernel.stop()
    assert kernel.km is None
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_kernels_start_without_the_debugger_and_otherwise_as_ipykernels_own_launcher(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """specsweep.notebooks.launcher: the kernel command names it in place of ``-m ipykernel_launcher``;
    its kernel has debugpy blocked and the same ``sys.path`` as a kernel of the stock launcher
    (``SPECSWEEP_KERNEL_DEBUGGER=1``), whose debugger stays as ipykernel sets it up; its first cell
    finds the garbage collector on again and start-up's objects frozen."""
    import asyncio
    import json

    from specsweep.notebooks.kernel import kernel_manager_class
    from specsweep.notebooks.launcher import launcher_argv
    from specsweep.paths import REPO_ROOT

    assert launcher_argv(["py", "-m", "ipykernel_launcher", "-f", "{connection_file}"]) == \
        ["py", "-m", "specsweep.notebooks.launcher", "-f", "{connection_file}"]
    assert launcher_argv(["julia", "-i", "kernel.jl", "{connection_file}"]) == ["julia", "-i", "kernel.jl", "{connection_file}"]

    async def probe() -> tuple[list[str], dict]:
        km = kernel_manager_class()(kernel_name="python3")
        await km.start_kernel(cwd=str(REPO_ROOT), extra_arguments=["--HistoryManager.hist_file=:memory:"])
        cmd = list(km.provisioner.process.args) if hasattr(km.provisioner.process, "args") else []
        kc = km.client()
        kc.start_channels()
        out: list[str] = []
        try:
            await kc.wait_for_ready(timeout=60)
            await kc.execute_interactive(
                "import json, sys; print(json.dumps({'debugpy': repr(sys.modules.get('debugpy', 'not imported')), "
                "'path': sys.path, 'debugger': bool(getattr(get_ipython().kernel, 'debugger', None)), "
                "'gc': [__import__('gc').isenabled(), __import__('gc').get_freeze_count()]}))",
                output_hook=lambda msg: out.append(msg["content"].get("text", "")), timeout=60)
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)
        return cmd, json.loads("".join(out))

    cmd, lean = asyncio.run(probe())
    assert "specsweep.notebooks.launcher" in cmd and "ipykernel_launcher" not in cmd
    monkeypatch.setenv("SPECSWEEP_KERNEL_DEBUGGER", "1")
    stock_cmd, stock = asyncio.run(probe())
    assert "ipykernel_launcher" in stock_cmd
    assert lean["debugpy"] == "None" and lean["debugger"] is False
    assert stock["debugpy"] != "None"
    assert lean["path"] == stock["path"]
    assert lean["gc"][0] is True and lean["gc"][1] > 10_000  # collecting, start-up's objects frozen
    assert stock["gc"] == [True, 0]


def test_from_a_running_event_loop_papermill_starts_the_kernel_as_usual(recwarn: pytest.WarningsRecorder) -> None:
    """A report built from a notebook cell (a running loop in this thread): no early kernel, and no
    "coroutine was never awaited" warning on the notebook's stderr."""
    import asyncio
    import gc

    from specsweep.notebooks.kernel import EarlyKernel
    from specsweep.paths import REPO_ROOT

    async def inside() -> EarlyKernel:
        return EarlyKernel(REPO_ROOT)

    kernel = asyncio.run(inside())
    gc.collect()
    assert kernel.km is None
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in recwarn]
    kernel.stop()  # nothing to stop: still fine


@pytest.mark.skipif(sys.platform == "win32", reason="unix sockets: POSIX only (Windows uses TCP with CurveZMQ)")
def test_kernels_talk_over_private_unix_sockets_and_leave_nothing_behind() -> None:
    """Every specsweep kernel listens on unix sockets in a 0700 folder of its own, so kernels started
    at the same moment cannot take each other's TCP ports (a study's arms did: ``ZMQError: Address
    already in use``); three started together all answer, and shutdown removes their folders."""
    import asyncio
    import os
    import stat

    from specsweep.notebooks.kernel import kernel_manager_class

    async def run() -> list[tuple[str, int, str]]:
        managers = [kernel_manager_class()(kernel_name="python3") for _ in range(3)]
        seen = []
        await asyncio.gather(*(km.start_kernel(extra_arguments=["--HistoryManager.hist_file=:memory:"])
                               for km in managers))
        try:
            for km in managers:
                folder = os.path.dirname(km.ip)
                seen.append((km.transport, stat.S_IMODE(os.stat(folder).st_mode), folder))
                kc = km.client()
                kc.start_channels()
                try:
                    await kc.wait_for_ready(timeout=60)
                    assert os.path.exists(f"{km.ip}-{km.shell_port}"), "the shell socket is a file in that folder"
                    reply = await kc.execute_interactive("x = 6 * 7", timeout=60)
                    assert reply["content"]["status"] == "ok"
                finally:
                    kc.stop_channels()
        finally:
            await asyncio.gather(*(km.shutdown_kernel(now=True) for km in managers))
        return seen

    seen = asyncio.run(run())
    assert [t for t, _, _ in seen] == ["ipc"] * 3
    assert all(mode == 0o700 for _, mode, _ in seen)
    assert len({folder for _, _, folder in seen}) == 3
    assert not [folder for _, _, folder in seen if os.path.exists(folder)]


@pytest.mark.parametrize("notebook, preload_name", [("report.ipynb", "KERNEL_PRELOAD"), ("sweep.ipynb", "SWEEP_PRELOAD")])
def test_kernel_preloads_import_cleanly_and_cover_their_notebooks_imports(notebook: str, preload_name: str) -> None:
    """A report's and a study arm's kernel import their notebook's specsweep modules while they start
    (specsweep.notebooks.kernel): each preload runs in a fresh interpreter (a misspelled module would only
    be logged by ipykernel, and the gain lost) and leaves loaded every specsweep module its notebook's
    cells import, so the two cannot drift apart."""
    import ast
    import json
    import subprocess
    import sys

    import nbformat

    from specsweep.notebooks import kernel
    from specsweep.paths import REPO_ROOT

    preload = getattr(kernel, preload_name)
    assert kernel.preload_arguments(preload) == [f"--IPKernelApp.exec_lines={preload}"]
    loaded = set(json.loads(subprocess.run(
        [sys.executable, "-c", preload + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
        check=True, cwd=REPO_ROOT, timeout=120, capture_output=True, text=True).stdout))
    nb = nbformat.read(REPO_ROOT / "notebooks" / notebook, as_version=4)
    wanted: set[str] = set()
    for cell in nb.cells:
        for node in ast.walk(ast.parse(cell.source)) if cell.cell_type == "code" else ():
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specsweep"):
                wanted.add(node.module)
                wanted.update(sub for a in node.names if _is_module(sub := f"{node.module}.{a.name}"))
            elif isinstance(node, ast.Import):
                wanted.update(a.name for a in node.names if a.name.startswith("specsweep"))
    assert "specsweep.report.charts" in wanted  # the scan finds the notebook's imports
    assert not sorted(wanted - loaded), f"{preload_name} leaves {sorted(wanted - loaded)} for {notebook}'s cells to import"


def _is_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a name in a module, not a package's submodule
        return False


def test_the_builder_loads_no_pandas_before_its_kernel_starts_and_a_study_folder_names_the_page(tmp_path: Path) -> None:
    """The report kernel starts first and imports pandas and the report's modules while the builder
    loads papermill and nbconvert: anything that loads pandas in the builder before it (0.5 s of
    imports) delays the whole page. A study folder's title is read before that, from the standard
    library only (``specsweep.results.study_record``)."""
    from specsweep.paths import REPO_ROOT

    study = tmp_path / "study"
    shutil.copytree(SEED, study / "set")
    (study / "study.json").write_text(json.dumps({"title": "From <study.json>", "fingerprint": {"arms": {}}}))
    probe = f"""
import json, sys
from specsweep.report import build
seen = {{}}
class Stop(Exception):
    pass
class Early:
    def __init__(self, *args, **kwargs):
        seen["pandas"] = "pandas" in sys.modules
        raise Stop
build.EarlyKernel = Early
try:
    build.build_report([{str(study)!r}], "x", out_dir={str(tmp_path / "out")!r})
except Stop:
    pass
print(json.dumps(seen))
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"pandas": False}

    from specsweep.results.study_record import study_title

    assert study_title([study]) == "From <study.json>"


def test_reproduce_says_which_server_to_start_before_each_endpoint_sweep(tmp_path: Path) -> None:
    """Two arms measured against one endpoint: each sweep command comes after a comment saying which
    server configuration to start there first (the recorded serve command, else the settings the server
    reported) — never two bare commands against the same endpoint."""
    from helpers import write_measured
    from specsweep.report import reproduce_markdown

    levels = {1: {"tokens": 8, "step_s": 0.01, "ttft_s": 0.02}}
    endpoint = {"endpoint": "http://gpu-host:30000"}
    write_measured(tmp_path / "baseline", "baseline", levels, server={"name": "sglang", "max_running_requests": 256},
                   **endpoint)
    write_measured(tmp_path / "mtp", "mtp", levels, **endpoint, server={
        "name": "sglang", "speculative_algorithm": "NEXTN", "max_running_requests": 48},
        serve={"argv": ["python", "-m", "sglang.launch_server", "--speculative-algorithm", "NEXTN"]})
    text = reproduce_markdown({"result_sets": [str(tmp_path / "baseline"), str(tmp_path / "mtp")],
                               "baseline": "baseline", "output_name": "x"})
    block = next(b for b in re.findall(r"```+sh\n(.*?)\n```+", text, re.S) if "notebooks/sweep.ipynb" in b).splitlines()
    assert len(block) == 4 and [line.startswith("#") for line in block] == [True, False, True, False], block
    assert "baseline's server" in block[0] and "max_running_requests=256" in block[0] and "gpu-host:30000" in block[0]
    assert "mtp's server" in block[2] and "sglang.launch_server --speculative-algorithm NEXTN" in block[2]
    assert '"arm": "baseline"' in block[1] and '"arm": "mtp"' in block[3]
