"""Simulated tokenisation and output text.

* **Prompt tokens.** A text prompt counts one token per whitespace-separated word
  (``len(text.split())``); a token-ID prompt counts its length. A chat prompt counts, per
  message, the words of its content plus ``CHAT_MESSAGE_OVERHEAD`` (4) template tokens
  (ChatML's ``<|im_start|>role\\n`` and ``<|im_end|>\\n``), plus ``CHAT_GENERATION_PROMPT`` (3)
  for the assistant header.
* **Output tokens** are words from a fixed vocabulary of ``VOCAB_SIZE`` lowercase pseudo-words,
  each rendered with a leading space (so text is the concatenation of tokens and one token is
  one word). Token *i* of a response is chosen deterministically from a 64-bit digest of the
  prompt and *i* (splitmix64), so greedy output is identical with and without speculation
  (speculation is lossless) and ``output_ids`` are stable across runs and machines. With
  ``temperature > 0`` a per-request sampling nonce is mixed into the digest.
* **EOS.** Without ``ignore_eos`` every prompt has a deterministic natural length in
  ``[natural_length_min, natural_length_max]`` (from the same digest); the request stops there
  with finish reason ``stop`` when that is shorter than ``max_new_tokens`` (but never before
  ``min_new_tokens``).

Output token IDs are ``VOCAB_ID_OFFSET + word index``; ``EOS_TOKEN_ID`` is what SGLang reports
as ``matched`` for an EOS stop.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CHAT_GENERATION_PROMPT",
    "CHAT_MESSAGE_OVERHEAD",
    "EOS_TOKEN_ID",
    "VOCAB",
    "VOCAB_ID_OFFSET",
    "VOCAB_SIZE",
    "RenderedOutput",
    "chat_prompt_tokens",
    "natural_length",
    "output_indices",
    "prompt_digest",
    "render_output",
    "text_prompt_tokens",
    "tokenize_text",
]

CHAT_MESSAGE_OVERHEAD = 4
CHAT_GENERATION_PROMPT = 3
VOCAB_ID_OFFSET = 1000
EOS_TOKEN_ID = 151645

_MASK = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15


def _make_vocab() -> list[str]:
    onsets = ["b", "c", "d", "f", "g", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
    codas = ["", "n", "r", "s", "t", "l"]
    words: list[str] = []
    for o in onsets:
        for v in vowels:
            for c in codas:
                words.append(o + v + c)
    # 768 pseudo-words; keep 512 in a fixed pseudo-random order
    order = sorted(range(len(words)), key=lambda i: hashlib.blake2b(words[i].encode(),
                                                                    digest_size=8).digest())
    return [words[i] for i in order[:512]]


VOCAB: list[str] = _make_vocab()
VOCAB_SIZE = len(VOCAB)
_WORD_BYTES: list[bytes] = [(" " + w).encode() for w in VOCAB]
_WORD_LENS = np.array([len(b) for b in _WORD_BYTES], dtype=np.int64)
_WORD_WIDTH = int(_WORD_LENS.max())
#: words padded with NUL bytes to a fixed width, so rendering is one gather and one filter
_WORD_TABLE = np.zeros((VOCAB_SIZE, _WORD_WIDTH), dtype=np.uint8)
for _i, _b in enumerate(_WORD_BYTES):
    _WORD_TABLE[_i, : len(_b)] = np.frombuffer(_b, dtype=np.uint8)
_ID_WIDTH = len(str(VOCAB_ID_OFFSET + VOCAB_SIZE - 1))
assert len(str(VOCAB_ID_OFFSET)) == _ID_WIDTH  # every ID has the same number of digits
#: "1234," for every token: IDs are fixed-width, so ID prefixes are plain multiples
_ID_TABLE = np.frombuffer(b"".join(f"{VOCAB_ID_OFFSET + i},".encode() for i in range(VOCAB_SIZE)),
                          dtype=np.uint8).reshape(VOCAB_SIZE, _ID_WIDTH + 1)


def _mix64(x: int) -> int:
    x &= _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def text_prompt_tokens(text: str) -> int:
    """Tokens of a text prompt: one per whitespace-separated word."""
    return len(text.split())


def chat_prompt_tokens(messages: Iterable[dict[str, Any]]) -> int:
    """Tokens of a chat prompt (content words + per-message template + generation prompt)."""
    total = CHAT_GENERATION_PROMPT
    for m in messages:
        total += CHAT_MESSAGE_OVERHEAD + text_prompt_tokens(chat_content_text(m.get("content")))
    return total


def chat_content_text(content: Any) -> str:
    """The text of a chat message's ``content`` (a string or a list of ``{"type":"text"}``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return " ".join(parts)
    return str(content)


def prompt_digest(prompt: str | list[int] | bytes) -> int:
    """A 64-bit digest of a prompt (text, token IDs, or raw bytes)."""
    if isinstance(prompt, str):
        data = b"t" + prompt.encode("utf-8", "surrogatepass")
    elif isinstance(prompt, bytes):
        data = b"b" + prompt
    else:
        data = b"i" + np.asarray(prompt, dtype=np.int64).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def natural_length(digest: int, lo: int, hi: int) -> int:
    """The deterministic EOS position of a prompt, in ``[lo, hi]`` tokens."""
    return lo + _mix64(digest ^ 0x5EED_E05) % (hi - lo + 1)


def output_indices(digest: int, n: int, nonce: int = 0) -> np.ndarray:
    """Vocabulary indices of the first ``n`` output tokens (splitmix64 of digest and position)."""
    base = np.uint64((digest ^ _mix64(nonce)) & _MASK) if nonce else np.uint64(digest & _MASK)
    with np.errstate(over="ignore"):
        x = base + (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(_GOLDEN))
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(VOCAB_SIZE)).astype(np.int64)


@dataclass(slots=True)
class RenderedOutput:
    """A response's full output, pre-encoded so any prefix or slice is a bytes slice.

    ``text`` is the UTF-8/JSON-safe text (ASCII words with leading spaces); ``text_end[i]`` is
    the byte offset where token *i* ends (``text_end[0] == 0`` for "no tokens"). ``ids`` is the
    comma-joined decimal token IDs; ``ids_end[i]`` ends the prefix of *i* IDs (without a
    trailing comma).
    """

    n: int
    indices: np.ndarray
    text: bytes
    text_end: list[int]
    ids: bytes
    ids_end: list[int]

    def text_prefix(self, i: int) -> bytes:
        """The text of the first ``i`` tokens."""
        return self.text[: self.text_end[i]]

    def text_slice(self, a: int, b: int) -> bytes:
        """The text of tokens ``a`` (inclusive) to ``b`` (exclusive)."""
        return self.text[self.text_end[a]: self.text_end[b]]

    def ids_prefix(self, i: int) -> bytes:
        """The first ``i`` IDs as a JSON array body (``1001,1042``)."""
        return self.ids[: self.ids_end[i]]

    def id_list(self, i: int) -> list[int]:
        """The first ``i`` token IDs as ints."""
        return [VOCAB_ID_OFFSET + int(x) for x in self.indices[:i]]


def render_output(digest: int, n: int, nonce: int = 0) -> RenderedOutput:
    """Pre-render ``n`` output tokens for a prompt digest."""
    idx = output_indices(digest, n, nonce)
    flat = _WORD_TABLE[idx].ravel()
    text = flat[flat != 0].tobytes()
    text_end = [0, *np.cumsum(_WORD_LENS[idx]).tolist()]
    ids = _ID_TABLE[idx].tobytes()[:-1]
    step = _ID_WIDTH + 1
    ids_end = [0, *range(_ID_WIDTH, step * n, step)]
    return RenderedOutput(n, idx, text, text_end, ids, ids_end)


_WORD_INDEX: dict[str, int] = {w: i for i, w in enumerate(VOCAB)}


def tokenize_text(text: str, vocab_size: int) -> list[int]:
    """Token IDs of ``text`` under the simulated tokenizer: one per whitespace-separated word.

    A word of the output vocabulary maps to ``VOCAB_ID_OFFSET + its index``, any other word to a
    stable hash; both are taken modulo ``vocab_size`` so every ID is one the model has. The count
    equals :func:`text_prompt_tokens` and, for generated text, the number of output tokens.
    """
    out = []
    for word in text.split():
        idx = _WORD_INDEX.get(word)
        if idx is None:
            tid = int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"),
                                                 digest_size=4).digest(), "little")
        else:
            tid = VOCAB_ID_OFFSET + idx
        out.append(tid % vocab_size)
    return out
