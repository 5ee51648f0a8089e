"""Whether the arms were measured the same way: workload fields, prompt seeds and sweep plans.

Input: the arms' result sets and the baseline's. Output: notes for the page (different prompts or
plans, each result set's own notes), or :class:`WorkloadMismatchError` where a workload field differs.

Invariant: arms measured with different workloads are compared only when the caller explicitly
allows it, and the page then says so for every difference.
"""
from __future__ import annotations

from collections.abc import Sequence

from specsweep.errors import InputError
from specsweep.results.meta import Workload
from specsweep.results.store import ResultSet

#: workload fields that must match for a comparison to be fair
WORKLOAD_KEYS: tuple[str, ...] = ("kind", "input_tokens", "output_tokens", "dataset_digest", "output_length",
                                   "order")


class WorkloadMismatchError(InputError, ValueError):
    """Arms were measured with different workloads; comparing them would mislead."""


def workload_differences(a: Workload, b: Workload) -> list[str]:
    """The workload fields that differ between two meta.json ``workload`` records.

    A field missing from a record takes its :class:`Workload` default (``output_length``: ``"fixed"``),
    so an old result set compares with a new fixed-length one and not with a natural one.
    """
    diffs = []
    for key in WORKLOAD_KEYS:
        va, vb = getattr(a, key), getattr(b, key)
        if key == "dataset_digest" and (va is None or vb is None):
            continue
        if va != vb:
            diffs.append(f"{key} {va!r} vs {vb!r}")
    return diffs


def check_workloads(sets: Sequence[ResultSet], baseline: ResultSet, allow: bool) -> list[str]:
    """Notes on how each arm's measurement differs from the baseline's (prompt seed, sweep plan, the
    result sets' own notes); :class:`WorkloadMismatchError` where a workload field differs, unless
    ``allow``, when each difference becomes a note instead."""
    notes: list[str] = []
    problems = []
    for rs in sets:
        if rs is baseline:
            continue
        diffs = workload_differences(rs.meta.workload, baseline.meta.workload)
        if diffs:
            problems.append(f"arm '{rs.arm}' vs baseline '{baseline.arm}': {'; '.join(diffs)}")
        sa, sb = rs.meta.workload.seed, baseline.meta.workload.seed
        if sa is not None and sb is not None and sa != sb:
            notes.append(
                f"Arm '{rs.arm}' used prompt seed {sa} and the baseline {sb}: same workload shape, "
                "different prompts, so the comparison is not paired request by request."
            )
    for rs in sets:
        if rs is baseline:
            continue
        for key in ("requests_per_level", "repeats", "warmup_requests"):
            va, vb = getattr(rs.meta.sweep, key), getattr(baseline.meta.sweep, key)
            if va is not None and vb is not None and va != vb:
                notes.append(f"Arm '{rs.arm}' and the baseline used different {key.replace('_', ' ')} "
                             f"({va} vs {vb}): prompts are not paired request by request.")
        notes.extend(f"Arm '{rs.arm}': {n}." for n in rs.notes)
    notes.extend(f"Baseline: {n}." for n in baseline.notes)
    if problems and not allow:
        raise WorkloadMismatchError(
            "the arms were measured with different workloads — " + " | ".join(problems)
            + ". Re-measure with the same workload, or pass allow_workload_mismatch=True to compare anyway."
        )
    notes.extend(f"Workloads differ ({p}); compared anyway because it was explicitly allowed." for p in problems)
    return notes
