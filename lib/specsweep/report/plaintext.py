"""The plain-text variant of the Markdown summary (``reports/<name>.txt``), for chat tools and
terminals that show Markdown as typed.

:func:`plain_text` turns the summary's Markdown (:func:`specsweep.report.summary.summary_markdown`:
a heading, tables, paragraphs, bullets, emphasis and :func:`specsweep.markup.md_text`'s escapes)
into text with no Markdown syntax at all, so the ``.txt`` says the ``.md``'s sentences word for word:

- a heading is its text; emphasis markers (``*``, ``**``) and code backticks are dropped; every
  backslash escape becomes the character it escaped, so an untrusted name (``**x**``,
  ``<script>``) reads literally — plain text is inert, nothing renders it;
- a table is aligned columns under a ``─`` rule where it fits :data:`TABLE_WIDTH` characters, else
  one line per row ("first cell — header: cell; header: cell …");
- a bullet ``- x`` is ``• x``;
- control characters (ANSI escape sequences, C0/C1 controls but the line break) and the Unicode
  bidirectional controls are removed (:func:`specsweep.markup.inert`, the rule the ``.md`` and ``.html``
  follow), from the whole text, so an untrusted string cannot recolour a terminal, ring a bell or
  reorder what a reader sees.
"""
from __future__ import annotations

import re
import string

from specsweep.markup import inert

__all__ = ["TABLE_WIDTH", "plain_text"]

#: a table wider than this many characters, aligned, is written one line per row instead
TABLE_WIDTH = 100

_PUNCTUATION = frozenset(string.punctuation)
_HEADING = re.compile(r"^#{1,6}\s+")
_BULLET = re.compile(r"^(\s*)[-+*]\s+")


def _split(text: str, sep: str | None = None) -> list[str]:
    """``text`` with its Markdown read: a backslash escape becomes its character, unescaped ``*`` and
    backticks are dropped; with ``sep``, split at each unescaped ``sep`` (a table row's ``|``)."""
    parts, out, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in _PUNCTUATION:
            out.append(text[i + 1])
            i += 2
            continue
        if sep is not None and ch == sep:
            parts.append("".join(out))
            out = []
        elif ch not in "*`":
            out.append(ch)
        i += 1
    parts.append("".join(out))
    return parts


def _inline(text: str) -> str:
    return _split(text)[0]


def _row(line: str) -> list[str]:
    """A Markdown table row's cells, read (:func:`_split`), without the outer pipes' empty ends."""
    cells = [c.strip() for c in _split(line.strip(), "|")]
    return cells[1:-1] if len(cells) >= 2 else cells


def _is_rule(line: str) -> bool:
    """A table's header rule: ``|---|:--:|``."""
    s = line.strip()
    return s.startswith("|") and set(s) <= set("|-: ") and "-" in s


def _table(rows: list[list[str]]) -> list[str]:
    """A table (header first) as aligned columns under a ``─`` rule, or one line per row where that
    would be wider than :data:`TABLE_WIDTH`."""
    head, body = rows[0], rows[1:]
    n = len(head)
    body = [(r + [""] * n)[:n] for r in body]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(n)]
    if sum(widths) + 2 * (n - 1) <= TABLE_WIDTH:
        def line(r: list[str]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
        return [line(head), "─" * (sum(widths) + 2 * (n - 1)), *(line(r) for r in body)]
    # a row is led by its first cell, named where it is a bare number ("concurrency 16 — …")
    return [(f"{head[0]} {r[0]}" if r[0].replace(",", "").isdigit() else r[0]) + " — "
            + "; ".join(f"{h}: {c}" for h, c in zip(head[1:], r[1:])) for r in body]


def plain_text(markdown: str) -> str:
    """The summary's Markdown as plain text (see the module docstring), ending in one line break."""
    out: list[str] = []
    table: list[list[str]] = []
    for raw in inert(markdown).splitlines():
        line = raw.rstrip()
        if line.lstrip().startswith("|"):
            if not _is_rule(line):
                table.append(_row(line))
            continue
        if table:
            out += _table(table)
            table = []
        if _HEADING.match(line):
            out.append(_inline(_HEADING.sub("", line)))
        elif (bullet := _BULLET.match(line)) is not None:
            out.append(f"{bullet[1]}• {_inline(line[bullet.end():])}")
        else:
            out.append(_inline(line))
    if table:
        out += _table(table)
    return "\n".join(out).strip("\n") + "\n"
