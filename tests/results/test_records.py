"""RequestRecord holds per-chunk data as compact numpy arrays and compares by value."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from specsweep.results.records import RequestRecord, times_array, tokens_array

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def test_lists_given_to_a_record_become_float64_and_int32_arrays() -> None:
    rec = RequestRecord(t_sent=0.0, t_end=1.0, chunk_times=[0.5, 0.75], chunk_tokens=[2, 1])
    assert rec.chunk_times.dtype == np.float64 and rec.chunk_times.tolist() == [0.5, 0.75]
    assert rec.chunk_tokens is not None and rec.chunk_tokens.dtype == np.int32 and rec.chunk_tokens.tolist() == [2, 1]
    assert RequestRecord(t_sent=0.0, t_end=1.0).chunk_times.size == 0
    same = np.arange(3.0)
    assert times_array(same) is same  # a float64 array is kept, not copied


def test_one_token_per_chunk_costs_no_memory_per_chunk() -> None:
    ones = tokens_array(np.ones(20_000, dtype=np.int64))
    assert ones.dtype == np.int32 and ones.shape == (20_000,) and ones.sum() == 20_000
    assert ones.strides == (0,) and not ones.flags.writeable  # a view of a single 1
    assert tokens_array([1, 2]).strides == (4,) and tokens_array([]).size == 0
    sent = RequestRecord(t_sent=0.0, t_end=1.0, chunk_times=[0.1, 0.2], chunk_tokens=ones[:2])
    back = pickle.loads(pickle.dumps(sent))  # to and from worker processes
    assert back.chunk_tokens is not None and back.chunk_tokens.tolist() == [1, 1]


@pytest.mark.parametrize("change", [
    {"chunk_times": [0.5, 0.76]},
    {"chunk_tokens": [1, 2]},
    {"chunk_tokens": None},
    {"output_tokens": 4},
])
def test_records_compare_field_by_field_and_arrays_by_value(change: dict[str, object]) -> None:
    base = {"t_sent": 0.0, "t_end": 1.0, "chunk_times": [0.5, 0.75], "chunk_tokens": [2, 1], "output_tokens": 3}
    assert RequestRecord(**base) == RequestRecord(**base)  # type: ignore[arg-type]
    assert RequestRecord(**base) != RequestRecord(**{**base, **change})  # type: ignore[arg-type]
    rec = RequestRecord(**base)  # type: ignore[arg-type]
    other = RequestRecord(**base)  # type: ignore[arg-type]
    other.chunk_times = other.chunk_times.astype(np.float32)
    assert rec != other  # the dtype counts too
