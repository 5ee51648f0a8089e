"""The sweep's parameters, typed and validated. Every error names the parameter and the fix.

These are the parameters of ``notebooks/sweep.ipynb`` (papermill ``-p``/``-y``); units are in
the names (tokens, seconds). ``auto`` values are resolved by the documented rules below.

- ``output_tokens="auto"``: 1000, or 256 when measuring the embedded reference server (a reduced
  demo workload so the no-parameter run finishes in minutes).
- ``requests_per_level="auto"``: max(``min_requests_per_level``, 2 × C) measured requests per level
  (the minimum is 4 unless given): every slot runs at least two requests, so each level has a span
  in which all C slots are busy; a larger minimum gives the low levels enough requests for their own
  figures (a prompt set sent whole at every level) while the high levels still get 2 × C.
- ``target_moe_pct`` (off by default): per-level stopping. A level then sends at least the count
  above and at most ``max_requests_per_level``, and stops sending once its throughput's 95 %
  margin of error (relative half-width, %) is at most the target (``measure.stopping``; requests in
  flight finish). ``max_requests_per_level="auto"``: max(4 × that minimum, 10 × C) — a margin needs
  at least 4 × C requests, and 10 × C leaves room for several checks.
- ``warmup_requests="auto"``: C short requests (16 output tokens) at concurrency C before each
  level, so every connection is open and the server warm; excluded from all metrics.
- ``embedded_spec="auto"``: ``off`` for the arm named ``baseline``, ``mtp`` for any other arm.
- ``workload="auto"``: ``builtin`` (the project's categorised prompt set, categories from
  copying a given text to creative writing) for a real server — speculation's gain depends on what is
  generated, and random token IDs say little about real traffic; ``random-ids`` for the embedded
  reference server, whose profiles are calibrated at 1000-token prompts (its demo stays a
  capacity picture; pass ``workload="builtin"`` to see its category effect). The reason is
  recorded in meta.json (``workload.chosen_by``). ``random-ids``/``random-text`` stay available
  for pure capacity tests.
- ``output_length``: ``fixed`` (every request produces exactly ``output_tokens``, ``ignore_eos``),
  ``natural`` (the model stops on its own; ``output_tokens`` is the maximum) or ``reference``
  (each prompt's reference length from the dataset, at most ``output_tokens``, ``ignore_eos``).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from specsweep.errors import InputError
from specsweep.results.outpath import NAME_PATTERN

Api = Literal["auto", "sglang", "openai-completions", "openai-chat"]
DEFAULT_CONCURRENCY = [1, 4, 16, 32, 64, 128]
WARMUP_OUTPUT_TOKENS = 16
#: ``requests_per_level="auto"``: at least this many measured requests per level unless ``min_requests_per_level`` says
DEFAULT_MIN_REQUESTS = 4
EMBEDDED_OUTPUT_TOKENS = 256
#: ``output_tokens="auto"`` on a real server (the seed's workload)
SERVER_OUTPUT_TOKENS = 1000
ARM_PATTERN = NAME_PATTERN  # arm names become folder names: the one check of every such name


class ConfigError(InputError, ValueError):
    """A sweep parameter is invalid; the message names it and says what to do."""


def _as_int_list(value: Any) -> Any:
    """Accept a list, or the string papermill ``-p`` passes (``"[1, 4]"`` or ``"1,4"``)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return json.loads(text if text.startswith("[") else f"[{text}]")
        except json.JSONDecodeError:
            return value
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return value


class SweepConfig(BaseModel):
    """Validated sweep parameters (see the module docstring for the ``auto`` rules)."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field("", description="scheme://host:port of the server; empty: start the embedded reference server")
    arm: str = Field("baseline", description="name of the server configuration measured")
    label: str | None = Field(None, description="human-readable description of the arm")
    api: Api = "auto"
    model: str = "auto"
    concurrency: list[int] = Field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    input_tokens: int = Field(1000, ge=1)
    output_tokens: int | Literal["auto"] = "auto"
    workload: str = Field("auto", description="random-ids, random-text, builtin[:cats], <format>:<path>, hf:<id>, "
                                               "a path, or auto (builtin for real servers, random-ids embedded)")
    output_length: Literal["fixed", "natural", "reference"] = "fixed"
    requests_per_level: int | Literal["auto"] = "auto"
    min_requests_per_level: int = Field(DEFAULT_MIN_REQUESTS, ge=1, description="with requests_per_level='auto': "
                                        "measured requests per level are max(this, 2 x concurrency)")
    target_moe_pct: float | None = Field(None, gt=0, le=100, description="per-level stopping: stop a level once "
                                         "its throughput's 95 % margin of error is at most this (%); None: a fixed count")
    max_requests_per_level: int | Literal["auto"] = Field("auto", description="with target_moe_pct: the most measured "
                                                          "requests a level sends; auto: max(4 x the minimum, 10 x C)")
    warmup_requests: int | Literal["auto"] = "auto"
    repeats: int = Field(1, ge=1)
    request_timeout_s: float = Field(600.0, gt=0)
    seed: int = 0
    temperature: float = Field(0.0, ge=0)
    out_dir: str = "data/runs"
    resume: str = ""
    client_workers: int = Field(1, ge=1, le=64)
    embedded_profile: str = "qwen3.5-122b-a10b-4x-rtxpro6000"
    embedded_spec: Literal["auto", "off", "mtp"] = "auto"
    embedded_args: list[str] = Field(default_factory=list)
    metrics_interval_s: float = Field(1.0, gt=0)
    keep_chunks: bool = True
    flush_cache: bool = Field(False, description="empty the server's prefix cache before each level "
                                                 "(SGLang POST /flush_cache, vLLM POST /reset_prefix_cache) where it offers a route")

    @field_validator("concurrency", mode="before")
    @classmethod
    def _concurrency(cls, value: Any) -> Any:
        return _as_int_list(value)

    @field_validator("embedded_args", mode="before")
    @classmethod
    def _args(cls, value: Any) -> Any:
        if isinstance(value, str):
            import shlex

            return shlex.split(value)
        return value

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("needs at least one level")
        bad = [c for c in value if c < 1]
        if bad:
            raise ValueError(f"levels must be >= 1, got {bad}")
        if len(set(value)) != len(value):
            raise ValueError(f"levels must be unique, got {value}")
        return value

    @field_validator("arm")
    @classmethod
    def _arm(cls, value: str) -> str:
        if not ARM_PATTERN.match(value):
            raise ValueError("use 1-64 letters, digits, '.', '_' or '-' (it names folders), e.g. 'mtp-cap128'")
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        value = value.strip()
        if value and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("give scheme://host:port, e.g. http://127.0.0.1:30000, or leave it empty for the embedded server")
        return value.rstrip("/")

    def cross_field_problems(self) -> list[tuple[str, str]]:
        """(parameter, problem) for every rule that involves more than one parameter."""
        problems = []
        if isinstance(self.requests_per_level, int) and self.requests_per_level < max(self.concurrency):
            problems.append(("requests_per_level",
                f"{self.requests_per_level} is below the largest concurrency ({max(self.concurrency)}): that level "
                f"could never hold {max(self.concurrency)} requests in flight; use 'auto' or at least "
                f"{max(self.concurrency)}"))
        if isinstance(self.requests_per_level, int) and self.min_requests_per_level != DEFAULT_MIN_REQUESTS:
            problems.append(("min_requests_per_level",
                f"applies only with requests_per_level='auto' (got requests_per_level={self.requests_per_level}); "
                "give one of the two"))
        problems += self._stopping_problems()
        if isinstance(self.output_tokens, int) and self.output_tokens < 1:
            problems.append(("output_tokens", f"must be >= 1 or 'auto' (got {self.output_tokens})"))
        if isinstance(self.warmup_requests, int) and self.warmup_requests < 0:
            problems.append(("warmup_requests", f"must be >= 0 or 'auto' (got {self.warmup_requests})"))
        return problems

    def _stopping_problems(self) -> list[tuple[str, str]]:
        """The per-level stopping parameters' rules (module docstring)."""
        most = self.max_requests_per_level
        if most == "auto":
            return []
        if self.target_moe_pct is None:
            return [("max_requests_per_level", f"applies only with target_moe_pct (got {most}); give target_moe_pct "
                     "too, e.g. 5, or leave max_requests_per_level 'auto'")]
        low = max(self.requests_for(c) for c in self.concurrency)
        if most < low:
            return [("max_requests_per_level", f"{most} is below a level's minimum count ({low}, from "
                     "requests_per_level); give at least that, or 'auto'")]
        return []

    # ---- resolved values --------------------------------------------------------------------

    @property
    def embedded(self) -> bool:
        return not self.endpoint

    def resolved_output_tokens(self) -> int:
        if self.output_tokens == "auto":
            return EMBEDDED_OUTPUT_TOKENS if self.embedded else SERVER_OUTPUT_TOKENS
        return self.output_tokens

    def resolved_workload(self) -> tuple[str, str]:
        """(workload value, why it was chosen): ``auto`` → ``builtin`` for a real server,
        ``random-ids`` for the embedded reference server (module docstring)."""
        if self.workload.strip() and self.workload.strip() != "auto":
            return self.workload.strip(), "given"
        if self.embedded:
            return "random-ids", ("auto: random token IDs for the embedded reference server, whose profiles are "
                                  "calibrated at fixed-length prompts (a capacity picture; acceptance on random IDs "
                                  "is not representative of real traffic)")
        return "builtin", ("auto: the built-in categorised prompt set for a real server, because speculative "
                           "decoding's gain depends on what is generated and random token IDs say little about "
                           "real traffic; pass workload='random-ids' for a pure capacity test")

    def requests_for(self, concurrency: int) -> int:
        """Measured requests at ``concurrency``: the fixed number, or the ``auto`` rule (module docstring)."""
        if self.requests_per_level == "auto":
            return max(self.min_requests_per_level, 2 * concurrency)
        return self.requests_per_level

    def max_requests_for(self, concurrency: int) -> int:
        """The most measured requests at ``concurrency``: :meth:`requests_for` without a target margin,
        else ``max_requests_per_level`` or its ``auto`` rule (module docstring)."""
        least = self.requests_for(concurrency)
        if self.target_moe_pct is None:
            return least
        if self.max_requests_per_level == "auto":
            return max(4 * least, 10 * concurrency)
        return self.max_requests_per_level

    def warmups_for(self, concurrency: int) -> int:
        if self.warmup_requests == "auto":
            return concurrency
        return self.warmup_requests

    def resolved_embedded_spec(self) -> str:
        if self.embedded_spec == "auto":
            return "off" if self.arm == "baseline" else "mtp"
        return self.embedded_spec

    def plan(self) -> list[tuple[int, int]]:
        """(concurrency, repeat) in run order: each level's repeats back to back, levels as given."""
        return [(c, r) for c in self.concurrency for r in range(self.repeats)]


def _as_option(name: str) -> str:
    """A parameter as the ``specsweep sweep`` option that sets it (``output_tokens.int`` → ``--output-tokens``)."""
    return "--" + name.split(".")[0].replace("_", "-")


#: how a message names a parameter and shows a list of levels, per front end: the notebook under
#: papermill (the default) or the ``specsweep sweep`` command, which checks its options before a kernel starts
SPELLINGS: dict[str, tuple[Callable[[str], str], str]] = {
    "papermill": (lambda name: f"parameter '{name}'", "with papermill: -y 'concurrency: [1, 4, 16]'"),
    "cli": (_as_option, "e.g. --concurrency '[1, 4, 16]'"),
}


def parse_config(params: dict[str, Any] | SweepConfig, *, spelling: str = "papermill") -> SweepConfig:
    """Validate notebook parameters; raise :class:`ConfigError` naming each bad parameter as
    ``spelling`` (a key of :data:`SPELLINGS`) spells it."""
    if isinstance(params, SweepConfig):
        return params
    named, levels = SPELLINGS[spelling]
    try:
        cfg = SweepConfig.model_validate(params)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown parameter{_closest_hint(name)} (papermill --help-notebook notebooks/sweep.ipynb lists them)"
            elif name == "concurrency" or name.startswith("concurrency."):
                msg += f" — give a list of integers, {levels}"
            problems.append(f"{named(name)}: {msg} (got {err.get('input')!r})")
        raise ConfigError("; ".join(problems)) from exc
    cross = cfg.cross_field_problems()
    if cross:
        raise ConfigError("; ".join(f"{named(name)}: {msg}" for name, msg in cross))
    return cfg


def _closest_hint(name: str, known: Any = None) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(SweepConfig.model_fields if known is None else known), n=1, cutoff=0.6)
    return f" — did you mean '{close[0]}'?" if close else " (check the spelling)"


#: the parameters of ``notebooks/sweep.ipynb`` (its cell tagged ``parameters``)
NOTEBOOK_PARAMETERS = (
    "endpoint", "arm", "label", "api", "model", "concurrency", "input_tokens", "output_tokens", "workload",
    "output_length",
    "requests_per_level", "min_requests_per_level", "target_moe_pct", "max_requests_per_level", "warmup_requests", "repeats", "request_timeout_s", "seed",
    "temperature", "out_dir",
    "resume", "client_workers", "embedded_profile", "embedded_spec", "embedded_args", "flush_cache",
)
#: names an IPython kernel defines in every notebook's namespace
_KERNEL_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})


def check_notebook_parameters(namespace: dict[str, Any], parameters: Any = None) -> None:
    """Fail on a value in ``namespace`` (a notebook's ``globals()``) that is not a sweep parameter.

    papermill injects every ``-p``/``-y`` name into the notebook, known or not, and only warns
    about unknown ones; a misspelled ``concurency`` would otherwise leave the default levels in
    place and measure them. Call this right after the parameters: every public plain value
    (str, number, bool, None, list, dict) must be one of ``parameters`` (default: the sweep
    notebook's, :data:`NOTEBOOK_PARAMETERS`), else :class:`ConfigError` names it and the closest
    valid name.
    """
    known = set(NOTEBOOK_PARAMETERS if parameters is None else parameters)
    plain = (str, int, float, bool, list, dict, tuple, type(None))
    unknown = sorted(name for name, value in namespace.items()
                     if not name.startswith("_") and name not in _KERNEL_NAMES and name not in known
                     and isinstance(value, plain))
    if unknown:
        raise ConfigError("; ".join(f"parameter '{name}': not a parameter of this notebook{_closest_hint(name, known)} "
                                    "(papermill --help-notebook notebooks/sweep.ipynb lists them)" for name in unknown))
