"""Importers given hostile or foreign files: one named line and exit status 2 through the console
script (never a traceback), bounded reads, nothing stored that loading would drop, and a failed
import that leaves the result set it would replace whole.

Files are the real tools' fixtures (``tests/fixtures/importers``) with one field changed.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from specsweep.importers import BadInput, import_files
from specsweep.importers.common import STAGING
from specsweep.results.store import load_result_set

FIX = Path(__file__).parents[1] / "fixtures" / "importers"
VLLM_DETAILED = FIX / "vllm" / "baseline-c1.json.gz"


def _cli(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specsweep.cli", "import", *map(str, args)], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=300)


def _refused(proc: subprocess.CompletedProcess[str], pattern: str) -> str:
    """The one line of a refusal: exit status 2, no traceback, ``pattern`` in it."""
    import re

    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and len(err.splitlines()) == 1, proc.stderr[-2000:]
    assert re.search(pattern, err), err
    return err


def _vllm(**changes: object) -> dict:
    doc = json.loads(gzip.open(VLLM_DETAILED, "rt").read())
    return {**doc, **changes}


def _entry(doc: dict, key: str, i: int, value: object) -> dict:
    """``doc`` with ``doc[key][i]`` set to ``value``."""
    values = list(doc[key])
    values[i] = value
    return {**doc, key: values}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _held(out: Path) -> list[str]:
    """What an out folder holds besides the import's staging folder, and any staged set left in that."""
    staged = [f"{STAGING}/{p.name}" for p in (out / STAGING).glob("*") if not p.name.endswith(".lock")]
    return sorted([p.name for p in out.iterdir() if p.name != STAGING] + staged)


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


# ----------------------------------------------------------------- one named line, never a traceback


@pytest.mark.parametrize(("value", "shown"), [("1e300", r"1e\+300"), ("9" * 31, "a 31-digit"), ("9" * 401, "a 401-digit"),
                                              ("1e400", "Infinity"), ("2.5", "2.5")])
def test_an_absurd_concurrency_is_one_line_naming_the_field(tmp_path: Path, value: str, shown: str) -> None:
    text = json.dumps(_vllm(max_concurrency=0)).replace('"max_concurrency": 0', f'"max_concurrency": {value}')
    proc = _cli("vllm", _write(tmp_path / "c.json", text), "--arm", "x", "--out", tmp_path / "out")
    _refused(proc, rf"c\.json: 'max_concurrency' is {shown}.*from 1 to 1,000,000,000")


def test_brackets_nested_two_hundred_thousand_deep_are_one_line(tmp_path: Path) -> None:
    deep = _write(tmp_path / "deep.json", '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}")
    _refused(_cli("vllm", deep, "--arm", "x", "--out", tmp_path / "out"), r"deep\.json: nested too deeply")
    lines = _write(tmp_path / "deep.jsonl", json.dumps(_vllm()) + "\n" + "[" * 200_000 + "]" * 200_000 + "\n")
    _refused(_cli("sglang", lines, "--arm", "x", "--out", tmp_path / "out"), r"deep\.jsonl, line 2: nested too deeply")


def test_an_integer_longer_than_python_converts_is_one_line(tmp_path: Path) -> None:
    text = json.dumps(_vllm(completed=0)).replace('"completed": 0', '"completed": ' + "7" * 5000)
    _refused(_cli("vllm", _write(tmp_path / "long.json", text), "--arm", "x", "--out", tmp_path / "out"),
             r"long\.json: not a readable JSON value")


def test_a_figure_of_hundreds_of_digits_is_one_line(tmp_path: Path) -> None:
    line = (FIX / "sglang" / "baseline.jsonl").read_text().splitlines()[0]
    huge = line.replace('"output_throughput": ', '"output_throughput": ' + "9" * 401 + ", \"was\": ", 1)
    _refused(_cli("sglang", _write(tmp_path / "s.jsonl", huge), "--arm", "x", "--out", tmp_path / "out"),
             r"s\.jsonl, line 1: field 'output_throughput' holds a 401-digit number")
    doc = json.loads((FIX / "aiperf" / "mtp-c1" / "profile_export_aiperf.json").read_text())
    doc["output_token_throughput"]["avg"] = 0
    text = json.dumps(doc).replace('"avg": 0', '"avg": ' + "9" * 401, 1)
    _refused(_cli("aiperf", _write(tmp_path / "a.json", text), "--arm", "x", "--out", tmp_path / "out"),
             r"a\.json: field '\w+\.avg' holds a 401-digit number")


@pytest.mark.parametrize(("key", "value", "message"), [
    ("start_times", "x", r"request 3: the start time must be a number, found \"x\""),
    ("ttfts", {"a": 1}, r"request 3: the time to first token must be a number"),
    ("latencies", "slow", r"request 3: the latency must be a number"),
    ("input_lens", [1], r"request 3: the prompt token count must be a number"),
    ("output_lens", "12", r"output_lens\[3\] must be a number of tokens"),
    ("output_lens", 1e300, r"request 3: the output token count is 1e\+300"),
    ("itls", ["a"], r"itls\[3\] must be a list of non-negative seconds"),
])
def test_a_wrong_typed_per_request_value_is_one_line_naming_the_request(tmp_path: Path, key: str, value: object,
                                                                        message: str) -> None:
    path = _write(tmp_path / "typed.json", json.dumps(_entry(_vllm(), key, 3, value)))
    _refused(_cli("vllm", path, "--arm", "x", "--out", tmp_path / "out"), r"typed\.json.*" + message)


def test_wrong_typed_aiperf_and_guidellm_requests_are_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "aiperf"
    folder.mkdir()
    summary = FIX / "aiperf" / "baseline-c1" / "profile_export_aiperf.json"
    (folder / summary.name).write_bytes(summary.read_bytes())
    lines = gzip.open(FIX / "aiperf" / "baseline-c1" / "profile_export.jsonl.gz", "rt").read().splitlines()
    rec = json.loads(lines[2])
    rec["metrics"]["inter_chunk_latency"]["value"] = ["fast", 1]
    (folder / "profile_export.jsonl").write_text("\n".join([*lines[:2], json.dumps(rec), *lines[3:]]) + "\n")
    _refused(_cli("aiperf", folder / summary.name, "--arm", "x", "--out", tmp_path / "out"),
             r"profile_export\.jsonl, line 3 \(a request\): a chunk gap must be a number")
    doc = json.loads(gzip.open(FIX / "guidellm" / "baseline.json.gz", "rt").read())
    doc["benchmarks"][0]["requests"]["successful"][1]["info"]["timings"]["token_iterations"] = "many"
    _refused(_cli("guidellm", _write(tmp_path / "g.json", json.dumps(doc)), "--arm", "x", "--out", tmp_path / "out"),
             r"g\.json, benchmarks\[0\], requests\.successful\[1\]: info\.timings\.token_iterations must be a number")
    doc["benchmarks"][0]["config"]["strategy"] = "concurrent"  # a shape the reader never met
    _refused(_cli("guidellm", _write(tmp_path / "h.json", json.dumps(doc)), "--arm", "x", "--out", tmp_path / "out"),
             r"h\.json: not a guidellm result file specsweep can read \(AttributeError")


# ------------------------------------------------------------------------------------- size bounds


def test_a_gzip_bomb_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as handle:
        for _ in range(64):
            handle.write(b" " * (1 << 20))  # 64 MiB of blanks: a few hundred kB packed
    assert bomb.stat().st_size < 1 << 20
    err = _refused(_cli("vllm", bomb, "--arm", "x", "--out", tmp_path / "out", SPECSWEEP_IMPORT_MAX_BYTES="8000000"),
                   r"bomb\.json\.gz: holds more than 8,000,000 decompressed bytes")
    assert "SPECSWEEP_IMPORT_MAX_BYTES" in err
    # a file within the limit imports as before
    proc = _cli("vllm", VLLM_DETAILED, "--arm", "x", "--out", tmp_path / "out", SPECSWEEP_IMPORT_MAX_BYTES="8000000")
    assert proc.returncode == 0, proc.stderr


def test_a_limit_that_is_no_number_is_one_line(tmp_path: Path) -> None:
    _refused(_cli("vllm", VLLM_DETAILED, "--arm", "x", "--out", tmp_path, SPECSWEEP_IMPORT_MAX_BYTES="lots"),
             r"SPECSWEEP_IMPORT_MAX_BYTES='lots': give a whole number")


def test_a_table_of_more_rows_than_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    rows = "".join(f"{c},{100 + c}\n" for c in range(1, 62))
    table = _write(tmp_path / "t.csv", "concurrency,agg tok/s\n" + rows)
    err = _refused(_cli("table", table, "--arm", "x", "--output-tokens", "8", "--out", tmp_path / "out",
                        SPECSWEEP_IMPORT_MAX_LEVELS="60"), r"t\.csv: more than 60 levels")
    assert "SPECSWEEP_IMPORT_MAX_LEVELS" in err
    assert _cli("table", table, "--arm", "x", "--output-tokens", "8", "--out", tmp_path / "out",
                SPECSWEEP_IMPORT_MAX_LEVELS="61").returncode == 0


def test_json_lines_of_one_repeated_line_stop_at_the_limit(tmp_path: Path) -> None:
    line = (FIX / "vllm" / "baseline-summary.jsonl").read_text().splitlines()[0]
    many = _write(tmp_path / "many.jsonl", "\n".join([line] * 40) + "\n")
    _refused(_cli("vllm", many, "--arm", "x", "--out", tmp_path / "out", SPECSWEEP_IMPORT_MAX_LEVELS="30"),
             r"many\.jsonl: more than 30 levels")
    files = [_write(tmp_path / f"f{i}.jsonl", "\n".join([line] * 10) + "\n") for i in range(4)]
    _refused(_cli("vllm", *files, "--arm", "x", "--out", tmp_path / "out", SPECSWEEP_IMPORT_MAX_LEVELS="30"),
             r"f0\.jsonl.*more than 30 levels")  # all files of one import together


# ------------------------------------------------------------------------- one tool's file, one tool


@pytest.mark.parametrize(("tool", "path", "other"), [
    ("vllm", FIX / "sglang" / "baseline.jsonl", "sglang"),
    ("vllm", FIX / "sglang" / "mtp-oai.jsonl", "sglang"),
    ("sglang", FIX / "vllm" / "baseline-summary.jsonl", "vllm"),
    ("sglang", FIX / "vllm" / "documented-shape" / "baseline-c1.json", "vllm"),
])
def test_a_file_of_another_tool_is_refused_by_its_own_markers(tmp_path: Path, tool: str, path: Path,
                                                             other: str) -> None:
    _refused(_cli(tool, path, "--arm", "x", "--out", tmp_path, "--output-tokens", "8"),
             rf"a {other} result \(it holds .*\), not a {tool} one; import it with `specsweep import {other}`")
    assert not (tmp_path / "x").exists()


def test_a_vllm_file_naming_sglang_as_its_backend_is_still_vllms(tmp_path: Path) -> None:
    # vLLM's client can measure an SGLang server: the backend field names the server, not the tool
    path = _write(tmp_path / "v.json", json.dumps(_vllm(backend="sglang")))
    assert load_result_set(import_files("vllm", [path], "x", tmp_path / "out")).meta.source["tool"] == "vllm bench serve"


# ------------------------------------------------------------ nothing stored that loading would drop


def test_values_loading_would_drop_are_refused_at_import_naming_file_row_and_column(tmp_path: Path) -> None:
    out = tmp_path / "out"
    table = _write(tmp_path / "t.md", "| concurrency | agg tok/s |\n|---|---|\n| 1 | 100 |\n| 4 | " + "9" * 401 + " |\n")
    _refused(_cli("table", table, "--arm", "x", "--output-tokens", "8", "--out", out),
             r"t\.md, line 4: the level at concurrency 4: column 'output_tok_s' holds inf")
    twice = _write(tmp_path / "u.md", "| concurrency | agg tok/s |\n|---|---|\n| 1 | 100 |\n| 4 | 200 |\n| 1 | 101 |\n")
    _refused(_cli("table", twice, "--arm", "x", "--output-tokens", "8", "--out", out),
             r"u\.md, line 5: concurrency 1 again \(first at line 3\)")
    bench = (FIX / "llamacpp" / "baseline.jsonl").read_text().splitlines()
    tiny = _write(tmp_path / "l.jsonl", "\n".join([bench[0], json.dumps({**json.loads(bench[1]), "t_tg": 1e-320})]))
    _refused(_cli("llamacpp", tiny, "--arm", "x", "--out", out),
             r"l\.jsonl, line 2: the level at concurrency \d+: column '\w+' holds .* \((infinite|beyond)")
    early = _write(tmp_path / "n.json", json.dumps(_entry(_vllm(), "ttfts", 5, -0.5)))
    _refused(_cli("vllm", early, "--arm", "x", "--out", out),
             r"n\.json: request \d+ of the level at concurrency 1: column 'ttft_s' holds -0\.5 \(negative\)")
    slow = _write(tmp_path / "i.json", json.dumps(_entry(_vllm(), "itls", 2, [0.01, 1e308])))
    _refused(_cli("vllm", slow, "--arm", "x", "--out", out), r"i\.json, request 2: chunk gap 1 is 1e\+308")
    line = json.loads((FIX / "vllm" / "baseline-summary.jsonl").read_text().splitlines()[0])
    negative = _write(tmp_path / "s.jsonl", json.dumps({**line, "output_throughput": -5.0}))
    _refused(_cli("vllm", negative, "--arm", "x", "--out", out),
             r"s\.jsonl: the level at concurrency \d+: column '(output_tok_s|vllm_output_throughput)' holds -5\.0")
    detailed = _write(tmp_path / "d.json", json.dumps(_vllm(output_throughput=-5.0)))
    _refused(_cli("vllm", detailed, "--arm", "x", "--out", out), r"column 'vllm_output_throughput' holds -5\.0")
    assert not out.exists() or not any(out.iterdir())


def test_an_output_length_beyond_any_request_is_refused(tmp_path: Path) -> None:
    _refused(_cli("table", FIX / "table" / "seed.md", "--arm", "mtp", "--output-tokens", "9" * 23, "--out", tmp_path),
             r"seed\.md: 1e\+23 output tokens per request \(--output-tokens or the file\) is more than any request")


# --------------------------------------------------- a failed import leaves the old result set whole


def _aiperf_with_model(tmp_path: Path, model: object) -> Path:
    folder = tmp_path / "aiperf-bad"
    folder.mkdir(exist_ok=True)
    doc = json.loads((FIX / "aiperf" / "mtp-c1" / "profile_export_aiperf.json").read_text())
    doc["input_config"]["models"] = {"items": [{"name": model}]}
    return _write(folder / "profile_export_aiperf.json", json.dumps(doc))


def test_a_failed_import_over_an_imported_set_leaves_it_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = import_files("vllm", sorted((FIX / "vllm").glob("baseline-c*.json.gz")), "arm", out)
    before = _digests(first)
    assert "requests.parquet" in before
    bad = _aiperf_with_model(tmp_path, {"name": "an object, not a name"})
    _refused(_cli("aiperf", bad, "--arm", "arm", "--out", out, "--force"), r"profile_export_aiperf\.json: the imported metadata is invalid: field 'model'")
    assert _digests(first) == before  # meta.json, levels and requests all as they were
    rs = load_result_set(first)
    assert sorted(rs.levels["concurrency"]) == [1, 8, 64] and rs.requests is not None
    assert _held(out) == ["arm"]  # no staged set left behind


def test_a_write_that_fails_midway_leaves_the_old_set_whole(tmp_path: Path) -> None:
    """A real fault while the new files are written (the file-size limit of the importing process,
    as a full disk would): the level-only set already there stays whole and loads."""
    import resource

    out = tmp_path / "out"
    first = import_files("vllm", [FIX / "vllm" / "baseline-summary.jsonl"], "arm", out)
    before = _digests(first)

    def small_files() -> None:  # Python ignores SIGXFSZ, so a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))

    proc = subprocess.run([sys.executable, "-m", "specsweep.cli", "import", "vllm", *map(str, sorted(
        (FIX / "vllm").glob("baseline-c*.json.gz"))), "--arm", "arm", "--out", str(out), "--force"],
        capture_output=True, text=True, preexec_fn=small_files, timeout=300)
    assert proc.returncode != 0 and "File too large" in proc.stderr
    assert _digests(first) == before
    assert load_result_set(first).meta.level_only
    assert _held(out) == ["arm"]


def test_an_import_of_an_arm_another_import_is_writing_is_refused_naming_it(tmp_path: Path) -> None:
    from specsweep.results.store import exclusive_lock

    out = tmp_path / "out"
    (out / STAGING).mkdir(parents=True)
    with exclusive_lock(out / STAGING / "arm.lock", RuntimeError):  # as a second import holds it
        proc = _cli("vllm", FIX / "vllm" / "baseline-summary.jsonl", "--arm", "arm", "--out", out)
    assert proc.returncode == 1 and "another import is writing this arm (pid " in proc.stderr
    assert not (out / "arm").exists()


def test_a_set_staged_by_a_killed_import_is_cleared_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "out"
    killed = out / STAGING / "arm~dead"
    killed.mkdir(parents=True)
    (killed / "meta.json").write_text("{}")
    import_files("vllm", [FIX / "vllm" / "baseline-summary.jsonl"], "arm", out)
    assert _held(out) == ["arm"]


def test_a_forced_import_replaces_the_whole_imported_set(tmp_path: Path) -> None:
    out = tmp_path / "out"
    import_files("vllm", sorted((FIX / "vllm").glob("baseline-c*.json.gz")), "arm", out)
    again = import_files("vllm", [FIX / "vllm" / "baseline-summary.jsonl"], "arm", out, force=True)
    rs = load_result_set(again)
    assert rs.meta.level_only and rs.requests is None and not (again / "requests.parquet").exists()
    assert _held(out) == ["arm"]


@pytest.mark.parametrize("force", [False, True])
def test_a_folder_with_data_but_no_meta_json_is_never_replaced(tmp_path: Path, force: bool) -> None:
    out = tmp_path / "out"
    died = out / "arm"  # a sweep that died before it wrote meta.json
    died.mkdir(parents=True)
    pd.DataFrame({"concurrency": [1], "repeat": [0], "output_tok_s": [10.0]}).to_parquet(died / "levels.parquet")
    pd.DataFrame({"t_s": [0.0], "name": ["x"], "value": [1.0]}).to_parquet(died / "server_metrics.parquet")
    before = _digests(died)
    args = ["--force"] if force else []
    err = _refused(_cli("vllm", FIX / "vllm" / "baseline-summary.jsonl", "--arm", "arm", "--out", out, *args),
                   r"out/arm: holds levels\.parquet, server_metrics\.parquet but no meta\.json")
    assert "--force never replaces it" in err
    assert _digests(died) == before


def test_an_empty_folder_is_free(tmp_path: Path) -> None:
    (tmp_path / "arm").mkdir()
    assert load_result_set(import_files("vllm", [FIX / "vllm" / "baseline-summary.jsonl"], "arm", tmp_path)).levels.size


def test_an_import_that_fails_before_writing_leaves_no_trace(tmp_path: Path) -> None:
    with pytest.raises(BadInput):
        import_files("aiperf", [_aiperf_with_model(tmp_path, ["a", "list"])], "arm", tmp_path / "out")
    assert not (tmp_path / "out" / "arm").exists()


# ------------------------------------------------------------------ damage anywhere: one named line

_DAMAGE = ["x", None, -1, -1e-9, 0, 1e308, 10**40, [], {}, [1, "a"], {"a": 1}, True, 1e-320]


def _fields(obj: object, at: tuple = ()) -> list[tuple]:
    """Paths to every field of ``obj`` (first, middle and last item of each list)."""
    out = [at] if at else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _fields(v, (*at, k))
    elif isinstance(obj, list) and obj:
        for i in sorted({0, len(obj) // 2, len(obj) - 1}):
            out += _fields(obj[i], (*at, i))
    return out


@pytest.mark.parametrize(("tool", "source"), [
    ("vllm", FIX / "vllm" / "baseline-c1.json.gz"), ("vllm", FIX / "vllm" / "baseline-summary.jsonl"),
    ("sglang", FIX / "sglang" / "mtp-oai.jsonl"), ("guidellm", FIX / "guidellm" / "baseline.json.gz"),
    ("aiperf", FIX / "aiperf" / "baseline-c1" / "profile_export_aiperf.json"),
    ("llamacpp", FIX / "llamacpp" / "baseline.jsonl"),
])
def test_any_field_damaged_imports_or_is_one_named_line(tmp_path: Path, tool: str, source: Path) -> None:
    """Many random draws: one field of a real file set to a value of another type or an absurd size."""
    import random

    from specsweep.errors import InputError

    text = gzip.open(source, "rt").read() if source.suffix == ".gz" else source.read_text()
    docs = [json.loads(line) for line in text.splitlines() if line.strip()] if source.suffix == ".jsonl" \
        else [json.loads(text)]
    fields = [(i, f) for i, doc in enumerate(docs) for f in _fields(doc)]
    rng = random.Random(f"{tool}-{source.name}")
    for trial in range(40):
        damaged = json.loads(json.dumps(docs))
        i, field = rng.choice(fields)
        target = damaged[i]
        for key in field[:-1]:
            target = target[key]
        target[field[-1]] = value = rng.choice(_DAMAGE)
        path = tmp_path / f"t{trial}" / ("profile_export_aiperf.json" if tool == "aiperf" else source.name.removesuffix(".gz"))
        path.parent.mkdir()
        path.write_text("\n".join(json.dumps(d) for d in damaged))
        try:
            import_files(tool, [path], "x", tmp_path / f"out{trial}", output_tokens=64)
        except InputError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc), (field, value, str(exc)[:500])
