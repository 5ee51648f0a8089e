"""Hardening of the data path: counts checked for plausibility, a failing cache
flush told from a missing one, a server that changes how it counts after the preflight, impossible
values in result sets, prompt files that escape validation. Real reference servers on 127.0.0.1,
with the data faults of ``specsweep.refserver.faults.DataFaults``."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsweep.analyze.metrics import requests_frame
from specsweep.measure.client import MAX_COUNT, RawExchange, parse_exchange
from specsweep.measure.probe import TokenCounter, try_flush_prefix_cache
from specsweep.measure.sweep import run_sweep
from specsweep.results.store import load_result_set

pytestmark = pytest.mark.usefixtures("chart_defaults")  # charts as the notebooks draw them


def small(tmp_path: Path, url: str, **kw) -> dict:
    return {"endpoint": url, "concurrency": [2], "input_tokens": 32, "output_tokens": 40, "workload": "random-ids",
            "out_dir": str(tmp_path), "metrics_interval_s": 0.05, "requests_per_level": 8, **kw}


def _event(count: object, text: str = "a") -> bytes:
    return (b'data: {"choices":[{"text":"%s","index":0,"finish_reason":null}],'
            b'"usage":{"prompt_tokens":3,"completion_tokens":%s,"total_tokens":5}}\n\n' % (text.encode(), str(count).encode()))


# ------------------------------------------------------------- 2: a count beyond int32 is one error row


@pytest.mark.parametrize("count", [2**31, 4294967295, 10**15, 10**19, 10**40])
@pytest.mark.parametrize("flavour", ["openai-completions", "sglang"])
def test_a_count_beyond_int32_is_that_requests_error_row(count: int, flavour: str) -> None:
    if flavour == "sglang":
        body = b"".join(b'data: {"text":"%s","meta_info":{"prompt_tokens":3,"completion_tokens":%d}}\n\n'
                        % (b"a" * (k + 1), c) for k, c in enumerate([1, 2, count])) + b"data: [DONE]\n\n"
    else:
        body = _event(1) + _event(2) + _event(count) + b"data: [DONE]\n\n"
    raw = RawExchange(t_sent=0.0, t_end=1.0, http_status=200, content_type="text/event-stream",
                      reads=[body], times=[0.5])
    rec = parse_exchange(flavour, raw)  # never raises
    claimed = f"{count:,}" if count < 2**64 else f"{float(count):g}"  # JSON reads 1e40 as a float
    assert rec.error is not None and "implausible token count" in rec.error and claimed in rec.error
    assert not rec.ok
    frame = requests_frame([rec], t0=0.0, run_id="r", arm="a", concurrency=1, repeat=0)
    assert frame["output_tokens"].iloc[0] <= MAX_COUNT


def test_a_prompt_count_beyond_int32_is_an_error_too() -> None:
    body = (b'data: {"choices":[{"text":"a","index":0,"finish_reason":null}],'
            b'"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":5}}\n\n' % 10**19) + b"data: [DONE]\n\n"
    rec = parse_exchange("openai-completions", RawExchange(0.0, 1.0, 200, "text/event-stream", [body], [0.5]))
    assert rec.error is not None and "prompt token count" in rec.error and rec.prompt_tokens is None
    requests_frame([rec], t0=0.0, run_id="r", arm="a", concurrency=1, repeat=0)


@pytest.mark.parametrize("value", ["4294967295", "10000000000000000000"])
def test_a_server_claiming_a_count_beyond_int32_does_not_stop_the_sweep(tmp_path: Path, refserver_factory,
                                                                       value: str) -> None:
    srv = refserver_factory(args=["--fault-count-value", value, "--fault-count-rate", "0.3", "--seed", "2"])
    lines: list[str] = []
    res = run_sweep(small(tmp_path, srv.url, requests_per_level=20), progress=False, log=lines.append)
    rs = load_result_set(res.run_dir)
    assert res.meta.complete and len(rs.requests) == 20
    bad = rs.requests["error"].fillna("").str.contains("implausible token count")
    assert 0 < bad.sum() < 20 and rs.requests.loc[~bad, "error"].isna().all()  # only those requests failed
    assert rs.levels["n_ok"].iloc[0] == 20 - bad.sum()
    assert rs.requests.loc[~bad, "output_tokens"].eq(40).all()


# ------------------------------------------------ 3: impossible counts refused with request and reason


def test_a_server_that_over_counts_gets_its_requests_refused(tmp_path: Path, refserver_factory) -> None:
    srv = refserver_factory(args=["--fault-count-scale", "100"])
    lines: list[str] = []
    res = run_sweep(small(tmp_path, srv.url), progress=False, log=lines.append)
    rs = load_result_set(res.run_dir)
    errors = rs.requests["error"]
    assert errors.notna().all()
    assert errors.str.contains("claims 4,000 completion tokens .* at most 40", regex=True).all()
    level = rs.levels.iloc[0]
    assert level["implausible_counts"] == 8 and level["output_tok_s"] == 0
    assert any("impossible token count" in w for w in res.meta.warnings)
    assert any("impossible token count" in n for n in rs.notes)  # what the report's notes say


def test_an_honest_server_has_no_count_refused(tmp_path: Path, refserver) -> None:
    res = run_sweep(small(tmp_path, refserver.url), progress=False, log=lambda _: None)
    rs = load_result_set(res.run_dir)
    assert rs.requests["error"].isna().all() and rs.levels["implausible_counts"].iloc[0] == 0
    assert not any("impossible" in n for n in rs.notes)


def test_tokenize_claiming_two_million_tokens_for_a_short_text_is_not_believed(tmp_path: Path,
                                                                                refserver_factory) -> None:
    srv = refserver_factory(args=["--fault-omit-usage", "--fault-tokenize-tokens", "2000000"])
    counter = TokenCounter(srv.url, "sglang", None)
    try:
        assert counter.count("a short text") is None
        assert "2,000,000 tokens" in (counter.why or "")
    finally:
        counter.close()
    res = run_sweep(small(tmp_path, srv.url), progress=False, log=lambda _: None)
    rs = load_result_set(res.run_dir)
    assert set(rs.requests["token_source"]) == {"chunks"}  # counted from chunks, never 2 M a request
    assert rs.requests["output_tokens"].max() <= 40
    assert any("2,000,000 tokens" in w for w in res.meta.warnings)


def test_an_honest_tokenize_is_used(tmp_path: Path, refserver_factory) -> None:
    srv = refserver_factory(args=["--fault-omit-usage"])
    res = run_sweep(small(tmp_path, srv.url), progress=False, log=lambda _: None)
    rs = load_result_set(res.run_dir)
    assert set(rs.requests["token_source"]) == {"tokenize"}


# ---------------------------------------------- 5: a failing flush is not "the server offers no route"


@pytest.mark.parametrize("fault", ["500", "reset"])
def test_a_failing_flush_is_told_from_a_missing_route(tmp_path: Path, refserver_factory, fault: str) -> None:
    srv = refserver_factory(args=["--fault-flush", fault])
    outcome = try_flush_prefix_cache(srv.url)
    assert outcome.route is None and outcome.failure and "/flush_cache" in outcome.failure
    assert outcome.describe.startswith("failed:")
    lines: list[str] = []
    res = run_sweep(small(tmp_path, srv.url, flush_cache=True), progress=False, log=lines.append)
    # SGLang takes a per-request cache_salt: the levels stay cold by salt, and every record says the
    # cache was not emptied and why (the route failed), never "emptied" and never "no route"
    assert res.meta.prefix_cache_flush.startswith("cache_salt per level (not emptied:")
    assert "/flush_cache" in res.meta.prefix_cache_flush and "no route" not in res.meta.prefix_cache_flush
    assert any("could not be emptied" in line and "/flush_cache" in line for line in lines)
    rs = load_result_set(res.run_dir)
    assert all("not emptied" in v and "/flush_cache" in v for v in rs.levels["prefix_cache_flush"])


def test_a_hanging_flush_is_a_failure(refserver_factory) -> None:
    srv = refserver_factory(args=["--fault-flush", "hang"])
    outcome = try_flush_prefix_cache(srv.url, timeout_s=0.5)
    assert outcome.route is None and "no answer within 0.5 s" in (outcome.failure or "")


def test_no_route_is_no_failure(tmp_path: Path, refserver, refserver_factory) -> None:
    assert try_flush_prefix_cache(refserver.url).route == "/flush_cache"
    outcome = try_flush_prefix_cache(refserver_factory(args=["--api-surface", "llamacpp"]).url)
    assert outcome.route is None and outcome.failure is None
    assert outcome.describe == "none: the server offers no route"
    res = run_sweep(small(tmp_path, refserver.url, flush_cache=True), progress=False, log=lambda _: None)
    rs = load_result_set(res.run_dir)
    assert rs.levels["prefix_cache_flush"].iloc[0] == "/flush_cache" and not res.meta.prefix_cache_flush_failed
    assert not any("warm cache" in n for n in rs.notes)


# -------------------------------------- 11: counts that turn non-integer after the preflight are warned


def test_counts_that_turn_non_integer_after_the_preflight_are_warned_at_once(tmp_path: Path,
                                                                            refserver_factory) -> None:
    srv = refserver_factory(args=["--fault-noninteger-counts-after", "1"])
    lines: list[str] = []
    res = run_sweep(small(tmp_path, srv.url, concurrency=[1, 2], requests_per_level=4), progress=False,
                    log=lines.append)
    meta = json.loads((res.run_dir / "meta.json").read_text())
    assert meta["preflight_token_source"] == "usage"
    changes = meta["count_changes"]
    assert [c["level"] for c in changes] == [[1, 0], [2, 0]]  # one record per level, as each was saved
    assert changes[0]["requests"] == 4 and set(changes[0]["token_sources"]) <= {"chunks", "tokenize"}
    warned = [line for line in lines if "changed how it counts after the preflight" in line]
    assert len(warned) == 2 and warned[0].startswith("⚠ C=1 repeat 0")
    assert any("changed how it counts after the preflight" in w for w in meta["warnings"])


def test_a_server_counting_alike_throughout_is_not_warned(tmp_path: Path, refserver) -> None:
    res = run_sweep(small(tmp_path, refserver.url), progress=False, log=lambda _: None)
    assert not res.meta.count_changes and res.meta.preflight_token_source == "usage"


# ------------------------------------------------- 10: impossible values in a result set, on load


LEVELS = {1: dict(tokens=50, step_s=0.01, ttft_s=0.05), 4: dict(tokens=50, step_s=0.012, ttft_s=0.06),
          8: dict(tokens=50, step_s=0.015, ttft_s=0.08)}


def _two_arms(tmp_path: Path) -> tuple[Path, Path]:
    from helpers import write_measured

    base = write_measured(tmp_path / "base", "baseline", LEVELS)
    mtp = write_measured(tmp_path / "mtp", "mtp", {c: {**k, "step_s": k["step_s"] / 2} for c, k in LEVELS.items()})
    return base, mtp


def _poke(folder: Path, stem: str, row: int, column: str, value: float) -> None:
    frame = pd.read_parquet(folder / f"{stem}.parquet")
    frame[column] = frame[column].astype(float)
    frame.loc[row, column] = value
    frame.to_parquet(folder / f"{stem}.parquet")


@pytest.mark.parametrize(("column", "value", "why"), [
    ("output_tok_s", float("nan"), "NaN"), ("output_tok_s", float("inf"), "infinite"),
    ("user_tok_s_mean", float("-inf"), "infinite"), ("ttft_p50_s", -0.5, "negative"),
    ("e2e_mean_s", -3.0, "negative"), ("output_tok_s", -100.0, "negative"),
    ("request_per_s", -1.0, "negative"), ("effective_concurrency", 1e308, "beyond"),
    ("output_tok_s", 1e300, "beyond"),
])
def test_impossible_level_values_are_dropped_with_file_column_and_row_named(tmp_path: Path, column: str,
                                                                            value: float, why: str) -> None:
    from specsweep.analyze.compare import compare
    from specsweep.report import charts
    from specsweep.results.store import load_result_sets

    base, mtp = _two_arms(tmp_path)
    _poke(mtp, "levels", 1, column, value)
    rs = load_result_set(mtp)
    assert list(rs.levels["concurrency"]) == [1, 8]  # the level of row 1 (C=4) is gone ...
    assert set(rs.requests["concurrency"]) == {1, 8}  # ... with its requests
    note = next(n for n in rs.notes if "impossible values dropped" in n)
    assert str(mtp / "levels.parquet") in note and f"column '{column}'" in note and "row 1 (concurrency 4" in note
    assert why in note
    comp = compare(load_result_sets([base, mtp]), baseline="baseline")
    assert any("impossible values dropped" in n for n in comp.notes)  # what the report shows on the page
    charts.pareto_chart(comp).to_json()  # no crash
    assert np.isfinite(comp.pareto["output_tok_s"]).all()


@pytest.mark.parametrize(("column", "value"), [("concurrency", 1e308), ("concurrency", -4), ("repeat", 1e12)])
def test_an_absurd_level_key_is_refused_naming_file_column_and_row(tmp_path: Path, column: str, value: float) -> None:
    from specsweep.results.store import SchemaError

    _, mtp = _two_arms(tmp_path)
    _poke(mtp, "levels", 2, column, value)
    with pytest.raises(SchemaError, match=rf"levels.parquet: column '{column}' must hold whole numbers in .*row 2"):
        load_result_set(mtp)


@pytest.mark.parametrize(("column", "value"), [("ttft_s", -0.01), ("e2e_s", -1.0), ("e2e_s", float("inf")),
                                               ("output_tokens", -5.0), ("output_tokens", 1e300)])
def test_impossible_request_values_are_dropped_and_said(tmp_path: Path, column: str, value: float) -> None:
    _, mtp = _two_arms(tmp_path)
    before = len(load_result_set(mtp).requests)
    _poke(mtp, "requests", 3, column, value)
    rs = load_result_set(mtp)
    assert len(rs.requests) == before - 1
    assert (rs.requests[column].dropna() >= 0).all()
    note = next(n for n in rs.notes if "impossible values dropped" in n)
    assert "requests.parquet" in note and f"column '{column}'" in note and "row 3" in note


def _poke_cell(folder: Path, stem: str, row: int, column: str, value: object) -> None:
    frame = pd.read_parquet(folder / f"{stem}.parquet")
    frame.at[row, column] = value
    frame.to_parquet(folder / f"{stem}.parquet")


@pytest.mark.parametrize(("column", "value", "why"), [
    ("tpot_s", float("inf"), "infinite"), ("user_tok_s", -5.0, "negative"), ("request_tok_s", 1e14, "beyond"),
    ("itl_p99_s", float("-inf"), "infinite"), ("chunk_gap_mean_s", 1e9, "beyond"),
    ("ttft_s", "tenfold", "exceeds 'e2e_s'"),
    ("chunk_t_s", np.array([np.nan, 0.5]), "chunk time"), ("chunk_t_s", np.array([0.1, np.inf]), "chunk time"),
    ("chunk_t_s", np.array([-1.0, 0.2]), "chunk time"),
])
def test_implausible_request_rows_are_dropped_and_said_on_the_page(tmp_path: Path, column: str, value: object,
                                                                   why: str) -> None:
    from specsweep.analyze.compare import compare
    from specsweep.report.setup_info import differences_markdown
    from specsweep.results.store import load_result_sets

    base, mtp = _two_arms(tmp_path)
    before = load_result_set(mtp).requests
    if isinstance(value, str):  # ten times the request's own e2e
        value = float(before["e2e_s"].iloc[3]) * 10
    _poke_cell(mtp, "requests", 3, column, value)
    rs = load_result_set(mtp)
    assert len(rs.requests) == len(before) - 1
    assert not rs.requests["request_index"].eq(before["request_index"].iloc[3]).all()
    note = next(n for n in rs.notes if "impossible values dropped" in n)
    assert "requests.parquet" in note and "row 3" in note and why in note and f"'{column}'" in note
    page = differences_markdown(compare(load_result_sets([base, mtp]), baseline="baseline"))
    assert "impossible values dropped" in page and "row 3" in page  # said on the page, in the setup's notes


@pytest.mark.parametrize(("column", "value", "why"), [
    ("ttft_p50_s", "50 x p99", "exceeds 'ttft_p90_s'"), ("tpot_p90_s", "10 x p99", "exceeds 'tpot_p99_s'"),
    ("e2e_p50_s", "3 x p99", "exceeds"), ("output_tok_s", 1e14, "beyond"), ("user_tok_s_mean", 1e10, "beyond"),
    ("ttft_mean_s", 1e9, "beyond"),  # below the bound of any metric (1e15), above those of rates and durations
])
def test_implausible_level_rows_are_dropped_and_said(tmp_path: Path, column: str, value: float | str,
                                                     why: str) -> None:
    _, mtp = _two_arms(tmp_path)
    levels = pd.read_parquet(mtp / "levels.parquet")
    if isinstance(value, str):  # a multiple of the same figure's p99
        value = float(value.split()[0]) * float(levels[column.rsplit("_p", 1)[0] + "_p99_s"].iloc[1])
    _poke(mtp, "levels", 1, column, value)
    rs = load_result_set(mtp)
    assert list(rs.levels["concurrency"]) == [1, 8] and set(rs.requests["concurrency"]) == {1, 8}
    note = next(n for n in rs.notes if "impossible values dropped" in n)
    assert "row 1 (concurrency 4" in note and why in note and f"'{column}'" in note


def test_percentiles_in_order_and_equal_times_are_kept(tmp_path: Path) -> None:
    # a request whose only chunk carried every token: ttft equals e2e; a level whose p50 equals its p99
    _, mtp = _two_arms(tmp_path)
    req = pd.read_parquet(mtp / "requests.parquet")
    _poke(mtp, "requests", 2, "ttft_s", float(req["e2e_s"].iloc[2]))
    _poke(mtp, "levels", 0, "ttft_p50_s", float(pd.read_parquet(mtp / "levels.parquet")["ttft_p99_s"].iloc[0]))
    _poke(mtp, "levels", 0, "ttft_p90_s", float(pd.read_parquet(mtp / "levels.parquet")["ttft_p99_s"].iloc[0]))
    rs = load_result_set(mtp)
    assert len(rs.levels) == 3 and not rs.notes


def test_a_clean_result_set_has_nothing_dropped(tmp_path: Path) -> None:
    _, mtp = _two_arms(tmp_path)
    rs = load_result_set(mtp)
    assert len(rs.levels) == 3 and not rs.notes


def test_a_level_without_successful_requests_is_kept(tmp_path: Path) -> None:
    # NaN latencies mean "not measured" (no successful request), not an impossible value
    _, mtp = _two_arms(tmp_path)
    _poke(mtp, "levels", 0, "ttft_p50_s", float("nan"))
    _poke(mtp, "levels", 0, "user_tok_s_mean", float("nan"))
    rs = load_result_set(mtp)
    assert len(rs.levels) == 3 and not rs.notes


# ---------------------------------------------------- 9: prompt files that escaped validation


@pytest.mark.parametrize(("name", "text"), [
    ("deep.jsonl", '{"prompt": "hi"}\n' + "[" * 20000 + "]" * 20000 + "\n"),
    ("deep-obj.jsonl", '{"prompt": "hi"}\n' + '{"a":' * 20000 + "1" + "}" * 20000 + "\n"),
    ("deep.json", '[{"prompt": "hi"},\n' + "[" * 20000 + "]" * 20000 + "]"),
    ("deep-lines.json", '{"prompt": "hi"}\n' + '{"a":' * 20000 + "1" + "}" * 20000 + "\n"),
])
def test_deeply_nested_json_is_an_error_naming_the_file_and_line(tmp_path: Path, name: str, text: str) -> None:
    from specsweep.workloads.datasets import DatasetError, load

    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DatasetError, match=r"nested too deeply") as err:
        load(path)
    assert f"{path}:2" in str(err.value)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_corrupt_parquet_prompt_file_is_an_error_naming_the_file(tmp_path: Path, damage: str) -> None:
    from specsweep.workloads.datasets import DatasetError, load

    path = tmp_path / "prompts.parquet"
    pd.DataFrame({"prompt": [f"question {i}" for i in range(50)]}).to_parquet(path)
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"PAR1" + b"\x00garbage" * 40,
                      "empty": b""}[damage])
    with pytest.raises(DatasetError, match=r"cannot be read as Parquet") as err:
        load(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("big", [2**31, 2**63, 2**64 + 5, 10**30])
def test_input_ids_beyond_any_vocabulary_fail_at_load(tmp_path: Path, big: int) -> None:
    from specsweep.workloads.datasets import DatasetError, load

    path = tmp_path / "ids.jsonl"
    path.write_text('{"input_ids": [1, 2, 3]}\n' + json.dumps({"input_ids": [5, big, 7]}) + "\n")
    with pytest.raises(DatasetError, match=rf"{path}:2: 'input_ids' holds {big}, above 2,147,483,647"):
        load(path)


def test_input_ids_beyond_int64_in_parquet_fail_at_load(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specsweep.workloads.datasets import DatasetError, load

    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2], [3, 2**64 - 1]], type=pa.list_(pa.uint64()))}), path)
    with pytest.raises(DatasetError, match=r"\(row 2\): 'input_ids' holds 18446744073709551615"):
        load(path)


def test_input_ids_of_a_real_vocabulary_still_load(tmp_path: Path) -> None:
    from specsweep.workloads.datasets import load

    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps({"input_ids": [0, 151_935, 2**31 - 1]}) + "\n")
    assert load(path).records[0].prompt == [0, 151_935, 2**31 - 1]


# ------------------------------------------- 4: an arm's own secrets are masked in every file of a study

ENV_CANARY = "canary-env-5f0c2e9d7b41"
ARGV_CANARY = "canary-argv-3a8e61c0d9f2"


def test_a_study_writes_an_arms_secrets_nowhere_when_its_server_quotes_them(tmp_path: Path) -> None:
    from helpers import run_canary_study

    result, out, reports = run_canary_study(
        tmp_path, ["--fault-error-rate", "0.4", "--seed", "5", "--fault-echo-env", "HF_TOKEN",
                   "--fault-echo-token", ARGV_CANARY], {"HF_TOKEN": ENV_CANARY}, requests=12)
    assert [o.status for o in result.outcomes] == ["complete", "complete"]
    run = Path(result.outcomes[0].run_dir)
    errors = load_result_set(run).requests["error"].dropna()
    assert len(errors) > 0  # the server did quote both secrets in its error bodies ...
    assert errors.str.contains(r"server token: \*\*\*\) \(api token: \*\*\*\)").all()
    files = [p for p in [*out.rglob("*"), *reports.rglob("*")] if p.is_file()]
    assert any(p.name == "requests.parquet" for p in files) and any(p.suffix == ".ipynb" for p in files)
    assert any(p.suffix == ".html" for p in files)  # the report too
    for p in files:  # ... and no file the study wrote holds either
        data = p.read_bytes()
        assert ENV_CANARY.encode() not in data and ARGV_CANARY.encode() not in data, p
    # the secrets travel to the sweep's kernel in its environment, never as a notebook parameter
    notebook = next(p for p in files if p.suffix == ".ipynb")
    assert "SPECSWEEP_REDACT" not in notebook.read_text()


def test_handed_secrets_are_masked_by_the_sweep_alone(tmp_path: Path, refserver_factory,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from specsweep.results.redact import REDACT_ENV

    monkeypatch.setenv(REDACT_ENV, json.dumps([ENV_CANARY, "short"]))
    monkeypatch.setenv("HF_TOKEN", ENV_CANARY)
    srv = refserver_factory(args=["--fault-error-rate", "0.4", "--seed", "5", "--fault-echo-env", "HF_TOKEN"])
    lines: list[str] = []
    res = run_sweep(small(tmp_path, srv.url, requests_per_level=12), progress=False, log=lines.append)
    errors = load_result_set(res.run_dir).requests["error"].dropna()
    assert len(errors) and errors.str.contains(r"server token: \*\*\*").all()
    for p in res.run_dir.rglob("*"):
        if p.is_file():
            assert ENV_CANARY.encode() not in p.read_bytes(), p
    assert not any(ENV_CANARY in line for line in lines)


# ---------------------------------------- 3: a count beyond the text that arrived is flagged, not refused


def test_a_count_beyond_the_text_received_is_flagged(tmp_path: Path, refserver_factory) -> None:
    # every request stops at 8 tokens of its own (EOS honoured) but is claimed as 800: under the cap of
    # 1,000 it asked for, so not impossible, but far more than its few dozen characters can hold
    srv = refserver_factory(args=["--disregard-ignore-eos", "--set", "engine.natural_length_min=8",
                                  "--set", "engine.natural_length_max=8", "--fault-count-scale", "100"])
    lines: list[str] = []
    res = run_sweep(small(tmp_path, srv.url, output_tokens=1000), progress=False, log=lines.append)
    rs = load_result_set(res.run_dir)
    assert rs.requests["error"].isna().all() and rs.requests["output_tokens"].eq(800).all()  # kept ...
    assert rs.levels["suspect_counts"].iloc[0] == 8  # ... and flagged
    assert any("more tokens than the text that arrived has bytes" in line for line in lines)
    assert any("suspect" in n for n in rs.notes)


def test_an_honest_count_is_not_flagged_for_its_text(tmp_path: Path, refserver) -> None:
    res = run_sweep(small(tmp_path, refserver.url), progress=False, log=lambda _: None)
    assert load_result_set(res.run_dir).levels["suspect_counts"].iloc[0] == 0
