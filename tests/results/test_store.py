"""Result sets: loading, validation errors that name the file and the problem, atomic writes."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from helpers import SEED, base_meta, write_level_only
from specsweep.results.meta import Meta
from specsweep.results.store import SchemaError, append_level, finished_levels, load_result_set, load_result_sets

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def test_seed_reference_loads_as_two_arms() -> None:
    sets = load_result_sets(SEED)
    assert [s.arm for s in sets] == ["baseline", "mtp"]
    base, mtp = sets
    assert base.requests is None and base.meta.level_only
    assert base.levels["concurrency"].tolist() == [1, 4, 16, 32, 64, 128]
    assert base.levels["output_tok_s"].tolist() == [108, 286, 873, 1359, 2327, 2800]
    assert mtp.levels["output_tok_s"].tolist() == [121.5, 400.5, 1209, 1502, 1571, 1635]
    assert mtp.levels["request_tok_s_mean"].tolist() == [123.1, 118.6, 84.4, 62.3, 65.7, 64.5]
    assert mtp.meta.server["max_running_requests"] == 48
    assert mtp.meta.server["speculative_algorithm"] == "NEXTN"
    for s in sets:
        m = s.meta
        assert m.model == "Qwen3.5-122B-A10B"
        assert m.workload.input_tokens == m.workload.output_tokens == 1000
        assert "seed" in m.source["file"] and m.source["citation"]
        assert "not published" in m.metric_definitions["request_tok_s_mean"]


def test_missing_meta(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    with pytest.raises(SchemaError, match=r"x/meta.json: missing"):
        load_result_set(tmp_path / "x")


def test_bad_json_and_missing_field(tmp_path: Path) -> None:
    d = write_level_only(tmp_path / "a", "a", {1: (1.0, 1.0)})
    (d / "meta.json").write_text("{not json")
    with pytest.raises(SchemaError, match=r"meta.json: not valid JSON"):
        load_result_set(d)
    meta = base_meta("a")
    del meta["workload"]["output_tokens"]
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SchemaError, match=r"meta.json: field 'workload.output_tokens': Field required"):
        load_result_set(d)


def test_missing_column_named(tmp_path: Path) -> None:
    d = write_level_only(tmp_path / "a", "a", {1: (1.0, 1.0)})
    pd.read_csv(d / "levels.csv").drop(columns=["output_tok_s"]).to_csv(d / "levels.csv", index=False)
    with pytest.raises(SchemaError, match=r"levels.csv: missing column\(s\) output_tok_s"):
        load_result_set(d)


def test_malformed_values_named(tmp_path: Path) -> None:
    d = write_level_only(tmp_path / "a", "a", {1: (1.0, 1.0), 4: (2.0, 2.0)})
    frame = pd.read_csv(d / "levels.csv")
    frame["output_tok_s"] = frame["output_tok_s"].astype(object)
    frame.loc[1, "output_tok_s"] = "fast"
    frame.to_csv(d / "levels.csv", index=False)
    with pytest.raises(SchemaError, match=r"column 'output_tok_s' must be numeric; row 1 holds 'fast'"):
        load_result_set(d)
    frame.loc[1, "output_tok_s"] = 2.0
    frame["concurrency"] = frame["concurrency"].astype(float)
    frame.loc[1, "concurrency"] = 4.5
    frame.to_csv(d / "levels.csv", index=False)
    with pytest.raises(SchemaError, match=r"'concurrency' must hold whole numbers"):
        load_result_set(d)


def test_duplicate_level_and_arm_mismatch(tmp_path: Path) -> None:
    d = write_level_only(tmp_path / "a", "a", {1: (1.0, 1.0)})
    frame = pd.read_csv(d / "levels.csv")
    pd.concat([frame, frame]).to_csv(d / "levels.csv", index=False)
    with pytest.raises(SchemaError, match=r"duplicate level \(concurrency=1, repeat=0\)"):
        load_result_set(d)
    frame.assign(arm="other").to_csv(d / "levels.csv", index=False)
    with pytest.raises(SchemaError, match=r"do not match meta.json arm 'a'"):
        load_result_set(d)


def test_measured_run_needs_requests(tmp_path: Path) -> None:
    d = write_level_only(tmp_path / "a", "a", {1: (1.0, 1.0)}, level_only=False, kind="run")
    with pytest.raises(SchemaError, match=r"requests.parquet: missing"):
        load_result_set(d)


def test_duplicate_arms_across_sets(tmp_path: Path) -> None:
    a = write_level_only(tmp_path / "one", "same", {1: (1.0, 1.0)})
    b = write_level_only(tmp_path / "two", "same", {1: (1.0, 1.0)})
    with pytest.raises(SchemaError, match=r"arm 'same' is also the arm of"):
        load_result_sets([a, b])


def test_not_a_result_set(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"neither a result set"):
        load_result_sets(tmp_path)
    with pytest.raises(SchemaError, match=r"no such folder"):
        load_result_sets(tmp_path / "nope")


def _level(c: int, value: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A minimal level row and three request rows that pass validation."""
    lv = pd.DataFrame([{"run_id": "test-a", "arm": "a", "concurrency": c, "repeat": 0, "output_tok_s": value}])
    rq = pd.DataFrame([{"run_id": "test-a", "arm": "a", "concurrency": c, "repeat": 0, "request_index": i,
                        "warmup": False, "t_start_s": 0.0, "ttft_s": 0.1, "e2e_s": 1.0, "t_end_s": 1.0,
                        "output_tokens": 10.0, "token_source": "usage", "http_status": 200.0, "error": None,
                        "value": value} for i in range(3)])
    return lv, rq


def test_append_level_replaces_and_keeps(tmp_path: Path) -> None:
    level = _level

    append_level(tmp_path, *level(1, 1.0))
    append_level(tmp_path, *level(4, 4.0))
    append_level(tmp_path, *level(1, 10.0))  # a re-run of level 1 replaces it; the first attempt is kept, superseded
    (tmp_path / "meta.json").write_text(json.dumps(base_meta("a", kind="run", level_only=False)))
    rs = load_result_set(tmp_path)
    assert rs.levels.sort_values("concurrency")["output_tok_s"].tolist() == [10.0, 4.0]
    assert len(rs.requests) == 6 and set(rs.requests.loc[rs.requests["concurrency"] == 1, "value"]) == {10.0}
    assert rs.superseded_levels["output_tok_s"].tolist() == [1.0]
    assert len(rs.superseded_requests) == 3 and set(rs.superseded_requests["value"]) == {1.0}
    assert any("superseded" in n for n in rs.notes)
    assert finished_levels(tmp_path) == {(1, 0), (4, 0)}
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


def test_rows_of_an_unfinished_level_are_left_out(tmp_path: Path) -> None:
    """An interruption between a level's writes leaves request rows without a level row."""
    from specsweep.results.store import write_frame

    append_level(tmp_path, *_level(1, 1.0))
    rq = pd.read_parquet(tmp_path / "requests.parquet")
    stray = rq.assign(concurrency=4)
    write_frame(tmp_path, "requests", pd.concat([rq, stray]))
    meta = base_meta("a", kind="run", level_only=False)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    rs = load_result_set(tmp_path)
    assert set(rs.requests["concurrency"]) == {1}
    assert rs.notes and "3 row(s) of unfinished levels left out" in rs.notes[0]


def test_result_files_follow_the_umask(tmp_path: Path) -> None:
    """mkstemp creates 0600 files; a result set must be as readable as the user's umask allows."""
    import os
    import stat

    from specsweep.results.store import write_meta

    old = os.umask(0o022)
    try:
        append_level(tmp_path / "a", *_level(1, 1.0))
        write_meta(tmp_path / "a", Meta.model_validate(base_meta("a", kind="run", level_only=False)))
        os.umask(0o027)
        append_level(tmp_path / "b", *_level(1, 1.0))
    finally:
        os.umask(old)
    for name in ("meta.json", "levels.parquet", "requests.parquet"):
        assert stat.S_IMODE((tmp_path / "a" / name).stat().st_mode) == 0o644, name
    assert stat.S_IMODE((tmp_path / "b" / "levels.parquet").stat().st_mode) == 0o640


def test_finished_levels_of_a_corrupt_file_names_it(tmp_path: Path) -> None:
    append_level(tmp_path, *_level(1, 1.0))
    (tmp_path / "levels.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(SchemaError, match=r"levels.parquet: cannot be read as Parquet"):
        finished_levels(tmp_path)


def test_a_locked_run_folder_names_its_holder(tmp_path: Path) -> None:
    import os
    import socket

    from specsweep.results.store import RunLocked, lock_run

    with lock_run(tmp_path):
        with pytest.raises(RunLocked, match=rf"pid {os.getpid()} on host {socket.gethostname()}, since 20"):
            with lock_run(tmp_path):
                pass
    with lock_run(tmp_path):  # released: free again
        pass


def test_api_key_never_reaches_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specsweep.results.store import write_meta

    key = "canary-9f3b1c"
    monkeypatch.setenv("SPECSWEEP_API_KEY", key)
    lv, rq = _level(1, 1.0)
    rq["error"] = [None, f"HTTP 401: Incorrect API key provided: {key}", "HTTP 500"]
    append_level(tmp_path, lv, rq)
    meta = Meta.model_validate(base_meta("a", kind="run", level_only=False, warnings=[f"server said {key}"],
                                         failed={"reason": f"ProbeError: bad key {key}"}))
    write_meta(tmp_path, meta)
    for f in tmp_path.iterdir():
        assert key.encode() not in f.read_bytes(), f
    rs = load_result_set(tmp_path)
    assert rs.requests["error"].tolist()[1] == "HTTP 401: Incorrect API key provided: [redacted SPECSWEEP_API_KEY]"
    assert meta.warnings == [f"server said {key}"]  # the caller's record is not changed


def test_append_level_on_a_file_written_before_superseded_existed(tmp_path: Path) -> None:
    """levels.parquet of an older run has no 'superseded' column; re-measuring a level still keeps the old row."""
    from specsweep.results.store import write_frame

    lv, rq = _level(1, 1.0)
    write_frame(tmp_path, "levels", lv)
    write_frame(tmp_path, "requests", rq)
    append_level(tmp_path, *_level(1, 2.0))
    (tmp_path / "meta.json").write_text(json.dumps(base_meta("a", kind="run", level_only=False)))
    rs = load_result_set(tmp_path)
    assert rs.levels["output_tok_s"].tolist() == [2.0]
    assert rs.superseded_levels["output_tok_s"].tolist() == [1.0] and len(rs.superseded_requests) == 3


def test_a_study_skips_and_names_a_run_that_never_finished_a_level(tmp_path: Path) -> None:
    """Older versions left <run>/meta.json alone after a failed preflight; it must not break the study."""
    write_level_only(tmp_path / "a", "a", {1: (1.0, 1.0)})
    empty = tmp_path / "20260101T000000Z-b"
    empty.mkdir()
    (empty / "meta.json").write_text(json.dumps(base_meta("b", kind="run", level_only=False, complete=False)))
    with pytest.warns(UserWarning, match=r"20260101T000000Z-b: an unfinished run with no finished level"):
        sets = load_result_sets(tmp_path)
    assert [s.arm for s in sets] == ["a"]
    with pytest.raises(SchemaError, match=r"levels.parquet: missing"):  # named directly, it is still an error
        load_result_sets(empty)


def test_a_study_folder_gives_its_arms_in_the_study_files_order_and_its_title(tmp_path: Path) -> None:
    """A study's own report shows its arms in the study file's order under its title; a report rebuilt
    from the study folder (``specsweep report DIR``) must give the same page, so the folder reads the
    same way (the order from study.json's fingerprint, which the study writes in that order)."""
    from specsweep.results.store import find_result_sets
    from specsweep.results.study_record import study_arm_order, study_title

    for arm in ("baseline", "ngram", "control", "zz-extra"):
        write_level_only(tmp_path / arm, arm, {1: (1.0, 1.0)})
    assert [p.name for p in find_result_sets(tmp_path)] == ["baseline", "control", "ngram", "zz-extra"]  # by name
    assert study_title([tmp_path]) is None and study_arm_order(tmp_path) == []
    # the plan runs the control first; the study file (and its report) lists baseline, ngram, control
    plan = [{"position": i, "repeat": r, "arm": a} for i, (r, a) in enumerate(
        [(0, "control"), (0, "ngram"), (0, "baseline"), (1, "baseline"), (1, "ngram"), (1, "control")], 1)]
    fingerprint = {"sweep": {}, "arms": {"baseline": "d1", "ngram": "d2", "control": "d3"}}
    (tmp_path / "study.json").write_text(json.dumps({"title": "A <b>real</b> engine", "plan": plan,
                                                     "fingerprint": fingerprint}))
    assert study_arm_order(tmp_path) == ["baseline", "ngram", "control"]
    assert [p.name for p in find_result_sets(tmp_path)] == ["baseline", "ngram", "control", "zz-extra"]
    assert [s.arm for s in load_result_sets(tmp_path)] == ["baseline", "ngram", "control", "zz-extra"]
    assert study_title([tmp_path]) == "A <b>real</b> engine"  # a string like any title: the page escapes it
    assert study_title([tmp_path, tmp_path / "baseline"]) is None  # only one study folder names the page
    for broken in ("{", "[]", json.dumps({"title": 3, "plan": plan, "fingerprint": {"arms": ["baseline"]}})):
        (tmp_path / "study.json").write_text(broken)
        assert study_title([tmp_path]) is None and study_arm_order(tmp_path) == []
        assert [p.name for p in find_result_sets(tmp_path)] == ["baseline", "control", "ngram", "zz-extra"]


def _timeline_frame(n: int, c: int = 1) -> pd.DataFrame:
    """Request rows with chunk timelines as numpy arrays (int32 tokens, a broadcast run of ones, an
    empty timeline, a row without one) and text cells with missing values."""
    rng = np.random.default_rng(c)
    _, rq = _level(c, float(c))
    rq = pd.concat([rq] * (n // 3 + 1), ignore_index=True).iloc[:n].assign(request_index=range(n))
    times, tokens = [], []
    for i in range(n):
        k = int(rng.integers(0, 7))
        times.append(np.cumsum(rng.random(k)) if i % 5 else None)
        tokens.append(np.broadcast_to(np.int32(1), (k,)) if i % 2 else rng.integers(1, 4, k).astype(np.int32))
    rq["error"] = pd.Series([None if i % 4 else f"e{i}" for i in range(n)], dtype="string")
    return rq.assign(chunk_t_s=times, chunk_tokens=tokens)


def _as_lists(frame: pd.DataFrame) -> pd.DataFrame:
    """The same rows with Python lists in the array columns (how they were written before arrays)."""
    return frame.assign(**{c: [v.tolist() if isinstance(v, np.ndarray) else v for v in frame[c]]
                           for c in ("chunk_t_s", "chunk_tokens")})


def _assert_same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got.drop(columns=["chunk_t_s", "chunk_tokens"]),
                                  want.drop(columns=["chunk_t_s", "chunk_tokens"]), check_exact=True)
    for col, dtype in (("chunk_t_s", np.float64), ("chunk_tokens", np.int64)):
        for a, b in zip(got[col], want[col]):
            assert (a is None) == (b is None), col
            if a is not None:
                assert a.dtype == dtype and b.dtype == dtype and np.array_equal(a, b), col


def test_array_columns_are_written_in_parts_as_pandas_writes_lists(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """write_frame stores numpy-array cells part by part, and the file reads back exactly as the frame
    with lists written by pandas: same schema and pandas metadata, same values (int tokens as int64)."""
    import pyarrow.parquet as pq

    from specsweep.results import store

    monkeypatch.setattr(store, "PART_VALUES", 20)
    frame = _timeline_frame(40)
    frame.attrs["note"] = "kept"
    assert store.array_columns(frame) == {"chunk_t_s": pa.float64(), "chunk_tokens": pa.int64()}
    store.write_frame(tmp_path, "arrays", frame)
    _as_lists(frame).to_parquet(tmp_path / "lists.parquet", index=False)
    got, want = (tmp_path / "arrays.parquet", tmp_path / "lists.parquet")
    assert pq.read_schema(got).equals(pq.read_schema(want), check_metadata=True)
    assert pq.ParquetFile(got).metadata.num_row_groups > 5  # written in parts
    _assert_same_rows(pd.read_parquet(got), pd.read_parquet(want))
    assert pd.read_parquet(got).attrs == {"note": "kept"}


def test_append_level_copies_stored_rows_part_by_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Levels appended one by one, one measured again, give the rows and flags the pandas way gives."""
    from specsweep.results import store

    monkeypatch.setattr(store, "PART_VALUES", 30)
    streamed: list[int] = []
    kept_rows = store._kept_rows
    monkeypatch.setattr(store, "_kept_rows", lambda *a: (streamed.append(1), kept_rows(*a))[1])
    levels = {1: _timeline_frame(30, 1), 4: _timeline_frame(20, 4)}
    again = _timeline_frame(25, 1).assign(value=9.0)
    for c, rq in [*levels.items(), (1, again)]:
        append_level(tmp_path, _level(c, float(rq["value"].iloc[0]))[0], rq)
    assert len(streamed) == 4  # requests and levels, for the second and third append
    got = pd.read_parquet(tmp_path / "requests.parquet")
    want = pd.concat([_as_lists(levels[1]).assign(superseded=True), _as_lists(levels[4]).assign(superseded=False),
                      _as_lists(again).assign(superseded=False)], ignore_index=True)
    want.to_parquet(tmp_path / "want.parquet", index=False)
    _assert_same_rows(got, pd.read_parquet(tmp_path / "want.parquet"))
    assert pd.read_parquet(tmp_path / "levels.parquet")["superseded"].tolist() == [True, False, False]


def test_the_schema_is_what_pyarrow_infers_from_the_whole_frame() -> None:
    """``_arrow_schema`` types dtype-typed columns from no rows and infers object columns from their
    values: on 300 random frames of every column kind a level file holds (numbers, flags, pandas'
    strings, nullable ints, times, categories, object columns of text, of None, of mixed ints and
    None, empty frames, attrs) it equals the schema of the whole frame converted at once."""
    from specsweep.results.store import _arrow_schema

    rng = np.random.default_rng(11)
    makers = {
        "f": lambda n: rng.normal(size=n),
        "i": lambda n: rng.integers(0, 9, n),
        "b": lambda n: rng.random(n) < 0.5,
        "s": lambda n: pd.Series([f"r{i}" for i in range(n)], dtype="str"),
        "I": lambda n: pd.array([None if i % 3 == 0 else i for i in range(n)], dtype="Int64"),
        "t": lambda n: pd.date_range(pd.Timestamp(1_767_225_600, unit="s", tz="UTC"), periods=n, freq="s"),
        "c": lambda n: pd.Categorical(rng.choice(["a", "b"], n), categories=["a", "b"]),
        "o": lambda n: pd.Series([f"text {i}" if i % 4 else None for i in range(n)], dtype=object),
        "n": lambda n: pd.Series([None] * n, dtype=object),
        "m": lambda n: pd.Series([i if i % 2 else None for i in range(n)], dtype=object),
    }
    for k in range(300):
        n = int(rng.integers(0, 6))
        kinds = rng.choice(list(makers), size=int(rng.integers(1, 8)))
        frame = pd.DataFrame({f"{kind}{j}": makers[kind](n) for j, kind in enumerate(kinds)})
        if k % 3 == 0:
            frame.attrs = {"arm": "x", "k": k}
        expected = pa.Table.from_pandas(frame, preserve_index=False).schema
        if frame.attrs:
            expected = expected.with_metadata({**expected.metadata, b"PANDAS_ATTRS": json.dumps(frame.attrs).encode()})
        assert _arrow_schema(frame, {}).equals(expected, check_metadata=True), (list(kinds), n)
