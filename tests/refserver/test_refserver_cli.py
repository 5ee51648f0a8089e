"""The command line: errors exit 2 with a message, signals exit 0, the ready line, RefServer."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from specsweep.refserver import READY_PREFIX
from specsweep.refserver.cli import main
from specsweep.refserver.launch import RefServer, RefServerError


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specsweep.refserver", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, message", [
    (["--profile", "nope"], "unknown profile 'nope'; valid profiles: qwen3.5-122b-a10b-4x-rtxpro6000, tiny"),
    (["--profile", ""], "--profile: give a profile name or file; valid profiles:"),
    (["--profile", "tiny", "--bogus"], "unrecognized arguments: --bogus"),
    (["--profile", "tiny", "--spec", "eagle"], "invalid choice: 'eagle'"),
    (["--profile", "tiny", "--set", "decode.nope=3"], "unknown key 'decode.nope'"),
    (["--profile", "tiny", "--set", "decode.fixed_ms=-3"], "decode.fixed_ms"),
    (["--profile", "tiny", "--fault-error-rate", "2"], "must be a fraction within [0, 1]"),
    (["--profile", "tiny", "--max-running-requests", "0"], "must be >= 1"),
    (["--profile", "tiny", "--port", "70000"], "must be within 0..65535"),
])
def test_bad_arguments_exit_2_with_a_message(args: list[str], message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    out = capsys.readouterr()
    assert message in out.err
    assert out.out == ""


def test_bad_profile_exits_2_as_a_process() -> None:
    proc = _run("--profile", "nope")
    assert proc.returncode == 2
    assert "unknown profile 'nope'; valid profiles:" in proc.stderr and proc.stdout == ""


def test_help_and_list_and_describe(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ("--profile", "--spec", "--max-running-requests", "--set", "--fault-drop-rate",
                 "--fault-omit-usage", "--health-delay-s", "--disregard-ignore-eos", "--seed",
                 "--fault-stall-s", "--fault-malformed-rate", "--fault-error-rate"):
        assert flag in help_text
    assert main(["--list-profiles"]) == 0
    assert capsys.readouterr().out.split() == ["qwen3.5-122b-a10b-4x-rtxpro6000", "tiny"]
    assert main(["--profile", "tiny", "--spec", "mtp", "--describe"]) == 0
    assert '"max_running_requests": 48' in capsys.readouterr().out


@contextlib.contextmanager
def _script_server() -> Iterator[subprocess.Popen[str]]:
    """``python -m specsweep.refserver --profile tiny --port 0`` in its own session, killed if a test
    leaves it running."""
    proc = subprocess.Popen([sys.executable, "-m", "specsweep.refserver", "--profile", "tiny", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ready_line_and_clean_exit_on_signal(sig: signal.Signals) -> None:
    with _script_server() as proc:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith(READY_PREFIX + "http://127.0.0.1:"), line
        url = line[len(READY_PREFIX):].strip()
        assert httpx.get(url + "/ready").status_code == 200
        os.kill(proc.pid, sig)
        assert proc.wait(timeout=15) == 0
        assert "Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sent_the_moment_the_ready_line_is_read_still_stops_cleanly(sig: signal.Signals) -> None:
    """The signal handlers are in place before the ready line is printed: a launcher that stops the
    server as soon as it has read that line gets status 0, never the default action (killed)."""
    for _ in range(3):
        with _script_server() as proc:
            assert proc.stdout.readline().startswith(READY_PREFIX)  # type: ignore[union-attr]
            os.kill(proc.pid, sig)
            assert proc.wait(timeout=15) == 0


def test_clean_exit_with_an_open_stream() -> None:
    srv = RefServer("tiny", "off")
    srv.start()
    with httpx.Client(timeout=10) as client:
        with client.stream("POST", srv.url + "/generate", json={
                "text": "x", "stream": True,
                "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True}}) as resp:
            next(resp.iter_lines())
            assert srv.stop() == 0


def test_refserver_raises_with_stderr_when_the_server_dies() -> None:
    with pytest.raises(RefServerError) as info:
        RefServer("no-such-profile").start()
    assert "exited with status 2" in str(info.value)
    assert "unknown profile" in info.value.stderr


def test_refserver_context_manager() -> None:
    with RefServer("tiny", "mtp", ["--seed", "5"]) as srv:
        assert srv.url and srv.url.startswith("http://127.0.0.1:") and srv.port > 0
        assert httpx.get(srv.url + "/server_info").json()["random_seed"] == 5
    assert srv.returncode == 0 and srv.process is None


def test_aiohttp_loads_without_the_ca_store_and_the_environment_is_restored() -> None:
    """The server imports aiohttp with OpenSSL's CA file and folder pointing at nothing (its default
    client contexts, which it never uses, then load no certificates), and restores both variables."""
    code = r"""
import json, os, sys
os.environ["SSL_CERT_DIR"] = "/custom/dir"
os.environ.pop("SSL_CERT_FILE", None)
from specsweep.refserver.cli import _no_client_ca_store
with _no_client_ca_store():
    seen = os.environ["SSL_CERT_FILE"], os.environ["SSL_CERT_DIR"]
    import aiohttp.connector as c
after = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
with _no_client_ca_store():  # aiohttp loaded: nothing changes
    again = os.environ.get("SSL_CERT_FILE")
print(json.dumps({"seen": seen, "after": after, "again": again,
                  "ca_loaded": c._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"]}))
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"seen": [os.devnull, os.devnull], "after": [None, "/custom/dir"], "again": None, "ca_loaded": 0}
