"""Performance profiles of the reference server: load, validate, override.

A profile is a JSON file in ``refserver/profiles/`` (or any path ending in ``.json``) that holds
the *physical* terms of one simulated deployment: the hardware (GPU count, memory, bandwidth,
FLOPs), the model (parameters read per step, MoE expert routing, KV bytes), engine step costs
(fixed per-step overhead, prefill cost per token), the memory budget that sizes the token pool,
and the speculative-decoding terms (draft cost, verify factor, mean accept length). Every section
has a ``notes`` string that says where its numbers come from (JSON allows no comments).

Units are in the field names: ``_ms`` milliseconds, ``_gib`` GiB (2**30 bytes), ``_gb_s``
decimal GB/s (1e9 bytes per second), ``_b`` billions of parameters, ``_tflops`` 1e12 FLOP/s.

Overrides use dotted paths into the profile, e.g. ``decode.fixed_ms=5`` or
``speculative.mean_accept_length=2.4`` (``--set`` on the command line); values are parsed as
JSON when they can be (numbers, ``true``, ``null``), else taken as strings, and the whole profile
is validated again, so a typo or an out-of-range value is an error that names the field.
"""
from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specsweep.errors import InputError

__all__ = [
    "Profile",
    "ProfileError",
    "apply_overrides",
    "available_profiles",
    "load_profile",
]


class ProfileError(InputError, ValueError):
    """A profile could not be found, parsed, validated or overridden (message says which/why)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
    notes: str = ""


class Hardware(_Section):
    """The accelerators: ``n_gpus`` ranks of tensor parallelism (SGLang ``tp_size``)."""

    gpu_name: str
    n_gpus: int = Field(ge=1, description="tensor-parallel ranks (tp_size)")
    gpu_mem_gib: float = Field(gt=0, description="memory per GPU, GiB")
    mem_bandwidth_gb_s: float = Field(gt=0, description="peak memory bandwidth per GPU, GB/s")
    bandwidth_efficiency: float = Field(gt=0, le=1, description="achieved / peak bandwidth")
    peak_tflops: float = Field(gt=0, description="dense peak per GPU at the weight dtype, TFLOP/s")
    flops_efficiency: float = Field(gt=0, le=1, description="achieved / peak FLOP/s in decode")


class ModelTerms(_Section):
    """What one forward pass reads and computes.

    ``dense_params_b`` are read on every step whatever the batch (attention / linear-attention
    layers, shared experts, embeddings, LM head); ``expert_params_b`` are the routed experts, of
    which a step reads the fraction its tokens touch (see ``model.frac_experts_touched``). A dense
    model has ``expert_params_b = 0``.
    """

    model_path: str
    architecture: str = ""
    context_length: int = Field(ge=16)
    dense_params_b: float = Field(ge=0)
    expert_params_b: float = Field(ge=0)
    num_experts: int = Field(ge=1)
    experts_per_token: int = Field(ge=1)
    bytes_per_param: float = Field(gt=0)
    active_params_b: float = Field(gt=0, description="params used per token (FLOPs = 2 x this)")
    kv_read_bytes_per_token: float = Field(
        ge=0, description="bytes of KV cache read per context token per forward, all ranks"
    )
    vocab_size: int = Field(
        default=32000, ge=16,
        description="token IDs the model has (0 .. vocab_size-1); prompt IDs at or above it are "
                    "rejected with the simulated server's error for an out-of-vocabulary token",
    )
    routing_hot_fraction: float = Field(
        default=0.5, gt=0, lt=1, description="share of experts that are 'hot' (routing skew)"
    )
    routing_hot_share: float = Field(
        default=0.5, gt=0, lt=1, description="share of routing picks that go to hot experts"
    )

    @model_validator(mode="after")
    def _check(self) -> ModelTerms:
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token must be <= num_experts")
        q = self.experts_per_token / self.num_experts
        h, s = self.routing_hot_fraction, self.routing_hot_share
        if s * q / h > 1 or (1 - s) * q / (1 - h) > 1:
            raise ValueError(
                "routing skew makes a per-token expert probability exceed 1: lower "
                "routing_hot_share or raise routing_hot_fraction"
            )
        return self


class Decode(_Section):
    """Per-step costs of a decode (or verify) forward that are not weight/KV reads or FLOPs."""

    fixed_ms: float = Field(ge=0, description="per-forward overhead: launches, all-reduce latency")
    per_token_ms: float = Field(default=0.0, ge=0, description="extra cost per token in the step")


class Prefill(_Section):
    """Prefill (prompt) forward: ``fixed_ms + max(weight-read ms, tokens x ms_per_token)``."""

    fixed_ms: float = Field(ge=0)
    ms_per_token: float = Field(ge=0)
    chunked_prefill_size: int = Field(ge=1, description="max prompt tokens per prefill step")


class Memory(_Section):
    """Token pool (SGLang ``max_total_num_tokens``) from the per-rank memory budget.

    ``pool = (gpu_mem_gib x mem_fraction_static - weights - draft weights - reserved) x 2**30
    / pool_bytes_per_token_per_rank``; ``max_total_num_tokens`` set here overrides the derivation.
    """

    mem_fraction_static: float = Field(gt=0, le=1)
    weights_gib_per_rank: float = Field(ge=0)
    reserved_gib_per_rank: float = Field(ge=0)
    pool_bytes_per_token_per_rank: float = Field(gt=0)
    max_total_num_tokens: int | None = Field(default=None, ge=1)


class Speculative(_Section):
    """Speculative decoding (``--spec mtp``): SGLang NEXTN, reported as EAGLE."""

    launch_algorithm: str = "NEXTN"
    algorithm: str = "EAGLE"
    num_steps: int = Field(ge=1, le=16, description="draft tokens proposed per step (chain)")
    eagle_topk: int = Field(default=1, ge=1)
    num_draft_tokens: int | None = Field(
        default=None, ge=2, description="tokens verified per request per step; topk 1: steps+1"
    )
    mean_accept_length: float = Field(
        ge=1, description="mean tokens a request gains per verify step, bonus token included"
    )
    overhead_ms: float = Field(ge=0, description="per-step spec bookkeeping (fixed)")
    draft_step_ms: float = Field(ge=0, description="fixed cost of one draft forward")
    draft_ms_per_request: float = Field(ge=0, description="draft cost per running request")
    verify_factor: float = Field(default=1.0, gt=0, description="verify forward cost multiplier")
    prefill_factor: float = Field(default=1.0, gt=0, description="prefill cost multiplier (draft extend)")
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)
    draft_weights_gib_per_rank: float = Field(default=0.0, ge=0)
    draft_pool_bytes_per_token_per_rank: float = Field(default=0.0, ge=0)
    max_total_num_tokens: int | None = Field(default=None, ge=1)
    default_max_running_requests: int = Field(default=48, ge=1)

    @model_validator(mode="after")
    def _check(self) -> Speculative:
        if self.num_draft_tokens is None:
            if self.eagle_topk != 1:
                raise ValueError("num_draft_tokens must be given when eagle_topk > 1")
            self.num_draft_tokens = self.num_steps + 1
        elif self.eagle_topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            raise ValueError("with eagle_topk 1, num_draft_tokens must be num_steps + 1")
        if self.mean_accept_length > self.num_steps + 1:
            raise ValueError(
                f"mean_accept_length {self.mean_accept_length} exceeds num_steps + 1 = "
                f"{self.num_steps + 1}"
            )
        return self

    @property
    def draft_tokens(self) -> int:
        """Tokens verified per request per step (``num_draft_tokens``, resolved)."""
        assert self.num_draft_tokens is not None
        return self.num_draft_tokens


class EngineDefaults(_Section):
    """Scheduler defaults and the simulated text."""

    max_running_requests: int | None = Field(
        default=None, ge=1, description="cap without speculation; null: SGLang's default rule"
    )
    natural_length_min: int = Field(default=16, ge=1, description="shortest EOS length, tokens")
    natural_length_max: int = Field(default=512, ge=1, description="longest EOS length, tokens")

    @model_validator(mode="after")
    def _check(self) -> EngineDefaults:
        if self.natural_length_max < self.natural_length_min:
            raise ValueError("natural_length_max must be >= natural_length_min")
        return self


class Profile(BaseModel):
    """One simulated deployment (see the module docstring for units and overrides)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    served_model_name: str | None = None
    hardware: Hardware
    model: ModelTerms
    decode: Decode
    prefill: Prefill
    memory: Memory
    speculative: Speculative
    engine: EngineDefaults = EngineDefaults()

    @property
    def model_name(self) -> str:
        """The served model name (``specsweep-sim/<profile>`` unless the profile sets one)."""
        return self.served_model_name or f"specsweep-sim/{self.name}"


def _profiles_dir() -> Path:
    return Path(str(resources.files("specsweep.refserver") / "profiles"))


def available_profiles() -> list[str]:
    """Names of the profiles shipped with the package, sorted."""
    return sorted(p.stem for p in _profiles_dir().glob("*.json"))


def _raw_profile(name_or_path: str) -> dict[str, Any]:
    path = Path(name_or_path)
    if name_or_path.endswith(".json") and path.is_file():
        source = path
    else:
        source = _profiles_dir() / f"{name_or_path}.json"
        if not source.is_file():
            raise ProfileError(
                f"unknown profile {name_or_path!r}; valid profiles: "
                f"{', '.join(available_profiles())} (or a path to a .json profile file)"
            )
    try:
        data = json.loads(source.read_text())
    except json.JSONDecodeError as exc:
        raise ProfileError(f"profile file {source} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"profile file {source} must hold a JSON object")
    return data


def _validate(data: dict[str, Any], what: str) -> Profile:
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ProfileError(f"invalid {what}: {problems}") from None


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def apply_overrides(profile: Profile, overrides: list[str] | tuple[str, ...]) -> Profile:
    """Return a copy of ``profile`` with ``section.key=value`` overrides applied and validated.

    Raises ``ProfileError`` naming the override when the path does not exist or the result is
    invalid.
    """
    if not overrides:
        return profile
    data = copy.deepcopy(profile.model_dump(mode="json"))
    for item in overrides:
        if "=" not in item:
            raise ProfileError(f"override {item!r} must look like section.key=value")
        dotted, value_text = item.split("=", 1)
        parts = [p for p in dotted.strip().split(".") if p]
        if not parts:
            raise ProfileError(f"override {item!r} has an empty key")
        node: Any = data
        for depth, key in enumerate(parts[:-1]):
            if not isinstance(node, dict) or key not in node or not isinstance(node[key], dict):
                valid = sorted(k for k, v in node.items() if isinstance(v, dict)) if isinstance(
                    node, dict) else []
                raise ProfileError(
                    f"override {item!r}: no section {'.'.join(parts[:depth + 1])!r}; "
                    f"sections: {', '.join(valid)}"
                )
            node = node[key]
        leaf = parts[-1]
        if not isinstance(node, dict) or leaf not in node:
            valid = sorted(node) if isinstance(node, dict) else []
            raise ProfileError(
                f"override {item!r}: unknown key {dotted!r}; keys there: {', '.join(valid)}"
            )
        if leaf == "num_steps" and parts[0] == "speculative":
            # keep the chain consistent: topk 1 implies num_draft_tokens = num_steps + 1
            node["num_draft_tokens"] = None
        node[leaf] = _parse_value(value_text)
    return _validate(data, f"profile {profile.name!r} after overrides {list(overrides)}")


def load_profile(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> Profile:
    """Load a shipped profile by name (or a ``.json`` path), validate it, apply overrides."""
    profile = _validate(_raw_profile(name_or_path), f"profile {name_or_path!r}")
    return apply_overrides(profile, overrides)
