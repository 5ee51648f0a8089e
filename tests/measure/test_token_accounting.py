"""Token accounting on its own (``token_accounting``): the three cases and the int32 rule, on
event lists shaped like the servers' streams (vLLM, SGLang ``/generate`` and OpenAI routes,
llama.cpp, a generic OpenAI server), on recorded streams, and on many drawn count sequences."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from specsweep.measure.client import RawExchange, parse_exchange
from specsweep.measure.sse import decode_reads
from specsweep.measure.token_accounting import MAX_COUNT, account_tokens, drop_implausible

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _times(n: int) -> list[float]:
    return [float(i + 1) for i in range(n)]


# ---- the three cases -------------------------------------------------------------------------------

def test_continuous_usage_times_only_chunks_that_carry_tokens() -> None:
    # vLLM chat with continuous_usage_stats: role chunk (count 0, no content), content chunks
    # counting 1, 4 (a speculative step of 3), 5, then the usage-only chunk repeating 5
    counts = [0, 1, 4, 5, 5]
    contents = [False, True, True, True, False]
    acc = account_tokens(_times(5), counts, contents, counts_per_chunk=False)
    assert acc.token_source == "usage" and acc.output_tokens == 5
    assert acc.chunk_times.tolist() == [2.0, 3.0, 4.0]
    assert acc.chunk_tokens is not None and acc.chunk_tokens.tolist() == [1, 3, 1]


def test_counts_at_the_end_only_time_content_chunks() -> None:
    # usage only in the final chunk (include_usage without continuous stats; llama.cpp-like)
    counts = [None, None, None, 54]
    contents = [True, True, True, False]
    acc = account_tokens(_times(4), counts, contents, counts_per_chunk=False)
    assert acc.token_source == "usage" and acc.output_tokens == 54 and acc.chunk_tokens is None
    assert acc.chunk_times.tolist() == [1.0, 2.0, 3.0]


def test_a_server_counting_some_content_chunks_only_is_not_continuous() -> None:
    # counting from the second content chunk would move TTFT to it: content chunks are timed instead
    counts = [None, 2, 3, 3]
    contents = [True, True, True, False]
    acc = account_tokens(_times(4), counts, contents, counts_per_chunk=False)
    assert acc.chunk_tokens is None and acc.output_tokens == 3 and acc.chunk_times.tolist() == [1.0, 2.0, 3.0]


def test_sglang_counts_are_per_chunk_even_where_some_are_missing() -> None:
    counts = [1, None, 3, 6]
    contents = [True, True, True, True]
    acc = account_tokens(_times(4), counts, contents, counts_per_chunk=True)
    assert acc.chunk_tokens is not None and acc.chunk_tokens.tolist() == [1, 2, 3]
    assert acc.chunk_times.tolist() == [1.0, 3.0, 4.0] and acc.output_tokens == 6
    # the same events from an OpenAI route are not continuous
    assert account_tokens(_times(4), counts, contents, counts_per_chunk=False).chunk_tokens is None


def test_no_count_at_all_counts_content_chunks() -> None:
    acc = account_tokens(_times(4), [None] * 4, [False, True, True, True], counts_per_chunk=False)
    assert acc.token_source == "chunks" and acc.output_tokens == 3 and acc.chunk_tokens is None
    assert acc.chunk_times.tolist() == [2.0, 3.0, 4.0]
    empty = account_tokens([], [], [], counts_per_chunk=True)
    assert empty.token_source == "chunks" and empty.output_tokens == 0 and empty.chunk_times.size == 0


def test_counts_without_content_chunks_are_continuous_when_two_differ() -> None:
    # token IDs only, no text: every chunk is content-less, but the counts rise
    acc = account_tokens(_times(3), [2, 5, 5], [False, False, False], counts_per_chunk=False)
    assert acc.chunk_tokens is not None and acc.chunk_tokens.tolist() == [2, 3] and acc.output_tokens == 5
    one = account_tokens(_times(2), [0, 5], [False, False], counts_per_chunk=False)
    assert one.chunk_tokens is None and one.output_tokens == 5 and one.chunk_times.size == 0


def test_a_falling_count_carries_nothing_until_the_maximum_is_passed() -> None:
    acc = account_tokens(_times(4), [3, 1, 2, 5], [True] * 4, counts_per_chunk=False)
    assert acc.chunk_tokens is not None and acc.chunk_tokens.tolist() == [3, 2]
    assert acc.chunk_times.tolist() == [1.0, 4.0] and acc.output_tokens == 5


@pytest.mark.parametrize("model", ["one per chunk", "speculative jumps", "gaps", "repeats and drops"])
def test_drawn_count_sequences_keep_the_totals(model: str) -> None:
    rng = random.Random(f"accounting-{model}")
    for _ in range(300):
        n = rng.randint(1, 60)
        if model == "one per chunk":
            counts: list[int | None] = list(range(1, n + 1))
        elif model == "speculative jumps":
            counts = list(np.cumsum([rng.randint(1, 5) for _ in range(n)]).tolist())
        elif model == "gaps":
            counts = [c if rng.random() > 0.3 else None for c in np.cumsum([rng.randint(0, 4) for _ in range(n)]).tolist()]
        else:
            counts = [max(0, c + rng.choice([0, 0, -2, 1])) for c in np.cumsum([rng.randint(0, 3) for _ in range(n)]).tolist()]
        contents = [rng.random() > 0.1 for _ in range(n)]
        per_chunk = rng.random() < 0.5
        acc = account_tokens(_times(n), counts, contents, counts_per_chunk=per_chunk)
        given = [c for c in counts if c is not None]
        if acc.chunk_tokens is not None:
            assert acc.token_source == "usage"
            assert int(acc.chunk_tokens.sum()) == acc.output_tokens == max([0, *given])
            assert (acc.chunk_tokens >= 1).all() and (np.diff(acc.chunk_times) > 0).all()
            assert len(acc.chunk_times) == len(acc.chunk_tokens)
        else:
            assert len(acc.chunk_times) == sum(contents)
            assert acc.output_tokens == (max(given) if given else sum(contents))
            assert acc.token_source == ("usage" if given else "chunks")


# ---- the int32 rule -------------------------------------------------------------------------------

def test_drop_implausible_keeps_possible_claims_as_given() -> None:
    counts: list[int | None] = [1, None, MAX_COUNT]
    kept, prompt, error = drop_implausible(counts, None, MAX_COUNT)
    assert kept is counts and prompt == MAX_COUNT and error is None


def test_drop_implausible_removes_an_impossible_completion_count() -> None:
    kept, prompt, error = drop_implausible([1, MAX_COUNT + 1, 3], None, 7)
    assert kept == [1, None, 3] and prompt == 7
    assert error is not None and f"{MAX_COUNT + 1:,}" in error and "completion tokens" in error


def test_drop_implausible_names_a_huge_float_count() -> None:
    kept, _, error = drop_implausible([1, None], 1e40, 7)
    assert kept == [1, None] and error is not None and "1e+40" in error
    _, _, error = drop_implausible([MAX_COUNT + 5], 1e40, None)
    assert error is not None and f"{MAX_COUNT + 5:,}" in error  # an integer claim is named first


def test_drop_implausible_prompt_count_only_when_completion_counts_are_possible() -> None:
    kept, prompt, error = drop_implausible([1, 2], None, MAX_COUNT + 1)
    assert kept == [1, 2] and prompt is None and error is not None and "prompt token count" in error
    _, prompt, error = drop_implausible([MAX_COUNT + 1], None, MAX_COUNT + 1)
    assert error is not None and "completion tokens" in error and prompt == MAX_COUNT + 1


# ---- recorded streams: the parser's events feed the accounting as read -----------------------------

def _events_by_hand(body: bytes, chat: bool) -> tuple[list[int | None], list[bool]]:
    """Per JSON event, the count and whether it carried content, read with the json module."""
    counts: list[int | None] = []
    contents: list[bool] = []
    for ev in decode_reads([body], [0.0]).events:
        if ev.data.strip() == b"[DONE]":
            break
        obj = json.loads(ev.data)
        usage = obj.get("usage") or {}
        c = usage.get("completion_tokens")
        counts.append(c if isinstance(c, int) else None)
        ch = (obj.get("choices") or [{}])[0]
        text = (ch.get("delta") or {}).get("content") if chat else ch.get("text")
        contents.append(bool(text) or bool(ch.get("token_ids")))
    return counts, contents


@pytest.mark.parametrize("fixture, flavour, expected", [
    ("vllm/chat-stream-spec-summary.txt", "openai-chat", 54),
    ("vllm/chat-stream-spec-detailed.txt", "openai-chat", None),
    ("sglang/completions-stream-spec-tokens-details.txt", "openai-completions", 106),
])
def test_recorded_streams_account_as_their_events_say(fixture: str, flavour: str, expected: int | None) -> None:
    body = (FIXTURES / fixture).read_bytes()
    events = body.split(b"\n\n")
    reads = [e + b"\n\n" for e in events if e.strip()]
    raw = RawExchange(t_sent=0.0, t_end=99.0, http_status=200, content_type="text/event-stream",
                      reads=reads, times=_times(len(reads)))
    rec = parse_exchange(flavour, raw)  # type: ignore[arg-type]
    counts, contents = _events_by_hand(body, chat=flavour == "openai-chat")
    want = account_tokens(_times(len(counts)), counts, contents, counts_per_chunk=False)
    assert rec.error is None
    assert rec.output_tokens == want.output_tokens and rec.token_source == want.token_source
    assert rec.chunk_times.tolist() == want.chunk_times.tolist()
    assert (rec.chunk_tokens is None) == (want.chunk_tokens is None)
    if want.chunk_tokens is not None:
        assert rec.chunk_tokens is not None and rec.chunk_tokens.tolist() == want.chunk_tokens.tolist()
    if expected is not None:
        assert rec.output_tokens == expected
