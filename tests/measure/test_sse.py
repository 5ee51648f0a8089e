"""The SSE decoder: line endings, events split across reads, timing per read, edge cases."""
from __future__ import annotations

import random

import pytest

from specsweep.measure.sse import SSEDecoder, SSEEvent, decode_reads

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def _datas(events: list[SSEEvent]) -> list[bytes]:
    return [e.data for e in events]


def _feed_all(chunks: list[bytes]) -> list[bytes]:
    dec = SSEDecoder()
    out: list[SSEEvent] = []
    for c in chunks:
        out.extend(dec.feed(c))
    return _datas(out)


STREAM = (b'data: {"a":1}\n\n'
          b": keep-alive comment\n\n"
          b'data: {"b":2}\r\n\r\n'
          b"event: update\rdata: line1\rdata: line2\r\r"
          b"data:nospace\n\n"
          b"data: [DONE]\n\n")
EXPECTED = [b'{"a":1}', b'{"b":2}', b"line1\nline2", b"nospace", b"[DONE]"]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_line_endings(ending: bytes) -> None:
    raw = b"data: x" + ending + ending + b"data: y" + ending + ending
    assert _feed_all([raw]) == [b"x", b"y"]


def test_whole_stream_in_one_read() -> None:
    assert _feed_all([STREAM]) == EXPECTED


def test_every_two_way_split_gives_the_same_events() -> None:
    for cut in range(len(STREAM) + 1):
        assert _feed_all([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_random_splits_and_single_bytes() -> None:
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randint(1, 12)))
        parts = [STREAM[i:j] for i, j in zip([0, *cuts], [*cuts, len(STREAM)])]
        assert _feed_all(parts) == EXPECTED
    assert _feed_all([STREAM[i:i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_crlf_split_across_reads_is_one_line_end() -> None:
    dec = SSEDecoder()
    assert _datas(dec.feed(b"data: a\r")) == []
    # the LF completes the CRLF of the data line; the next CRLF is the blank line
    assert _datas(dec.feed(b"\n\r\n")) == [b"a"]
    dec = SSEDecoder()
    assert _datas(dec.feed(b"data: a\r\n\r")) == [b"a"]  # CR alone already ends the blank line
    assert _datas(dec.feed(b"\ndata: b\r\n\r\n")) == [b"b"]
    dec = SSEDecoder()  # a full CRLF at the end of a read: a leading LF next is a blank line
    assert _datas(dec.feed(b"data: a\r\n")) == []
    assert _datas(dec.feed(b"\ndata: b\n\n")) == [b"a", b"b"]


def test_multiline_data_and_leading_space_rule() -> None:
    got = _feed_all([b"data: one\ndata:two\ndata:  three\ndata\n\n"])
    assert got == [b"one\ntwo\n three\n"]


def test_comments_fields_and_no_data_events() -> None:
    dec = SSEDecoder()
    evs = dec.feed(b": hello\n\nevent: ping\n\nid: 7\nretry: 1500\nevent: msg\ndata: x\n\nunknown: y\ndata: z\n\n")
    assert [(e.event, e.data, e.id, e.retry_ms) for e in evs] == [("msg", b"x", "7", 1500),
                                                                   ("message", b"z", "7", 1500)]
    assert dec.last_event_id == "7"


def test_done_marker_is_plain_data() -> None:
    assert _feed_all([b"data: [DONE]\n\n"]) == [b"[DONE]"]


def test_trailing_partial_event_is_flagged_incomplete() -> None:
    dec = SSEDecoder()
    assert _datas(dec.feed(b'data: {"a":1}\n\ndata: {"b":')) == [b'{"a":1}']
    tail = dec.flush()
    assert tail is not None and tail.complete is False and tail.data == b'{"b":'
    assert dec.flush() is None
    dec = SSEDecoder()
    dec.feed(b"data: [DONE]\n")  # missing only the blank line
    tail = dec.flush()
    assert tail is not None and tail.data == b"[DONE]" and not tail.complete
    assert SSEDecoder().flush() is None


def test_bom_is_dropped_even_when_split() -> None:
    assert _feed_all([b"\xef\xbb\xbfdata: a\n\n"]) == [b"a"]
    assert _feed_all([b"\xef", b"\xbb", b"\xbfdata: a\n\n"]) == [b"a"]
    assert _feed_all([b"\xef\xbb"]) == []


def test_empty_reads_are_harmless() -> None:
    assert _feed_all([b"", b"data: a\n", b"", b"\n", b""]) == [b"a"]


def test_event_time_is_the_read_that_completed_it() -> None:
    reads = [b"data: a\n\ndata: b\n\ndata: c", b"\n", b"\n", b"data: d\n\n"]
    times = [1.0, 2.0, 3.0, 4.0]
    got = decode_reads(reads, times)
    assert _datas(got.events) == [b"a", b"b", b"c", b"d"]
    # a and b completed by read 1 share its time; c's blank line came with read 3
    assert got.times == [1.0, 1.0, 3.0, 4.0]
    assert got.trailing is None


def test_decode_reads_reports_trailing_and_checks_lengths() -> None:
    got = decode_reads([b"data: a\n\ndata: b"], [5.0])
    assert _datas(got.events) == [b"a"] and got.trailing is not None and got.trailing.data == b"b"
    with pytest.raises(ValueError, match="times"):
        decode_reads([b"x"], [1.0, 2.0])
    assert decode_reads([b"data: a\n\n"]).times == [0.0]
