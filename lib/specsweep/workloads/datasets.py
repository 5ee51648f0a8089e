"""Prompt sets from published formats, each prompt with a category and a reference output length.

A reader turns a file (or a Hugging Face dataset, with the optional ``datasets`` extra) into a
list of :class:`PromptRecord`: ``prompt`` (text, chat messages or token IDs), ``category``
(``"all"`` when the format carries none), ``reference_output_tokens`` (tokens, or ``None``) and
``source`` (``file:line``, ``file#record``, or ``hf:<id>:<split>#<row>``, for error messages and
provenance).

Formats (``format=`` names; ``"auto"`` detects from the first record's keys):

==================  ==========================================================================
``prompts``         specsweep's own prompt file: ``.jsonl`` with ``prompt`` (text),
                    ``input_ids`` (token IDs) or ``messages`` (``[{role, content}]``), optional
                    ``category`` and ``reference_output_tokens``; or ``.txt``, one prompt a line.
``sharegpt``        ``{"conversations": [{"from": "human"|"gpt", "value": ...}, ...]}``: the
                    first human turn is the prompt (with a leading ``system`` turn, the prompt
                    is chat messages), the following gpt turn's length is the reference.
``turns``           MT-Bench / Spec-Bench / SPEED-Bench question files:
                    ``{"question_id", "category", "turns": [str, ...]}`` (MT-Bench and
                    Spec-Bench may add ``reference``; SPEED-Bench adds ``sub_category``,
                    ``source``, ``src_id``, ``difficulty``, ``multiturn``). The first turn is
                    the prompt: later turns refer to an answer the benchmark does not have.
                    Aliases: ``mt-bench``, ``spec-bench``, ``speed-bench``.
``instructcoder``   ``{"instruction", "input", "output"}``: the prompt is the instruction
                    followed by the code in ``input``; the reference is ``output``'s length.
                    Category ``code-edit`` unless ``category=`` says otherwise (Alpaca-style
                    instruction files have the same keys: pass ``category=`` for them).
==================  ==========================================================================

Files: ``.jsonl`` (one record a line; errors name the 1-based line), ``.json`` (one JSON array;
errors name the record, counted from 1, and the line it starts on; a ``.json`` file that starts
with ``{`` is read as JSON Lines), ``.parquet`` (errors name
the row, counted from 1), ``.txt`` (``prompts`` only). Blank lines in JSON Lines are skipped.

Reference output lengths are estimates where the format gives text, not a count: by default
``estimate_tokens`` (about 4 characters per token, the usual figure for English under BPE
tokenizers of 32k–150k entries; expect ±30 % against a real tokenizer, more for code and
non-English text). Pass ``count_tokens=`` (e.g. a tokenizer's ``len(tok.encode(text))``) for
exact counts. MT-Bench's ``reference`` is a grader's short key answer, not a response, so the
``turns`` format gives no reference length.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from specsweep.errors import InputError
from specsweep.results.untrusted import parse_json
from specsweep.workloads.order import record_index

__all__ = [
    "ALL",
    "Dataset",
    "DatasetError",
    "FORMATS",
    "INPUT_GROUNDED",
    "PromptRecord",
    "builtin_prompts",
    "builtin_path",
    "category_of",
    "detect_format",
    "estimate_tokens",
    "load",
    "load_builtin",
    "load_hf",
    "load_spec",
    "read_records",
    "records_from_rows",
    "with_category",
]

#: the category of a prompt whose format carries none
ALL = "all"
FORMATS: tuple[str, ...] = ("prompts", "sharegpt", "turns", "instructcoder")
_ALIASES = {"mt-bench": "turns", "mtbench": "turns", "spec-bench": "turns", "specbench": "turns",
            "speed-bench": "turns", "speedbench": "turns", "jsonl": "prompts", "txt": "prompts",
            "prompt-file": "prompts"}
_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}
#: characters per token assumed by :func:`estimate_tokens`
CHARS_PER_TOKEN = 4.0

Prompt = str | list[int] | list[dict[str, Any]]


class DatasetError(InputError, ValueError):
    """A prompt set that cannot be read; the message names the file and line (or record/row)."""


@dataclass(frozen=True)
class PromptRecord:
    """One prompt of a workload.

    ``reference_output_tokens``: a natural answer length in tokens (the dataset's reference
    answer, counted or estimated), or ``None``. ``source``: where it came from.
    """

    prompt: Prompt
    category: str = ALL
    reference_output_tokens: int | None = None
    source: str = ""

    def text(self) -> str:
        """The prompt as plain text (chat messages joined by newlines; token IDs give "")."""
        if isinstance(self.prompt, str):
            return self.prompt
        if self.prompt and isinstance(self.prompt[0], dict):
            return "\n".join(str(m.get("content", "")) for m in self.prompt)  # type: ignore[union-attr]
        return ""


@dataclass(frozen=True)
class Dataset:
    """Records read from one source, with what was read and what was skipped."""

    records: list[PromptRecord]
    format: str
    source: str
    digest: str | None = None
    skipped: list[str] = field(default_factory=list)
    #: how reference lengths were obtained: "given" (the file's own counts), "estimate" (about
    #: 4 characters per token), "count_tokens" (the caller's counter) or "none"
    reference_counter: str = "none"

    def categories(self) -> dict[str, int]:
        """Prompts per category, in first-seen order."""
        out: dict[str, int] = {}
        for r in self.records:
            out[r.category] = out.get(r.category, 0) + 1
        return out

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary for meta.json (no prompt text)."""
        refs = [r.reference_output_tokens for r in self.records if r.reference_output_tokens is not None]
        return {"format": self.format, "source": self.source, "dataset_digest": self.digest,
                "prompts": len(self.records), "categories": self.categories(),
                "with_reference_output_tokens": len(refs), "reference_counter": self.reference_counter,
                "skipped": len(self.skipped)}


def estimate_tokens(text: str) -> int:
    """Approximate tokens in ``text``: ceil(characters / 4), at least 1 (see module docstring)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


# ------------------------------------------------------------------------------- record parsers


def _category(obj: dict[str, Any], where: str, default: str) -> str:
    if "category" not in obj or obj["category"] is None:
        return default
    cat = obj["category"]
    if not isinstance(cat, str) or not cat.strip():
        raise DatasetError(f"{where}: 'category' must be a non-empty string, got {cat!r}; "
                           "fix the record or remove the field (the category is then 'all')")
    return cat.strip()


def _nonempty_str(obj: dict[str, Any], key: str, where: str, hint: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        got = "missing" if key not in obj else f"{type(value).__name__} {str(value)[:40]!r}"
        raise DatasetError(f"{where}: '{key}' must be non-empty text ({got}); {hint}")
    return value


def _parse_prompts(obj: Any, where: str, count: Callable[[str], int], category: str | None) -> PromptRecord:
    if isinstance(obj, str):
        if not obj.strip():
            raise DatasetError(f"{where}: empty prompt; remove the line or give text")
        return PromptRecord(obj, category or ALL, None, where)
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected an object with 'prompt', 'input_ids' or 'messages', "
                           f"got {type(obj).__name__}")
    prompt: Prompt
    if isinstance(obj.get("prompt"), str) and obj["prompt"].strip():
        prompt = obj["prompt"]
    elif "input_ids" in obj:
        ids = obj["input_ids"]
        if not (isinstance(ids, list) and ids and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                      for t in ids)):
            raise DatasetError(f"{where}: 'input_ids' must be a non-empty list of non-negative integers")
        top = max(ids)
        if top > MAX_TOKEN_ID:
            raise DatasetError(f"{where}: 'input_ids' holds {top}, above {MAX_TOKEN_ID:,}, the largest token ID any "
                               "model's vocabulary can have; the IDs must be the target model's own")
        prompt = ids
    elif "messages" in obj:
        msgs = obj["messages"]
        if not (isinstance(msgs, list) and msgs and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in msgs)):
            raise DatasetError(f"{where}: 'messages' must be a non-empty list of {{role, content}} objects "
                               "with text values")
        prompt = msgs
    else:
        raise DatasetError(f"{where}: needs 'prompt' (non-empty text), 'input_ids' (non-negative ints) or "
                           "'messages' (list of {role, content}); found keys " + ", ".join(sorted(obj)))
    ref = obj.get("reference_output_tokens")
    if ref is not None and (isinstance(ref, bool) or not isinstance(ref, int) or ref < 1):
        raise DatasetError(f"{where}: 'reference_output_tokens' must be a whole number of tokens >= 1, "
                           f"got {ref!r}")
    return PromptRecord(prompt, category or _category(obj, where, ALL), ref, where)


def _parse_sharegpt(obj: Any, where: str, count: Callable[[str], int], category: str | None) -> PromptRecord:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a ShareGPT object with 'conversations', got {type(obj).__name__}")
    conv = obj.get("conversations")
    if not isinstance(conv, list) or not conv:
        raise DatasetError(f"{where}: 'conversations' must be a non-empty list of {{from, value}} turns "
                           f"({'missing' if 'conversations' not in obj else 'got ' + repr(conv)[:40]}); "
                           "fix the record, or pass skip_invalid=True to drop such records")
    system: str | None = None
    for i, turn in enumerate(conv):
        if not (isinstance(turn, dict) and isinstance(turn.get("from"), str) and isinstance(turn.get("value"), str)):
            raise DatasetError(f"{where}: turn {i + 1} must be an object with text 'from' and 'value', got "
                               f"{repr(turn)[:60]}")
        role = turn["from"].lower()
        if role == "system" and system is None:
            system = turn["value"]
            continue
        if role in _HUMAN:
            if not turn["value"].strip():
                raise DatasetError(f"{where}: turn {i + 1} (the first human turn) is empty; fix the record, "
                                   "or pass skip_invalid=True to drop such records")
            ref = None
            if i + 1 < len(conv) and isinstance(conv[i + 1], dict) and \
                    str(conv[i + 1].get("from", "")).lower() in _ASSISTANT and \
                    isinstance(conv[i + 1].get("value"), str) and conv[i + 1]["value"].strip():
                ref = count(conv[i + 1]["value"])
            prompt: Prompt = turn["value"] if system is None else [
                {"role": "system", "content": system}, {"role": "user", "content": turn["value"]}]
            return PromptRecord(prompt, category or _category(obj, where, ALL), ref, where)
        if role in _ASSISTANT:
            raise DatasetError(f"{where}: turn {i + 1} is from {turn['from']!r} before any human turn; the "
                               "prompt is the first human turn. Fix the record, or pass skip_invalid=True")
        raise DatasetError(f"{where}: turn {i + 1} has 'from' {turn['from']!r}; expected human/user, "
                           "gpt/assistant or system")
    raise DatasetError(f"{where}: no human turn in 'conversations'; fix the record, or pass skip_invalid=True")


def _parse_turns(obj: Any, where: str, count: Callable[[str], int], category: str | None) -> PromptRecord:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a question object with 'turns', got {type(obj).__name__}")
    turns: object = obj.get("turns")
    if hasattr(turns, "tolist"):  # a numpy array from a parquet or datasets row
        turns = turns.tolist()
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise DatasetError(f"{where}: 'turns' must be a non-empty list of text turns "
                           f"({'missing' if 'turns' not in obj else 'got ' + repr(turns)[:40]})")
    if not turns[0].strip():
        raise DatasetError(f"{where}: the first turn is empty; it is the prompt")
    return PromptRecord(turns[0], category or _category(obj, where, ALL), None, where)


def _parse_instructcoder(obj: Any, where: str, count: Callable[[str], int], category: str | None) -> PromptRecord:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected an object with 'instruction', 'input', 'output', "
                           f"got {type(obj).__name__}")
    instruction = _nonempty_str(obj, "instruction", where, "it says what to change in the code")
    code = obj.get("input", "")
    if code is None:
        code = ""
    if not isinstance(code, str):
        raise DatasetError(f"{where}: 'input' must be text (the code to edit), got {type(code).__name__}")
    output = obj.get("output")
    if output is not None and not isinstance(output, str):
        raise DatasetError(f"{where}: 'output' must be text (the edited code), got {type(output).__name__}")
    prompt = f"{instruction.strip()}\n\n{code}" if code.strip() else instruction
    ref = count(output) if output and output.strip() else None
    return PromptRecord(prompt, category or _category(obj, where, "code-edit"), ref, where)


_PARSERS: dict[str, Callable[[Any, str, Callable[[str], int], str | None], PromptRecord]] = {
    "prompts": _parse_prompts, "sharegpt": _parse_sharegpt, "turns": _parse_turns,
    "instructcoder": _parse_instructcoder}


def _canonical(fmt: str) -> str:
    name = fmt.strip().lower()
    name = _ALIASES.get(name, name)
    if name != "auto" and name not in FORMATS:
        raise DatasetError(f"format {fmt!r} is not known; give 'auto' or one of {', '.join(FORMATS)} "
                           f"(aliases: {', '.join(sorted(_ALIASES))})")
    return name


def detect_format(obj: Any, where: str) -> str:
    """The format of a record, from its keys (see the module docstring)."""
    if isinstance(obj, str):
        return "prompts"
    if isinstance(obj, dict):
        if "conversations" in obj:
            return "sharegpt"
        if "turns" in obj:
            return "turns"
        if "instruction" in obj and ("output" in obj or "input" in obj):
            return "instructcoder"
        if any(k in obj for k in ("prompt", "input_ids", "messages")):
            return "prompts"
        keys = ", ".join(sorted(map(str, obj))) or "none"
    else:
        keys = f"a {type(obj).__name__}, not an object"
    raise DatasetError(f"{where}: cannot tell the format from this record (keys: {keys}); expected "
                       "'conversations' (sharegpt), 'turns' (MT-Bench/Spec-Bench/SPEED-Bench), "
                       "'instruction' + 'input'/'output' (instructcoder) or 'prompt'/'input_ids'/'messages' "
                       "(prompts); or pass format= explicitly")


def records_from_rows(rows: Iterable[tuple[str, Any]], fmt: str = "auto", *,
                      count_tokens: Callable[[str], int] | None = None, category: str | None = None,
                      skip_invalid: bool = False) -> tuple[list[PromptRecord], str, list[str]]:
    """Parse ``(where, record)`` pairs; ``where`` names the record in errors (``file:line``).

    Returns (records, format used, messages of skipped records). The format is detected from
    the first record when ``fmt`` is ``"auto"``; every record is then validated against it.
    With ``skip_invalid`` a record that fails validation is skipped (its message kept) instead
    of raising; a record that is not JSON always raises.
    """
    name = _canonical(fmt)
    count = count_tokens or estimate_tokens
    if category is not None and (not isinstance(category, str) or not category.strip()):
        raise DatasetError(f"category= must be a non-empty string, got {category!r}")
    out: list[PromptRecord] = []
    skipped: list[str] = []
    for where, obj in rows:
        if name == "auto":
            name = detect_format(obj, where)
        try:
            out.append(_PARSERS[name](obj, where, count, category))
        except DatasetError as exc:
            if not skip_invalid:
                raise
            skipped.append(str(exc))
    return out, ("prompts" if name == "auto" else name), skipped


# ------------------------------------------------------------------------------------ file reading


#: the largest token ID a prompt file may hold (int32: no vocabulary is larger; servers store IDs so)
MAX_TOKEN_ID = 2**31 - 1
_TOO_DEEP = "nested too deeply to read (thousands of brackets inside one another); a prompt record is a flat object"


def _jsonl_rows(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = parse_json(line, f"{path}:{n}", DatasetError)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno}); each line "
                               "must be one JSON object") from exc
        yield f"{path}:{n}", obj


def _json_array_rows(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """Elements of a JSON array, each named ``file:line (record N)`` (line where it starts)."""
    dec = json.JSONDecoder()
    ws = " \t\r\n"
    i = 0
    n = len(text)
    while i < n and text[i] in ws:
        i += 1
    if i >= n or text[i] != "[":
        raise DatasetError(f"{path}:{text.count(chr(10), 0, i) + 1}: a .json prompt set must be one JSON array "
                           "of records (or JSON Lines: one object a line)")
    i += 1
    line, last = 1, 0
    k = 0
    while True:
        while i < n and text[i] in ws:
            i += 1
        if i < n and text[i] == "]":
            break
        if i >= n:
            raise DatasetError(f"{path}: the JSON array is not closed (missing ']' at the end)")
        line += text.count("\n", last, i)
        last = i
        k += 1
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            bad_line = text.count("\n", 0, exc.pos) + 1
            raise DatasetError(f"{path}:{bad_line}: record {k} (from line {line}) is not valid JSON "
                               f"({exc.msg})") from exc
        except RecursionError:
            raise DatasetError(f"{path}:{line}: record {k} is {_TOO_DEEP}") from None
        yield f"{path}:{line} (record {k})", obj
        while i < n and text[i] in ws:
            i += 1
        if i < n and text[i] == ",":
            i += 1
        elif i < n and text[i] != "]":
            bad_line = text.count("\n", 0, i) + 1
            raise DatasetError(f"{path}:{bad_line}: expected ',' or ']' after record {k}")


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds (ArrowInvalid, OSError, ...)
        raise DatasetError(f"{path}: cannot be read as Parquet ({type(exc).__name__}: {exc}); is the file complete? "
                           "Write it again, or give the prompts as .jsonl") from None
    for n, row in enumerate(frame.to_dict(orient="records"), 1):
        yield f"{path} (row {n})", {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()}


def _reference_counter(fmt: str, records: list[PromptRecord], count_tokens: Callable[[str], int] | None) -> str:
    if not any(r.reference_output_tokens is not None for r in records):
        return "none"
    if fmt == "prompts":
        return "given"
    return "count_tokens" if count_tokens is not None else "estimate"


def load(path: str | os.PathLike[str], format: str = "auto", *, count_tokens: Callable[[str], int] | None = None,
         category: str | None = None, skip_invalid: bool = False) -> Dataset:
    """Read a prompt set from a local file (``.jsonl``, ``.json``, ``.parquet`` or ``.txt``).

    ``format``: ``"auto"`` or one of :data:`FORMATS` (aliases accepted). ``category``: one
    category for every record (overrides the records' own). ``count_tokens``: text → tokens for
    reference lengths (default :func:`estimate_tokens`). Errors are :class:`DatasetError` naming
    the file and the line (or record / row).
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{p}: no such prompt file; give the path of a .jsonl, .json, .parquet or .txt "
                           "prompt set")
    raw = p.read_bytes()
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    suffix = p.suffix.lower()
    rows: Iterable[tuple[str, Any]]
    if suffix == ".parquet":
        rows = _parquet_rows(p)
    else:
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw[:exc.start].count(b"\n") + 1
            raise DatasetError(f"{p}:{line}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the file "
                               "as UTF-8") from exc
        if suffix == ".txt":
            if _canonical(format) not in ("auto", "prompts"):
                raise DatasetError(f"{p}: a .txt file holds one prompt a line (format 'prompts'), not "
                                   f"{format!r}; save the records as .jsonl")
            rows = ((f"{p}:{n}", line) for n, line in enumerate(text.splitlines(), 1) if line.strip())
        elif suffix == ".json":
            # a .json file is usually one array; some sets ship JSON Lines under .json
            rows = _jsonl_rows(p, text) if text.lstrip().startswith("{") else _json_array_rows(p, text)
        elif suffix == ".jsonl":
            rows = _jsonl_rows(p, text)
        else:
            raise DatasetError(f"{p}: unknown file type {suffix or '(none)'!r}; use .jsonl (one JSON record a "
                               "line), .json (a JSON array), .parquet or .txt (one prompt a line)")
    records, fmt, skipped = records_from_rows(rows, format, count_tokens=count_tokens, category=category,
                                              skip_invalid=skip_invalid)
    if not records:
        why = f" ({len(skipped)} skipped as invalid; first: {skipped[0]})" if skipped else ""
        raise DatasetError(f"{p}: has no prompts{why}")
    return Dataset(records, fmt, str(p.resolve()), digest, skipped,
                   _reference_counter(fmt, records, count_tokens))


def read_records(path: str | os.PathLike[str], format: str = "auto", **kwargs: Any) -> list[PromptRecord]:
    """The records of :func:`load` (same arguments)."""
    return load(path, format, **kwargs).records


def load_hf(dataset_id: str, split: str = "train", format: str = "auto", *, name: str | None = None,
            revision: str | None = None, limit: int | None = None, cache_dir: str | None = None,
            count_tokens: Callable[[str], int] | None = None, category: str | None = None,
            skip_invalid: bool = False) -> Dataset:
    """Read a Hugging Face dataset (needs the optional extra: ``pip install -e '.[datasets]'``).

    ``dataset_id``: a Hub id (``likaixin/InstructCoder``) or a local dataset folder; ``name`` its
    configuration (SPEED-Bench: ``qualitative``); ``limit``: the first rows only; ``cache_dir``:
    the library's cache folder (default its own, ``~/.cache/huggingface``). Works offline
    from the Hugging Face cache (``HF_HUB_OFFLINE=1``). Errors name ``hf:<id>:<split>`` and the
    row (counted from 1).
    """
    try:
        import datasets  # noqa: PLC0415 (optional extra)
    except ImportError as exc:
        raise DatasetError(f"reading the Hugging Face dataset {dataset_id!r} needs the optional 'datasets' "
                           "package: pip install -e '.[datasets]' (or pip install datasets); local files need "
                           "no extra") from exc
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DatasetError(f"limit must be a whole number of rows >= 1, got {limit!r}")
    try:
        ds = datasets.load_dataset(dataset_id, name, split=split, revision=revision, cache_dir=cache_dir)
    except Exception as exc:  # the library raises many kinds; say which dataset and what to check
        raise DatasetError(f"hf:{dataset_id}:{split}: could not load ({type(exc).__name__}: {exc}); check the "
                           "id, the configuration name= and split=, and network access or the local cache") from exc
    label = f"hf:{dataset_id}{'/' + name if name else ''}:{split}"

    def rows() -> Iterator[tuple[str, Any]]:
        for n, row in enumerate(ds, 1):
            if limit is not None and n > limit:
                return
            yield f"{label} (row {n})", dict(row)

    records, fmt, skipped = records_from_rows(rows(), format, count_tokens=count_tokens, category=category,
                                              skip_invalid=skip_invalid)
    if not records:
        raise DatasetError(f"{label}: has no prompts")
    fingerprint = getattr(ds, "_fingerprint", None)
    return Dataset(records, fmt, label, f"hf-fingerprint:{fingerprint}" if fingerprint else None, skipped,
                   _reference_counter(fmt, records, count_tokens))


# ----------------------------------------------------------------------------------- built-in set


#: the built-in set's input-grounded categories: the answer repeats a span of the prompt (text to
#: copy, a whole file to return edited, a passage to quote), the traffic where prompt-lookup and
#: n-gram drafters find drafts that are accepted
INPUT_GROUNDED = ("copy", "edit-file", "quote-answer")


def builtin_path() -> Path:
    """Where the built-in prompt set lives (shipped in the package: ``specsweep/data/prompts``)."""
    return Path(__file__).resolve().parents[1] / "data" / "prompts" / "builtin.jsonl"


def builtin_prompts(categories: Sequence[str] | None = None) -> list[PromptRecord]:
    """The project's own prompt set (file order), optionally only ``categories``.

    Categories that differ in how predictable the answer is: ``code-edit``, ``extraction``,
    ``summarisation``, ``qa``, ``math``, ``creative-writing``, and the input-grounded
    :data:`INPUT_GROUNDED` (see the README beside the file).
    """
    records = load(builtin_path(), "prompts").records
    if categories is None:
        return records
    known = {r.category for r in records}
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise DatasetError(f"built-in prompt set has no category {', '.join(map(repr, unknown))}; it has "
                           f"{', '.join(sorted(known))}")
    return [r for r in records if r.category in set(categories)]


def load_builtin(categories: Sequence[str] | None = None) -> Dataset:
    """The built-in prompt set as a :class:`Dataset` (digest of the shipped file)."""
    path = builtin_path()
    records = builtin_prompts(categories)
    label = "builtin" + (":" + ",".join(categories) if categories else "")
    return Dataset(records, "prompts", label, "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest(),
                   reference_counter="given")


def load_spec(spec: str, **kwargs: Any) -> Dataset:
    """A prompt set named by one string (a ``workload`` value):

    - ``builtin`` or ``builtin:code-edit,math``: the built-in set, or some of its categories;
    - ``hf:<dataset id>[:<split>[:<config>]]``: a Hugging Face dataset (split ``train`` unless
      given), e.g. ``hf:nvidia/SPEED-Bench:test:qualitative`` (needs the ``datasets`` extra);
    - ``<format>:<path>``: a local file read as that format, e.g. ``sharegpt:chats.json``;
    - ``<path>``: a local file, format detected.

    ``kwargs`` go to :func:`load` / :func:`load_hf` (``count_tokens``, ``category``,
    ``skip_invalid``; ``limit`` for ``hf:``).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise DatasetError(f"workload {spec!r}: give 'builtin', 'hf:<id>[:<split>[:<config>]]', "
                           "'<format>:<path>' or the path of a prompt file")
    spec = spec.strip()
    if spec == "builtin" or spec.startswith("builtin:"):
        cats = [c.strip() for c in spec[len("builtin:"):].split(",") if c.strip()] if ":" in spec else None
        return load_builtin(cats or None)
    if spec.startswith("hf:"):
        parts = spec[3:].split(":")
        if not parts[0] or len(parts) > 3:
            raise DatasetError(f"workload {spec!r}: write hf:<dataset id>[:<split>[:<config>]], e.g. "
                               "hf:nvidia/SPEED-Bench:test:qualitative")
        split = parts[1] if len(parts) > 1 and parts[1] else "train"
        return load_hf(parts[0], split, kwargs.pop("format", "auto"), name=parts[2] if len(parts) > 2 else None,
                       **kwargs)
    head, sep, rest = spec.partition(":")
    kwargs.pop("limit", None)
    if sep and rest and (head.lower() in FORMATS or head.lower() in _ALIASES):
        return load(rest, head, **kwargs)
    return load(spec, kwargs.pop("format", "auto"), **kwargs)


# ---------------------------------------------------------------------------------- categories


def category_of(records: Sequence[PromptRecord], prompt_ids: Iterable[int] | None = None,
                seed: int | None = None) -> list[str]:
    """The category of each prompt: of ``records`` in order, or of prompt ``i`` for each of
    ``prompt_ids`` as the workload sends them — with the sweep's ``seed``, the shuffled order
    (:func:`specsweep.workloads.order.record_index`); with ``seed=None``, the record order of result sets
    written before shuffling (``records[i % n]``)."""
    if prompt_ids is None:
        return [r.category for r in records]
    if not records:
        raise ValueError("category_of: no records")
    n = len(records)
    if seed is None:
        return [records[int(i) % n].category for i in prompt_ids]
    return [records[record_index(seed, n, int(i))].category for i in prompt_ids]


def with_category(requests: pd.DataFrame, records: Sequence[PromptRecord] | None = None,
                  seed: int | None = None) -> pd.DataFrame:
    """``requests`` with a ``category`` column (a copy): from ``records`` by ``prompt_id`` when
    given (``seed``: as :func:`category_of`), else the frame's own column, else ``"all"`` (result
    sets written before categories)."""
    out = requests.copy()
    if records is not None:
        out["category"] = category_of(records, out["prompt_id"].astype(int), seed) if len(out) else []
    elif "category" not in out.columns:
        out["category"] = ALL
    out["category"] = out["category"].astype("string").fillna(ALL)
    return out
