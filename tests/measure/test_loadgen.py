"""The closed loop: at most C in flight, every body once, order, stop, worker processes.

Talks to ``bench/fastsse_server.py`` started as a separate process; the server reports how many
streams it ever had open at once and the request ids it saw, in arrival order.
"""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import sys
import threading
import time
from collections.abc import Iterator
from time import perf_counter
from typing import Any

import httpx
import numpy as np
import pytest

from helpers import load_fastsse  # noqa: E402
from specsweep.measure.client import RawExchange
from specsweep.measure.loadgen import LoadGenerator, run_level, split_concurrency
from specsweep.servers.flavours import build_body

fastsse = load_fastsse()
FLAVOUR = "openai-completions"


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with fastsse.spawn() as (_, url):
        yield url


def _reset(url: str) -> None:
    httpx.post(url + "/stats/reset").raise_for_status()


def _stats(url: str) -> dict[str, Any]:
    return httpx.get(url + "/stats").json()


def _bodies(n: int, tokens: int = 20, itl_ms: float = 2.0, **fastsse_opts: Any) -> list[dict[str, Any]]:
    return [build_body(FLAVOUR, [i], tokens, extra={"rid": i, "fastsse": {"itl_ms": itl_ms, **fastsse_opts}})
            for i in range(n)]


def _check_closed_loop(url: str, res: Any, n: int, c: int, tokens: int) -> None:
    stats = _stats(url)
    assert stats["max_active"] <= c, stats["max_active"]
    assert stats["max_active"] >= min(c, n) - 1  # the loop really kept (about) C streams open
    assert sorted(int(r) for r in stats["rids"]) == list(range(n))  # every body sent exactly once
    assert res.request_index == list(range(n))  # records in issue order
    assert len(res.records) == n and all(r.ok for r in res.records), {r.error for r in res.records}
    assert all(r.output_tokens == tokens for r in res.records)
    assert res.max_in_flight <= c
    assert 0 < res.mean_in_flight <= c + 1e-9
    assert res.t_start == min(r.t_sent for r in res.records) and res.t_end == max(r.t_end for r in res.records)
    assert res.cpu_s > 0 and res.parse_cpu_s >= 0 and not res.stopped and res.cancelled == 0


def test_split_concurrency() -> None:
    assert split_concurrency(10, 4) == [3, 3, 2, 2]
    assert split_concurrency(1, 2) == [1, 0]
    assert sum(split_concurrency(257, 3)) == 257


def test_closed_loop_in_process(server_url: str) -> None:
    _reset(server_url)
    seen: list[tuple[int, int]] = []
    res = run_level(server_url, FLAVOUR, _bodies(60), 8, progress=lambda d, n: seen.append((d, n)))
    _check_closed_loop(server_url, res, 60, 8, 20)
    assert seen and seen[-1] == (60, 60) and all(n == 60 for _, n in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_closed_loop_two_worker_processes(server_url: str) -> None:
    _reset(server_url)
    before = perf_counter()
    with LoadGenerator(server_url, FLAVOUR, max_concurrency=8, workers=2) as gen:
        res = gen.run_level(_bodies(60), 8)
        _check_closed_loop(server_url, res, 60, 8, 20)
        # a second level on the same workers (the caller's warm-up, then the measured level)
        _reset(server_url)
        res2 = gen.run_level(_bodies(30), 5)
        _check_closed_loop(server_url, res2, 30, 5, 20)
    after = perf_counter()
    assert res.workers == 2
    # perf_counter is CLOCK_MONOTONIC: the workers' times fall inside the parent's bracket
    assert before < res.t_start < res.t_end < res2.t_start < res2.t_end < after


def _child_clock(q: Any) -> None:
    q.put(perf_counter())


def test_perf_counter_is_one_clock_across_processes() -> None:
    if sys.platform.startswith("linux"):
        assert "CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    before = perf_counter()
    p = ctx.Process(target=_child_clock, args=(q,))
    p.start()
    child = q.get(timeout=60)
    p.join()
    after = perf_counter()
    assert before < child < after


def test_failures_never_abort_the_level(server_url: str) -> None:
    _reset(server_url)
    bodies = _bodies(12, tokens=5, itl_ms=0)
    faults = {2: "http500", 5: "drop", 7: "error", 9: "malformed"}
    for i, f in faults.items():
        bodies[i]["fastsse"]["fault"] = f
    res = run_level(server_url, FLAVOUR, bodies, 3)
    assert res.request_index == list(range(12))
    for i, rec in zip(res.request_index, res.records):
        assert (rec.error is not None) == (i in faults), (i, rec.error)
    assert res.records[2].http_status == 500


@pytest.mark.parametrize("workers", [1, 2])
def test_stop_event_cancels_promptly(server_url: str, workers: int) -> None:
    stop = threading.Event()
    # 4 quick requests finish first; the slow ones (200 × 20 ms = 4 s) are in flight at the stop
    bodies = _bodies(4, tokens=2, itl_ms=1) + _bodies(20, tokens=200, itl_ms=20)
    with LoadGenerator(server_url, FLAVOUR, max_concurrency=4, workers=workers) as gen:
        timer = threading.Timer(0.5, stop.set)
        timer.start()
        t0 = time.monotonic()
        res = gen.run_level(bodies, 4, stop=stop)
        took = time.monotonic() - t0
        timer.cancel()
        assert res.stopped and res.cancelled >= 1
        assert took < 3.0  # far less than one slow request (4 s)
        assert set(res.request_index) <= set(range(4))  # only what finished, in order
        assert all(r.ok for r in res.records)
        # the generator is still usable after a stop
        again = gen.run_level(_bodies(3, tokens=2, itl_ms=0), 2)
        assert [r.ok for r in again.records] == [True, True, True]


def test_usable_from_a_running_event_loop(server_url: str) -> None:
    """A Jupyter kernel runs an asyncio loop in the calling thread; the loadgen must still work."""
    async def notebook_cell() -> Any:
        return run_level(server_url, FLAVOUR, _bodies(6, tokens=3, itl_ms=0), 2)

    res = asyncio.run(notebook_cell())
    assert [r.ok for r in res.records] == [True] * 6


def test_parse_budget_zero_without_spill_parses_in_the_loop(server_url: str) -> None:
    res = run_level(server_url, FLAVOUR, _bodies(6, tokens=4, itl_ms=0), 3, parse_budget_bytes=0, spill=False)
    assert all(r.ok and r.output_tokens == 4 for r in res.records)


def test_sglang_cumulative_streams_over_a_mebibyte(server_url: str) -> None:
    """SGLang repeats the whole text in every chunk: such big responses are parsed as they end."""
    bodies = [build_body("sglang", [i, 1, 2], 1200, extra={"rid": i, "fastsse": {"k": 3}}) for i in range(4)]
    res = run_level(server_url, "sglang", bodies, 2)
    for rec in res.records:
        assert rec.ok and rec.output_tokens == 1200 and rec.token_source == "usage"
        assert rec.chunk_tokens is not None and rec.chunk_tokens.sum() == 1200 and rec.chunk_tokens.max() == 3
        assert rec.finish_reason == "length" and rec.prompt_tokens == 3
        assert rec.server["spec_verify_ct"] == 400 and rec.output_digest is not None


def test_validation_names_the_parameter(server_url: str) -> None:
    with pytest.raises(ValueError, match="flavour"):
        LoadGenerator(server_url, "tgi", max_concurrency=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="workers"):
        LoadGenerator(server_url, FLAVOUR, max_concurrency=1, workers=0)
    with pytest.raises(ValueError, match="max_concurrency"):
        LoadGenerator(server_url, FLAVOUR, max_concurrency=0)
    with LoadGenerator(server_url, FLAVOUR, max_concurrency=2) as gen:
        with pytest.raises(ValueError, match="max_concurrency"):
            gen.run_level(_bodies(2), 3)
        with pytest.raises(ValueError, match="bodies"):
            gen.run_level([], 1)
    with pytest.raises(RuntimeError, match="closed"):
        gen.run_level(_bodies(1), 1)


def test_spilled_level_reads_back_every_response_exactly(server_url: str, tmp_path: Any) -> None:
    """Budget 0: every finished response goes to the level's temp file and is parsed from there."""
    bodies = _bodies(12, tokens=40, itl_ms=0)
    held = run_level(server_url, FLAVOUR, bodies, 4)
    spilled = run_level(server_url, FLAVOUR, bodies, 4, parse_budget_bytes=0, spill_dir=str(tmp_path))
    assert [r.output_tokens for r in spilled.records] == [40] * 12
    for a, b in zip(held.records, spilled.records):
        assert b.ok and np.array_equal(b.chunk_tokens, a.chunk_tokens) and b.output_digest == a.output_digest
        assert len(b.chunk_times) == len(a.chunk_times) and b.t_sent <= b.chunk_times[0] <= b.t_end
    assert list(tmp_path.iterdir()) == []  # the spool file is gone after the level


def test_spool_round_trips_reads_times_and_errors(tmp_path: Any) -> None:
    from specsweep.measure.loadgen.spool import _Spool

    spool = _Spool(str(tmp_path))
    a = RawExchange(t_sent=1.0, t_end=2.0, http_status=200, content_type="text/event-stream",
                    reads=[b"data: x\n", b"\n", b""], times=[1.25, 1.5, 1.75])
    b = RawExchange(t_sent=3.0, t_end=4.0, http_status=None, error="connect error: refused")
    ha, hb = spool.put(a), spool.put(b)
    assert spool.get(hb) == b and spool.get(ha) == a
    spool.close()


def test_long_streams_spill_while_they_stream(server_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the budget, a stream in flight moves its reads to the spool every SPILL_STEP_BYTES of
    body (it never holds the whole response) and the level still parses to the same records."""
    from specsweep.measure.client import SPILL_STEP_BYTES
    from specsweep.measure.loadgen import spool

    moved: list[int] = []
    real_spill = spool._Spool.spill

    def counting_spill(self: Any, raw: RawExchange) -> None:
        moved.append(raw.nbytes)
        real_spill(self, raw)

    monkeypatch.setattr(spool._Spool, "spill", counting_spill)
    # ≈ 2 MB a response (9,000 events of ≈ 220 bytes). A move is what a stream held below one step plus
    # its last read, and one read can be as large as the client's read buffer (256 KiB, more when the
    # loop runs late on a busy machine), so the response must be much larger than both for "never the
    # whole response" to be a property of the code rather than of the machine's load.
    tokens = 9000
    bodies = _bodies(8, tokens=tokens, itl_ms=0)
    held = run_level(server_url, FLAVOUR, bodies, 4)
    assert moved == []  # within the default budget nothing leaves memory
    spilled = run_level(server_url, FLAVOUR, bodies, 4, parse_budget_bytes=0, spill_dir=str(tmp_path))
    response_bytes = sum(moved) / len(bodies)  # all of a body but its last partial step moves in steps
    assert response_bytes > 150 * tokens
    assert min(moved) >= SPILL_STEP_BYTES and max(moved) < response_bytes / 2  # in steps, never whole
    assert len(moved) >= 8 * 2
    for a, b in zip(held.records, spilled.records):
        assert b.ok and b.output_tokens == tokens and b.output_digest == a.output_digest
        assert np.array_equal(b.chunk_tokens, a.chunk_tokens) and len(b.chunk_times) == len(a.chunk_times)
        assert np.all(np.diff(b.chunk_times) >= 0) and b.t_sent <= b.chunk_times[0] and b.chunk_times[-1] <= b.t_end
    assert list(tmp_path.iterdir()) == []


def test_sglang_cumulative_streams_are_not_spilled_while_streaming(server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Their bytes grow with the square of their length: parsed when they end, never spooled in steps."""
    from specsweep.measure.loadgen import spool

    def refuse(self: Any, raw: RawExchange) -> None:
        raise AssertionError("an SGLang cumulative stream was spilled while streaming")

    monkeypatch.setattr(spool._Spool, "spill", refuse)
    bodies = [build_body("sglang", [i, 1, 2], 600, extra={"rid": i, "fastsse": {"k": 3}}) for i in range(3)]
    res = run_level(server_url, "sglang", bodies, 3, parse_budget_bytes=0)
    assert all(r.ok and r.output_tokens == 600 for r in res.records)


def test_spool_round_trips_a_response_spilled_in_steps(tmp_path: Any) -> None:
    """Blocks written while the response streamed, then its rest: read back as one exchange."""
    from specsweep.measure.loadgen.spool import _Spool

    reads = [bytes([65 + i % 26]) * (i + 1) for i in range(40)]
    times = [10.0 + i / 7 for i in range(40)]
    whole = RawExchange(t_sent=9.0, t_end=20.0, http_status=200, content_type="text/event-stream",
                        reads=list(reads), times=list(times))
    spool = _Spool(str(tmp_path))
    # hold some reads, spill them, hold more: steps of 7, 1 and 17 reads, then the last 15 held
    ex = RawExchange(t_sent=9.0, t_end=20.0, http_status=200, content_type="text/event-stream")
    at = 0
    for cut in (7, 8, 25):
        ex.reads.extend(reads[at:cut])
        ex.times.extend(times[at:cut])
        spool.spill(ex)
        assert ex.reads == [] and ex.times == [] and ex.nbytes == 0
        at = cut
    ex.reads.extend(reads[at:])
    ex.times.extend(times[at:])
    handle = spool.put(ex)
    assert len(handle.segments) == 4 and spool.get(handle) == whole
    ex2 = RawExchange(t_sent=1.0, t_end=2.0, http_status=200, reads=[b"x"], times=[1.5])
    spool.spill(ex2)
    only_spilled = spool.put(ex2)  # nothing held after the last step: no empty block
    assert len(only_spilled.segments) == 1 and spool.get(only_spilled).reads == [b"x"]
    spool.close()


def test_parse_exchange_refuses_an_exchange_with_reads_still_spilled() -> None:
    from specsweep.measure.client import parse_exchange

    ex = RawExchange(t_sent=1.0, t_end=2.0, http_status=200, content_type="text/event-stream",
                     spilled=[(0, 1, 10)])
    with pytest.raises(ValueError, match="spilled"):
        parse_exchange(FLAVOUR, ex)
