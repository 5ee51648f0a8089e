"""The order in which a sweep sends the records of a prompt set.

Each pass through a set of ``n`` prompts is its own seeded permutation, so every arm with the same
seed sends the same prompts in the same order. Its own module because both the workload builder
(:mod:`specsweep.workloads.prompts`) and the dataset readers (:mod:`specsweep.workloads.datasets`, which map a
request's prompt id back to its record and category) need it, and neither should import the other
for it.
"""
from __future__ import annotations

import functools

import numpy as np

#: ``meta.workload.order`` of prompt sets: each pass through the set in its own seeded order
SHUFFLED = "shuffled"
#: the order of result sets written before prompt sets were shuffled (and of random prompts)
RECORD_ORDER = "record"


@functools.lru_cache(maxsize=256)
def pass_order(seed: int, n: int, p: int) -> np.ndarray:
    """The record order of pass ``p`` through a set of ``n`` prompts: a permutation of ``range(n)``
    drawn by ``numpy.random.default_rng([seed, n, p])`` (read-only)."""
    order = np.random.default_rng([seed, n, p]).permutation(n)
    order.flags.writeable = False
    return order


def record_index(seed: int, n: int, i: int) -> int:
    """The record (0-based, of ``n``) that prompt number ``i`` of a shuffled prompt set sends."""
    p, k = divmod(int(i), n)
    return int(pass_order(seed, n, p)[k])
