"""The study file: a YAML description of every arm of a study, validated; errors name key and line.

A study measures several server configurations (*arms*) with one shared workload and turns them
into one report (docs/studies.md). Example (``data/studies/demo.yaml`` is a complete one)::

    title: "MTP vs baseline"          # report title
    notes: "Why this workload, ..."   # optional: shown on the report's study section (Markdown)
    name: my-study                    # optional: reports/<name>.html, data/runs/studies/<name>/
    baseline: baseline                # the arm every other arm is compared against
    repeats: 2                        # interleaved repeats (baseline, mtp, mtp, baseline, ...)
    sweep:                            # notebooks/sweep.ipynb parameters shared by every arm
      concurrency: [1, 4, 16, 64]
      input_tokens: 1000
      output_tokens: 1000
    profiles: null                    # report profiles (notebooks/report.ipynb), null: defaults
    arms:
      - name: baseline
        endpoint: http://gpu-host:30000          # (a) a server that is already running
      - name: mtp
        serve:                                   # (b) a server the runner starts and stops
          argv: [python3, -m, sglang.launch_server, --model-path, M, --port, "{port}",
                 --speculative-algorithm, NEXTN]
          env: {CUDA_VISIBLE_DEVICES: "0,1,2,3"}
          cwd: /srv
          ready_url: "http://127.0.0.1:{port}/health"
          start_timeout_s: 900
      - name: sim
        embedded: {profile: tiny, spec: mtp, args: ["--max-running-requests", "128"]}  # (c)
      - name: "mtp-steps{steps}-cap{cap}"        # (d) a grid: one arm per combination
        resources: {GPU: 4}                      # backend ray: what its task needs
        grid: {steps: [1, 3], cap: [48, 128]}
        embedded: {spec: mtp, args: [--speculative-num-steps, "{steps}", --max-running-requests, "{cap}"]}

Placeholders: ``{port}`` in ``serve`` (argv, env values, ready_url, endpoint) is a free TCP port
picked when the arm starts; ``{key}`` of a grid is replaced in the arm's name, label and every
string of its server description. Other braces (a JSON ``--speculative-config``) are left alone.
A grid arm whose name has no placeholder gets ``-<key><value>`` appended per key
(``mtp`` × {steps: [2], cap: [128]} → ``mtp-steps2-cap128``). ``port_range: [30000, 30100]``
(top level, or per arm) confines ``{port}`` to that range (inclusive).

Limits: a study of more than ``max_arms`` arms (grids expanded; default 256) is refused before any
grid is expanded, with its number of sweeps and a rough duration; raise ``max_arms`` (≤ 100,000)
or pass ``--allow-large-grid`` to mean it. A study file is UTF-8, at most 1 MiB, nested at most
64 levels, with no key twice in one mapping; each of these errors names the file and line.

``parallel: N`` (top level; default 1) lets the local backend run up to N sweeps at once, each
in a worker process running the same per-arm function as the Ray backend
(:mod:`specsweep.study.parallel`): for embedded arms, whose simulated servers each take a free
port and little CPU; real servers sharing one machine should stay at 1 (they would compete).

``backend: ray`` (``python -m specsweep.study FILE --backend ray``) runs arms in parallel as Ray
tasks, each with its ``resources``; the top-level ``ray: {address, max_retries}`` says where and how
often an arm whose node was lost is re-run (:mod:`specsweep.study.ray_backend`).

Times are in seconds. Relative ``out_dir``/``report_dir`` are relative to the working directory.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specsweep.decide import DEFAULT_PROFILES, Profile
from specsweep.errors import InputError
from specsweep.measure.config import ARM_PATTERN, SERVER_OUTPUT_TOKENS, SweepConfig
from specsweep.results.untrusted import decode_utf8, read_bounded

#: sweep-notebook parameters the study sets per arm (not allowed in the shared ``sweep`` section)
RUNNER_PARAMETERS: dict[str, str] = {
    "endpoint": "give it per arm ('endpoint', 'serve' or 'embedded')",
    "arm": "it is the arm's 'name'",
    "label": "give it per arm as 'label'",
    "out_dir": "give it at the study's top level (or --out-dir)",
    "resume": "use the study's --resume",
    "repeats": "give it at the study's top level: the study interleaves repeats across arms",
    "embedded_profile": "give it per arm in 'embedded: {profile: ...}'",
    "embedded_spec": "give it per arm in 'embedded: {spec: ...}'",
    "embedded_args": "give it per arm in 'embedded: {args: [...]}'",
}
#: the sweep notebook's parameters a study may share (see notebooks/sweep.ipynb)
SWEEP_PARAMETERS: tuple[str, ...] = (
    "api", "model", "concurrency", "input_tokens", "output_tokens", "workload", "requests_per_level",
    "min_requests_per_level", "target_moe_pct", "max_requests_per_level", "warmup_requests", "request_timeout_s",
    "seed", "temperature", "client_workers", "flush_cache",
)
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: names of variables and flags whose values are secrets (HF_TOKEN, SPECSWEEP_API_KEY, --api-key, …);
#: whole words between '_' so TOKENIZERS_PARALLELISM is not one
SECRET_NAME = re.compile(r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)($|_)", re.IGNORECASE)
Scalar = str | int | float | bool


class StudyError(InputError, ValueError):
    """The study file is invalid; the message names the file, the key, the line and the fix."""


#: a study of more arms (grids expanded) is refused unless its ``max_arms`` or ``--allow-large-grid`` allows it
DEFAULT_MAX_ARMS = 256
#: never more arms than this, whatever is allowed (each arm is a folder and at least one sweep)
HARD_MAX_ARMS = 100_000
#: a study file larger than this (bytes) is refused before it is parsed
MAX_STUDY_BYTES = 1 << 20
#: deepest nesting of YAML collections a study file may have
MAX_DEPTH = 64
#: most YAML nodes a study file may expand to (aliases counted each time they are used)
MAX_NODES = 200_000


def _check_port_range(value: tuple[int, int] | None) -> tuple[int, int] | None:
    if value is not None:
        low, high = value
        if not 1 <= low <= high <= 65535:
            raise ValueError(f"give [low, high] with 1 <= low <= high <= 65535, e.g. [30000, 30100]; got [{low}, {high}]")
    return value


class ServeSpec(BaseModel):
    """A server the runner starts (argument list, never a shell) and stops."""

    model_config = ConfigDict(extra="forbid")
    argv: list[str] = Field(min_length=1, description="program and arguments; '{port}' is a free port")
    env: dict[str, str] = Field(default_factory=dict, description="added to the runner's environment")
    cwd: str | None = Field(None, description="working directory of the server")
    ready_url: str = Field(description="GET answers 2xx once the server is ready, e.g. http://127.0.0.1:{port}/health")
    endpoint: str | None = Field(None, description="scheme://host:port to measure; default: that of ready_url")
    start_timeout_s: float = Field(600.0, gt=0, description="seconds to wait for ready_url")
    stop_grace_s: float = Field(30.0, ge=0, description="seconds between SIGTERM and SIGKILL of the process group")

    @field_validator("ready_url", "endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("give an http(s) URL, e.g. http://127.0.0.1:{port}/health")
        return value


class EmbeddedSpec(BaseModel):
    """Arguments of the embedded reference server, which the sweep notebook starts (simulated)."""

    model_config = ConfigDict(extra="forbid")
    profile: str = "qwen3.5-122b-a10b-4x-rtxpro6000"
    spec: Literal["auto", "off", "mtp"] = "auto"
    args: list[str] = Field(default_factory=list)


class ArmSpec(BaseModel):
    """One arm (or, with ``grid``, a template of several)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    label: str | None = None
    endpoint: str | None = None
    serve: ServeSpec | None = None
    embedded: EmbeddedSpec | None = None
    grid: dict[str, list[Scalar]] | None = None
    resources: dict[str, float] = Field(default_factory=dict, description="backend ray: what the arm's task needs, "
                                        "e.g. {GPU: 4} (CPU and GPU are Ray's own; others are custom resources)")
    port_range: tuple[int, int] | None = Field(None, description="serve arms: pick '{port}' in [low, high] "
                                               "(inclusive); default: the study's port_range, else any free port")

    @field_validator("port_range")
    @classmethod
    def _port_range(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        return _check_port_range(value)
    control: bool = Field(False, description="a control arm: configured like the baseline, never recommended; its "
                                             "deviation from the baseline measures noise and drift")

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in value.items() if v < 0}
        if bad:
            raise ValueError(f"resource amounts must be >= 0, got {bad}")
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("give scheme://host:port, e.g. http://127.0.0.1:30000")
        return value.rstrip("/") if value else value

    @field_validator("grid")
    @classmethod
    def _grid(cls, value: dict[str, list[Scalar]] | None) -> dict[str, list[Scalar]] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("a grid needs at least one key with a list of values")
        for key, values in value.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"grid key {key!r}: use letters, digits and '_' (it is a {{placeholder}})")
            if key == "port":
                raise ValueError("grid key 'port' is reserved for the free port placeholder")
            if not values:
                raise ValueError(f"grid key {key!r} has no values")
        return value

    @model_validator(mode="after")
    def _one_server(self) -> ArmSpec:
        given = [k for k in ("endpoint", "serve", "embedded") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"arm {self.name!r} needs exactly one of 'endpoint' (a running server), 'serve' "
                             f"(a command the study starts) or 'embedded' (the reference server); it has "
                             f"{', '.join(given) if given else 'none'}")
        return self


class RayOptions(BaseModel):
    """How the ``ray`` backend reaches its cluster and retries an arm whose node was lost."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = Field(default=None, description="Ray cluster address (e.g. 'auto'); None: RAY_ADDRESS, else a local instance")
    max_retries: int = Field(default=1, ge=0, description="re-runs of an arm whose worker or node died (a failed server is not retried)")


class SentinelSpec(BaseModel):
    """Runs measured again at the end of a study, so the report can measure the machine's drift."""

    model_config = ConfigDict(extra="forbid")
    levels: list[int] = Field(min_length=1, description="concurrency levels measured again (one or two of the sweep's)")
    arms: list[str] | None = Field(None, description="arms measured again (default: the baseline)")


@dataclass(frozen=True)
class Slot:
    """One sweep run of one arm: its index (run folder ``r<index>``), the study repeat it belongs to
    (prompt seed ``seed + repeat``), the levels it measures (None: all) and whether it is a sentinel."""

    index: int
    repeat: int
    levels: tuple[int, ...] | None = None
    sentinel: bool = False


#: what the report says about each run order
ORDER_TEXT: dict[str, str] = {
    "interleaved": "forward on even repeats, reversed on odd ones",
    "abba": "ABBA over levels: at each level the arms in turn, forward at even levels and reversed at odd ones "
            "(within each repeat), consecutive levels of one arm in one run",
}


class AdaptiveSpec(BaseModel):
    """An adaptive study (:mod:`specsweep.study.adaptive`): measure level by level what keeps a
    decision open, stop when every profile named is settled or the budget is spent."""

    model_config = ConfigDict(extra="forbid")
    budget_device_minutes: float = Field(gt=0, description="minutes of measurement (the levels' measured windows, "
                                                           "every arm together) the study may spend at most")
    profiles: list[str] | None = Field(None, min_length=1, description="names of the study's profiles whose decisions "
                                       "must settle (default: every profile the report judges)")
    target_flip_pct: float = Field(5.0, gt=0, le=50, description="a profile is settled when the probability that "
                                   "the runs still allowed change the sign of a level it reads is at most this (%)")
    coarse_levels: int = Field(4, ge=2, le=64, description="levels of the first, coarse pass (both ends included)")
    max_repeats: int | None = Field(None, ge=1, le=100, description="most runs of one arm at one level (default: "
                                    "the study's repeats, at least 3)")


class StudySpec(BaseModel):
    """A whole study file."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1)
    notes: str | None = Field(None, description="what the reader should know about the study (Markdown), "
                                                "e.g. how its workload differs from a reference and what that changes")
    name: str | None = None
    baseline: str = "baseline"
    repeats: int = Field(1, ge=1, description="interleaved repeats of every arm")
    sweep: dict[str, Any] = Field(default_factory=dict)
    profiles: list[Profile] | None = None
    out_dir: str | None = None
    report_dir: str = "reports"
    ray: RayOptions = Field(default_factory=RayOptions)
    port_range: tuple[int, int] | None = Field(None, description="serve arms pick '{port}' in [low, high] "
                                               "(inclusive), e.g. [30000, 30100] where a firewall allows those")
    max_arms: int | None = Field(None, ge=1, le=HARD_MAX_ARMS, description=f"refuse a study of more arms (grids expanded); "
                                 f"default {DEFAULT_MAX_ARMS}, at most {HARD_MAX_ARMS}")

    order: Literal["interleaved", "abba"] = Field(
        "interleaved", description="interleaved: whole arms, forward on even repeats and reversed on odd ones; "
                                   "abba: also within a repeat, level by level (more server restarts)")
    sentinel: SentinelSpec | None = Field(None, description="levels (and arms) measured again at the end, to "
                                                            "measure drift")
    parallel: int = Field(1, ge=1, le=64, description="backend local: sweeps run at once, each in a worker process "
                          "(1: one after another, right for real servers that share a machine; embedded arms can "
                          "run several at once)")
    adaptive: AdaptiveSpec | None = Field(None, description="choose each measurement by what keeps a decision open "
                                                           "(docs/studies.md, 'Adaptive studies')")
    arms: list[ArmSpec] = Field(min_length=1)

    @field_validator("port_range")
    @classmethod
    def _port_range(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        return _check_port_range(value)

    @model_validator(mode="after")
    def _sentinel_levels(self) -> StudySpec:
        if self.sentinel is not None:
            levels = SweepConfig.model_validate(self.sweep).concurrency
            bad = [c for c in self.sentinel.levels if c not in levels]
            if bad:
                raise ValueError(f"sentinel levels {bad} are not among the sweep's concurrency levels {levels}: "
                                 "a sentinel measures a level again, so pick one or two of those")
            names = {a.name for a in self.arms}
            unknown = [a for a in self.sentinel.arms or [] if a not in names and not any(x.grid for x in self.arms)]
            if unknown:
                raise ValueError(f"sentinel arms {unknown} are not arms of the study ({', '.join(sorted(names))})")
        return self

    @model_validator(mode="after")
    def _adaptive(self) -> StudySpec:
        if self.adaptive is None:
            return self
        if self.order != "interleaved" or self.sentinel is not None:
            raise ValueError("adaptive: an adaptive study chooses its own order, level by level; remove "
                             f"{'order' if self.order != 'interleaved' else 'sentinel'} (or the adaptive block)")
        known = [p.name for p in self.profiles] if self.profiles is not None else [p["name"] for p in DEFAULT_PROFILES]
        unknown = [n for n in self.adaptive.profiles or [] if n not in known]
        if unknown:
            raise ValueError(f"adaptive.profiles: {', '.join(map(repr, unknown))} is not a profile of the study; "
                             f"name one of {', '.join(map(repr, known))}")
        return self

    @model_validator(mode="after")
    def _parallel_ports(self) -> StudySpec:
        if self.parallel > 1:
            for arm in self.arms:
                s = arm.serve
                if s is not None and "{port}" not in s.ready_url + (s.endpoint or "") + " ".join(s.argv):
                    raise ValueError(f"parallel: {self.parallel} runs arms at once, but serve arm {arm.name!r} has a "
                                     "fixed port (no '{port}' in its argv and ready_url), so two of its sweeps would "
                                     "share it: use '{port}' there, or parallel: 1")
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not ARM_PATTERN.match(value):
            raise ValueError("use 1-64 letters, digits, '.', '_' or '-' (it names the report and folder)")
        return value

    @field_validator("sweep")
    @classmethod
    def _sweep(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if key in RUNNER_PARAMETERS:
                raise ValueError(f"'{key}' is set by the study, not shared: {RUNNER_PARAMETERS[key]}")
            if key not in SWEEP_PARAMETERS:
                raise ValueError(f"unknown sweep parameter '{key}'; shared ones are {', '.join(SWEEP_PARAMETERS)}")
        SweepConfig.model_validate(value)  # the sweep's own rules (levels, lengths, 'auto' values)
        return value


# ------------------------------------------------------------------------------------------ arms


@dataclass(frozen=True)
class Arm:
    """One expanded arm: a name, how its server is reached, and the grid values that made it."""

    name: str
    label: str | None
    kind: Literal["endpoint", "serve", "embedded"]
    endpoint: str | None = None
    serve: ServeSpec | None = None
    embedded: EmbeddedSpec | None = None
    grid_values: dict[str, Scalar] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)
    #: serve arms: where ``{port}`` is picked, [low, high] inclusive (None: any free port)
    port_range: tuple[int, int] | None = None
    control: bool = False

    def describe(self) -> str:
        """One line: the arm and how it is reached (the serve command with secret env values hidden)."""
        if self.kind == "endpoint":
            return f"{self.name}: endpoint {self.endpoint} (already running)"
        if self.kind == "embedded":
            e = self.embedded
            assert e is not None
            args = f" args {shlex.join(e.args)}" if e.args else ""
            return f"{self.name}: embedded reference server (simulated), profile {e.profile}, spec {e.spec}{args}"
        s = self.serve
        assert s is not None
        env = " ".join(f"{k}={'***' if SECRET_NAME.search(k) else shlex.quote(v)}" for k, v in s.env.items())
        hidden = set(secret_argv_values(s.argv))

        def mask(a: str) -> str:
            if a in hidden:
                return "***"
            flag, _, value = a.partition("=")
            return f"{flag}=***" if value and value in hidden else a

        argv = shlex.join([mask(a) for a in s.argv])
        return (f"{self.name}: serve {(env + ' ') if env else ''}{argv}"
                f"{f' (cwd {s.cwd})' if s.cwd else ''}; ready when GET {s.ready_url} answers "
                f"(≤ {s.start_timeout_s:g} s)")


def secret_argv_values(argv: list[str]) -> list[str]:
    """Values of secret-named flags in an argument list (``--api-key K``, ``--hf-token=T``)."""
    out = []
    for flag, value in zip(argv, argv[1:]):
        if flag.startswith("-") and "=" not in flag and SECRET_NAME.search(flag.replace("-", "_")):
            out.append(value)
    out += [a.split("=", 1)[1] for a in argv
            if a.startswith("-") and "=" in a and SECRET_NAME.search(a.split("=", 1)[0].replace("-", "_"))]
    return out


def _fill(value: Any, values: dict[str, Scalar]) -> Any:
    """Replace ``{key}`` grid placeholders in every string of ``value`` ({port} is kept for later)."""
    if isinstance(value, str):
        def one(match: re.Match[str]) -> str:
            key = match.group(1)
            if key in values:
                return str(values[key])
            return match.group(0)
        return PLACEHOLDER.sub(one, value)
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    return value


def _name_part(value: Scalar) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return re.sub(r"[^A-Za-z0-9._]+", "_", text)


def grid_size(spec: ArmSpec) -> int:
    """How many arms an entry expands to (the product of its grid's value counts), without expanding."""
    return math.prod(len(v) for v in (spec.grid or {}).values())


#: per-request output speed assumed by :func:`plan_duration_s` (tokens/s of one request's stream)
ASSUMED_STREAM_TOK_S = 100.0


def plan_duration_s(spec: StudySpec, n_arms: int) -> tuple[float, int, int]:
    """A rough duration of a study of ``n_arms`` arms from its plan, in seconds, with its sweeps and
    requests: each level runs ⌈(warm-up + measured requests) ÷ C⌉ rounds of ``output_tokens``
    tokens at :data:`ASSUMED_STREAM_TOK_S` per request (server starts not counted)."""
    cfg = SweepConfig.model_validate(spec.sweep)
    out = cfg.output_tokens if isinstance(cfg.output_tokens, int) else SERVER_OUTPUT_TOKENS
    per_sweep_s = sum(math.ceil((cfg.requests_for(c) + cfg.warmups_for(c)) / c) * out / ASSUMED_STREAM_TOK_S
                      for c in cfg.concurrency)
    requests = sum(cfg.requests_for(c) + cfg.warmups_for(c) for c in cfg.concurrency)
    sweeps = n_arms * spec.repeats
    return per_sweep_s * sweeps, sweeps, requests * sweeps


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:,.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:,.0f} hours"
    return f"{seconds / 60:,.0f} minutes"


def check_arm_count(spec: StudySpec, node: yaml.Node | None, source: str, allow_large_grid: bool = False) -> int:
    """Count the arms the study expands to, before expanding; raise :class:`StudyError` beyond the
    limit (``max_arms``, default :data:`DEFAULT_MAX_ARMS`; :data:`HARD_MAX_ARMS` with
    ``allow_large_grid``; never above :data:`HARD_MAX_ARMS`) with how long the study would take."""
    counts = [grid_size(entry) for entry in spec.arms]
    total = sum(counts)
    limit = HARD_MAX_ARMS if allow_large_grid else min(spec.max_arms or DEFAULT_MAX_ARMS, HARD_MAX_ARMS)
    if total <= limit:
        return total
    biggest = max(range(len(counts)), key=counts.__getitem__)
    line = _line(node, ("arms", biggest, "grid")) if spec.arms[biggest].grid else _line(node, ("arms",))
    seconds, sweeps, requests = plan_duration_s(spec, total)
    grid = spec.arms[biggest].grid or {}
    shape = " × ".join(f"{len(v)} {k}" for k, v in grid.items())
    how = ("this is above the hard limit of every study; split it into several studies" if total > HARD_MAX_ARMS
           else f"if you mean it, set max_arms: {total} in the study (or pass --allow-large-grid)")
    raise StudyError(
        f"{source}{f' line {line}' if line else ''}: key 'arms.{biggest}.grid': the study expands to {total:,} arms "
        f"(arm {biggest} alone: {shape or 1} = {counts[biggest]:,}), more than the limit of {limit:,}. With "
        f"{spec.repeats} repeat(s) that is {sweeps:,} sweeps and {requests:,} requests: about {_duration(seconds)} "
        f"at {ASSUMED_STREAM_TOK_S:g} tokens/s per request, not counting server starts. Shrink the grid; {how}")


def expand_arm(spec: ArmSpec, port_range: tuple[int, int] | None = None) -> list[Arm]:
    """The arms of one entry: itself, or one per combination of its grid (in the grid's order).
    ``port_range``: the study's, for an entry without its own. Count first (:func:`grid_size`)."""
    grid = spec.grid or {}
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
        values = dict(zip(keys, combo))
        used = {m.group(1) for m in PLACEHOLDER.finditer(spec.name)}
        name = _fill(spec.name, {k: _name_part(v) for k, v in values.items()})
        if keys and not used & set(keys):
            name += "".join(f"-{k}{_name_part(v)}" for k, v in values.items())
        data = spec.model_dump(exclude={"name", "grid", "resources", "port_range"}, exclude_none=True)
        data = _fill(data, values)
        out.append(Arm(
            name=name, label=data.get("label"), kind=next(k for k in ("endpoint", "serve", "embedded") if k in data),
            endpoint=data.get("endpoint"), serve=ServeSpec(**data["serve"]) if "serve" in data else None,
            embedded=EmbeddedSpec(**data["embedded"]) if "embedded" in data else None, grid_values=values,
            resources=dict(spec.resources), port_range=spec.port_range or port_range,
            control=spec.control))
    return out


# ----------------------------------------------------------------------------------------- study


@dataclass
class Study:
    """A validated study: its spec, expanded arms, and the file it came from."""

    spec: StudySpec
    arms: list[Arm]
    path: Path | None = None
    #: an adaptive study's runs so far, in time order (set by :mod:`specsweep.study.adaptive_run`);
    #: None: the schedule follows from the file
    adaptive_runs: list[tuple[Arm, Slot]] | None = None

    @property
    def name(self) -> str:
        """Folder and report name: the file's ``name``, else the file's stem."""
        return self.spec.name or (self.path.stem if self.path else "study")

    @property
    def title(self) -> str:
        return self.spec.title

    @property
    def baseline(self) -> str:
        return self.spec.baseline

    def default_out_dir(self) -> Path:
        """Where result sets go unless ``--out-dir``: the file's ``out_dir`` or data/runs/studies/<name>."""
        return Path(self.spec.out_dir) if self.spec.out_dir else Path("data/runs/studies") / self.name

    def order(self, repeat: int) -> list[Arm]:
        """Arms in the order measured in ``repeat``: forward on even repeats, reversed on odd ones
        (baseline, mtp, mtp, baseline, …), so a linear drift of the machine weighs on every arm alike."""
        return list(self.arms) if repeat % 2 == 0 else list(reversed(self.arms))

    def schedule(self) -> list[tuple[Arm, Slot]]:
        """Every sweep run in time order (see :class:`Slot`): the repeats in the study's ``order``,
        then the sentinel runs. With ``interleaved`` and no sentinel, run index = repeat. An adaptive
        study's schedule is the runs it chose so far (:attr:`adaptive_runs`)."""
        if self.adaptive_runs is not None:
            return list(self.adaptive_runs)
        levels = list(SweepConfig.model_validate(self.spec.sweep).concurrency)
        count: dict[str, int] = {}
        out: list[tuple[Arm, Slot]] = []

        def add(arm: Arm, repeat: int, cs: tuple[int, ...] | None, sentinel: bool = False) -> None:
            out.append((arm, Slot(count.get(arm.name, 0), repeat, cs, sentinel)))
            count[arm.name] = count.get(arm.name, 0) + 1

        for r in range(self.spec.repeats):
            arms = self.order(r)
            if self.spec.order == "abba" and len(levels) > 1:
                runs: list[tuple[Arm, list[int]]] = []
                for i, c in enumerate(levels):
                    for arm in (arms if i % 2 == 0 else list(reversed(arms))):
                        if runs and runs[-1][0] is arm:
                            runs[-1][1].append(c)
                        else:
                            runs.append((arm, [c]))
                for arm, cs in runs:
                    add(arm, r, tuple(cs))
            else:
                for arm in arms:
                    add(arm, r, None)
        if self.spec.sentinel is not None:
            names = self.spec.sentinel.arms or [self.baseline]
            for arm in self.arms:
                if arm.name in names:
                    add(arm, 0, tuple(self.spec.sentinel.levels), True)
        return out

    def slot(self, arm: Arm, index: int) -> Slot:
        """The run ``index`` of ``arm`` (a plain repeat where the schedule has no such run)."""
        return next((s for a, s in self.schedule() if a.name == arm.name and s.index == index), Slot(index, index))

    def run_indices(self, arm: Arm) -> list[int]:
        """Every run index of ``arm`` (its run folders r<index>)."""
        return [s.index for a, s in self.schedule() if a.name == arm.name]

    def plan(self) -> list[tuple[int, Arm]]:
        """(run index, arm) in the order the runner measures them (run index = repeat unless the
        study's order splits repeats or adds sentinel runs: see :meth:`schedule`)."""
        return [(s.index, arm) for arm, s in self.schedule()]

    def is_control(self, arm: Arm) -> bool:
        """A control arm: marked ``control: true``, or defined exactly like the baseline (label aside)."""
        if arm.control:  # expand_arm carries the entry's control flag to each of its arms
            return True
        base = next((a for a in self.arms if a.name == self.baseline), None)
        if base is None or arm.name == base.name:
            return False
        def definition(a: Arm) -> tuple[Any, ...]:
            return (a.kind, a.endpoint, a.serve.model_dump() if a.serve else None,
                    a.embedded.model_dump() if a.embedded else None)
        return arm.kind != "endpoint" and definition(arm) == definition(base)

    def sweep_parameters(self, arm: Arm, repeat: int) -> dict[str, Any]:
        """The sweep notebook's parameters for one arm and repeat (endpoint and out_dir excluded).

        Each repeat is its own sweep run (repeats=1) with prompt seed ``seed + repeat``: arms stay
        paired (same prompts within a repeat) and a prefix cache kept across repeats cannot serve a
        repeat's prompts from an earlier one.

        ``auto`` workload and output length resolve differently for the embedded server and a real
        one (see ``config``); a study resolves them once for every arm, so that arms of both kinds
        share one workload: the real-server rule when any arm is not embedded. ``flush_cache`` is on unless the study's
        ``sweep`` turns it off: the sweep empties the server's prefix cache before each level, so arms are
        measured alike.
        """
        slot = self.slot(arm, repeat)
        params: dict[str, Any] = {"flush_cache": True, **self.spec.sweep, "arm": arm.name, "repeats": 1,
                                  "seed": int(self.spec.sweep.get("seed", 0)) + slot.repeat}
        if slot.levels is not None:
            params["concurrency"] = list(slot.levels)
        if not all(a.embedded is not None for a in self.arms):
            if str(params.get("workload", "auto")).strip() in ("", "auto"):
                params["workload"] = "builtin"
            if str(params.get("output_tokens", "auto")).strip() == "auto":
                params["output_tokens"] = SERVER_OUTPUT_TOKENS
        if arm.label:
            params["label"] = arm.label
        if arm.embedded is not None:
            params.update(endpoint="", embedded_profile=arm.embedded.profile, embedded_spec=arm.embedded.spec,
                          embedded_args=list(arm.embedded.args))
        return params

    def fingerprint(self) -> dict[str, Any]:
        """What must not change when a study is resumed: the shared sweep parameters and a digest
        of each arm's definition (a digest, so secrets in it are never written)."""
        def digest(arm: Arm) -> str:
            data = {"kind": arm.kind, "endpoint": arm.endpoint, "label": arm.label,
                    "serve": arm.serve.model_dump() if arm.serve else None,
                    "embedded": arm.embedded.model_dump() if arm.embedded else None}
            return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

        return {"sweep": dict(self.spec.sweep), "arms": {a.name: digest(a) for a in self.arms}}

    def resume_conflicts(self, old: dict[str, Any]) -> list[str]:
        """Why a study recorded with fingerprint ``old`` cannot be resumed with this file (empty: it can)."""
        new = self.fingerprint()
        problems = []
        for key in sorted(set(old.get("sweep", {})) | set(new["sweep"])):
            if old.get("sweep", {}).get(key) != new["sweep"].get(key):
                problems.append(f"sweep.{key} was {old.get('sweep', {}).get(key)!r}, now {new['sweep'].get(key)!r}")
        for name, value in new["arms"].items():
            if name in old.get("arms", {}) and old["arms"][name] != value:
                problems.append(f"arm {name!r} is defined differently (server, arguments, environment or label)")
        return problems

    def check_embedded(self) -> None:
        """Validate every embedded arm's server arguments with the reference server's own parser and
        profile loader (``python -m specsweep.refserver ... --describe``, run in this process: nothing
        starts); raise :class:`StudyError` naming each arm, its arguments and what the server said."""
        problems = [f"arm {a.name!r}: {why}" for a in self.arms if a.embedded is not None
                    and (why := embedded_problem(a.embedded, a.name)) is not None]
        if problems:
            source = self.path or "the study"
            raise StudyError(f"{source}: the embedded reference server would refuse "
                             + "; ".join(problems) + ". Fix 'embedded' of the arm(s) named "
                             "(python -m specsweep.refserver --help lists every flag; --list-profiles every profile)")

    def dry_run(self, out_dir: Path, report_dir: Path) -> str:
        """Every arm, command and sweep in run order, as text; starts nothing. The embedded arms'
        arguments are validated first (:meth:`check_embedded`)."""
        self.check_embedded()
        lines = [f"study {self.name!r}: {self.title}", f"baseline: {self.baseline}",
                 f"result sets: {out_dir}", f"report: {report_dir / (self.name + '.html')}",
                 f"{len(self.arms)} arm(s) × {self.spec.repeats} repeat(s), in this order:"]
        if self.spec.adaptive is not None:
            a = self.spec.adaptive
            lines[-1] = (f"{len(self.arms)} arm(s), adaptive: level by level, coarse design of {a.coarse_levels} "
                         f"levels first, at most {a.budget_device_minutes:g} min of measurement (the runs are chosen "
                         "as the study goes; the full grid of the same levels is not measured)")
        for i, (r, arm) in enumerate(self.plan(), 1):
            lines.append(f"{i:3d}. repeat {r} — {arm.describe()}")
            params = {k: v for k, v in self.sweep_parameters(arm, r).items() if not k.startswith("embedded_")}
            lines.append(f"     sweep: {yaml.safe_dump(params, default_flow_style=True, width=10_000).strip()}")
        return "\n".join(lines)


def embedded_problem(embedded: EmbeddedSpec, arm: str) -> str | None:
    """What the reference server says about an embedded arm's arguments (profile, spec, args), or None
    when it accepts them: its own ``main`` with ``--describe``, stdout and stderr captured."""
    import contextlib
    import io

    from specsweep.refserver.cli import main as refserver_main

    spec = embedded.spec if embedded.spec != "auto" else ("off" if arm == "baseline" else "mtp")
    argv = ["--profile", embedded.profile, "--spec", spec, *embedded.args, "--describe"]
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = refserver_main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    if code == 0:
        return None
    said = [line.strip() for line in err.getvalue().splitlines() if line.strip()]
    reason = next((line.split("error:", 1)[1].strip() for line in reversed(said) if "error:" in line),
                  said[-1] if said else f"exit status {code}")
    return f"profile {embedded.profile!r}, spec {spec!r}, args {shlex.join(embedded.args) or '(none)'}: {reason}"


def free_port(host: str = "127.0.0.1", port_range: tuple[int, int] | None = None) -> int:
    """A TCP port that was free a moment ago (for the ``{port}`` placeholder): any, or the first
    free one of ``port_range`` [low, high] (inclusive) from a random start, so that runners
    sharing a range rarely race for one port. Raises OSError naming the range when none is free."""
    if port_range is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    low, high = port_range
    ports = list(range(low, high + 1))
    start = random.randrange(len(ports))
    for port in ports[start:] + ports[:start]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in port_range [{low}, {high}] on {host}: every one is in use; widen the range "
                  "or stop what holds them")


def endpoint_of(url: str) -> str:
    """scheme://host:port of a URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# --------------------------------------------------------------------------------------- parsing


def _line(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at a pydantic error location (the deepest one that exists).

    An unknown key points at the key; a missing key at the key of the mapping that lacks it.
    """
    if node is None:
        return None
    line = node.start_mark.line + 1
    for depth, part in enumerate(loc):
        nxt = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(part):
                    nxt, line = value, key.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            nxt = node.value[part]
            line = nxt.start_mark.line + 1
        if nxt is None:
            continue  # a missing key, or a pydantic-only step (a union member): stay here
        node = nxt
    return line


def _check_depth(text: str, source: str) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` (PyYAML's composer recurses per level) by a
    scan of the tokens, which does not recurse; names the line where it gets too deep."""
    depth = 0
    opening = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
               yaml.FlowSequenceStartToken)
    closing = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, opening):
            depth += 1
            if depth > MAX_DEPTH:
                raise StudyError(f"{source} line {token.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep; "
                                 "a study file needs a few levels (study, arms, serve, argv): check the brackets there")
        elif isinstance(token, closing):
            depth -= 1


def _check_nodes(node: yaml.Node | None, source: str) -> None:
    """Refuse a mapping with a key twice (naming both lines) and a document that expands, aliases
    counted each time used, to more than :data:`MAX_NODES` nodes. Iterative: no recursion limit."""
    seen = 0
    stack: list[tuple[yaml.Node, str]] = [(node, "")] if node is not None else []
    while stack:
        current, path = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise StudyError(f"{source} line {current.start_mark.line + 1}: the file expands to more than {MAX_NODES:,} "
                             "values (YAML aliases '*name' count each time they are used); a study file needs far "
                             "fewer: remove the aliases")
        if isinstance(current, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, value in current.value:
                name = f"{path}.{key.value}" if path else str(key.value)
                if isinstance(key, yaml.ScalarNode):
                    ident = (key.tag, key.value)
                    if ident in first:
                        raise StudyError(f"{source} line {key.start_mark.line + 1}: key '{name}' appears twice in one "
                                         f"mapping (first at line {first[ident]}); YAML would keep only the last one "
                                         "silently: remove or rename one of them")
                    first[ident] = key.start_mark.line + 1
                stack.append((value, name))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((item, f"{path}.{i}") for i, item in enumerate(current.value))


def parse_study(text: str, source: str = "<study>", *, allow_large_grid: bool = False) -> Study:
    """Validate a study file's text; raise :class:`StudyError` naming each bad key and its line.

    Refused before parsing: more than :data:`MAX_STUDY_BYTES` of text, nesting deeper than
    :data:`MAX_DEPTH`; after: a key twice in one mapping, more than :data:`MAX_NODES` values, and
    more arms than the limit (:func:`check_arm_count`; ``allow_large_grid`` lifts ``max_arms``).
    """
    if len(text) > MAX_STUDY_BYTES:
        raise StudyError(f"{source}: {len(text):,} characters, more than a study file may have ({MAX_STUDY_BYTES:,}); "
                         "is this the study file? Long lists belong in grids, prompts in a workload file")
    try:
        _check_depth(text, source)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_nodes(node, source)
        raw = yaml.safe_load(text)
    except RecursionError as exc:
        raise StudyError(f"{source}: nested too deeply to read; check the brackets") from exc
    except yaml.YAMLError as exc:
        mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        opened = (f", {exc.context} at line {context.line + 1}"  # type: ignore[attr-defined]
                  if context is not None and getattr(exc, "context", None) else "")
        raise StudyError(f"{source}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc}{opened}); "
                         "check indentation, quoting and brackets there") from exc
    if not isinstance(raw, dict):
        raise StudyError(f"{source}: a study file is a mapping with title, arms, … (got {type(raw).__name__})")
    try:
        spec = StudySpec.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            key = ".".join(str(p) for p in loc) or "study"
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key (check the spelling; see specsweep/study/file.py for the keys)"
            elif err["type"] == "missing":
                msg = "required key is missing"
            line = _line(node, loc)
            problems.append(f"{source}{f' line {line}' if line else ''}: key '{key}': {msg}")
        raise StudyError("; ".join(problems)) from exc
    check_arm_count(spec, node, source, allow_large_grid)
    arms: list[Arm] = []
    names: set[str] = set()
    for i, entry in enumerate(spec.arms):
        for arm in expand_arm(entry, spec.port_range):
            line = _line(node, ("arms", i, "name"))
            if not ARM_PATTERN.match(arm.name):
                raise StudyError(f"{source} line {line}: key 'arms.{i}.name': arm name {arm.name!r} is not folder-safe; "
                                 "use letters, digits, '.', '_' or '-' (e.g. 'mtp-steps2-cap128')")
            if arm.name in names:
                raise StudyError(f"{source} line {line}: key 'arms.{i}.name': arm {arm.name!r} appears twice; "
                                 "every arm needs a unique name (grid arms get -<key><value> suffixes)")
            arms.append(arm)
            names.add(arm.name)
    if spec.baseline not in {a.name for a in arms}:
        line = _line(node, ("baseline",))
        raise StudyError(f"{source}{f' line {line}' if line else ''}: key 'baseline': {spec.baseline!r} is not one "
                         f"of the arms ({', '.join(a.name for a in arms)}); name the arm to compare against")
    return Study(spec=spec, arms=arms)


def load_study(path: str | Path, *, allow_large_grid: bool = False) -> Study:
    """Read and validate a study file (see the module docstring): UTF-8, at most
    :data:`MAX_STUDY_BYTES` bytes (read no further), errors naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise StudyError(f"{path}: no such study file; give the path of a .yaml study (e.g. data/studies/demo.yaml)")
    data = read_bounded(path, MAX_STUDY_BYTES, StudyError,
                        too_big=f"larger than a study file may be ({MAX_STUDY_BYTES:,} bytes); is this the study "
                                "file? Long lists belong in grids, prompts in a workload file")
    text = decode_utf8(data, path, StudyError, fix="save the study file as UTF-8")
    study = parse_study(text, str(path), allow_large_grid=allow_large_grid)
    study.path = path
    return study
