"""A vLLM without ``VLLM_SERVER_DEV_MODE`` has no prefix-cache flush route: the sweep keeps every
level cold by a ``cache_salt`` of its own, says so, warns naming the variable, and the page never
claims the cache was emptied. The reference server's vLLM surface counts prefix-cache hits by
prompt and salt as vLLM does."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from specsweep.measure.probe import parse_metrics
from specsweep.measure.sweep import run_sweep
from specsweep.report.setup_info import _prompt_cache_line
from specsweep.results.store import load_result_set

PROMPTS = Path(__file__).parents[1] / "fixtures" / "datasets" / "prompts.txt"  # 2 prompts
VLLM = ["--api-surface", "vllm"]


def _hits(url: str) -> tuple[float, float]:
    """(prefix-cache tokens queried, tokens hit) so far."""
    samples = parse_metrics(httpx.get(f"{url}/metrics", trust_env=False).text,
                            ["vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"])
    got = {name: value for name, _, value in samples}
    return got["vllm:prefix_cache_queries_total"], got["vllm:prefix_cache_hits_total"]


def test_the_vllm_surface_serves_the_flush_only_in_dev_mode(refserver_factory) -> None:  # noqa: ANN001 - fixture
    plain, dev = refserver_factory(args=VLLM), refserver_factory(args=[*VLLM, "--vllm-dev-mode"])
    assert httpx.post(f"{plain.url}/reset_prefix_cache", trust_env=False).status_code == 404
    assert httpx.post(f"{dev.url}/reset_prefix_cache", trust_env=False).status_code == 200


def test_the_vllm_surface_counts_prefix_hits_by_prompt_and_salt(refserver_factory) -> None:  # noqa: ANN001 - fixture
    srv = refserver_factory(args=VLLM)
    body = {"model": "specsweep-sim/tiny", "prompt": [5, 6, 7, 8], "max_tokens": 2}
    for salt in (None, None, "a", "a", "b"):
        httpx.post(f"{srv.url}/v1/completions", json={**body, **({"cache_salt": salt} if salt else {})},
                   trust_env=False).raise_for_status()
    assert _hits(srv.url) == (20.0, 8.0)  # 5 lookups of 4 tokens; the 2nd unsalted and the 2nd "a" hit
    bad = httpx.post(f"{srv.url}/v1/completions", json={**body, "cache_salt": ""}, trust_env=False)
    assert bad.status_code == 400 and "cache_salt" in bad.text


@pytest.mark.parametrize("dev_mode", [False, True])
def test_a_vllm_sweep_reads_a_cold_cache_per_level_and_never_claims_a_flush(
        refserver_factory, tmp_path: Path, dev_mode: bool) -> None:  # noqa: ANN001 - fixture
    srv = refserver_factory(args=[*VLLM, *(["--vllm-dev-mode"] if dev_mode else [])])
    before = _hits(srv.url)
    res = run_sweep({"endpoint": srv.url, "arm": "v", "concurrency": [1, 2], "output_tokens": 4,
                     "workload": str(PROMPTS), "requests_per_level": 2, "warmup_requests": 0, "flush_cache": True,
                     "metrics_interval_s": 0.2, "out_dir": str(tmp_path)}, progress=False, log=lambda _: None)
    assert res.complete
    rs = load_result_set(res.run_dir)
    queried, hit = (a - b for a, b in zip(_hits(srv.url), before))
    assert queried > 0 and hit == 0  # the second level sent the first level's 2 prompts again: no hit
    line = _prompt_cache_line(rs.meta)
    if dev_mode:
        assert rs.meta.prefix_cache_flush == "/reset_prefix_cache" and line.startswith("emptied before every level")
        return
    assert rs.meta.prefix_cache_flush.startswith("cache_salt per level")
    assert (rs.levels["prefix_cache_flush"].str.startswith("cache_salt per level")).all()
    assert line.startswith("not emptied") and "cache_salt" in line
    assert any("VLLM_SERVER_DEV_MODE" in w for w in rs.meta.warnings)
