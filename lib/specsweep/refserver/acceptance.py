r"""Content-dependent acceptance: a documented, deterministic rule from a prompt to the mean
accept length a simulated drafter achieves on it.

Real drafters are accepted more often where the answer is predictable: an edit of code that is
in the prompt, or facts reformatted from a given text, repeat what the target model already
sees; open-ended writing does not. Most of all where the answer *copies* the prompt (text repeated,
a file returned with one edit, quotes from a passage): there the next tokens stand in the prompt, so
an MTP head or a draft model proposes them as surely as a prompt-lookup or n-gram drafter (which
finds drafts only there) does, and the target accepts them. The reference server models this per request:

1. The profile's ``mean_accept_length`` (``base_mean``, tokens per verify step, bonus included)
   with ``k`` draft tokens gives a per-draft acceptance probability ``p0``, solved from
   ``E[L] = sum_{i=0..k} p^i`` (as ``model.AcceptanceModel``).
2. The prompt's **category** shifts it in log-odds: ``logit(p) = logit(p0) + shift[category] +
   REPEAT_WEIGHT * r``, where ``r`` is the prompt's **repetitiveness**: the share of its word
   trigrams that repeat an earlier trigram of the same prompt (0 for text without repeats).
   Log-odds keep ``p`` inside (0, 1) for any profile and keep the order of the categories.
   An **input-grounded** category's shift is the copy rule: ``COPY_WEIGHT`` (2.0) × the share of
   its answer that copies the prompt (:data:`GROUNDED_COPY_SHARE`: ``copy`` 1.0, ``edit-file`` 0.9,
   ``quote-answer`` 0.6), so copy-like traffic is accepted most, and more the more it copies; the
   other categories' shifts are set by hand (the demo studies measure them, and their pages rest
   on them).
3. ``p`` is capped at ``P_MAX`` and the mean accept length is ``E[L] = sum_{i=0..k} p^i``.

Category shifts (log-odds) and the mean accept lengths they give (``all``, the category of prompts without one, is 0, so a workload of
random token IDs keeps the profile's mean exactly):

================  ======  ================  =====================================
category          shift   tiny (k=3, 2.0)   qwen3.5-122b seed profile (k=1, 1.89)
================  ======  ================  =====================================
copy              +2.0    3.43              1.98
edit-file         +1.8    3.33              1.98
quote-answer      +1.2    2.94              1.96
code-edit         +1.0    2.79              1.96
extraction        +0.8    2.64              1.95
summarisation     +0.3    2.23              1.92
qa                 0.0    2.00              1.89
all                0.0    2.00              1.89
math              -0.2    1.86              1.87
creative-writing  -1.0    1.43              1.75
================  ======  ================  =====================================

(Means at ``r = 0``; :func:`category_means` computes the table for any profile.) Categories not
in the table get 0. The server sees only the prompt, so its category comes from
:func:`category_of_prompt`, which recognises the built-in prompt set's texts exactly (no marker
in the text is needed) and returns ``all`` for anything else. A prompt sent as token IDs has no
text: pass ``""`` (repetitiveness 0, category ``all``: the profile's mean).

Deterministic: the same (prompt, category, base_mean, k) always gives the same mean. With
``jitter > 0`` each prompt's log-odds are further shifted by a normal draw with that standard
deviation, seeded by ``(seed, SHA-256 of the prompt text)``, so repeats of one prompt agree.
The per-step draws around the mean stay the engine's seeded RNG.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
from pathlib import Path

from specsweep.refserver.model import AcceptanceModel

__all__ = [
    "CATEGORY_SHIFT",
    "COPY_WEIGHT",
    "GROUNDED_COPY_SHARE",
    "P_MAX",
    "REPEAT_WEIGHT",
    "accept_probability",
    "category_means",
    "category_of_prompt",
    "expected_accept_length",
    "repetitiveness",
]

#: the input-grounded categories (the answer repeats a span of the prompt:
#: ``specsweep.workloads.datasets.INPUT_GROUNDED``) and the share of the answer that copies the prompt, by
#: the built-in set's design: ``copy`` is the given text itself, ``edit-file`` the given file with one small
#: edit, ``quote-answer`` quotes from a passage joined by a few words of its own
GROUNDED_COPY_SHARE: dict[str, float] = {"copy": 1.0, "edit-file": 0.9, "quote-answer": 0.6}
#: log-odds added per unit of the answer's copied share (module docstring, step 2)
COPY_WEIGHT = 2.0

#: log-odds shift of the per-draft acceptance probability, per prompt category
CATEGORY_SHIFT: dict[str, float] = {
    **{cat: COPY_WEIGHT * share for cat, share in GROUNDED_COPY_SHARE.items()},
    "code-edit": 1.0,
    "extraction": 0.8,
    "summarisation": 0.3,
    "qa": 0.0,
    "all": 0.0,
    "math": -0.2,
    "creative-writing": -1.0,
}
#: log-odds added per unit of repetitiveness (share of repeated word trigrams, 0..1)
REPEAT_WEIGHT = 1.5
#: the per-draft acceptance probability never exceeds this (a drafter is never perfect)
P_MAX = 0.98

_WORD = re.compile(r"\w+|[^\w\s]")


def repetitiveness(text: str, n: int = 3) -> float:
    """Share (0..1) of the word ``n``-grams of ``text`` that repeat an earlier one in it.

    Words are runs of letters/digits or single punctuation marks, lower-cased; 0 when the text
    has fewer than ``n + 1`` words.
    """
    words = _WORD.findall(text.lower())
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    if len(grams) < 2:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def _expected_length(p: float, k: int) -> float:
    return AcceptanceModel.expected_length(p, k)


def _solve_p(k: int, mean: float) -> float:
    return AcceptanceModel.solve_p(k, mean)


def _check(base_mean: float, k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (draft tokens per step) must be a whole number >= 1, got {k!r}")
    if not 1.0 <= base_mean <= k + 1:
        raise ValueError(f"base_mean (mean accept length, tokens per verify step) must be within [1, {k + 1}] "
                         f"for k={k}, got {base_mean!r}; fix the profile's speculative.mean_accept_length")


def accept_probability(prompt_text: str, category: str, base_mean: float, k: int, *,
                       jitter: float = 0.0, seed: int = 0) -> float:
    """The per-draft acceptance probability for one prompt (see the module docstring)."""
    _check(base_mean, k)
    p0 = _solve_p(k, base_mean)
    if p0 <= 0.0:
        return 0.0
    p0 = min(p0, 1.0 - 1e-12)
    logit = math.log(p0 / (1.0 - p0)) + CATEGORY_SHIFT.get(category, 0.0) + REPEAT_WEIGHT * repetitiveness(prompt_text)
    if jitter > 0:
        digest = hashlib.sha256(prompt_text.encode("utf-8", "surrogatepass")).digest()
        rng = random.Random(seed * 0x9E3779B97F4A7C15 ^ int.from_bytes(digest[:8], "big"))
        logit += rng.gauss(0.0, jitter)
    elif jitter < 0:
        raise ValueError(f"jitter (standard deviation in log-odds) must be >= 0, got {jitter!r}")
    return min(P_MAX, 1.0 / (1.0 + math.exp(-logit)))


def expected_accept_length(prompt_text: str, category: str, base_mean: float, k: int, *,
                           jitter: float = 0.0, seed: int = 0) -> float:
    """Mean accept length (tokens per verify step, bonus included; within [1, k + 1]) that the
    simulated drafter achieves on this prompt: the profile's ``base_mean`` moved by the
    prompt's category and repetitiveness (module docstring). Pure and deterministic."""
    return _expected_length(accept_probability(prompt_text, category, base_mean, k, jitter=jitter, seed=seed), k)


def category_means(base_mean: float, k: int) -> dict[str, float]:
    """Mean accept length per category of :data:`CATEGORY_SHIFT` for a profile, at repetitiveness 0."""
    return {cat: expected_accept_length("", cat, base_mean, k) for cat in CATEGORY_SHIFT}


def _normalise(text: str) -> str:
    return " ".join(text.split())


@functools.lru_cache(maxsize=1)
def _builtin_index() -> dict[str, str]:
    """SHA-256 of each built-in prompt's normalised text → its category.

    Read with ``json`` straight from the shipped file (every record there is ``{"category",
    "prompt": text}``; ``test_datasets`` checks the file), not through ``specsweep.workloads.datasets``:
    that imports pandas, which would stall the server's event loop for a fraction of a second
    on the first request. The server builds the index at start (``ServerState``).
    """
    path = Path(__file__).resolve().parents[1] / "data" / "prompts" / "builtin.jsonl"
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out[hashlib.sha256(_normalise(rec["prompt"]).encode()).hexdigest()] = rec.get("category") or "all"
    return out


def category_of_prompt(prompt_text: str) -> str:
    """The built-in set's category of this exact prompt text (whitespace-insensitive), else ``"all"``."""
    return _builtin_index().get(hashlib.sha256(_normalise(prompt_text).encode()).hexdigest(), "all")
