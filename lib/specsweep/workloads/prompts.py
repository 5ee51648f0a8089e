"""Prompts for a sweep: seeded random token IDs or random text of fixed length, or a prompt file.

Every arm of a study must see the same prompts in the same order, so prompt ``i`` depends only
on (workload, i): random IDs come from ``numpy.random.default_rng([seed, i])``; a prompt file is
read in a seeded shuffled order per pass through it (see below). Output length is fixed: every request asks for ``output_tokens``
with ``ignore_eos`` (``servers.flavours.build_body``), so arms do the same amount of work.

Chat endpoints take no token IDs: with ``random-ids`` the ``openai-chat`` flavour sends the same
IDs rendered as text (one word per ID from a fixed word list), so the prompt length in tokens is
approximate there; the server's own ``prompt_tokens`` is recorded per request.

``random-text`` prompts are ``input_tokens`` words drawn (seeded, like ``random-ids``) from a fixed
list of common English words: valid for any tokenizer, whatever its vocabulary, at the price of a
prompt length in tokens that is only approximate (most such words are one token in common
tokenizers; the server's own ``prompt_tokens`` is recorded per request).

Vocabulary: random IDs are drawn from ``id_range`` (default [1000, 30000)); a model whose
vocabulary is smaller rejects them (llama.cpp: HTTP 400 "Prompt contains invalid tokens").
:func:`check_vocabulary` refuses such a workload before anything is sent when the server says
its vocabulary size, :func:`warmup_workload` gives preflight and warm-up requests prompts of the
same kind as the measured ones (text for text, IDs only from a range the workload itself uses),
and :func:`explain_rejection` names the likely cause when a server rejects token IDs.

Prompt sets (every other ``workload`` value, read by :func:`specsweep.workloads.datasets.load_spec`):
``builtin`` / ``builtin:code-edit,math`` (the project's categorised set), ``<format>:<path>``
(``sharegpt:``, ``mt-bench:``, ``spec-bench:``, ``speed-bench:``, ``instructcoder:``,
``prompts:``), ``hf:<id>[:split[:config]]`` or a plain path (format detected; ``.jsonl``,
``.json``, ``.parquet``, ``.txt``). Prompt ``i`` is record ``perm_p[i mod n]`` of the ``n``
records, where pass ``p = i div n`` through the set has its own seeded permutation
(:func:`pass_order`): every arm with the same seed sends the same prompts in the same order, and
categories are interleaved within each level rather than sent in the file's blocks (a file sorted
by category would otherwise put one category at the head of every level, where a server that caps
its running requests admits it first). Prompt ``i`` carries its record's category (``"all"`` where
the format has none). Result sets written before this (``meta.workload.order`` absent) used
record order, ``records[i mod n]``. The file's SHA-256 (or
the Hugging Face fingerprint) is the dataset digest; ``Dataset.describe()`` goes to meta.json.
Bad records stop the sweep with the file and line.

Output length (``output_length``): ``fixed`` — every request asks for ``output_tokens`` with
``ignore_eos``, so arms do the same work; ``natural`` — ``ignore_eos`` is off and
``output_tokens`` is only the maximum: the model stops at its own end of sequence, so lengths
follow the prompts (and the batch mix changes with them); ``reference`` — each request asks
for its prompt's reference length (the dataset's answer length, capped at ``output_tokens``)
with ``ignore_eos``, so lengths follow the dataset and arms still do the same work (prompts
without a reference length ask for ``output_tokens``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from specsweep.servers.flavours import Flavour, build_body
from specsweep.workloads.order import SHUFFLED, record_index

RANDOM_IDS = "random-ids"
RANDOM_TEXT = "random-text"
PROMPT_FILE = "prompt-file"
#: the built-in categorised prompt set (``builtin`` or ``builtin:<categories>``)
BUILTIN = "builtin"
#: a Hugging Face dataset (``hf:<id>...``)
HF_DATASET = "hf-dataset"
FIXED, NATURAL, REFERENCE = "fixed", "natural", "reference"
OUTPUT_LENGTHS = (FIXED, NATURAL, REFERENCE)
#: token IDs drawn from [low, high): above the special tokens of common tokenizers, below every
#: common vocabulary size (Llama 3: 128k, Qwen: 151k, Mistral: 32k)
DEFAULT_ID_RANGE = (1000, 30000)
_WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case point "
    "government company number group problem fact river stone cloud garden window letter engine market "
    "signal forest bridge music paper silver orange planet winter summer harbor valley rocket ladder"
).split()

Prompt = str | list[int] | list[dict[str, Any]]



@dataclass(frozen=True)
class Workload:
    """What every request of a sweep asks for (lengths in tokens)."""

    kind: str  # "random-ids", "random-text", "prompt-file", "builtin" or "hf-dataset"
    input_tokens: int | None
    output_tokens: int
    seed: int = 0
    path: Path | None = None
    dataset_digest: str | None = None
    id_range: tuple[int, int] = DEFAULT_ID_RANGE
    prompts: tuple[Prompt, ...] = field(default=(), repr=False, compare=False)
    #: "fixed" (ignore_eos, exactly output_tokens), "natural" (the model stops; output_tokens is the
    #: max) or "reference" (ignore_eos, each prompt's reference length capped at output_tokens)
    output_length: str = FIXED
    #: reference output length (tokens) of each of ``prompts``, or None where it has none
    references: tuple[int | None, ...] = field(default=(), repr=False, compare=False)
    #: category of each of ``prompts`` (same length), or () for "all" everywhere
    categories: tuple[str, ...] = field(default=(), repr=False, compare=False)
    #: the workload value as given (``builtin:math``, ``sharegpt:chats.json``, ...)
    spec: str = ""
    #: ``datasets.Dataset.describe()`` of a prompt set, else None
    dataset: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def ignore_eos(self) -> bool:
        """True when every request must produce exactly ``output_tokens`` (``output_length="fixed"``)."""
        return self.output_length != NATURAL

    def max_tokens(self, i: int) -> int:
        """Output tokens requested for prompt number ``i``: ``output_tokens``, or under
        ``output_length="reference"`` the prompt's reference length capped at ``output_tokens``."""
        if self.output_length == REFERENCE and self.references:
            ref = self.references[self.record(i)]
            if ref is not None:
                return max(1, min(ref, self.output_tokens))
        return self.output_tokens

    def record(self, i: int) -> int:
        """The record of the prompt set that prompt number ``i`` sends (:func:`record_index`)."""
        return record_index(self.seed, len(self.prompts), i)

    def category(self, i: int) -> str:
        """Category of prompt number ``i`` (its record's); ``"all"`` when none."""
        return self.categories[self.record(i)] if self.categories else "all"

    def describe(self) -> dict[str, Any]:
        """The ``workload`` record of meta.json."""
        out: dict[str, Any] = {
            "kind": self.kind,
            # the `workload` parameter that reproduces this workload (with seed and lengths below)
            "value": self.spec or (self.kind if self.kind in (RANDOM_IDS, RANDOM_TEXT) else str(self.path)),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "output_length": self.output_length,
            "ignore_eos": self.ignore_eos,
            "seed": self.seed,
            "dataset_digest": self.dataset_digest,
        }
        length = (f"natural output lengths (the model stops; at most {self.output_tokens} tokens)"
                  if self.output_length == NATURAL else
                  f"each prompt's reference output length, at most {self.output_tokens} tokens, with ignore_eos"
                  if self.output_length == REFERENCE else f"{self.output_tokens} output tokens with ignore_eos")
        if self.kind == RANDOM_IDS:
            out["id_range"] = list(self.id_range)
            out["description"] = (f"{self.input_tokens} random token IDs in [{self.id_range[0]}, {self.id_range[1]}) "
                                  f"per prompt (numpy default_rng([seed, i])), {length}")
        elif self.kind == RANDOM_TEXT:
            out["description"] = (f"{self.input_tokens} random words per prompt from a fixed list of "
                                  f"{len(_WORDS)} common English words (numpy default_rng([seed, i])), about "
                                  f"{self.input_tokens} tokens; {length}")
        else:
            out["path"] = str(self.path) if self.path else None
            out["prompts"] = len(self.prompts)
            if self.dataset is not None:
                out["dataset"] = self.dataset
            cats = self.dataset.get("categories") if self.dataset else None
            where = self.spec if self.kind != PROMPT_FILE or not self.path else self.path.name
            out["order"] = SHUFFLED
            out["description"] = (f"{len(self.prompts)} prompts from {where}, each pass through them in its own "
                                  "seeded order (numpy default_rng([seed, prompts, pass]).permutation)"
                                  + (f" ({len(cats)} categories: {', '.join(cats)})" if cats and list(cats) != ["all"]
                                     else "") + f"; {length}")
        return out

    def prompt(self, i: int, flavour: Flavour) -> Prompt:
        """Prompt number ``i`` (0-based, any size) shaped for ``flavour``."""
        if self.kind in (RANDOM_IDS, RANDOM_TEXT):
            assert self.input_tokens is not None
            rng = np.random.default_rng([self.seed, i])
            ids = rng.integers(self.id_range[0], self.id_range[1], size=self.input_tokens).tolist()
            if flavour == "openai-chat" or self.kind == RANDOM_TEXT:
                return " ".join(_WORDS[t % len(_WORDS)] for t in ids)
            return ids
        item = self.prompts[self.record(i)]
        if flavour == "openai-chat" and isinstance(item, list) and item and isinstance(item[0], int):
            raise ValueError(f"{self.path}: prompt {self.record(i)} is token IDs, which chat endpoints do "
                             "not accept; use api openai-completions or sglang, or give text prompts")
        if flavour != "openai-chat" and isinstance(item, list) and item and isinstance(item[0], dict):
            return "\n".join(str(m.get("content", "")) for m in item)
        return item

    def bodies(self, flavour: Flavour, indices: Sequence[int], *, model: str | None, temperature: float,
               output_tokens: int | None = None, extra: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Request bodies for prompts ``indices``: ``ignore_eos`` with ``max_tokens(i)`` tokens, or
        under ``output_length="natural"`` no ``ignore_eos`` (``output_tokens`` is the maximum).

        ``output_tokens`` overrides the workload's length (warm-up and preflight requests).
        ``extra``: more top-level keys (``servers.flavours.build_body``), e.g. ``servers.Dialect.spec_request_options``.
        """
        return [build_body(flavour, self.prompt(i, flavour), output_tokens or self.max_tokens(i),
                           temperature=temperature, model=model, ignore_eos=self.ignore_eos, extra=extra)
                for i in indices]


def random_ids(input_tokens: int, output_tokens: int, seed: int = 0,
               id_range: tuple[int, int] = DEFAULT_ID_RANGE) -> Workload:
    """Seeded random token-ID prompts of ``input_tokens`` tokens."""
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number of tokens >= 1; got {value!r}")
    lo, hi = id_range
    if not 0 <= lo < hi:
        raise ValueError(f"id_range must be (low, high) with 0 <= low < high; got {id_range!r}")
    return Workload(RANDOM_IDS, input_tokens, output_tokens, seed=seed, id_range=(lo, hi))


def random_text(input_tokens: int, output_tokens: int, seed: int = 0) -> Workload:
    """Seeded random-word text prompts of about ``input_tokens`` tokens (valid for any tokenizer)."""
    base = random_ids(input_tokens, output_tokens, seed)
    return Workload(RANDOM_TEXT, base.input_tokens, base.output_tokens, seed=seed)


def prompt_ids_range(workload: Workload) -> tuple[int, int] | None:
    """[lowest, highest + 1) of the token IDs the workload sends on an ID-taking flavour, or None
    when it sends text only."""
    if workload.kind == RANDOM_IDS:
        return workload.id_range
    if workload.kind == RANDOM_TEXT:
        return None
    ids = [t for p in workload.prompts if isinstance(p, list) and p and isinstance(p[0], int) for t in p]
    return (min(ids), max(ids) + 1) if ids else None


def check_vocabulary(workload: Workload, vocab_size: int | None, flavour: Flavour, source: str = "the server") -> None:
    """Refuse a workload whose token IDs the model does not have (``vocab_size``: IDs 0..N-1).

    Raises ``ValueError`` naming the parameter and what to do; nothing happens when the vocabulary
    is unknown (None), the flavour takes text only (chat), or the workload sends text.
    """
    if vocab_size is None or flavour == "openai-chat":
        return
    span = prompt_ids_range(workload)
    if span is None or span[1] <= vocab_size:
        return
    where = (f"token IDs in [{span[0]}, {span[1]})" if workload.kind == RANDOM_IDS
             else f"token IDs up to {span[1] - 1} in {workload.path}")
    raise ValueError(f"parameter 'workload': the model's vocabulary has {vocab_size:,} token IDs ({source}), but the "
                     f"workload sends {where}, which the server would reject (llama.cpp: 'Prompt contains invalid "
                     "tokens'). Use workload='random-text' (valid for any tokenizer) or a prompt file of text or of "
                     "IDs the model has.")


def warmup_workload(workload: Workload) -> Workload:
    """Prompts for preflight and warm-up requests: of the same kind as ``workload``'s (text for a
    text workload, token IDs only from the range the workload itself sends), from their own index
    range so no measured prompt is reused, and never IDs the measured prompts do not use."""
    assert workload.output_tokens >= 1
    length = workload.input_tokens or _typical_length(workload)
    span = prompt_ids_range(workload)
    if workload.kind == RANDOM_IDS:
        return random_ids(length, workload.output_tokens, workload.seed, workload.id_range)
    if span is not None:
        return random_ids(length, workload.output_tokens, workload.seed, span)
    return random_text(length, workload.output_tokens, workload.seed)


def _prompt_size(prompt: Prompt) -> int:
    """A prompt's length: tokens for IDs, words for text or for a chat's message contents."""
    if isinstance(prompt, str):
        return len(prompt.split())
    if prompt and isinstance(prompt[0], int):
        return len(prompt)
    chat = cast(list[dict[str, Any]], prompt)  # a list that does not start with an ID is a chat's messages
    return sum(len(str(m.get("content", "")).split()) for m in chat)


def _typical_length(workload: Workload) -> int:
    """Median prompt length of a prompt file, in tokens (IDs) or words (text), at least 1."""
    sizes = [_prompt_size(p) for p in workload.prompts]
    return max(1, int(np.median(sizes))) if sizes else 16


#: phrases of the real servers' out-of-vocabulary errors (llama.cpp, vLLM, SGLang) and kin
_VOCAB_WORDS = ("invalid token", "out of vocabulary", "vocab size", "vocab_size", "vocabulary")


def explain_rejection(error: str, workload: Workload, flavour: Flavour, vocab_size: int | None = None) -> str:
    """``error`` with its likely cause named when a server rejected the token IDs a workload sends."""
    span = prompt_ids_range(workload)
    if span is None or flavour == "openai-chat":
        return error
    low = error.lower()
    if not any(w in low for w in _VOCAB_WORDS):
        return error
    known = f" (it has {vocab_size:,})" if vocab_size else ""
    return (f"{error} — the server rejected the prompt's token IDs, which go up to {span[1] - 1}: the model's "
            f"vocabulary is probably smaller{known}. Use workload='random-text' (valid for any tokenizer) or a "
            "prompt file of text.")


def _parse_line(path: Path, n: int, line: str) -> Prompt:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg}); each line must be an object with "
                         "'prompt', 'input_ids' or 'messages'") from exc
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, dict):
        raise ValueError(f"{path}:{n}: expected an object with 'prompt', 'input_ids' or 'messages', got {type(obj).__name__}")
    if isinstance(obj.get("prompt"), str):
        return obj["prompt"]
    ids = obj.get("input_ids")
    if isinstance(ids, list) and ids and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        return ids
    msgs = obj.get("messages")
    if isinstance(msgs, list) and msgs and all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
        return msgs
    raise ValueError(f"{path}:{n}: needs 'prompt' (text), 'input_ids' (non-negative ints) or 'messages' "
                     "(list of {role, content}); found keys " + ", ".join(sorted(obj)))


def prompt_file(path: str | Path, output_tokens: int, input_tokens: int | None = None, seed: int = 0) -> Workload:
    """Prompts read from a JSON Lines (``.jsonl``) or text (one prompt per line) file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"workload {str(path)!r}: no such prompt file; give 'random-ids', 'random-text' or the "
                         "path of a .jsonl / .txt prompt file")
    raw = path.read_bytes()
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError(f"workload {str(path)!r}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the prompt "
                         "file as UTF-8") from exc
    if path.suffix == ".jsonl":
        prompts = [_parse_line(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
    else:
        prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise ValueError(f"{path}: has no prompts")
    if isinstance(output_tokens, bool) or not isinstance(output_tokens, int) or output_tokens < 1:
        raise ValueError(f"output_tokens must be a whole number of tokens >= 1; got {output_tokens!r}")
    return Workload(PROMPT_FILE, input_tokens, output_tokens, seed=seed, path=path.resolve(),
                    dataset_digest="sha256:" + hashlib.sha256(raw).hexdigest(), prompts=tuple(prompts))


def from_dataset(spec: str, output_tokens: int, seed: int = 0, output_length: str = FIXED) -> Workload:
    """A workload of the prompt set named by ``spec`` (any :func:`specsweep.workloads.datasets.load_spec`
    value): prompts and categories in record order; ``dataset`` is ``Dataset.describe()``."""
    from specsweep.workloads.datasets import DatasetError, load_spec  # noqa: PLC0415 (pandas-heavy reader)

    if isinstance(output_tokens, bool) or not isinstance(output_tokens, int) or output_tokens < 1:
        raise ValueError(f"output_tokens must be a whole number of tokens >= 1; got {output_tokens!r}")
    try:
        ds = load_spec(spec)
    except DatasetError as exc:
        raise DatasetError(f"parameter 'workload': {exc}") from exc
    head = spec.strip().split(":", 1)[0]
    kind = BUILTIN if head == BUILTIN else HF_DATASET if head == "hf" else PROMPT_FILE
    path = Path(ds.source) if kind == PROMPT_FILE else None
    w = Workload(kind, None, output_tokens, seed=seed, path=path, dataset_digest=ds.digest,
                 prompts=tuple(r.prompt for r in ds.records), output_length=output_length,
                 categories=tuple(r.category for r in ds.records), spec=spec.strip(), dataset=ds.describe(),
                 references=tuple(r.reference_output_tokens for r in ds.records))
    if output_length == REFERENCE and not any(r is not None for r in w.references):
        raise ValueError(f"parameter 'output_length': 'reference' needs reference output lengths, and {spec!r} has "
                         "none (MT-Bench-style question files carry no answers); use 'fixed' or 'natural'")
    return w


def make_workload(workload: str, input_tokens: int, output_tokens: int, seed: int,
                  output_length: str = FIXED) -> Workload:
    """The notebook's ``workload`` parameter: ``"random-ids"``, ``"random-text"``, or a prompt set
    (``builtin[:cats]``, ``<format>:<path>``, ``hf:<id>[:split[:config]]``, a path; see
    :func:`specsweep.workloads.datasets.load_spec`). ``output_length``: ``"fixed"``, ``"natural"`` or
    ``"reference"`` (module docstring)."""
    if output_length not in OUTPUT_LENGTHS:
        raise ValueError(f"parameter 'output_length': {output_length!r} is not one of {', '.join(OUTPUT_LENGTHS)}; "
                         "'fixed' sends ignore_eos with output_tokens, 'natural' lets the model stop, 'reference' asks "
                         "for each prompt's reference length")
    if workload in (RANDOM_IDS, RANDOM_TEXT):
        if output_length == REFERENCE:
            raise ValueError(f"parameter 'output_length': 'reference' needs a prompt set with reference output "
                             f"lengths; {workload} prompts have none. Use 'fixed' or 'natural'")
        base = (random_ids if workload == RANDOM_IDS else random_text)(input_tokens, output_tokens, seed)
        return dataclasses.replace(base, output_length=output_length)
    text = str(workload).strip()
    head, sep, _ = text.partition(":")
    named = text == BUILTIN or head in (BUILTIN, "hf") or (sep and _is_format_name(head))
    if not named and not Path(text).is_file():
        raise ValueError(f"parameter 'workload': {text!r} is not 'random-ids', 'random-text', 'builtin[:categories]', "
                         "'hf:<id>[:split[:config]]' or '<format>:<path>', and there is no such prompt file; give one "
                         "of those or the path of a .jsonl / .json / .parquet / .txt prompt set")
    return from_dataset(text, output_tokens, seed, output_length)


def _is_format_name(name: str) -> bool:
    from specsweep.workloads.datasets import _ALIASES, FORMATS  # noqa: PLC0415

    return name.lower() in FORMATS or name.lower() in _ALIASES
