"""Keep the API key out of everything specsweep stores or shows.

A server may quote the key it was sent in an error body ("Incorrect API key provided: sk-…"),
and that text travels on into request errors, warnings, abort reasons and log lines. Rather than
guard each of those, the key's value is replaced by :data:`MASK` at the few places where strings
leave the process: :mod:`specsweep.results.store` when it writes ``meta.json`` and every Parquet file,
and :mod:`specsweep.measure.sweep` for its log lines, warnings and the messages of the errors it raises
(which the sweep notebook shows).

A study hands the sweep the secrets of its arm (the server's secret-named ``env`` values and the
values of secret flags in its argv: a server may quote those too) in :data:`REDACT_ENV`, a JSON
list, set in the environment of the sweep notebook's kernel only (never a notebook parameter:
parameters are written into the executed notebook); they are masked as :data:`MASK_OTHER`.
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: the environment variable holding the API key (read by ``specsweep.measure.client`` too)
API_KEY_ENV = "SPECSWEEP_API_KEY"
MASK = "[redacted SPECSWEEP_API_KEY]"
#: the environment variable holding more secret values to mask (a JSON list of strings; see above)
REDACT_ENV = "SPECSWEEP_REDACT"
#: what replaces a value of :data:`REDACT_ENV`
MASK_OTHER = "***"
#: values shorter than this in :data:`REDACT_ENV` are not masked ('true', '1' would blank common words)
MIN_SECRET_CHARS = 6


def handed_secrets() -> list[str]:
    """The values of :data:`REDACT_ENV`: a JSON list of strings (anything else: the whole text is one value)."""
    raw = os.environ.get(REDACT_ENV, "").strip()
    if not raw:
        return []
    try:
        values = json.loads(raw)
    except ValueError:
        values = [raw]
    if not isinstance(values, list):
        values = [raw]
    return [v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS]


def secrets() -> list[str]:
    """The secret values to hide: the API key from the environment and :data:`REDACT_ENV`'s values
    (longest first, so that a value containing another is masked whole), or none."""
    key = os.environ.get(API_KEY_ENV, "").strip()
    values = ([key] if key else []) + handed_secrets()
    return sorted(dict.fromkeys(values), key=len, reverse=True)


def _mask(value: str) -> str:
    return MASK if value == os.environ.get(API_KEY_ENV, "").strip() else MASK_OTHER


def redact_text(text: str, values: list[str] | None = None) -> str:
    """``text`` with every secret value replaced by :data:`MASK` (the API key) or :data:`MASK_OTHER`."""
    for value in secrets() if values is None else values:
        if value in text:
            text = text.replace(value, _mask(value))
    return text


def redact(obj: Any, values: list[str] | None = None) -> Any:
    """A copy of ``obj`` (str, or dicts/lists/tuples of them) with every secret string value masked.

    Dictionary keys and non-string leaves are kept as they are.
    """
    values = secrets() if values is None else values
    if not values:
        return obj
    if isinstance(obj, str):
        return redact_text(obj, values)
    if isinstance(obj, dict):
        return {k: redact(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v, values) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact(v, values) for v in obj)
    return obj


def redact_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with secret values masked in its text cells (a copy when anything changed)."""
    values = secrets()
    if not values or frame.empty:
        return frame
    import pandas as pd  # deferred: the kernel factory imports this module before pandas is needed

    out = frame
    for col in frame.columns:
        series = frame[col]
        if not (pd.api.types.is_object_dtype(series) or pd.api.types.is_string_dtype(series)):
            continue
        hit = series.map(lambda v: isinstance(v, str) and any(s in v for s in values))
        if hit.any():
            if out is frame:
                out = frame.copy()
            out.loc[hit, col] = series[hit].map(lambda v: redact_text(v, values))
    return out


def redact_exception(exc: BaseException) -> None:
    """Mask secret values in the arguments of ``exc`` and its causes, in place (what tracebacks show)."""
    values = secrets()
    seen: set[int] = set()
    current: BaseException | None = exc
    while values and current is not None and id(current) not in seen:  # the chain a traceback prints
        seen.add(id(current))
        if current.args:
            current.args = tuple(redact(a, values) for a in current.args)
        current = current.__cause__ or current.__context__
