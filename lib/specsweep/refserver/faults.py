"""Fault injection for reliability tests, deterministic per request under ``--seed``.

Each generation request gets an index in arrival order (0, 1, 2, ...; health checks excluded).
Its faults are drawn from an RNG seeded by ``(seed, index)``, one independent draw per fault
kind in a fixed order, so the same seed and index always give the same faults, and changing one
rate does not reshuffle the others.

* ``error_rate``: the request is answered at once with HTTP 500 or 503 (half each) and an error
  body shaped like the real servers' (``{"error": {"message", "type", "param", "code"}}``).
* ``drop_rate``: a stream is closed mid-way (after a drawn 10-90 % of its tokens) without a
  final chunk or ``[DONE]``; a non-streaming request's connection is closed without a response.
* ``stall_rate`` / ``stall_s``: a stream stops sending for ``stall_s`` seconds at a drawn point
  (generation goes on; what was produced meanwhile arrives as one merged chunk after the pause);
  a non-streaming response is delayed by ``stall_s``.
* ``malformed_rate``: a stream carries one ``data:`` line that is not valid JSON at a drawn
  point (the stream then goes on normally).
* ``errors_after``: every request from this index on is answered with HTTP 500 as ``error_rate``'s
  are (a server that passes a client's first request, then fails every one).
* ``omit_usage``: every response leaves out token counts: no ``usage`` (OpenAI; no usage chunk,
  ``usage: null``) and no ``prompt_tokens``/``completion_tokens`` in SGLang ``meta_info``.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from specsweep.refserver.model import request_seed

__all__ = ["CountRewriter", "DataFaults", "FaultConfig", "FaultPlan"]


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The faults of one request (``None``: that fault does not happen)."""

    error_status: int | None = None
    #: fraction of the output after which the stream is dropped
    drop_at: float | None = None
    stall_at: float | None = None
    stall_s: float = 0.0
    malformed_at: float | None = None
    omit_usage: bool = False

    @property
    def streaming_faults(self) -> bool:
        """True when the stream needs per-chunk fault checks."""
        return (self.drop_at is not None or self.stall_at is not None
                or self.malformed_at is not None)


NO_FAULTS = FaultPlan()


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Fault rates (0..1) and the seed; ``plan(index)`` draws one request's faults."""

    seed: int = 0
    error_rate: float = 0.0
    drop_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 2.0
    malformed_rate: float = 0.0
    omit_usage: bool = False
    errors_after: int | None = None

    def __post_init__(self) -> None:
        for name in ("error_rate", "drop_rate", "stall_rate", "malformed_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], not {value}")
        if self.stall_s < 0:
            raise ValueError("stall_s must be >= 0")

    @property
    def active(self) -> bool:
        """True when any fault can happen."""
        return bool(self.error_rate or self.drop_rate or self.stall_rate or self.malformed_rate
                    or self.omit_usage or self.errors_after is not None)

    def plan(self, index: int) -> FaultPlan:
        """The faults of request ``index`` (deterministic)."""
        if not self.active:
            return NO_FAULTS
        rng = random.Random(request_seed(self.seed, index, "faults"))
        u_err, u_status, u_drop, u_drop_at, u_stall, u_stall_at, u_mal, u_mal_at = (
            rng.random() for _ in range(8))
        return FaultPlan(
            error_status=500 if self.errors_after is not None and index >= self.errors_after
            else (500 if u_status < 0.5 else 503) if u_err < self.error_rate else None,
            drop_at=0.1 + 0.8 * u_drop_at if u_drop < self.drop_rate else None,
            stall_at=0.1 + 0.8 * u_stall_at if u_stall < self.stall_rate else None,
            stall_s=self.stall_s,
            malformed_at=0.1 + 0.8 * u_mal_at if u_mal < self.malformed_rate else None,
            omit_usage=self.omit_usage,
        )


# ------------------------------------------------------------------ data faults (plausibility tests)

_COUNT_RE = re.compile(rb'"completion_tokens":(\d+)')


@dataclass(frozen=True, slots=True)
class DataFaults:
    """Faults in what the server claims rather than in how it answers (tests of count checks,
    cache flushes and redaction); every field off by default.

    * ``count_scale``: every ``completion_tokens`` the server sends is multiplied by this factor
      (a server that over-counts: 100 gives 100× the true throughput if nothing checks it);
    * ``count_value``: every ``completion_tokens`` is this number (e.g. 4294967295, 10**19);
    * ``count_rate``: the fraction of requests (drawn per request index under the seed) whose counts
      ``count_scale`` / ``count_value`` rewrite (default 1: all);
    * ``noninteger_after``: requests from this index on send non-integer counts (``n + 0.5``),
      a server that switches after the sweep's preflight;
    * ``tokenize_tokens``: ``POST /tokenize`` claims this many tokens whatever the text;
    * ``flush``: ``POST /flush_cache`` / ``/reset_prefix_cache`` fail: ``"500"`` (an HTTP 500),
      ``"hang"`` (no answer for an hour) or ``"reset"`` (the connection is closed unanswered);
    * ``echo_env``: injected error bodies quote the value of this environment variable of the
      server (as a server may quote its own token in an error);
    * ``echo_token``: injected error bodies quote this value (given as ``--fault-echo-token``, a
      secret-named flag: what a study masks from a server's argv);
    * ``echo_pad``: before what it quotes, injected error ``i`` writes ``(37 i) mod (echo_pad + 1)``
      filler characters, so that over a level the quoted secrets fall across a client's cut of the text;
    * ``echo_base64``: each quoted secret is quoted a second time as basic-auth gateways do,
      ``base64("user:" + secret)``.
    """

    count_scale: float = 1.0
    count_value: int | None = None
    count_rate: float = 1.0
    seed: int = 0
    noninteger_after: int | None = None
    tokenize_tokens: int | None = None
    flush: str | None = None
    echo_env: str | None = None
    echo_token: str | None = None
    echo_pad: int = 0
    echo_base64: bool = False

    def __post_init__(self) -> None:
        if self.flush not in (None, "500", "hang", "reset"):
            raise ValueError(f"flush fault must be 500, hang or reset, not {self.flush!r}")
        if self.count_scale <= 0:
            raise ValueError("count_scale must be > 0")
        if not 0.0 <= self.count_rate <= 1.0:
            raise ValueError(f"count_rate must be within [0, 1], not {self.count_rate}")

    def _miscounts(self, index: int) -> bool:
        if self.count_scale == 1.0 and self.count_value is None:
            return False
        return self.count_rate >= 1.0 or random.Random(request_seed(self.seed, index, "count")).random() < self.count_rate

    def rewrites_counts(self, index: int) -> bool:
        """True when request ``index``'s token counts are to be rewritten."""
        return self._miscounts(index) or (self.noninteger_after is not None and index >= self.noninteger_after)

    def count_text(self, n: int, index: int) -> bytes:
        """What request ``index`` claims instead of its true count ``n``."""
        if self._miscounts(index):
            n = self.count_value if self.count_value is not None else int(n * self.count_scale)
        if self.noninteger_after is not None and index >= self.noninteger_after:
            return b"%d.5" % n
        return b"%d" % n


class CountRewriter:
    """A response format (``streaming.*Format``) whose ``completion_tokens`` are rewritten by
    :meth:`DataFaults.count_text`; everything else is delegated unchanged."""

    def __init__(self, fmt: Any, faults: DataFaults, index: int) -> None:
        self._fmt = fmt
        self._faults = faults
        self._index = index

    def _sub(self, data: bytes) -> bytes:
        return _COUNT_RE.sub(lambda m: b'"completion_tokens":' + self._faults.count_text(int(m.group(1)), self._index),
                             data)

    def content(self, a: int, b: int, req: Any) -> bytes:
        return self._sub(self._fmt.content(a, b, req))

    def final(self, a: int, b: int, req: Any) -> bytes:
        return self._sub(self._fmt.final(a, b, req))

    def full_response(self, req: Any) -> bytes:
        return self._sub(self._fmt.full_response(req))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fmt, name)
