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

:func:`md_text` escapes Markdown's own syntax in an untrusted string that is interpolated into
Markdown, so a label such as ``**x**`` or ``[a](b)`` shows literally, and nothing else: summaries are
pasted into chats that show Markdown as plain text, where a needless escape shows as a backslash
(before each parenthesis of a profile name, each sign of a band).
"""
from __future__ import annotations

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
_SCRIPT_UNSAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                "\u2028": "\\u2028", "\u2029": "\\u2029"})


@lru_cache(maxsize=1)
def _renderer() -> mistune.Markdown:
    return mistune.create_markdown(escape=True, plugins=["table", "strikethrough"])


def markdown_html(text: str) -> str:
    """Markdown → HTML with every raw HTML tag escaped and unsafe link targets removed."""
    return str(_renderer()(text))


def markdown(text: str) -> Any:
    """Markdown as an IPython ``HTML`` display object, safe for untrusted content (see module doc)."""
    from IPython.display import HTML

    return HTML(markdown_html(text))


def md_text(value: Any) -> str:
    """An untrusted value as literal text inside Markdown, on one line: only the characters that would
    be Markdown there are escaped (brackets only where they could make a link, a marker only where it
    would start a block), so ``Latency (interactive)`` or ``+8.6% [+3.1%, +14%]`` stay as they read."""
    text = _MD_INLINE.sub(r"\\\1", str(value).replace("\n", " "))
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    if _MD_LINK.search(text) or text.lstrip().startswith("["):
        text = re.sub(r"([\[\]])", r"\\\1", text)
    return _MD_LINE_START.sub(lambda m: f"{m[1]}{m[2][:-1]}\\{m[2][-1]}", text)


def script_json(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that is safe to inline in an HTML ``<script>`` element."""
    return json.dumps(value, **kwargs).translate(_SCRIPT_UNSAFE)
