"""Read a pasted results table (Markdown pipe table or CSV) of concurrency × aggregate and
per-request tok/s, one or several arms side by side, into a level-only
:class:`~specsweep.importers.common.ToolRun` — what people paste into chats and issues, as the
seed's operator did (``data/reference/seed-qwen3.5-122b-a10b``)::

    | concurrency | baseline agg tok/s | MTP agg tok/s | baseline per-request tok/s | MTP per-request tok/s |
    |---|---|---|---|---|
    | 1 | 108 | 121.5 | 110 | 123.1 |

Columns are recognised by their headers (case-insensitive): the concurrency column names
``concurrency`` (or ``conc``, ``c``, ``users``, ``clients``); an aggregate column says ``agg``,
``aggregate``, ``total`` or ``throughput``, or only a rate (``tok/s``, ``tokens/s``, ``t/s``,
``tps``), as in ``| Concurrency | Baseline tok/s | MTP tok/s |``; a per-request column says
``per-request``, ``per request``, ``per-user``, ``per user`` or ``/user``. With several arms side by side, the arm's
columns are those whose header contains the ``select`` word (default: the arm name), e.g.
``MTP agg tok/s`` for ``--arm mtp``. Values are taken as published (commas as thousands
separators allowed; ``-``, ``n/a`` or empty for not measured); nothing is recomputed, and what the
columns mean is whatever their author meant: the definitions say so.
"""
from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

from specsweep.importers.common import BadInput, Level, ToolRun, check_levels, nonblank_lines, read_text
from specsweep.results.store import MAX_KEY

TOOL = "results table"
READER = "specsweep.importers.table"
CONC = re.compile(r"^\s*(concurrency|concurrent( requests)?|conc|c|users|clients|batch( size)?)\b", re.I)
AGG = re.compile(r"\b(agg|aggregate|total|throughput|output tok/?s)\b|\b(tok(en)?s?|t)\s*/\s*s\b|\btps\b"
                 r"|tokens per second", re.I)
#: the shape every message about a missing column shows
SHAPE = ("| concurrency | baseline tok/s | mtp tok/s | baseline per-user tok/s | mtp per-user tok/s | "
         "(per-user columns optional; one arm's columns name it, or --select WORD)")
PER = re.compile(r"(per[- ]request|per[- ]user|/\s*user|per[- ]req)\b", re.I)
AGG_ID = "aggregate output tok/s as published in a table (window not stated)"
PER_ID = "per-request tok/s as published in a table (definition not stated)"


def _rows(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, cells) of a Markdown pipe table or a CSV file; separator rows dropped."""
    lines = nonblank_lines(read_text(path), path, extra=2)  # a header, a separator and one row per level
    piped = [(n, ln) for n, ln in lines if ln.strip().startswith("|")]
    out: list[tuple[int, list[str]]] = []
    if piped:
        for n, ln in piped:
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            if all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
                continue
            out.append((n, cells))
        return out
    for (n, _), cells in zip(lines, csv.reader(io.StringIO("\n".join(ln for _, ln in lines)))):
        out.append((n, [c.strip() for c in cells]))
    return out


def _value(cell: str, where: str) -> float:
    text = cell.replace(",", "").replace("\u2009", "").strip().strip("*").strip()
    if text.lower() in {"", "-", "—", "–", "n/a", "na", "nan"}:
        return math.nan
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(?:\s*(tok/s|t/s|tokens/s))?", text, re.I)
    if not m:
        raise BadInput(f"{where}: '{cell}' is not a number (write plain numbers, e.g. 1359 or 121.5)")
    return float(m.group(1))


def _pick(headers: list[str], pattern: re.Pattern[str], select: str, path: Path, what: str) -> int | None:
    cols = [i for i, h in enumerate(headers) if pattern.search(h) and not CONC.search(h)]
    if what == "aggregate":
        cols = [i for i in cols if not PER.search(headers[i])]
    if len(cols) > 1:
        chosen = [i for i in cols if select.lower() in headers[i].lower()]
        if len(chosen) != 1:
            raise BadInput(f"{path}: {len(cols)} {what} columns ({', '.join(repr(headers[i]) for i in cols)}) and "
                           f"{'none' if not chosen else 'several'} of them name '{select}'; pass --select WORD "
                           "with the word that marks this arm's columns")
        return chosen[0]
    return cols[0] if cols else None


def read(path: Path, *, select: str) -> ToolRun:
    """The table in ``path``; ``select``: the word that marks this arm's columns (see the module docstring)."""
    rows = _rows(path)
    if len(rows) < 2:
        raise BadInput(f"{path}: no table found (a header row and at least one row of values, as Markdown "
                       "'| concurrency | agg tok/s | ... |' or CSV)")
    check_levels(len(rows) - 1, path)
    line, headers = rows[0]
    conc = next((i for i, h in enumerate(headers) if CONC.search(h)), None)
    if conc is None:
        raise BadInput(f"{path}, line {line}: no concurrency column among {headers}; name it 'concurrency', "
                       f"as in {SHAPE}")
    agg = _pick(headers, AGG, select, path, "aggregate")
    if agg is None:
        raise BadInput(f"{path}, line {line}: no aggregate tok/s column among {headers}; name it e.g. "
                       f"'baseline tok/s', as in {SHAPE}")
    per = _pick(headers, PER, select, path, "per-request")
    levels = []
    seen: dict[int, str] = {}
    for n, cells in rows[1:]:
        where = f"{path}, line {n}"
        if len(cells) != len(headers):
            raise BadInput(f"{where}: {len(cells)} cells, the header has {len(headers)}")
        c = _value(cells[conc], where)
        if not (1 <= c <= MAX_KEY and c == int(c)):  # the range first: int() of inf raises
            raise BadInput(f"{where}: concurrency '{cells[conc][:40]}' must be a whole number from 1 to {MAX_KEY:,}")
        figures = {"output_tok_s": _value(cells[agg], where)}
        if per is not None:
            figures["request_tok_s_mean"] = _value(cells[per], where)
        if math.isnan(figures["output_tok_s"]):
            continue
        if int(c) in seen:
            raise BadInput(f"{where}: concurrency {int(c)} again (first at {seen[int(c)]}); a table holds one row per "
                           "concurrency: remove one, or import repeats as the tool's own result files")
        seen[int(c)] = f"line {n}"
        levels.append(Level(int(c), {k: v for k, v in figures.items() if v == v}, None, where))
    if not levels:
        raise BadInput(f"{path}: column '{headers[agg]}' holds no numbers")
    ids = {"output_tok_s": AGG_ID, "request_tok_s_mean": PER_ID}
    definitions = {"output_tok_s": f"'{headers[agg]}' as published in {path.name} (window not stated)"}
    if per is not None:
        definitions["request_tok_s_mean"] = (f"'{headers[per]}' as published in {path.name} (whether it includes "
                                             "queueing and time to first token was not stated)")
    return ToolRun(tool=TOOL, version=None, levels=levels, source=path, workload={"kind": "published-table"},
                   definitions=definitions, definition_ids=ids, reader=READER,
                   warnings=[f"Level figures transcribed from a table ({path.name}): no per-request samples, no "
                             "repeats and no latency percentiles; what each column means is whatever its author "
                             "meant, so it is compared only with arms read from tables."],
                   notes=[f"Columns read: concurrency = '{headers[conc]}', aggregate = '{headers[agg]}'"
                          + (f", per-request = '{headers[per]}'" if per is not None else "") + "."])
