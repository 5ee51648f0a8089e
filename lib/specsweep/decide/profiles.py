"""Workload profiles (what an operator optimises for) and the default set every report judges."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Objective = Literal["latency", "throughput", "balanced"]


SYNTHETIC_KINDS = {"random-ids", "fixed-ids", "random-text"}


class Profile(BaseModel):
    """What the operator cares about. Units: concurrency in requests, speeds in tok/s, times in s."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    objective: Objective
    concurrency_min: int = Field(1, ge=1)
    concurrency_max: int | None = Field(None, ge=1)
    min_user_tok_s: float | None = Field(None, gt=0, description="SLO: per-user speed at least this (tok/s)")
    max_ttft_p99_s: float | None = Field(None, gt=0, description="SLO: TTFT p99 at most this (s)")
    max_e2e_p99_s: float | None = Field(None, gt=0, description="SLO: end-to-end p99 at most this (s)")
    max_throughput_loss_pct: float = Field(5.0, ge=0, description="balanced: tolerated aggregate loss (%)")
    min_effect_pct: float = Field(2.0, ge=0, description="smaller deltas count as no difference (%), intervals or not")
    max_error_rate_increase: float = Field(0.01, ge=0, le=1, description="more failed requests than the baseline by this fraction loses a level")
    description: str = ""

    @model_validator(mode="after")
    def _range(self) -> Profile:
        if self.concurrency_max is not None and self.concurrency_max < self.concurrency_min:
            raise ValueError(f"concurrency_max ({self.concurrency_max}) is below concurrency_min ({self.concurrency_min})")
        return self


def parse_profile(raw: dict[str, Any] | Profile) -> Profile:
    """Validate a profile given as a dict (e.g. a notebook parameter); errors name the field."""
    if isinstance(raw, Profile):
        return raw
    if not isinstance(raw, dict):
        raise ValueError(f"profile must be a mapping with at least 'name' and 'objective', got {raw!r}")
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"'{'.'.join(map(str, e['loc'])) or 'profile'}': {e['msg']}" for e in exc.errors())
        raise ValueError(f"profile {raw.get('name', '?')!r}: {problems} "
                         "(objective is one of latency, throughput, balanced)") from exc


DEFAULT_PROFILES: list[dict[str, Any]] = [
    {"name": "Latency-sensitive (interactive, agentic)", "objective": "latency",
     "description": "Each user's speed matters most; aggregate throughput only as capacity."},
    {"name": "Batch throughput", "objective": "throughput",
     "description": "Offline or batch work: the tokens per second the hardware delivers (per GPU-second on a GPU server) matter, per-request speed does not."},
    {"name": "Interactive SLO: at least 60 tok/s per user", "objective": "throughput", "min_user_tok_s": 60,
     "description": "Most aggregate throughput while the mean per-user speed stays at or above 60 tok/s."},
]
