"""A chart's data frame as Vega-Lite values: Altair's default data transformer, without its pandas round trip.

When a chart is shown or saved, Altair turns every layer's DataFrame into ``{"values": [records]}``
with ``altair.utils.core.sanitize_pandas_dataframe``: a copy of the frame, then per column an
``astype(object)`` and a ``where`` (NaN and ±inf to ``null``), then ``to_dict("records")``. That
costs about 8 ms per small frame, and the Δ% chart alone hands it 14 (one per layer; layers that
share a frame are sanitised once each): a quarter of a report's chart work.

:func:`transformer` gives exactly the same values (the same Python objects, so the same JSON and
the same dataset names) by reading each column once with numpy, for frames whose columns are all
of the kinds specsweep's charts use: numpy floats (NaN and ±inf become ``None``), integers and
booleans (as Python ``int``/``bool``), and pandas' string dtype (missing becomes ``None``), with
unique string column names. Anything else (categoricals, datetimes, nullable extension dtypes,
object columns, a MultiIndex, more rows than ``max_rows``) goes to Altair's own
``default_data_transformer`` unchanged, so its checks and errors (``MaxRowsError``) are Altair's.

:func:`enable` registers it as the data transformer ``"specsweep"`` and turns it on when Altair's
``"default"`` is the active one (keeping its options, ``max_rows`` among them);
``specsweep.report.charts`` calls it on import. ``alt.data_transformers.enable("default")`` turns it off.
Altair's ``alt.data_transformers.disable_max_rows()`` only knows its own transformers: with this
one on, :func:`disable_max_rows` (or ``alt.data_transformers.enable("specsweep", max_rows=None)``)
lifts the row limit.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

NAME = "specsweep"
#: Altair's default row limit (``altair.vegalite.data.default_data_transformer``)
DEFAULT_MAX_ROWS = 5000


def _column_values(col: pd.Series) -> list[Any] | None:
    """One column as the Python values Altair's sanitiser gives, or None when it is not a fast kind."""
    dtype = col.dtype
    if isinstance(dtype, np.dtype):
        arr = col.to_numpy()
        if dtype.kind == "f":
            values = arr.tolist()
            bad = ~np.isfinite(arr)
            if bad.any():
                for i in np.flatnonzero(bad).tolist():
                    values[i] = None
            return values
        if dtype.kind in "iub":
            return arr.tolist()
        return None
    if isinstance(dtype, pd.StringDtype):
        return col.to_numpy(dtype=object, na_value=None).tolist()
    return None


def records(frame: pd.DataFrame) -> list[dict[str, Any]] | None:
    """``frame``'s rows as Altair's default transformer writes them (``to_dict("records")`` of the
    sanitised frame), or None when a column or the frame's shape needs Altair's own handling."""
    columns = frame.columns
    if isinstance(columns, (pd.MultiIndex, pd.RangeIndex)) or isinstance(frame.index, pd.MultiIndex):
        return None
    names = list(columns)
    if not all(type(n) is str for n in names) or len(set(names)) != len(names):
        return None
    lists = []
    for i in range(len(names)):
        values = _column_values(frame.iloc[:, i])
        if values is None:
            return None
        lists.append(values)
    return [dict(zip(names, row)) for row in zip(*lists)] if names else [{} for _ in range(len(frame))]


def transformer(data: Any, max_rows: int | None = DEFAULT_MAX_ROWS) -> Any:
    """Altair data transformer: ``{"values": records(frame)}`` for a plain pandas frame within
    ``max_rows`` rows, else Altair's ``default_data_transformer(data, max_rows)``."""
    from altair.vegalite.data import default_data_transformer

    if isinstance(data, pd.DataFrame) and (max_rows is None or len(data) <= max_rows):
        values = records(data)
        if values is not None:
            return {"values": values}
    # Altair annotates max_rows as int, yet its own disable_max_rows() passes None (no limit)
    return default_data_transformer(data, max_rows=max_rows)  # type: ignore[arg-type]


def enable() -> None:
    """Register :func:`transformer` as ``"specsweep"`` and make it active where Altair's
    ``"default"`` is (its options kept); another active transformer is left as it is."""
    import altair as alt

    registry = alt.data_transformers
    if NAME not in registry.names():
        registry.register(NAME, transformer)
    if registry.active == "default":
        registry.enable(NAME, **registry.options)


def disable_max_rows() -> None:
    """Lift the row limit of the active data transformer: this one's where it is active, else
    Altair's own ``disable_max_rows()``."""
    import altair as alt

    registry = alt.data_transformers
    if registry.active == NAME:
        registry.enable(NAME, **{**registry.options, "max_rows": None})
    else:
        registry.disable_max_rows()
