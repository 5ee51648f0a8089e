"""A level's temporary file of unparsed responses (``_Spool``) and the handle of one in it (``_Spilled``).

When a level's unparsed response bytes exceed its budget (see ``loadgen``), finished responses, and
the reads of long streams still in flight, move here; they are read back one at a time when the
level is parsed.
"""
from __future__ import annotations

import os
import tempfile
from array import array
from dataclasses import dataclass

from specsweep.measure.client import RawExchange

__all__ = ["_Spilled", "_Spool"]

#: write buffer of a level's spool file (bytes)
_SPOOL_BUFFER = 1 << 20


@dataclass(slots=True)
class _Spilled:
    """A finished response whose reads and read times are in the level's spool file.

    ``meta``: the exchange without its reads/times; ``segments``: where its blocks start (bytes)
    and how many reads and body bytes each holds, in order (one block, or several when the response
    was spilled while it streamed).
    """

    meta: RawExchange
    segments: list[tuple[int, int, int]]


class _Spool:
    """One level's temporary file of unparsed responses (deleted when closed).

    A block is the read lengths (int64), the read times (float64 perf_counter seconds) and the body
    bytes, back to back; a response is one block or several (``client.SpillFn``: reads moved out
    while it streamed). Written from the measuring loop (buffered: one ``write`` system call per
    MiB), read back after the level.
    """

    __slots__ = ("_file", "_pos")

    def __init__(self, directory: str | None = None) -> None:
        self._file = tempfile.TemporaryFile(prefix="specsweep-level-", dir=directory, buffering=_SPOOL_BUFFER)
        self._pos = 0

    def put_block(self, reads: list[bytes], times: list[float]) -> tuple[int, int, int]:
        """Write one block of reads and their times; its ``(offset, reads, body bytes)``."""
        lens = array("q", map(len, reads))
        body = b"".join(reads)
        n_bytes = len(body)
        w = self._file.write
        w(lens)
        w(array("d", times))
        w(body)
        at = self._pos
        self._pos += 16 * len(reads) + n_bytes
        return at, len(reads), n_bytes

    def spill(self, raw: RawExchange) -> None:
        """Move ``raw``'s reads and times (held so far) to the file: a handle in ``raw.spilled``."""
        raw.spilled.append(self.put_block(raw.reads, raw.times))
        raw.reads.clear()
        raw.times.clear()

    def put(self, raw: RawExchange) -> _Spilled:
        """Write ``raw``'s reads and times (after any spilled while it streamed); the handle that
        reads them all back."""
        segments = [*raw.spilled]
        if raw.reads or not segments:
            segments.append(self.put_block(raw.reads, raw.times))
        meta = RawExchange(t_sent=raw.t_sent, t_end=raw.t_end, http_status=raw.http_status,
                           content_type=raw.content_type, error=raw.error)
        return _Spilled(meta, segments)

    def get(self, sp: _Spilled) -> RawExchange:
        """The exchange ``sp`` stands for, reads and times restored."""
        f = self._file
        f.flush()
        reads: list[bytes] = []
        times = array("d")
        for offset, n, n_bytes in sp.segments:
            f.seek(offset)
            lens = array("q")
            lens.frombytes(f.read(8 * n))
            times.frombytes(f.read(8 * n))
            body = f.read(n_bytes)
            pos = 0
            for ln in lens:
                reads.append(body[pos:pos + ln])
                pos += ln
        f.seek(0, os.SEEK_END)
        m = sp.meta
        return RawExchange(t_sent=m.t_sent, t_end=m.t_end, http_status=m.http_status,
                           content_type=m.content_type, reads=reads, times=times.tolist(), error=m.error)

    def close(self) -> None:
        self._file.close()
