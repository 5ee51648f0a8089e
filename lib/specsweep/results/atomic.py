"""Writing a file so that a reader sees the old one or the new one, never a torn one.

A folder is replaced the same way (:func:`replace_dir`). Standard library only:
:mod:`specsweep.results.study_record` writes ``study.json`` with it and is read by the report
builder before its kernel has loaded pandas. Files follow the user's umask.
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


#: Linux ``renameat2`` arguments: the current directory as base, and swap the two paths
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False
    where the C library or the file system does not offer it."""
    import ctypes
    import errno

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(new: Path, target: Path) -> None:
    """Put the folder ``new`` at ``target`` so a reader sees the old folder or the new one, never a
    mix of both: a rename where ``target`` does not exist, else an atomic exchange; afterwards
    ``new`` holds the old folder's contents, for the caller to delete. Where no exchange is
    offered, the old folder is renamed aside first (for an instant there is none at ``target``;
    its contents are never lost)."""
    if not target.exists():
        os.rename(new, target)
    elif not _exchange(new, target):
        aside = new.with_name(new.name + ".old")
        os.rename(target, aside)
        os.rename(new, target)
        os.rename(aside, new)
    with contextlib.suppress(OSError):  # make the rename durable where the file system allows
        fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
