"""Names that become paths, and the folders commands write into, checked before anything is written.

Every command that turns a user's name (an arm, a report name) into a file or folder name, or
writes into a folder the user named, checks it here first: :func:`check_name` refuses anything
but a plain folder-safe name, :func:`inside` refuses a target that resolves outside its out dir
(``..``, an absolute part, a symbolic link leading out), and :func:`writable_dir` refuses a folder
that is a file, lies under a file, or cannot be written (``/proc``, a read-only file system). Each
raises :class:`PathError`, an :class:`~specsweep.errors.InputError` (exit status 2) whose one-line
message names the option or parameter (``what``) and what to do.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

from specsweep.errors import InputError

__all__ = ["NAME_PATTERN", "PathError", "check_name", "inside", "writable_dir"]

#: a folder-safe name: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit
#: (so never '.', '..', hidden, nor holding a separator)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")  # \Z: no trailing newline


class PathError(InputError, ValueError):
    """A name or folder a command cannot write to; the message names the option and what to do."""


def check_name(value: object, what: str) -> str:
    """``value`` when it is a folder-safe name (:data:`NAME_PATTERN`); else :class:`PathError` naming ``what``."""
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise PathError(f"{what} {value!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or "
                        "digit (it names a file or folder), e.g. 'mtp-cap128'")
    return value


def inside(base: Path | str, target: Path | str, what: str) -> Path:
    """``target`` resolved (links followed), when it lies in ``base`` resolved; else :class:`PathError`."""
    root, path = Path(base).resolve(), Path(target).resolve()
    if path != root and not path.is_relative_to(root):
        raise PathError(f"{what}: {target} resolves to {path}, outside its folder {root}; give a plain name")
    return path


def writable_dir(path: Path | str, what: str, *, create: bool = True) -> Path:
    """Create the folder ``path`` (and its parents; with ``create=False`` only check that they could be)
    and check that a file can be written in it; :class:`PathError` naming ``what`` when it is a file,
    lies under one, or cannot be written."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise PathError(f"{what} {folder}: exists and is not a folder; give a folder")
    probe = folder if create else next(p for p in [folder, *folder.absolute().parents] if p.exists())
    if not create and not probe.is_dir():
        raise PathError(f"{what} {folder}: lies under {probe}, a file; give a folder")
    try:
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise PathError(f"{what} {folder}: cannot write there ({exc.strerror or type(exc).__name__}); "
                        "give a folder you can write to") from None
    return folder
