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
* ``omit_usage``: every response leaves out token counts: no ``usage`` (OpenAI; no usage chunk,
  ``usage: null``) and no ``prompt_tokens``/``completion_tokens`` in SGLang ``meta_info``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from .model import request_seed

__all__ = ["FaultConfig", "FaultPlan"]


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
                    or self.omit_usage)

    def plan(self, index: int) -> FaultPlan:
        """The faults of request ``index`` (deterministic)."""
        if not self.active:
            return NO_FAULTS
        rng = random.Random(request_seed(self.seed, index, "faults"))
        u_err, u_status, u_drop, u_drop_at, u_stall, u_stall_at, u_mal, u_mal_at = (
            rng.random() for _ in range(8))
        return FaultPlan(
            error_status=(500 if u_status < 0.5 else 503) if u_err < self.error_rate else None,
            drop_at=0.1 + 0.8 * u_drop_at if u_drop < self.drop_rate else None,
            stall_at=0.1 + 0.8 * u_stall_at if u_stall < self.stall_rate else None,
            stall_s=self.stall_s,
            malformed_at=0.1 + 0.8 * u_mal_at if u_mal < self.malformed_rate else None,
            omit_usage=self.omit_usage,
        )
