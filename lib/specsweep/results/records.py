"""The record of one streamed request, shared by the client (which fills it) and metrics.

All times are absolute ``time.perf_counter()`` seconds taken in the measuring process; result
sets store them relative to the level's start (see ``store``).

Per-chunk data is held compactly, as numpy arrays: 8 bytes per token-carrying chunk for its time
(float64) and 4 for its token count (int32), or none for the counts when every chunk carried one
token (see :func:`tokens_array`), so that a level of 20 million chunks fits in a few hundred MB.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

from specsweep.results.redact import cut

TokenSource = Literal["usage", "tokenize", "chunks"]

#: characters of generated text kept for display (``output_head``)
HEAD_CHARS = 200
#: the largest token count one request can have (int32: no context is longer); a larger claim is no
#: measurement (the client makes it an error row, an importer refuses it)
MAX_COUNT = 2**31 - 1
#: characters per block of ``output_blocks`` (the resolution of a first difference past the head)
BLOCK_CHARS = 64
#: bytes of BLAKE2b per block, and of ``output_digest`` (16 hex digits)
DIGEST_BYTES = 8


def output_fingerprint(text: str) -> tuple[str, str, bytes]:
    """``(digest, head, blocks)`` of a request's generated text, for output agreement across arms.

    - ``digest``: BLAKE2b-64 of the whole text (UTF-8) as 16 hex digits — equal texts, equal digests;
    - ``head``: the first :data:`HEAD_CHARS` characters (Unicode code points), for display and for
      the exact position of a first difference inside them;
    - ``blocks``: BLAKE2b-64 of every :data:`BLOCK_CHARS`-character block, concatenated (8 bytes per
      block, the last block possibly shorter): the first differing block places a later first
      difference to within one block without storing the text (≈ 1 KiB for 8,000 characters).
    """
    data = text.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()
    if data.isascii():
        blocks = b"".join(hashlib.blake2b(data[i:i + BLOCK_CHARS], digest_size=DIGEST_BYTES).digest()
                          for i in range(0, len(data), BLOCK_CHARS))
    else:
        blocks = b"".join(hashlib.blake2b(text[i:i + BLOCK_CHARS].encode("utf-8", "surrogatepass"),
                                          digest_size=DIGEST_BYTES).digest()
                          for i in range(0, len(text), BLOCK_CHARS))
    return digest, cut(text, HEAD_CHARS, ellipsis=""), blocks  # a secret in the text is masked, never cut


_NO_TIMES = np.empty(0, dtype=np.float64)
_NO_TIMES.flags.writeable = False
_ONE = np.ones(1, dtype=np.int32)
_ONE.flags.writeable = False


def times_array(times: Sequence[float] | np.ndarray) -> np.ndarray:
    """Chunk arrival times (seconds) as a float64 array; a float64 array is kept as it is."""
    return np.asarray(times, dtype=np.float64)


def tokens_array(tokens: Sequence[int] | np.ndarray) -> np.ndarray:
    """Tokens per chunk as an int32 array.

    When every chunk carried exactly one token (no speculation: the longest streams) the result is a
    read-only view of a single 1 (``np.broadcast_to``): it reads as the full array, element by
    element, but costs no memory per chunk. Copy it (``np.array``) before writing to it.
    """
    arr = np.asarray(tokens, dtype=np.int32)
    if arr.size and (arr == 1).all():
        return np.broadcast_to(_ONE, arr.shape)
    return arr


@dataclass(slots=True, eq=False)
class RequestRecord:
    """What happened to one request.

    ``chunk_times`` holds the arrival time (seconds, perf_counter; a float64 array) of every SSE
    chunk that carried at least one new output token, in order; ``chunk_tokens`` the number of new
    output tokens each of those chunks carried (from the server's cumulative counts; an int32
    array, see :func:`tokens_array`), or ``None`` when the server gave no per-chunk counts. Lists
    given to the constructor are converted. ``output_tokens`` is the server's own count
    (``usage.completion_tokens`` or SGLang ``meta_info.completion_tokens``) with
    ``token_source="usage"``; only when the server gives none is it the number of token-carrying
    chunks, with ``token_source="chunks"``, until the returned text (kept in ``output_text`` only
    in that case) is counted with the server's tokenizer (``token_source="tokenize"``). It is
    never the requested length.

    A failed request keeps whatever arrived before the failure and says why in ``error``.
    Records compare field by field, the chunk arrays by dtype and values.
    """

    t_sent: float
    t_end: float
    http_status: int | None = None
    error: str | None = None
    chunk_times: np.ndarray = field(default_factory=lambda: _NO_TIMES)
    chunk_tokens: np.ndarray | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    token_source: TokenSource | None = None
    finish_reason: str | None = None
    #: BLAKE2b-64 of the generated text, its first 200 characters and its 64-character block hashes
    #: (see :func:`output_fingerprint`); None when the text could not be assembled
    output_digest: str | None = None
    output_head: str | None = None
    output_blocks: bytes | None = None
    #: per-request figures the server reported, e.g. ``e2e_latency_s``, ``spec_accept_length``,
    #: ``spec_verify_ct`` (SGLang final ``meta_info``)
    server: dict[str, float] = field(default_factory=dict)
    #: the generated text, kept only when the server gave no token counts (for ``/tokenize``)
    output_text: str | None = None

    def __post_init__(self) -> None:
        self.chunk_times = times_array(self.chunk_times)
        if self.chunk_tokens is not None:
            self.chunk_tokens = tokens_array(self.chunk_tokens)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                        and np.array_equal(a, b)):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]  # mutable, as with the dataclass default

    @property
    def ok(self) -> bool:
        """True when the request finished without error and produced at least one token."""
        return self.error is None and bool(self.output_tokens)
