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
Markdown, so a label such as ``**x**`` or ``[a](b)`` shows literally.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import mistune

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>~])")
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
    """An untrusted value as literal text inside Markdown: its Markdown syntax characters escaped."""
    return _MD_SPECIAL.sub(r"\\\1", str(value)).replace("\n", " ")


def script_json(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that is safe to inline in an HTML ``<script>`` element."""
    return json.dumps(value, **kwargs).translate(_SCRIPT_UNSAFE)
