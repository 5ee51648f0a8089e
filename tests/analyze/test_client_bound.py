"""The client-bound rule: an imported arm whose median TTFT at a level is more than TTFT_RATIO times
the largest any other tool measured there is flagged on the page; below it, or against arms of its
own tool, or for specsweep's own runs, it is not."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tests.helpers import base_meta

from specsweep.analyze.client_bound import TTFT_RATIO, client_bound_levels
from specsweep.results.meta import Meta

FIX = Path(__file__).parents[1] / "fixtures" / "importers"


def _meta(arm: str, tool: str | None) -> Meta:
    extra = {"imported": True, "source": {"tool": tool}} if tool else {}
    return Meta.model_validate(base_meta(arm, **extra))


#: noise models of the other tools' median TTFTs (s) at a level
NOISE = {
    "lognormal": lambda rng, n: 0.01 * rng.lognormal(0.0, 0.5, n),
    "uniform": lambda rng, n: rng.uniform(0.002, 0.2, n),
    "gamma": lambda rng, n: 0.005 * rng.gamma(2.0, 1.0, n) + 1e-4,
}


@pytest.mark.fast
@pytest.mark.parametrize("noise", sorted(NOISE))
def test_an_arm_is_flagged_exactly_where_its_ttft_exceeds_the_ratio_times_every_other_tools(noise: str) -> None:
    rng = np.random.default_rng(sorted(NOISE).index(noise))
    for _ in range(200):
        levels = [1, 4, 16, 64]
        others = {"vllm-base": "vllm bench serve", "vllm-mtp": "vllm bench serve", "sg-mtp": "sglang bench_serving"}
        rows, expected = [], set()
        for c in levels:
            theirs = NOISE[noise](rng, len(others))
            rows += [{"arm": a, "concurrency": c, "ttft_p50_s": t} for a, t in zip(others, theirs)]
            # the tested arm: on either side of the threshold, never within 2 % of it
            ratio = rng.choice([rng.uniform(0.3, TTFT_RATIO * 0.98), rng.uniform(TTFT_RATIO * 1.02, 8.0)])
            rows.append({"arm": "aiperf-mtp", "concurrency": c, "ttft_p50_s": ratio * theirs.max()})
            # its own tool's second arm, far above: never set against the first
            rows.append({"arm": "aiperf-base", "concurrency": c, "ttft_p50_s": 50 * ratio * theirs.max()})
            if ratio > TTFT_RATIO:
                expected.add(("aiperf-mtp", c))
        metas = {a: _meta(a, t) for a, t in {**others, "aiperf-mtp": "aiperf", "aiperf-base": "aiperf"}.items()}
        found = client_bound_levels(pd.DataFrame(rows), metas)
        got = {(f.arm, f.concurrency) for f in found if f.arm == "aiperf-mtp"}
        assert got == expected
        assert {f.concurrency for f in found if f.arm == "aiperf-base"} == set(levels)  # 50x: always flagged


@pytest.mark.fast
def test_specsweeps_own_runs_arms_of_one_tool_and_missing_ttft_are_not_judged() -> None:
    rows = pd.DataFrame([{"arm": "base", "concurrency": 8, "ttft_p50_s": 0.01},
                         {"arm": "mtp", "concurrency": 8, "ttft_p50_s": 0.5},
                         {"arm": "g", "concurrency": 8, "ttft_p50_s": float("nan")},
                         {"arm": "g", "concurrency": 16, "ttft_p50_s": 0.9}])
    metas = {"base": _meta("base", "aiperf"), "mtp": _meta("mtp", None), "g": _meta("g", "guidellm")}
    # mtp is specsweep's own (never flagged); g has no TTFT at 8 and no other tool at 16
    assert client_bound_levels(rows, metas) == []
    metas["mtp"] = _meta("mtp", "aiperf")  # the same tool as base: not set against it
    assert client_bound_levels(rows, metas) == []


@pytest.mark.fast
def test_recorded_aiperf_arms_beside_vllms_are_flagged_client_bound_on_the_page(tmp_path: Path) -> None:
    """aiperf's recorded baseline runs on the shared machine fell behind at 8 and 64 (TTFT several times
    vLLM's on the same server); at 1 they agree. The page's warnings say so and rank it as able
    to change the verdict."""
    from specsweep.analyze.compare import compare
    from specsweep.importers import import_files
    from specsweep.report.warnings import collect_warnings
    from specsweep.results.store import load_result_set

    sets = [load_result_set(import_files("vllm", sorted((FIX / "vllm").glob(f"{a}-c*.json.gz")), a, tmp_path))
            for a in ("baseline", "mtp")]
    aiperf = sorted((FIX / "aiperf").glob("baseline-c*/profile_export_aiperf.json"))
    sets.append(load_result_set(import_files("aiperf", aiperf, "aiperf-base", tmp_path)))
    comp = compare(sets, allow_workload_mismatch=True, n_boot=50)
    found = client_bound_levels(comp.levels, comp.metas)
    assert {(f.arm, f.concurrency) for f in found} == {("aiperf-base", 8), ("aiperf-base", 64)}
    bound = [w for w in collect_warnings(comp) if w.kind == "client-bound"]
    assert len(bound) == 1 and bound[0].changes_verdict and "aiperf-base" in bound[0].text
    assert "concurrency 8 (" in bound[0].text and "64 (" in bound[0].text and " 1 (" not in bound[0].text


@pytest.mark.fast
def test_a_tools_own_client_warnings_reach_the_page_as_client_bound(tmp_path: Path) -> None:
    """guidellm records its own checks of its client per benchmark (the recorded files: requests
    generated late at concurrency 1); aiperf's bursts (median time per token 0) say the same."""
    import gzip
    import json

    from specsweep.analyze.compare import compare
    from specsweep.importers import import_files
    from specsweep.report.warnings import collect_warnings
    from specsweep.results.store import load_result_set

    doc = json.loads(gzip.decompress((FIX / "guidellm" / "baseline.json.gz").read_bytes()))
    said = [(b["config"]["strategy"].get("streams") or 1, w["code"]) for b in doc["benchmarks"] for w in b["warnings"]]
    assert said  # what the recorded file holds
    sets = [load_result_set(import_files("guidellm", [FIX / "guidellm" / f"{a}.json.gz"], a, tmp_path))
            for a in ("baseline", "mtp")]
    for c, code in said:
        assert any(f"guidellm at concurrency {c} " in w and f"({code})" in w for w in sets[0].meta.warnings)
    bound = [w for w in collect_warnings(compare(sets, n_boot=50)) if w.kind == "client-bound"]
    assert bound and all(w.changes_verdict and w.severity == "high" for w in bound)
    aiperf = load_result_set(import_files("aiperf", [FIX / "aiperf" / "extra" / "baseline-c64-client-bound.json"],
                                          "bursts", tmp_path))
    assert any("client-bound" in w for w in aiperf.meta.warnings)
