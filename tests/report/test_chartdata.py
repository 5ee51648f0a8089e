"""specsweep.report.chartdata gives exactly Altair's default data transformer's values, faster.

Equality is checked on the Python values (so the JSON and the datasets' hashed names are the
same) for random frames of every column kind, on the fast path (floats with NaN/±inf, integers,
booleans, strings with missing values) and on the frames it hands to Altair (categoricals,
datetimes, nullable and object columns, odd column names, a MultiIndex), and on every chart of
the reference result sets.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import pytest
from altair.utils.data import MaxRowsError
from altair.vegalite.data import default_data_transformer

from specsweep.analyze.compare import compare
from specsweep.report import chartdata, charts
from specsweep.results.store import load_result_set

pytestmark = [pytest.mark.fast, pytest.mark.usefixtures("chart_defaults")]  # charts as the notebooks draw them

REPO = Path(__file__).resolve().parents[2]


def _same(a: object, b: object) -> bool:
    """Equal as values and as JSON text, NaN-free (a NaN left in would differ from None)."""
    return json.dumps(a, allow_nan=False) == json.dumps(b, allow_nan=False) and a == b


def _random_frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    floats = rng.normal(size=n) * 10.0 ** rng.integers(-3, 6)
    floats[rng.random(n) < 0.2] = np.nan
    floats[rng.random(n) < 0.05] = np.inf
    floats[rng.random(n) < 0.05] = -np.inf
    words = np.array(["baseline", "mtp", "n-gram <b>", "Δ%", "", "a\"b"], dtype=object)[rng.integers(0, 6, n)]
    strings = pd.Series(words, dtype="str")
    strings[rng.random(n) < 0.2] = None
    return pd.DataFrame({
        "f64": floats, "f32": floats.astype(np.float32), "i64": rng.integers(-2**40, 2**40, n),
        "u8": rng.integers(0, 255, n).astype(np.uint8), "flag": rng.random(n) < 0.5, "arm": strings,
        "neg_zero": np.where(rng.random(n) < 0.5, -0.0, 0.0),
    }, index=rng.permutation(n) + 100)


def test_the_fast_path_gives_altairs_values_on_random_frames() -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 17, 300):
        for _ in range(20):
            frame = _random_frame(rng, n)
            cols = list(rng.permutation(frame.columns)[: int(rng.integers(1, len(frame.columns) + 1))])
            frame = frame[cols]
            assert chartdata.records(frame) is not None  # every kind here is a fast one
            assert _same(chartdata.transformer(frame), default_data_transformer(frame)), frame


@pytest.mark.parametrize("make", [
    lambda: pd.DataFrame({"c": pd.Categorical(["a", None, "b"]), "x": [1.0, 2.0, 3.0]}),
    lambda: pd.DataFrame({"t": pd.to_datetime([1_796_551_200, None, 1_796_556_600], unit="s")}),
    lambda: pd.DataFrame({"n": pd.array([1, None, 3], dtype="Int64"), "b": pd.array([True, None, False], dtype="boolean")}),
    lambda: pd.DataFrame({"o": [np.array([1, 2]), None, "x"], "p": [1.5, math.nan, None]}),
    lambda: pd.DataFrame([[1.0, 2.0]]),  # RangeIndex column names: Altair makes them strings
    lambda: pd.DataFrame({"x": [1.0, 2.0]}, index=pd.MultiIndex.from_tuples([("a", 1), ("b", 2)])),
    lambda: pd.DataFrame([[1, 2]], columns=["x", "x"]),
    lambda: pd.DataFrame({"m": [1, 2]}, dtype="timedelta64[s]"),
])
def test_other_frames_go_to_altair_unchanged(make) -> None:
    frame = make()
    assert chartdata.records(frame) is None
    try:
        expected = default_data_transformer(frame)
    except Exception as exc:  # noqa: BLE001 - the very error Altair raises must come back
        with pytest.raises(type(exc)) as raised:
            chartdata.transformer(frame)
        assert str(raised.value) == str(exc)
    else:
        assert json.dumps(chartdata.transformer(frame), default=str) == json.dumps(expected, default=str)


def test_the_row_limit_is_altairs() -> None:
    frame = pd.DataFrame({"x": np.arange(6.0)})
    with pytest.raises(MaxRowsError):
        chartdata.transformer(frame, max_rows=5)
    assert chartdata.transformer(frame, max_rows=None) == default_data_transformer(frame, max_rows=None)
    assert chartdata.transformer(frame, max_rows=6) == {"values": [{"x": float(i)} for i in range(6)]}


def test_enabled_only_over_altairs_default_with_its_options() -> None:
    registry = alt.data_transformers
    before, options = registry.active, dict(registry.options)
    try:
        registry.enable("default", max_rows=123)
        chartdata.enable()
        assert registry.active == chartdata.NAME and registry.options == {"max_rows": 123}
        chartdata.disable_max_rows()  # as the report notebook's setup does
        assert registry.active == chartdata.NAME and registry.options == {"max_rows": None}
        big = pd.DataFrame({"x": np.arange(6000.0)})
        assert len(alt.Chart(big).mark_point().encode(x="x:Q").to_dict()["datasets"].popitem()[1]) == 6000
        registry.enable("default")
        chartdata.disable_max_rows()  # Altair's own where its transformer is active
        assert registry.active == "default" and registry.options == {"max_rows": None}
        registry.enable("json")
        chartdata.enable()
        assert registry.active == "json"  # an analyst's choice stays
    finally:
        registry.enable(before, **options)


@pytest.mark.parametrize("reference", ["seed-qwen3.5-122b-a10b", "real-llamacpp-smollm2"])
def test_every_chart_of_a_reference_set_is_the_same_either_way(reference: str) -> None:
    assert alt.data_transformers.active == chartdata.NAME  # the chart_defaults fixture turned it on
    sets = [load_result_set(p) for p in sorted((REPO / "data" / "reference" / reference).iterdir()) if p.is_dir()]
    comp = compare(sets)
    built = 0
    for build in (charts.throughput_chart, charts.user_speed_chart, charts.delta_chart, charts.delta_fit_chart,
                  charts.pareto_chart, charts.concurrency_chart, charts.latency_chart):
        chart = build(comp)
        if chart is None:
            continue
        fast = chart.to_dict()
        try:
            alt.data_transformers.enable("default")
            slow = chart.to_dict()
        finally:
            alt.data_transformers.enable(chartdata.NAME)
        assert json.dumps(fast) == json.dumps(slow), build.__name__
        built += 1
    assert built >= 5
