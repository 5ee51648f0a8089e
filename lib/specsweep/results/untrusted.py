"""Reading a file nobody vouches for: bounded in bytes, UTF-8 named by line, JSON without tracebacks.

Study files, prompt files and other tools' result files are read through these functions, so each
bound is checked the same way everywhere. Every function takes the :class:`~specsweep.errors.InputError`
subclass its caller raises (``StudyError``, ``DatasetError``, ``BadInput``) and raises it with one
line naming the file (and line) and what to do. Standard library only.
"""
from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

from specsweep.errors import InputError

#: bytes read from a file per block (decompressed bytes for a ``.gz`` file)
BLOCK = 1 << 20


def env_limit(name: str, default: int, error: type[InputError]) -> int:
    """A whole-number limit from the environment variable ``name`` (``default`` when unset)."""
    text = os.environ.get(name, "").strip().replace("_", "")
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise error(f"environment variable {name}={os.environ[name]!r}: give a whole number >= 1 (default {default:,})")
    return int(text)


def read_bounded(path: Path, limit: int, error: type[InputError], *, too_big: str) -> bytearray:
    """The bytes of ``path`` (decompressed when its name ends in ``.gz``), read in blocks of
    :data:`BLOCK` and never more than ``limit`` + 1 bytes: beyond ``limit`` an ``error`` of
    ``"{path}: {too_big}"`` (say the limit and how to raise it). A gzip bomb costs ``limit`` bytes."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as handle:
            data = bytearray()  # grown in place: no second copy of what was read
            while len(data) <= limit:
                block = handle.read(min(BLOCK, limit + 1 - len(data)))
                if not block:
                    break
                data += block
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error) as exc:  # gzip raises BadGzipFile (an OSError), EOFError, zlib.error
        raise error(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    if len(data) > limit:
        raise error(f"{path}: {too_big}")
    return data


def decode_utf8(data: bytes | bytearray, source: object, error: type[InputError], *, fix: str = "save the file as UTF-8") -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); else an ``error`` naming the line
    and column of the first byte that is not UTF-8, and ``fix``."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"{source} line {line}: byte 0x{data[exc.start]:02x} at column {column} is not UTF-8 text; "
                    f"{fix}") from None


def parse_json(text: str, where: object, error: type[InputError]) -> Any:
    """``json.loads(text)``; a :class:`json.JSONDecodeError` passes through (the caller may try
    another reading), but what ``json`` raises beyond it for hostile text is an ``error`` naming
    ``where``: nesting deep enough to exhaust the recursion limit, an integer longer than Python
    converts (4,300 digits)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise error(f"{where}: nested too deeply to read (thousands of brackets inside one another); "
                    "pass the file the tool wrote, unedited") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise error(f"{where}: not a readable JSON value ({exc}); pass the file the tool wrote, unedited") from None
