"""Server-sent events (SSE) decoding, done after the fact on timestamped reads.

The measuring hot path (``client``) only timestamps and stores the raw bytes of every read; this
module turns those reads into events afterwards, following the WHATWG "event stream" parsing rules:

- lines end in CRLF, LF or CR (a CRLF split across two reads counts once);
- ``data:`` lines of one event are joined with ``\\n``; one leading space after the colon is
  dropped (``data:x`` and ``data: x`` are the same);
- lines starting with ``:`` are comments; ``event``, ``id`` and ``retry`` fields are kept;
- a blank line dispatches the event; an event with no ``data`` line is not dispatched.

Timing rule: an event's time is the arrival time of the read that completed it (the read holding
its terminating blank line); several events completed by one read share that read's time.

Data is kept as ``bytes`` (``orjson.loads`` takes bytes directly); field names and ``event``/``id``
values are decoded as UTF-8.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEDecoder", "TimedEvents", "decode_reads"]

_BOM = b"\xef\xbb\xbf"
_EOL = re.compile(rb"\r\n|\r|\n")


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event. ``data`` is the joined ``data:`` lines (bytes, no trailing newline).

    ``complete`` is False only for the event returned by :meth:`SSEDecoder.flush`: the stream ended
    before the blank line that would have dispatched it.
    """

    data: bytes
    event: str = "message"
    id: str | None = None
    retry_ms: int | None = None
    complete: bool = True


class SSEDecoder:
    """Incremental SSE decoder: :meth:`feed` bytes as they arrived, get the events each completes.

    >>> d = SSEDecoder()
    >>> [e.data for e in d.feed(b"data: a\\n\\ndata: b")], [e.data for e in d.feed(b"\\n\\n")]
    ([b'a'], [b'b'])
    """

    __slots__ = ("_partial", "_skip_lf", "_data", "_has_data", "_event", "_last_id", "_retry",
                 "_pending_fields", "_started")

    def __init__(self) -> None:
        self._partial = b""        # bytes of an unterminated line carried to the next feed
        self._skip_lf = False      # previous feed ended in CR: a leading LF belongs to it
        self._data: list[bytes] = []
        self._has_data = False
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._pending_fields = False  # any field line seen since the last dispatch
        self._started = False         # first bytes seen (a leading UTF-8 BOM is dropped)

    @property
    def last_event_id(self) -> str | None:
        """The last ``id`` field seen (SSE's "last event ID buffer")."""
        return self._last_id

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode one read; return the events it completed, in order."""
        if not chunk:
            return []
        if not self._started:
            buf = self._partial + chunk  # before the start, _partial holds only BOM bytes
            if len(buf) < 3 and _BOM.startswith(buf):
                self._partial = buf  # too short to tell whether it is a BOM
                return []
            self._partial = b""
            self._started = True
            chunk = buf[3:] if buf[:3] == _BOM else buf
            if not chunk:
                return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return []
        if self._partial:
            chunk = self._partial + chunk
            self._partial = b""
        out: list[SSEEvent] = []
        n = len(chunk)
        pos = 0
        # one pass over the read, slicing each data value once (events can be megabytes when a
        # server repeats the whole text in every chunk)
        eol_search = _EOL.search if b"\r" in chunk else None
        find = chunk.find
        startswith = chunk.startswith
        while pos < n:
            if eol_search is None:
                eol = find(b"\n", pos)
                if eol < 0:
                    self._partial = chunk[pos:]
                    break
                nxt = eol + 1
            else:
                m = eol_search(chunk, pos)
                if m is None:
                    self._partial = chunk[pos:]
                    break
                eol, nxt = m.start(), m.end()
                if nxt == n and nxt - eol == 1 and chunk[eol] == 13:  # a lone CR ends the read: an LF may follow
                    self._skip_lf = True
            if eol == pos:
                ev = self._dispatch()
                if ev is not None:
                    out.append(ev)
            elif startswith(b"data:", pos):
                v = pos + 5
                if v < eol and chunk[v] == 32:
                    v += 1
                self._data.append(chunk[v:eol])
                self._has_data = True
                self._pending_fields = True
            elif chunk[pos] != 58:  # not a ":" comment
                self._field(chunk[pos:eol])
            pos = nxt
        return out

    def flush(self) -> SSEEvent | None:
        """End of stream: return the event left without its blank line, if it has data.

        Per the SSE standard such an event is not dispatched; it is returned with
        ``complete=False`` so the caller can tell a truncated stream (or a server that omitted the
        final blank line) and decide. An unterminated last line counts as a line here.
        """
        if self._partial:
            line = self._partial
            self._partial = b""
            if line[:1] != b":":
                self._field(line)
        self._skip_lf = False
        ev = self._dispatch()
        if ev is not None:
            ev.complete = False
        return ev

    def _field(self, line: bytes) -> None:
        self._pending_fields = True
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._has_data = True
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\x00" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry":
            if value.isdigit():
                self._retry = int(value)
        # unknown fields are ignored, as the standard says

    def _dispatch(self) -> SSEEvent | None:
        if not self._pending_fields:
            return None
        self._pending_fields = False
        event = self._event or "message"
        self._event = ""
        if not self._has_data:
            return None
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        self._data = []
        self._has_data = False
        return SSEEvent(data=data, event=event, id=self._last_id, retry_ms=self._retry)


@dataclass(slots=True)
class TimedEvents:
    """Events decoded from a list of timestamped reads.

    ``times[i]`` is the arrival time (seconds, ``perf_counter``) of the read that completed
    ``events[i]``. ``trailing`` is the event left without its blank line at the end (or None).
    """

    events: list[SSEEvent]
    times: list[float]
    trailing: SSEEvent | None


def decode_reads(reads: Sequence[bytes], times: Sequence[float] | None = None) -> TimedEvents:
    """Decode a whole stream given as the bytes of each read and each read's arrival time.

    ``times`` may be None (all event times are then 0.0). Raises ValueError when the two lists have
    different lengths.
    """
    if times is None:
        times = [0.0] * len(reads)
    elif len(times) != len(reads):
        raise ValueError(f"decode_reads: reads ({len(reads)}) and times ({len(times)}) differ in length")
    dec = SSEDecoder()
    events: list[SSEEvent] = []
    ev_times: list[float] = []
    feed = dec.feed
    for chunk, t in zip(reads, times):
        got = feed(chunk)
        if got:
            events.extend(got)
            ev_times.extend([t] * len(got))
    return TimedEvents(events=events, times=ev_times, trailing=dec.flush())


def iter_data(events: Iterable[SSEEvent]) -> Iterable[bytes]:
    """The ``data`` of each event (convenience for tests and tools)."""
    return (e.data for e in events)
