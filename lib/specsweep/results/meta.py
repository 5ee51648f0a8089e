"""The typed record of ``meta.json``: what a result set measured, against what, how, by which tool, when.

:class:`Meta` names every field the code reads, each with the default an older file that lacks
it gets; the defaults live here and nowhere else. Fields no code reads (and keys of newer tools)
are kept as extra fields, so a file read and written again keeps them.

Invariant: :meth:`Record.to_json_dict` gives back what the file held, keys in its order, plus the
fields set or changed since (in the order they were set); a default an older file lacked is not
written back (``store.write_meta`` writes that dict).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_serializer, model_validator
from pydantic.functional_serializers import SerializerFunctionWrapHandler
from pydantic.functional_validators import ModelWrapValidatorHandler


class Record(BaseModel):
    """A JSON object read from a file: unknown keys kept, and the file's key order remembered, so that
    writing it back gives the same object (see the module docstring)."""

    model_config = ConfigDict(extra="allow")
    _order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        record = handler(data)
        if isinstance(data, dict) and isinstance(record, Record):
            record._order = [str(k) for k in data]
        return record

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if not name.startswith("_") and name not in self._order:
            self._order.append(name)

    def unset(self, name: str) -> None:
        """Take field ``name`` out of what is written (as ``dict.pop`` did): back to its default."""
        if name in type(self).model_fields:
            info = type(self).model_fields[name]
            super().__setattr__(name, info.get_default(call_default_factory=True))
        elif self.__pydantic_extra__ is not None:
            self.__pydantic_extra__.pop(name, None)
        self.model_fields_set.discard(name)
        if name in self._order:
            self._order.remove(name)

    def mark_changed(self) -> None:
        """Count fields whose value differs from their default as set (a default list appended to in
        place), in this record and the records it holds, so that writing keeps them."""
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if isinstance(value, Record):
                value.mark_changed()
            if name not in self.model_fields_set and value != info.get_default(call_default_factory=True):
                self.model_fields_set.add(name)
                self._order.append(name)

    @model_serializer(mode="wrap")
    def _in_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        first = {k: data[k] for k in self._order if k in data}
        return {**first, **{k: v for k, v in data.items() if k not in first}}

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON object to write: the fields read or set, in order (see the module docstring)."""
        self.mark_changed()
        return self.model_dump(mode="python", exclude_unset=True)


class Workload(Record):
    """What each request asked for (``meta.json`` ``workload``)."""

    kind: str = Field(description="random-ids | fixed-ids | prompt-file | ...")
    input_tokens: int | None = Field(ge=1, description="prompt length, tokens")
    output_tokens: int = Field(ge=1, description="requested output length, tokens")
    ignore_eos: bool | None = None
    seed: int | None = None
    dataset_digest: str | None = None
    #: the ``workload`` parameter's value and its description (absent before they were recorded)
    value: str | None = None
    description: str | None = None
    #: the prompt file's path, as given
    path: str | None = None
    #: "given", or the automatic rule and its reason
    chosen_by: str | None = None
    #: "fixed" (every request asks for ``output_tokens``), or a natural-length mode; older files: fixed
    output_length: str = "fixed"
    #: the order prompts were sent in; prompt sets written before it was recorded went in record order
    order: str = "record"


class Sweep(Record):
    """The sweep's parameters (``meta.json`` ``sweep``); the fields code reads, the rest kept as given."""

    concurrency: list[int] | None = None
    repeats: int | None = None
    requests_per_level: int | dict[str, Any] | None = None
    requests_per_level_rule: str | None = None
    min_requests_per_level: int | None = None
    #: per-level stopping: the target margin of error (%), None: a fixed count per level
    target_moe_pct: int | float | None = None
    #: with a target: the most measured requests per level, by concurrency
    max_requests_per_level: int | dict[str, Any] | None = None
    warmup_requests: int | dict[str, Any] | None = None
    temperature: int | float | None = None
    api: str | None = None
    seed: int | None = None
    request_timeout_s: int | float | None = None
    client_workers: int | None = None
    #: whether the prompt cache was emptied before every level; None: not recorded
    flush_cache: bool | None = None


class StudyMeta(Record):
    """How a study ran this arm (``meta.json`` ``study``, on an arm merged by ``study.runner``)."""

    name: str | None = None
    title: str | None = None
    #: the study's own notes (Markdown)
    notes: str | None = None
    #: how many times each arm was measured, interleaved
    repeats: int | None = None
    #: the order the runs went in, in words
    order: str | None = None
    sentinel: dict[str, Any] | None = None
    missing_repeats: list[int] = Field(default_factory=list)
    missing_arms: list[str] = Field(default_factory=list)
    #: every run merged into this arm, in time order: repeat, levels, run id, position, seed, start and end
    runs: list[dict[str, Any]] = Field(default_factory=list)


class Meta(Record):
    """The metadata record beside every result set (``meta.json``)."""

    schema_version: int
    kind: Literal["run", "reference"]
    run_id: str = Field(min_length=1)
    arm: str = Field(min_length=1)
    label: str | None = None
    description: str | None = None
    complete: bool = True
    level_only: bool = False
    level_only_note: str | None = None
    #: ``{"name", "version", "git_commit"}`` of the tool that wrote the result set
    tool: dict[str, Any] | None = None
    started_utc: str | None = None
    finished_utc: str | None = None
    resumed_utc: list[str] = Field(default_factory=list)
    #: the level being measured (concurrency, repeat) while a sweep runs: a hard kill leaves it here
    in_progress: list[int] | None = None
    #: why the sweep stopped early: ``{"level": [c, r] | None, "reason": ...}``
    interrupted: dict[str, Any] | None = None
    failed: dict[str, Any] | None = None
    #: levels measured again on resume, ``[c, r]`` each
    rerun_levels: list[list[int]] = Field(default_factory=list)
    changes_on_resume: list[dict[str, Any]] = Field(default_factory=list)
    endpoint: str | None = None
    embedded_server: dict[str, Any] | None = None
    api: str | None = None
    api_chosen_by: str | None = None
    model: str | None = None
    #: the server's snapshot as probed (``/server_info``, ``/props`` …): free-form
    server: dict[str, Any] = Field(default_factory=dict)
    hardware: dict[str, Any] = Field(default_factory=dict)
    serve: dict[str, Any] | None = None
    workload: Workload
    sweep: Sweep = Field(default_factory=Sweep)
    environment: dict[str, Any] = Field(default_factory=dict)
    metric_definitions: dict[str, str] = Field(default_factory=dict)
    metric_definition_ids: dict[str, str] = Field(default_factory=dict)
    warnings: list[Any] = Field(default_factory=list)
    preflight_token_source: str | None = None
    #: how the prompt cache was emptied before each level (``failed: …`` when it was not)
    prefix_cache_flush: str | None = None
    prefix_cache_flush_failed: list[dict[str, Any]] = Field(default_factory=list)
    #: levels whose requests came without the integer token counts the preflight saw
    count_changes: list[dict[str, Any]] = Field(default_factory=list)
    #: a control arm: the baseline's configuration measured again, to size drift and noise
    control: bool = False
    study: StudyMeta | None = None
    #: imported from another tool's result files (``specsweep.importers``), which ``--force`` may replace
    imported: bool = False
    #: where imported data came from (tool, files and their digests)
    source: dict[str, Any] | None = None

    @field_validator("warnings", mode="before")
    @classmethod
    def _one_warning(cls, value: Any) -> Any:
        """Older files may hold one warning (a string or object) or null instead of a list."""
        if value is None:
            return []
        return [value] if isinstance(value, (str, dict)) else value

    @property
    def shown_label(self) -> str:
        """The arm's label, else its name."""
        return self.label or self.arm

    def server_field(self, key: str) -> Any:
        """``server[key]``, else the same key of the server's ``/server_info`` snapshot (None where neither says)."""
        if key in self.server:
            return self.server[key]
        return (self.server.get("server_info") or {}).get(key)
