"""A chunk that is valid JSON but not shaped as its API says (``choices`` or ``delta`` or
SGLang's ``meta_info`` of the wrong type) is read as lacking those fields: ``parse_exchange``
returns a record (it never raises on bad data), and the well-shaped chunks around it still count."""
from __future__ import annotations

import orjson
import pytest

from specsweep.measure.client import RawExchange, parse_exchange

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def _raw(*objs: object) -> RawExchange:
    reads = [b"data: " + orjson.dumps(o) + b"\n\n" for o in objs] + [b"data: [DONE]\n\n"]
    return RawExchange(t_sent=0.0, t_end=9.0, http_status=200, content_type="text/event-stream",
                       reads=reads, times=[float(i + 1) for i in range(len(reads))])


_CMPL_OK = [{"choices": [{"index": 0, "text": " a"}], "usage": {"completion_tokens": 1}},
            {"choices": [{"index": 0, "text": " b", "finish_reason": "length"}], "usage": {"completion_tokens": 2}}]
_CHAT_OK = [{"choices": [{"index": 0, "delta": {"content": " a"}}], "usage": {"completion_tokens": 1}},
            {"choices": [{"index": 0, "delta": {"content": " b"}, "finish_reason": "length"}],
             "usage": {"completion_tokens": 2}}]
_SG_OK = [{"text": " a", "output_ids": [5], "meta_info": {"completion_tokens": 1}},
          {"text": " a b", "output_ids": [5, 6], "meta_info": {"completion_tokens": 2, "finish_reason": {"type": "length"}}}]

CASES = {
    "completions choices of numbers": ("openai-completions", _CMPL_OK[:1] + [{"choices": [1]}] + _CMPL_OK[1:]),
    "completions choices a string": ("openai-completions", _CMPL_OK[:1] + [{"choices": "abc"}] + _CMPL_OK[1:]),
    "completions choices an object": ("openai-completions", _CMPL_OK[:1] + [{"choices": {"text": "x"}}] + _CMPL_OK[1:]),
    "chat delta a string": ("openai-chat", _CHAT_OK[:1] + [{"choices": [{"delta": "x"}]}] + _CHAT_OK[1:]),
    "chat delta a list": ("openai-chat", _CHAT_OK[:1] + [{"choices": [{"delta": ["x"]}]}] + _CHAT_OK[1:]),
    "sglang meta_info a string": ("sglang", _SG_OK[:1] + [{"text": " a", "meta_info": "x"}] + _SG_OK[1:]),
    "sglang meta_info a list": ("sglang", _SG_OK[:1] + [{"text": " a", "meta_info": [1, 2]}] + _SG_OK[1:]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_misshaped_chunk_is_read_as_lacking_the_field(case: str) -> None:
    flavour, objs = CASES[case]
    rec = parse_exchange(flavour, _raw(*objs))  # type: ignore[arg-type]
    assert rec.error is None
    assert rec.output_tokens == 2 and rec.token_source == "usage"
    assert rec.chunk_tokens is not None and rec.chunk_tokens.tolist() == [1, 1]
    assert rec.finish_reason == "length"


@pytest.mark.parametrize("flavour", ["sglang", "openai-completions", "openai-chat"])
@pytest.mark.parametrize("event, says", [(b"null", "not a JSON object: null"), (b"[1]", "not a JSON object: [1]"),
                                         (b"{bad", "malformed chunk JSON (event 0): {bad")])
def test_an_event_that_is_no_json_object_says_which(flavour: str, event: bytes, says: str) -> None:
    raw = RawExchange(t_sent=0.0, t_end=9.0, http_status=200, content_type="text/event-stream",
                      reads=[b"data: " + event + b"\n\ndata: [DONE]\n\n"], times=[1.0])
    rec = parse_exchange(flavour, raw)  # type: ignore[arg-type]
    assert rec.error is not None and says in rec.error
