"""Studies: the study file (validation with lines, grids, dry run) and the runner end to end.

The runner tests start real servers: the reference server as a ``serve`` arm (an argument list
with a ``{port}`` placeholder) and as an ``embedded`` arm (started by the sweep notebook), and a
``serve`` command that exits at once like a server that cannot load its model.
"""
from __future__ import annotations

import http.server
import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import papermill as pm
import pytest
import yaml

from helpers import FLAKY_SERVER, base_meta, require_extra
from specsweep.measure.probe import flush_prefix_cache
from specsweep.paths import REPO_ROOT
from specsweep.results.meta import Meta
from specsweep.results.store import ResultSet, find_result_sets, load_result_set
from specsweep.study.file import StudyError, load_study, parse_study
from specsweep.study.runner import Redactor, main, run_arm, run_order, run_study, study_markdown

SERVE_REFSERVER = [sys.executable, "-m", "specsweep.refserver", "--profile", "tiny", "--port", "{port}",
                   "--health-delay-s", "0.2"]
SECRET = "hunter2-not-for-logs"


def study_text(**over: object) -> str:
    doc: dict[str, object] = {
        "title": "Test study",
        "name": "t",
        "baseline": "baseline",
        "sweep": {"concurrency": [1, 2], "input_tokens": 32, "output_tokens": 16},
        "arms": [
            {"name": "baseline", "serve": {"argv": SERVE_REFSERVER, "ready_url": "http://127.0.0.1:{port}/health",
                                           "start_timeout_s": 60, "stop_grace_s": 5}},
            {"name": "mtp", "grid": {"steps": [1, 2]},
             "embedded": {"profile": "tiny", "spec": "mtp", "args": ["--speculative-num-steps", "{steps}"]}},
        ],
    }
    doc.update(over)
    return yaml.safe_dump(doc, sort_keys=False)


# ------------------------------------------------------------------------------------ the file


BAD = """\
title: T
baseline: baseline
sweep:
  concurrency: [1, 2]
  input_tokens: 0
arms:
  - name: baseline
    endpoint: http://127.0.0.1:1
  - name: mtp
    serve:
      argv: [x]
      ready_url: "http://127.0.0.1:{port}/health"
      start_timout_s: 5
"""


@pytest.mark.parametrize("text, line, key", [
    (BAD, 5, "sweep.input_tokens"),
    (BAD.replace("input_tokens: 0", "input_tokens: 8"), 13, "arms.1.serve.start_timout_s"),
    (BAD.replace("input_tokens: 0", "repeats: 3"), 3, "sweep"),
    (BAD.replace("input_tokens: 0", "input_tokens: 8").replace("start_timout_s", "start_timeout_s")
        .replace("baseline: baseline", "baseline: nope"), 2, "baseline"),
    (BAD.replace("    endpoint: http://127.0.0.1:1\n", "").replace("input_tokens: 0", "input_tokens: 8")
        .replace("start_timout_s", "start_timeout_s"), 7, "arms.0"),
    (BAD.replace("      argv: [x]\n", "").replace("input_tokens: 0", "input_tokens: 8")
        .replace("start_timout_s", "start_timeout_s"), 10, "arms.1.serve.argv"),
])
def test_errors_name_the_key_and_its_line(text: str, line: int, key: str) -> None:
    with pytest.raises(StudyError) as err:
        parse_study(text, "s.yaml")
    assert f"s.yaml line {line}: key '{key}'" in str(err.value), str(err.value)


def test_a_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(StudyError, match=r"s\.yaml line 5: not valid YAML .*while parsing a flow sequence at line 4"):
        parse_study("title: T\narms:\n  - name: a\n    endpoint: [http://x\n", "s.yaml")


def test_exactly_one_way_to_reach_the_server() -> None:
    text = study_text(arms=[{"name": "baseline", "endpoint": "http://127.0.0.1:1", "embedded": {}}])
    with pytest.raises(StudyError, match="needs exactly one of 'endpoint'.*it has endpoint, embedded"):
        parse_study(text)


def test_a_grid_expands_to_readable_arm_names() -> None:
    study = parse_study(study_text(arms=[
        {"name": "baseline", "endpoint": "http://127.0.0.1:1"},
        {"name": "mtp", "grid": {"steps": [2, 3], "cap": [128]},
         "serve": {"argv": ["srv", "--port", "{port}", "--speculative-num-steps", "{steps}",
                            "--max-running-requests", "{cap}", "--speculative-config", '{"method": "mtp", "k": {steps}}'],
                   "env": {"STEPS": "{steps}"}, "ready_url": "http://127.0.0.1:{port}/health"}},
        {"name": "eagle-k{topk}", "label": "EAGLE topk {topk}", "grid": {"topk": [1, 4]},
         "embedded": {"spec": "mtp", "args": ["--set", "speculative.num_steps={topk}"]}},
    ]))
    assert [a.name for a in study.arms] == ["baseline", "mtp-steps2-cap128", "mtp-steps3-cap128", "eagle-k1", "eagle-k4"]
    mtp3 = study.arms[2]
    assert mtp3.serve is not None and mtp3.grid_values == {"steps": 3, "cap": 128}
    assert mtp3.serve.argv == ["srv", "--port", "{port}", "--speculative-num-steps", "3", "--max-running-requests",
                               "128", "--speculative-config", '{"method": "mtp", "k": 3}']
    assert mtp3.serve.env == {"STEPS": "3"}
    assert study.arms[4].label == "EAGLE topk 4" and study.arms[4].embedded.args == ["--set", "speculative.num_steps=4"]


def test_auto_workload_and_length_resolve_once_for_every_arm() -> None:
    """A real-server arm and an embedded arm would resolve ``auto`` differently; a study shares one."""
    from specsweep.measure.config import parse_config

    mixed = parse_study(study_text(sweep={"concurrency": [1, 2]}))
    params = [mixed.sweep_parameters(a, 0) for a in mixed.arms]
    assert {p["workload"] for p in params} == {"builtin"} and {p["output_tokens"] for p in params} == {1000}
    resolved = {(parse_config(p).resolved_workload()[0], parse_config(p).resolved_output_tokens()) for p in params}
    assert resolved == {("builtin", 1000)}
    embedded = parse_study(study_text(sweep={"concurrency": [1, 2]}, arms=[
        {"name": "baseline", "embedded": {"profile": "tiny", "spec": "off"}},
        {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}]))
    resolved = {(parse_config(p).resolved_workload()[0], parse_config(p).resolved_output_tokens())
                for p in (embedded.sweep_parameters(a, 0) for a in embedded.arms)}
    assert resolved == {("random-ids", 256)}  # all embedded: the embedded rule, one for both


def test_grid_names_must_stay_unique() -> None:
    with pytest.raises(StudyError, match=r"<study> line 19: key 'arms.2.name': arm 'mtp-1' appears twice"):
        parse_study(study_text(arms=[{"name": "baseline", "endpoint": "http://h:1"},
                                     {"name": "mtp-{x}", "grid": {"x": [1, 2]}, "endpoint": "http://h:1{x}"},
                                     {"name": "mtp-1", "endpoint": "http://h:3"}]))


def test_repeats_interleave_arms_in_alternating_order() -> None:
    study = parse_study(study_text(repeats=3, arms=[{"name": "baseline", "endpoint": "http://h:1"},
                                                   {"name": "mtp", "endpoint": "http://h:2"}]))
    assert [(r, a.name) for r, a in study.plan()] == [(0, "baseline"), (0, "mtp"), (1, "mtp"), (1, "baseline"),
                                                      (2, "baseline"), (2, "mtp")]
    # each repeat is its own sweep run with its own prompt seed, paired across arms
    assert study.sweep_parameters(study.arms[1], 2)["seed"] == 2
    assert study.sweep_parameters(study.arms[0], 2)["repeats"] == 1


def test_dry_run_prints_every_arm_and_command_and_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = study_text(repeats=2)
    text = text.replace("    start_timeout_s: 60", f"    env:\n      MY_API_KEY: {SECRET}\n    start_timeout_s: 60")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main([str(path), "--out-dir", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "out").exists()
    lines = [line for line in out.splitlines() if re.match(r"\s*\d+\. repeat", line)]
    assert [re.search(r"repeat \d — ([\w-]+)", line).group(1) for line in lines] == [
        "baseline", "mtp-steps1", "mtp-steps2", "mtp-steps2", "mtp-steps1", "baseline"]
    assert "-m specsweep.refserver --profile tiny --port '{port}'" in out
    assert "MY_API_KEY=***" in out and SECRET not in out
    assert "--speculative-num-steps 2" in out


def test_bad_study_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BAD)
    assert main([str(path), "--dry-run"]) == 2
    assert "line 5: key 'sweep.input_tokens'" in capsys.readouterr().err


def test_study_notebook_dry_run(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(study_text())
    out = tmp_path / "study.ipynb"
    pm.execute_notebook(str(REPO_ROOT / "notebooks" / "study.ipynb"), str(out), kernel_name="python3",
                        parameters={"study_file": str(path), "out_dir": str(tmp_path / "o"), "dry_run": True},
                        cwd=str(tmp_path), progress_bar=False)
    text = json.dumps([c.get("outputs") for c in nbformat.read(str(out), as_version=4).cells])
    assert "mtp-steps1: embedded reference server" in text and "no report built" in text
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------- the runner


def test_redactor_hides_secret_values_and_url_credentials() -> None:
    study = parse_study(study_text(arms=[{"name": "baseline", "serve": {
        "argv": ["srv", "--api-key", "k3y-value-1", "--hf-token=tok-value-2"], "env": {"HF_TOKEN": "tok-value-3", "A": "b"},
        "ready_url": "http://h:1/health"}}]))
    redact = Redactor.for_arm(study.arms[0], {"SPECSWEEP_API_KEY": "env-key-4", "PATH": "/usr/bin",
                                              "TOKENIZERS_PARALLELISM": "false-ish", "MONKEY": "banana"})
    text = redact("k3y-value-1 tok-value-2 tok-value-3 env-key-4 http://user:pw@host:1/x /usr/bin false-ish banana")
    assert text == "*** *** *** *** http://***:***@host:1/x /usr/bin false-ish banana"
    shown = study.arms[0].describe()
    assert "--api-key '***' '--hf-token=***'" in shown and "HF_TOKEN=*** A=b" in shown and "value" not in shown


def test_url_credentials_are_hidden_in_time_linear_in_the_text() -> None:
    """The URL-credentials pattern is looked for from each ``://``: a long run of word characters (a
    notebook output's hex digests or base64 image, a log's) costs one pass, where the old pattern
    backtracked over the rest of the run from every start in it (time growing with the square of
    the run: this 400,000-character run would stall the test); matches are the old pattern's."""
    import re

    old = re.compile(r"(\w+://)[^/\s:@]+:[^/\s@]+@")
    redact = Redactor([])
    cases = ["http://user:pw@host/x", "xhttp://u:p@h", "a://b://u:p@h", "x://u:p@y://v:q@z", "x://u:p@://v:q@",
             "s3://k:s@b/p and ftp://a:b@c", "no url here", "http://host:8000/only-a-port", "://u:p@h", "a-b://u:p@h"]
    for text in cases:
        assert redact(text) == old.sub(r"\1***:***@", text), text
    long_run = "ab12" * 100_000 + " https://user:secret@host/x " + "f0" * 1000
    assert redact(long_run).endswith(" https://***:***@host/x " + "f0" * 1000)  # found past the run, and at once


def test_flush_prefix_cache_uses_the_route_the_server_offers() -> None:
    calls: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            calls.append(self.path)
            self.send_response(200 if self.path == "/reset_prefix_cache" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert flush_prefix_cache(url) == "/reset_prefix_cache"
        assert calls == ["/flush_cache", "/reset_prefix_cache"]
    finally:
        server.shutdown()


def test_flush_prefix_cache_on_each_api_surface(refserver, refserver_factory) -> None:  # noqa: ANN001 - fixtures
    assert flush_prefix_cache(refserver.url) == "/flush_cache"  # SGLang
    assert flush_prefix_cache(refserver_factory(args=["--api-surface", "vllm", "--vllm-dev-mode"]).url) == "/reset_prefix_cache"
    assert flush_prefix_cache(refserver_factory(args=["--api-surface", "llamacpp"]).url) is None  # no such route


@pytest.mark.parametrize("flush", [False, True])
def test_a_sweep_flushes_before_each_level_and_keeps_the_embedded_server_log(tmp_path: Path, flush: bool) -> None:
    from specsweep.measure.sweep import run_sweep

    result = run_sweep(dict(embedded_profile="tiny", concurrency=[1, 2], input_tokens=32, output_tokens=8,
                            out_dir=str(tmp_path), flush_cache=flush), progress=False, log=lambda _: None)
    server_log = result.run_dir / "server.log"
    assert server_log.is_file() and not list(tmp_path.glob("embedded-server-*.log"))
    assert server_log.read_text().count("/flush_cache: prefix cache flushed") == (2 if flush else 0)
    assert result.meta.sweep.flush_cache is flush
    assert result.meta.prefix_cache_flush == ("/flush_cache" if flush else None)


def test_refserver_keeps_its_log_when_asked(tmp_path: Path) -> None:
    from specsweep.refserver.launch import RefServer

    log_path = tmp_path / "logs" / "server.log"
    with RefServer("tiny", "off", ["--health-delay-s", "0.2"], log_path=log_path) as srv:
        assert flush_prefix_cache(srv.url) == "/flush_cache"
    assert "prefix cache flushed" in log_path.read_text() and "prefix cache flushed" in srv.stderr_text()


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_a_server_that_never_gets_ready_is_killed_with_its_whole_group(tmp_path: Path) -> None:
    # the leader ignores SIGTERM and has a child: both must be gone after the grace period
    script = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
              "print('child', c.pid, flush=True); time.sleep(120)")
    study = parse_study(study_text(arms=[{"name": "baseline", "serve": {
        "argv": [sys.executable, "-c", script], "ready_url": "http://127.0.0.1:{port}/health",
        "start_timeout_s": 2, "stop_grace_s": 0.5}}]))
    outcome = run_arm(study, study.arms[0], 0, tmp_path, log=lambda s: None)
    assert outcome.status == "failed"
    assert "did not answer 2xx within 2 s" in (outcome.error or "")
    child = int(re.search(r"child (\d+)", outcome.log_tail or "").group(1))
    assert _gone(child), "the server's child process survived the stop"
    assert outcome.server_log and "child" in Path(outcome.server_log).read_text()


@pytest.mark.slow
def test_a_study_end_to_end_with_a_failing_arm_then_resumed(tmp_path: Path) -> None:
    broken = {"name": "broken", "serve": {
        "argv": [sys.executable, "-c", "import os, sys; print('loading with key', os.environ['MY_API_KEY']); "
                                       "print('CUDA out of memory (simulated)'); sys.exit(3)"],
        "env": {"MY_API_KEY": SECRET}, "ready_url": "http://127.0.0.1:{port}/health", "start_timeout_s": 30}}
    doc = yaml.safe_load(study_text(repeats=2))
    doc["arms"].append(broken)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    study = load_study(path)
    out, reports = tmp_path / "out", tmp_path / "reports"
    logged: list[str] = []
    result = run_study(study, out_dir=out, report_dir=reports, log=logged.append)

    order = [(o.arm, o.repeat, o.status) for o in result.outcomes]
    assert order == [("baseline", 0, "complete"), ("mtp-steps1", 0, "complete"), ("mtp-steps2", 0, "complete"),
                     ("broken", 0, "failed"), ("broken", 1, "failed"), ("mtp-steps2", 1, "complete"),
                     ("mtp-steps1", 1, "complete"), ("baseline", 1, "complete")]
    assert result.missing == ["broken"] and not result.ok
    failed = result.outcomes[3]
    assert "exited with status 3 before it was ready" in failed.error
    assert "CUDA out of memory (simulated)" in failed.log_tail and SECRET not in failed.log_tail
    assert "loading with key ***" in Path(failed.server_log).read_text()
    assert SECRET not in (out / "study.json").read_text()

    # each run keeps its executed notebook and (serve arms) the server's log beside the result set
    base_run = Path(result.outcomes[0].run_dir)
    assert (base_run / "sweep.ipynb").is_file() and "C=2 repeat 0" in (base_run / "sweep.ipynb").read_text()
    assert "specsweep study: arm baseline" in (base_run / "server.log").read_text()
    assert (Path(result.outcomes[1].run_dir) / "sweep.ipynb").is_file()
    # studies flush the prefix cache before each level (2 levels); embedded arms keep their server's log too
    for o in result.outcomes[:3]:
        assert (Path(o.run_dir) / "server.log").read_text().count("/flush_cache: prefix cache flushed") == 2, o.arm
        assert o.server_log == str(Path(o.run_dir) / "server.log")
    assert load_result_set(base_run).meta.prefix_cache_flush == "/flush_cache"

    # repeats merged per arm, each level's repeat = the study's repeat, time order in meta.json
    merged = load_result_set(out / "mtp-steps2")
    assert merged.meta.complete and merged.meta.server["speculative_num_steps"] == 2
    assert sorted(set(zip(merged.levels["concurrency"], merged.levels["repeat"]))) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    runs = merged.meta.study.runs
    assert [(r["repeat"], r["position"], r["seed"]) for r in runs] == [(0, 3, 0), (1, 6, 1)]
    assert runs[0]["started_utc"] <= runs[1]["started_utc"]
    assert set(merged.requests["repeat"]) == {0, 1}

    # the simulated speculation is lossless: every paired output identical, both repeats paired
    agree = pd.read_csv(out / "agreement.csv")
    assert sorted(agree["arm"].unique()) == ["mtp-steps1", "mtp-steps2"]
    assert (agree["pairs"] == 8).all() and (agree["identical"] == 8).all() and not agree["flagged"].any()

    # what a report can say about the study (for report.ipynb): run order, missing arm, agreement
    sets = [load_result_set(p) for p in result.result_sets]
    # the study folder read back (specsweep report DIR) gives the arms in the order its report got them
    assert find_result_sets(out) == result.result_sets
    order = run_order(sets)
    assert list(zip(order["arm"], order["repeat"])) == [(o.arm, o.repeat) for o in result.outcomes if o.arm != "broken"]
    text = study_markdown(sets, "baseline")
    assert "**Missing arm(s): broken**" in text and "interleaved order" in text
    assert "*mtp-steps2*: identical to the baseline on all 16 paired prompts" in text

    html = (reports / "t.html").read_text()
    flat = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "missing arm(s): broken" in flat
    assert "mtp-steps1" in flat and "mtp-steps2" in flat

    # without --resume the folder is refused; with it, nothing complete is measured again
    with pytest.raises(StudyError, match="already holds a study"):
        run_study(study, out_dir=out, report=False, log=logged.append)
    before = sorted(p for p in (out / "_runs").rglob("meta.json"))
    again = run_study(study, out_dir=out, resume=True, report=False, log=logged.append)
    assert [(o.arm, o.status) for o in again.outcomes if o.status != "skipped"] == [("broken", "failed"), ("broken", "failed")]
    assert {o.run_dir for o in again.outcomes if o.status == "skipped"} == {o.run_dir for o in result.outcomes if o.run_dir}
    assert sorted(p for p in (out / "_runs").rglob("meta.json")) == before
    status = json.loads((out / "study.json").read_text())
    assert status["missing_arms"] == ["broken"] and len(status["outcomes"]) == 8
    assert pd.read_parquet(out / "baseline" / "levels.parquet")["repeat"].tolist().count(1) == 2

    # a changed study file is not resumed onto the old runs
    doc["sweep"]["concurrency"] = [1]
    doc["arms"][0]["serve"]["argv"] = [*SERVE_REFSERVER, "--seed", "3"]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(StudyError, match=r"sweep.concurrency was \[1, 2\], now \[1\]; arm 'baseline' is defined differently"):
        run_study(load_study(path), out_dir=out, resume=True, report=False, log=logged.append)


CRASHING_SERVER = r'''
import re, subprocess, sys, time, urllib.request
port = sys.argv[1]
child = subprocess.Popen([sys.executable, "-m", "specsweep.refserver", "--profile", "tiny", "--port", port,
                          "--health-delay-s", "0.2"])
while child.poll() is None:
    time.sleep(0.05)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        continue
    served = re.search(r"^sglang:num_requests_total\{[^}]*\} ([0-9.e+]+)", text, re.M)
    if served and float(served.group(1)) >= 10:
        print("simulated crash after", served.group(1), "requests", flush=True)
        child.kill()
        sys.exit(9)
sys.exit(1)
'''


@pytest.mark.slow
def test_a_server_that_dies_mid_arm_is_reported_with_its_log(tmp_path: Path) -> None:
    # a wrapper serves the reference server and kills it once it has served 10 requests: mid-sweep
    script = tmp_path / "crashing_server.py"
    script.write_text(CRASHING_SERVER)
    study = parse_study(study_text(sweep={"concurrency": [1, 2, 4], "input_tokens": 32, "output_tokens": 16}, arms=[
        {"name": "baseline", "serve": {"argv": [sys.executable, str(script), "{port}"],
                                       "ready_url": "http://127.0.0.1:{port}/health", "start_timeout_s": 60}}]))
    outcome = run_arm(study, study.arms[0], 0, tmp_path / "out", log=lambda s: None)
    assert outcome.status == "failed"
    assert "the server died mid-arm (status 9)" in outcome.error
    assert "simulated crash after" in outcome.log_tail
    # the incomplete run keeps what was measured, its notebook and the server log
    run = Path(outcome.run_dir)
    assert json.loads((run / "meta.json").read_text())["complete"] is False
    assert (run / "sweep.ipynb").is_file() and "simulated crash" in (run / "server.log").read_text()


def test_output_agreement_flags_a_server_that_changes_outputs(tmp_path: Path, refserver, refserver_mtp,  # noqa: ANN001
                                                              refserver_factory) -> None:  # noqa: ANN001
    from specsweep.analyze.agreement import agreement_markdown, output_agreement
    from specsweep.measure.sweep import run_sweep

    # a speculative server that stops at its own EOS despite ignore_eos returns other text
    diverging = refserver_factory("mtp", ["--disregard-ignore-eos"])
    common = dict(concurrency=[1, 2], input_tokens=32, output_tokens=64, out_dir=str(tmp_path))
    sets = [load_result_set(run_sweep(dict(endpoint=url, arm=arm, **common), progress=False, log=lambda s: None).run_dir)
            for arm, url in (("baseline", refserver.url), ("mtp", refserver_mtp.url), ("mtp-diverging", diverging.url))]
    table = output_agreement(sets, "baseline")
    mtp = table[table["arm"] == "mtp"]
    assert mtp["concurrency"].tolist() == [1, 2] and (mtp["pairs"] == 4).all()
    assert (mtp["identical"] == mtp["pairs"]).all() and not mtp["flagged"].any()
    bad = table[table["arm"] == "mtp-diverging"]
    assert bad["flagged"].all() and (bad["identical_pct"] < 100).all()
    text = agreement_markdown(table)
    assert "*mtp*: identical to the baseline on all 8 paired prompts" in text
    assert "⚠ *mtp-diverging*: outputs differ from the baseline at temperature 0" in text
    # where they differ: the diverging server stops early, so its output is a prefix of the
    # baseline's and the first difference is where it ends — recomputed here from the stored heads
    req = {rs.arm: rs.requests for rs in sets}
    pairs = req["mtp-diverging"].merge(req["baseline"], on=["repeat", "prompt_id"], suffixes=("", "_b"))
    pairs = pairs[~pairs["warmup"] & (pairs["output_digest"] != pairs["output_digest_b"])]
    assert len(pairs) and (pairs["output_tokens"] < pairs["output_tokens_b"]).all()
    short = pairs[pairs["output_head"].str.len() < 200]
    assert len(short)
    for r in short.itertuples():  # a prefix of the baseline's text, ending inside the head
        assert r.output_head_b.startswith(r.output_head)
    for c, part in pairs.groupby("concurrency"):
        expected = part["output_head"].str.len().median() if (part["output_head"].str.len() < 200).all() else None
        got = bad.set_index("concurrency").loc[c, "first_diff_median_chars"]
        assert got >= 0 and (expected is None or got == expected)
    assert "Median position of the first difference" in text


def _start_ray(ray: Any) -> None:
    """A local Ray node for the test (2 CPUs, 2 fake GPUs), started again once if it timed out:
    Ray waits a fixed time for its raylet to register, which a small machine running the rest of
    the suite beside it can exceed ("The current node timed out during startup")."""
    kwargs = dict(num_cpus=2, resources={"fake_gpu": 2}, include_dashboard=False, log_to_driver=False)
    try:
        ray.init(**kwargs)
    except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this
        if "timed out during startup" not in str(exc):
            raise
        ray.shutdown()
        ray.init(**kwargs)


@pytest.mark.slow
def test_the_ray_backend_runs_arms_as_tasks_with_their_resources(tmp_path: Path) -> None:
    ray = require_extra("ray", "ray")
    # the baseline's first attempt kills the Ray worker running it (a lost node); the retry serves.
    # The server's parent is the study's server guard (specsweep.study.guard); the worker is the guard's parent.
    marker = tmp_path / "first-attempt-happened"
    flaky = FLAKY_SERVER
    doc = yaml.safe_load(study_text())
    doc["ray"] = {"max_retries": 1}
    doc["arms"] = [{"name": "baseline", "resources": {"fake_gpu": 1}, "serve": {
                        "argv": [sys.executable, "-c", flaky, "{port}", str(marker)],
                        "ready_url": "http://127.0.0.1:{port}/health", "start_timeout_s": 60}},
                   {"name": "mtp", "resources": {"fake_gpu": 1},
                    "embedded": {"profile": "tiny", "spec": "mtp"}}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    _start_ray(ray)
    try:
        result = run_study(load_study(path), out_dir=tmp_path / "out", backend="ray", report=False, log=lambda s: None)
    finally:
        ray.shutdown()
    assert [(o.arm, o.status) for o in result.outcomes] == [("baseline", "complete"), ("mtp", "complete")]
    assert marker.exists()  # the first attempt did run and was lost
    for outcome in result.outcomes:
        run = Path(outcome.run_dir)
        assert run.is_relative_to(tmp_path / "out") and (run / "sweep.ipynb").is_file()
        assert json.loads((run / "meta.json").read_text())["complete"]
    assert (Path(result.outcomes[0].run_dir) / "server.log").is_file()
    assert sorted(p.name for p in result.result_sets) == ["baseline", "mtp"]
    assert load_result_set(tmp_path / "out" / "mtp").meta.server["speculative_algorithm"]


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "data" / "studies").rglob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_study_file_validates(path: Path) -> None:
    study = load_study(path)
    assert study.baseline in {a.name for a in study.arms} and len(study.arms) >= 2
    assert study.dry_run(Path("out"), Path("reports")).count(" repeat ") >= len(study.arms)


def test_fresh_starts_over_and_a_study_without_its_baseline_builds_no_report(tmp_path: Path) -> None:
    study = parse_study(study_text(arms=[{"name": "baseline", "serve": {
        "argv": [sys.executable, "-c", "print('no model here'); raise SystemExit(2)"],
        "ready_url": "http://127.0.0.1:{port}/health"}}]))
    logged: list[str] = []
    first = run_study(study, out_dir=tmp_path, report_dir=tmp_path / "reports", log=logged.append)
    assert [o.status for o in first.outcomes] == ["failed"] and first.report is None and first.missing == ["baseline"]
    assert "no report: the baseline arm 'baseline' has no complete run" in logged
    old_logs = list((tmp_path / "_runs").rglob("server-*.log"))
    assert len(old_logs) == 1 and "no model here" in old_logs[0].read_text()
    with pytest.raises(StudyError, match="fresh and resume contradict"):
        run_study(study, out_dir=tmp_path, fresh=True, resume=True, log=logged.append)
    stale = tmp_path / "_runs" / "baseline" / "r0" / "stale.txt"
    stale.write_text("left by the first run")
    again = run_study(study, out_dir=tmp_path, fresh=True, report=False, log=logged.append)
    assert len(again.outcomes) == 1 and not stale.exists()
    assert len(json.loads((tmp_path / "study.json").read_text())["outcomes"]) == 1
    assert not (tmp_path / "reports").exists()


def _capped(arm: str, cap: int | None, rows: list[tuple[int, float, int]], pool: int = 63_376) -> ResultSet:
    levels = pd.DataFrame([{"concurrency": c, "repeat": 0, "output_tok_s": tok, "server_running_max": ran}
                           for c, tok, ran in rows])
    server = {"name": "sglang", "max_running_requests": cap, "max_total_num_tokens": pool,
              "speculative_algorithm": "NEXTN" if cap else None}
    return ResultSet(path=Path(arm), levels=levels, meta=Meta.model_validate(base_meta(
        arm, run_id=arm, server=server, workload={"input_tokens": 1300, "output_tokens": 256},
        study={"name": "s", "repeats": 1, "order": "o", "notes": "**Workload.** reduced."})))


def test_cap_markdown_says_what_held_each_arm_and_what_raising_the_cap_did() -> None:
    from specsweep.study.runner import cap_markdown

    base = _capped("baseline", None, [(32, 900.0, 32), (64, 1200.0, 64), (128, 1450.0, 128)], pool=212_718)
    mtp = _capped("mtp", 48, [(32, 1060.0, 32), (64, 1080.0, 40), (128, 1100.0, 40)])
    cap128 = _capped("mtp-cap128", 128, [(32, 1050.0, 32), (64, 1090.0, 40), (128, 1111.0, 40)])
    text = cap_markdown([base, mtp, cap128])
    assert "baseline" not in text  # no cap reported, nothing held it
    assert ("*mtp*: at C=64, C=128 the server ran at most 40 requests at once (its running-requests gauge), "
            "below its cap of 48: its KV pool of 63,376 tokens holds about 40 requests of 1,556 tokens") in text
    assert "*mtp-cap128*: at C=64, C=128 the server ran at most 40 requests at once" in text
    assert ("Raising the cap from 48 (*mtp*) to 128 (*mtp-cap128*) changed aggregate tok/s by "
            "+0.9 % at C=64 (ran ≤ 40 vs ≤ 40), +1.0 % at C=128 (ran ≤ 40 vs ≤ 40). The higher cap let no more "
            "requests run at once, so here it cannot recover throughput.") in text
    # a cap that binds is named as such; arms whose servers differ in more than the cap are not paired
    bound = _capped("mtp", 48, [(64, 1080.0, 48)])
    other = _capped("eagle", 128, [(64, 1500.0, 64)], pool=50_000)
    text = cap_markdown([bound, other])
    assert "*mtp*: at C=64 the server ran at most 48 requests at once — its cap of 48 binds." in text
    assert "Raising the cap" not in text
    # a gauge that read 0 all level (it missed a short level) is not taken as "held below the offer"
    missed = _capped("mtp", 48, [(32, 1500.0, 0), (64, 1080.0, 48)])
    assert "*mtp*: at C=64 the server ran at most 48 requests at once — its cap of 48 binds." in cap_markdown([missed])
    assert cap_markdown([base]) == ""
    freed = _capped("mtp-cap128", 128, [(64, 1300.0, 64)])  # a pool big enough: the higher cap does let more run
    text = cap_markdown([_capped("mtp", 48, [(64, 1080.0, 48)]), freed])
    assert "+20.4 % at C=64 (ran ≤ 64 vs ≤ 48)." in text and "cannot recover" not in text
    # the study section carries the study's notes and the cap paragraph
    shown = study_markdown([base, mtp, cap128])
    assert "**Workload.** reduced." in shown and "**Running-request caps**" in shown
