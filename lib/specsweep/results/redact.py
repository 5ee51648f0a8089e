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

Each secret is masked in the forms a server may quote it in (:func:`encodings`: itself, URL-encoded,
and base64 — of the secret alone or after any prefix, as basic-auth gateways quote ``user:secret``),
and text is masked whole before it is cut (:func:`cut`), a fragment of a secret (at least
:data:`MIN_SECRET_CHARS` characters) left at a cut — the text's ends, an ellipsis — masked too.
"""
from __future__ import annotations

import base64
import functools
import json
import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, quote_plus

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


@functools.lru_cache(maxsize=256)
def encodings(value: str) -> tuple[str, ...]:
    """``value`` and the forms a server may quote it in: URL-encoded, and base64 (standard and
    URL-safe) at each of the three alignments — the characters that only the secret's bytes decide,
    so ``base64(user:value)`` holds one of them for any ``user`` (at least :data:`MIN_SECRET_CHARS` each)."""
    raw = value.encode("utf-8", "surrogatepass")
    forms = [value, quote(value, safe=""), quote_plus(value)]
    for k in range(3):  # k bytes of whatever came before the secret share its first base64 group
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            enc = encode(b"\0" * k + raw).decode()
            whole, rest = divmod(k + len(raw), 3)  # a partial last group shares bits with what follows
            forms.append(enc[(0, 2, 3)[k]: whole * 4 + (0, 1, 2)[rest]])
    return tuple(f for f in dict.fromkeys(forms) if len(f) >= MIN_SECRET_CHARS)


#: an ellipsis, where a text was cut (one character or three dots, with a few blanks around it); a
#: text's own ends count too. The blanks are bounded: an unbounded run would be tried from each of its
#: starts, a time growing with the square of a long blank run
_ELLIPSIS = re.compile(r"\s{0,8}(?:…|\.\.\.)\s{0,8}")


@functools.lru_cache(maxsize=256)
def _edges(value: str) -> tuple[frozenset[str], frozenset[str]]:
    """The last MIN_SECRET_CHARS characters of each leading part of ``value``, the first of each trailing part."""
    sizes = range(len(value) - 1, MIN_SECRET_CHARS - 1, -1)
    return (frozenset(value[n - MIN_SECRET_CHARS:n] for n in sizes),
            frozenset(value[-n:][:MIN_SECRET_CHARS] for n in sizes))


def _at_cuts(text: str, value: str, shown: str) -> str:
    """``text`` with a leading part of ``value`` (>= MIN_SECRET_CHARS) masked where it ends at a cut,
    and a trailing part where it starts at one (a cut: the text's start or end, an ellipsis)."""
    sizes = range(len(value) - 1, MIN_SECRET_CHARS - 1, -1)  # longest first
    marks = list(_ELLIPSIS.finditer(text))
    last, first = _edges(value)  # a cheap look at a cut's few characters first: most hold nothing
    spans = []
    for end in [m.start() for m in marks] + [len(text.rstrip())]:
        if text[max(end - MIN_SECRET_CHARS, 0):end] in last:
            n = next((n for n in sizes if end >= n and text.startswith(value[:n], end - n)), 0)
            spans += [(end - n, end)] if n else []
    for start in [len(text) - len(text.lstrip())] + [m.end() for m in marks]:
        if text[start:start + MIN_SECRET_CHARS] in first:
            n = next((n for n in sizes if text.startswith(value[-n:], start)), 0)
            spans += [(start, start + n)] if n else []
    out, done = [], 0
    for a, b in sorted(spans):  # left to right, overlapping spans as one
        if b > done:
            out += [text[done:max(a, done)], shown] if a >= done else []
            done = b
    return "".join(out) + text[done:] if out else text


def redact_text(text: str, values: list[str] | None = None, mask: str | None = None) -> str:
    """``text`` with every secret value, its :func:`encodings` and its fragments at a cut replaced by
    ``mask`` (default :data:`MASK` for the API key, :data:`MASK_OTHER` for the others)."""
    for value in secrets() if values is None else values:
        shown = mask if mask is not None else _mask(value)
        for form in encodings(value):
            if form in text:
                text = text.replace(form, shown)
        text = _at_cuts(text, value, shown)
    return text


def cut(text: str, limit: int, ellipsis: str = "…", values: list[str] | None = None) -> str:
    """``text`` masked whole (:func:`redact_text`), then cut to ``limit`` characters (``ellipsis``
    last when it was longer), a fragment of a secret left at the cut masked too."""
    text = redact_text(text, values)
    if len(text) <= limit:
        return text
    return redact_text(text[: limit - len(ellipsis)] + ellipsis, values)


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
        hit = series.map(lambda v: isinstance(v, str) and redact_text(v, values) != v)
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
