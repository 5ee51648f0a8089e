"""Writing a file so that a reader sees the old one or the new one, never a torn one.

Standard library only: :mod:`specsweep.results.study_record` writes ``study.json`` with it and is
read by the report builder before its kernel has loaded pandas. Files follow the user's umask.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def current_umask() -> int:
    """The process's file-creation mask (read from /proc on Linux, else set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_file(target: Path) -> Iterator[BinaryIO]:
    """A binary file open for writing that becomes ``target`` when the block ends without error
    (fsync, then rename), so readers see the old file or the new one, never a torn one; on error
    the partial file is deleted. The file follows the user's umask."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; result files follow the umask
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` so readers see the old file or the new one, never a torn one."""
    with atomic_file(target) as handle:
        handle.write(data)
