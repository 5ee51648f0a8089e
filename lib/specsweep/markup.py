"""Safe markup for everything specsweep shows: Markdown with raw HTML escaped, JSON safe inside ``<script>``.

Strings that reach a report or a notebook come from users (titles, labels, profile names), from
result sets (meta.json travels with a shared result set) and from servers (model names, error
bodies). None of them is trusted. Two mechanisms keep them inert wherever they are shown:

- :func:`markdown` renders Markdown to HTML with mistune's ``escape=True``: raw HTML in the text
  (``<script>``, ``<img onerror=…>``, comments) is shown as text, and ``javascript:`` links are
  replaced. Report and notebook prose goes through it instead of IPython's ``Markdown``, whose
  raw HTML nbconvert passes through unchanged.
- :func:`script_json` serialises a value for inlining in a ``<script>`` element: ``<``, ``>``,
  ``&`` and the line separators become ``\\u`` escapes, so ``</script>`` or ``<!--`` in a label
  cannot end the element or open a comment.

Neither may an untrusted string carry what is not text: :func:`inert` removes ANSI escape sequences,
C0/C1 control characters and the Unicode bidirectional controls (which recolour a terminal that shows
a ``.md`` or ``.txt``, ring its bell, or reorder what a reader sees: ``U+202E`` makes ``gpj.exe`` read
``exe.jpg``). :func:`md_text`, :func:`html_text`, :func:`markdown_html` and :func:`script_json` apply
it, and so do the report's tables and its plain-text summary, so the ``.md``, ``.txt`` and ``.html`` are cleaned by one rule.

:func:`md_text` escapes Markdown's own syntax in an untrusted string that is interpolated into
Markdown, so a label such as ``**x**`` or ``[a](b)`` shows literally, and nothing else: summaries are
pasted into chats that show Markdown as plain text, where a needless escape shows as a backslash
(before each parenthesis of a profile name, each sign of a band).
"""
from __future__ import annotations

import html
import json
import re
from functools import lru_cache
from typing import Any

import mistune

#: characters that are Markdown wherever they stand: escapes, code, emphasis, raw HTML and autolinks,
#: table cells, strikethrough
_MD_INLINE = re.compile(r"([\\`*<|~])")
#: ``_`` opens emphasis only at a word's edge (inside ``mtp_cap`` it is a letter)
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
#: a link or an image needs a ``]`` followed by ``(`` or ``[`` (a reference definition: ``]:`` at a line's start)
_MD_LINK = re.compile(r"\][(\[:]")
#: what makes a line a heading, quote, list item, rule or setext underline when the value starts it
_MD_LINE_START = re.compile(r"^(\s*)(#{1,6}|>|[-+=]|\d{1,9}[.)])(?=\s|$|[-=])")
#: ANSI escape sequences (CSI … final byte, OSC … BEL/ST, and two-character escapes)
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
#: control characters other than the line break, DEL and C1, and the bidirectional controls (marks,
#: embeddings, overrides, isolates)
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SCRIPT_UNSAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                "\u2028": "\\u2028", "\u2029": "\\u2029"})


@lru_cache(maxsize=1)
def _renderer() -> mistune.Markdown:
    return mistune.create_markdown(escape=True, plugins=["table", "strikethrough"])


def inert(text: str) -> str:
    """``text`` without ANSI escape sequences, control characters (the line break kept; a tab
    becomes a space) or bidirectional controls: only what prints, in the order it was typed."""
    return _CONTROL.sub("", _ANSI.sub("", text.replace("\t", " ")))


def _inert_strings(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, tuples, scalars) with :func:`inert` applied to every string, keys too."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {_inert_strings(k): _inert_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_inert_strings(v) for v in value]
    return value


def markdown_html(text: str) -> str:
    """Markdown → HTML with every raw HTML tag escaped, unsafe link targets removed and :func:`inert` applied."""
    return str(_renderer()(inert(text)))


def markdown(text: str) -> Any:
    """Markdown as an IPython ``HTML`` display object, safe for untrusted content (see module doc)."""
    from IPython.display import HTML

    return HTML(markdown_html(text))


def md_text(value: Any) -> str:
    """An untrusted value as literal text inside Markdown, on one line: only the characters that would
    be Markdown there are escaped (brackets only where they could make a link, a marker only where it
    would start a block), so ``Latency (interactive)`` or ``+8.6% [+3.1%, +14%]`` stay as they read."""
    text = _MD_INLINE.sub(r"\\\1", inert(str(value)).replace("\n", " "))
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    if _MD_LINK.search(text) or text.lstrip().startswith("["):
        text = re.sub(r"([\[\]])", r"\\\1", text)
    return _MD_LINE_START.sub(lambda m: f"{m[1]}{m[2][:-1]}\\{m[2][-1]}", text)


def html_text(value: Any, *, quote: bool = True) -> str:
    """An untrusted value as literal text inside HTML (an element's text or a quoted attribute): :func:`inert`,
    then ``&``, ``<``, ``>`` and, with ``quote``, both quote marks escaped."""
    return html.escape(inert(str(value)), quote=quote)


def script_json(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that is safe to inline in an HTML ``<script>`` element, its strings :func:`inert`
    (a chart shows its labels and tooltips as text: a bidirectional override there reorders them)."""
    return json.dumps(_inert_strings(value), **kwargs).translate(_SCRIPT_UNSAFE)
