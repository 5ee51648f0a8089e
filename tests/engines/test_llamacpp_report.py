"""What a report says about arms of a real engine: each arm's server command (secrets masked), the
prompt-cache handling, at most a few per-draft-position columns in the full-data table, and output
agreement for sweeps run by hand (reference servers over real sockets)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import base_meta
from specsweep.analyze.compare import compare
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.report import (
    DATA_TABLE_POSITIONS,
    data_table,
    manual_agreement_markdown,
    masked_argv,
    server_command,
    setup_table,
)
from specsweep.results.meta import Meta
from specsweep.results.store import load_result_sets


def test_server_commands_are_shown_with_secrets_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECSWEEP_API_KEY", "sk-live-123")
    argv = ["llama-server", "--api-key", "abc", "--hf-token=hf_x", "-m", "m.gguf", "--header", "Bearer sk-live-123",
            "--spec-type", "ngram-mod"]
    shown = masked_argv(argv)
    assert shown[:4] == ["llama-server", "--api-key", "***", "--hf-token=***"]
    assert "sk-live-123" not in " ".join(shown) and shown[-2:] == ["--spec-type", "ngram-mod"]
    meta = Meta.model_validate(base_meta("a", server={"name": "llamacpp", "launch": {"argv": [
        "python -m specsweep.engines.llamacpp", "--model", "smollm2", "--spec", "ngram-simple", "--api-key", "k"]}}))
    assert server_command(meta) == ("'python -m specsweep.engines.llamacpp' --model smollm2 --spec ngram-simple "
                                    "--api-key '***'")
    assert server_command(Meta.model_validate(base_meta("a", server={"name": "vllm"}))) is None  # nothing recorded: nothing claimed


def _sweep(url: str, out: Path, arm: str) -> Path:
    res = run_sweep({"endpoint": url, "arm": arm, "concurrency": [1, 2], "input_tokens": 32, "output_tokens": 40,
                     "workload": "random-text", "out_dir": str(out), "metrics_interval_s": 0.05, "flush_cache": True},
                    progress=False, log=lambda _: None)
    return res.run_dir


def test_manual_sweeps_get_agreement_few_position_columns_and_the_cache_line(
        tmp_path: Path, refserver_factory: Callable[..., RefServer]) -> None:
    surface = ["--api-surface", "llamacpp", "--set", "model.vocab_size=1403"]
    base = refserver_factory("off", surface)
    spec = refserver_factory("mtp", [*surface, "--speculative-num-steps", "6"])
    dirs = [_sweep(base.url, tmp_path, "baseline"), _sweep(spec.url, tmp_path, "draft")]
    sets = load_result_sets(dirs)
    comp = compare(sets)
    # six draft positions measured, only the first few shown: the rest stay in levels.parquet
    measured = [c for c in comp.levels.columns if c.startswith("spec_accept_rate_pos_")]
    assert len(measured) >= 6
    shown = [c for c in data_table(comp).columns if c.startswith("spec_accept_rate_pos_")]
    assert shown == [f"spec_accept_rate_pos_{i}" for i in range(DATA_TABLE_POSITIONS)]
    # sweeps run by hand carry digests too: the report compares their outputs prompt by prompt
    text = manual_agreement_markdown(sets)
    assert text and "draft" in text
    # the refserver offers no slot erase: the sweep said how it kept the cache out instead
    setup = setup_table(comp)
    assert "cache_prompt: false on every request" in setup.loc["prompt cache"].iloc[0]
