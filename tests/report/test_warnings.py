"""The warnings at the top of a report (specsweep.report.warnings): one per line, ranked, each saying
whether it changes the verdict with the number it was compared against; workload mismatches among them."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from helpers import write_measured
from specsweep.analyze.compare import compare
from specsweep.decide import DEFAULT_PROFILES, recommend
from specsweep.markup import markdown_html
from specsweep.report import collect_warnings, top_warnings, warnings_markdown
from specsweep.results.store import load_result_sets

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess

LAG = "C=4 repeat 0: event-loop lag p99 7.0 ms: chunk timestamps can be late by that much"
LAG_SMALLER = "C=16 repeat 0: event-loop lag p99 3.2 ms: chunk timestamps can be late by that much"
TOKENIZE = ("The server reports no token counts (no usage / meta_info), so output tokens are counted from the "
            "returned text with the server's own tokenizer (POST /tokenize; token_source 'tokenize').")
UNKNOWN = "something <script>odd</script> happened"


def _levels(ttft_s: float) -> dict[int, dict]:
    return {c: {"tokens": 30, "step_s": 0.02, "ttft_s": ttft_s, "jitter": 0.05} for c in (1, 4, 16)}


def _sets(tmp: Path, ttft_s: float, spec_input: int = 100) -> list:
    base = write_measured(tmp / "baseline", "baseline", _levels(ttft_s), warnings=[TOKENIZE])
    spec = write_measured(tmp / "spec", "spec", _levels(ttft_s), warnings=[LAG, LAG_SMALLER, UNKNOWN],
                          workload={"input_tokens": spec_input})
    return load_result_sets([base, spec])


def _shortest_ttft_p50_ms(tmp: Path, concurrency: int | None = None) -> float:
    """The shortest median TTFT over every arm (at ``concurrency``, else at every level), from the stored
    requests (not the code's levels)."""
    meds = []
    for arm in ("baseline", "spec"):
        req = pd.read_parquet(tmp / arm / "requests.parquet") if (tmp / arm / "requests.parquet").exists() else \
            pd.read_csv(tmp / arm / "requests.csv")
        req = req[req["error"].isna()]
        if concurrency is not None:
            req = req[req["concurrency"] == concurrency]
        meds += list(req.groupby("concurrency")["ttft_s"].median())
    return min(meds) * 1e3


def _largest_share(tmp: Path) -> tuple[int, float, float, float]:
    """(concurrency, lag ms, that level's shortest median TTFT ms, share %) of the two lag warnings' largest share."""
    rows = [(c, lag, w := _shortest_ttft_p50_ms(tmp, c), lag / w * 100) for c, lag in ((4, 7.0), (16, 3.2))]
    return max(rows, key=lambda r: r[3])


def test_warnings_are_ranked_one_per_line_each_saying_whether_it_changes_the_verdict(tmp_path: Path) -> None:
    comp = compare(_sets(tmp_path, ttft_s=0.5, spec_input=200), allow_workload_mismatch=True)
    recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
    ws = collect_warnings(comp, recs)
    kinds = [w.kind for w in ws]
    # the mismatch changes the verdict (high), the unassessed one may, then those that do not change it
    assert kinds[0] == "workload-mismatch"
    assert kinds.index("other") < kinds.index("timestamps") and kinds.index("other") < kinds.index("tokenizer")
    assert [w.changes_verdict for w in ws] == sorted((w.changes_verdict for w in ws), reverse=True)
    # the two lag warnings are one line, quoting the larger lag, each weighed against its own level's median TTFT
    lag = [w for w in ws if w.kind == "timestamps"]
    assert len(lag) == 1 and "7.0 ms" in lag[0].text and "concurrency 4, 16" in lag[0].text
    c, lag_ms, shortest, share = _largest_share(tmp_path)
    assert share < 2.0  # 7 ms against about 500 ms
    assert lag[0].changes_verdict is False
    assert f"concurrency {c}, where {lag_ms:.1f} ms" in lag[0].effect, lag[0].effect
    assert f"{shortest:.0f} ms" in lag[0].effect and f"{share:.1f}%" in lag[0].effect
    assert lag[0].effect.startswith("Does not change the verdict") and "2% minimum effect" in lag[0].effect
    md = warnings_markdown(ws)
    lines = md.split("\n")
    assert len(lines) == len(ws) and all(line.startswith("- ⚠ ") for line in lines)
    assert "\\<script>" in md and "<script>" not in markdown_html(md)  # a result set's text is escaped


def test_a_lag_that_is_large_against_the_waits_changes_the_verdict(tmp_path: Path) -> None:
    comp = compare(_sets(tmp_path, ttft_s=0.05))
    lag = next(w for w in collect_warnings(comp) if w.kind == "timestamps")
    c, lag_ms, _, share = _largest_share(tmp_path)
    assert share > 2.0
    assert lag.changes_verdict is True and lag.effect.startswith("Can change the verdict")
    assert f"at concurrency {c}, {lag_ms:.1f} ms is {share:.1f}%" in lag.effect, lag.effect


def test_a_lag_is_weighed_against_the_waits_of_its_own_level(tmp_path: Path) -> None:
    """7 ms late at 4 clients, whose TTFT is 1 s, does not decide, although TTFT at 1 client is 50 ms."""
    levels = {1: {"tokens": 30, "step_s": 0.02, "ttft_s": 0.05, "jitter": 0.05},
              4: {"tokens": 30, "step_s": 0.02, "ttft_s": 1.0, "jitter": 0.05}}
    write_measured(tmp_path / "baseline", "baseline", levels)
    write_measured(tmp_path / "spec", "spec", levels, warnings=[LAG])
    lag = next(w for w in collect_warnings(compare(load_result_sets(tmp_path))) if w.kind == "timestamps")
    assert lag.changes_verdict is False and "at concurrency 4, where 7.0 ms" in lag.effect, lag.effect


def test_a_workload_mismatch_is_a_top_warning_naming_the_field(tmp_path: Path) -> None:
    comp = compare(_sets(tmp_path, ttft_s=0.5, spec_input=200), allow_workload_mismatch=True)
    lines = top_warnings(comp)
    hit = [line for line in lines if "different workloads" in line]
    assert len(hit) == 1 and "input_tokens 200 vs 100" in hit[0] and "allow-workload-mismatch" in hit[0]
    assert "Can change the verdict" in hit[0]
    same = compare(_sets(tmp_path / "same", ttft_s=0.5))
    assert not any("different workloads" in line for line in top_warnings(same))
