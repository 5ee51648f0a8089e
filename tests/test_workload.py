"""Prompts: seeded, paired across arms, shaped per API flavour; prompt files validated."""
from __future__ import annotations

from pathlib import Path

import pytest

from specsweep.workload import make_workload, prompt_file, random_ids


def test_random_ids_are_seeded_and_fixed_length() -> None:
    w = random_ids(100, 50, seed=3)
    a, b = w.prompt(7, "sglang"), random_ids(100, 50, seed=3).prompt(7, "sglang")
    assert a == b and len(a) == 100 and all(1000 <= t < 30000 for t in a)
    assert w.prompt(8, "sglang") != a
    assert random_ids(100, 50, seed=4).prompt(7, "sglang") != a
    chat = w.prompt(7, "openai-chat")
    assert isinstance(chat, str) and len(chat.split()) == 100
    body = w.bodies("sglang", [7], model=None, temperature=0.0)[0]
    assert body["input_ids"] == a and body["sampling_params"]["max_new_tokens"] == 50
    assert body["sampling_params"]["ignore_eos"] is True and body["stream"] is True
    short = w.bodies("openai-completions", [1], model="m", temperature=0.0, output_tokens=16)[0]
    assert short["max_tokens"] == 16 and short["model"] == "m" and short["prompt"] == w.prompt(1, "openai-completions")
    d = w.describe()
    assert d["kind"] == "random-ids" and d["input_tokens"] == 100 and d["seed"] == 3


def test_prompt_file(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hello there"}\n{"input_ids": [5, 6, 7]}\n\n'
                 '{"messages": [{"role": "user", "content": "hi"}]}\n')
    w = prompt_file(f, 32)
    assert w.prompt(0, "sglang") == "hello there"
    assert w.prompt(1, "openai-completions") == [5, 6, 7]
    assert w.prompt(2, "openai-chat") == [{"role": "user", "content": "hi"}]
    assert w.prompt(2, "sglang") == "hi"  # messages flattened for non-chat APIs
    assert w.prompt(3, "sglang") == "hello there"  # cycles
    assert w.dataset_digest.startswith("sha256:")
    with pytest.raises(ValueError, match=r"token IDs, which chat endpoints do not accept"):
        w.prompt(1, "openai-chat")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "wrong key"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: needs 'prompt'"):
        prompt_file(bad, 32)
    txt = tmp_path / "p.txt"
    txt.write_text("one\n\ntwo\n")
    assert prompt_file(txt, 8).prompts == ("one", "two")


def test_make_workload_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no such prompt file"):
        make_workload(str(tmp_path / "missing.jsonl"), 10, 10, 0)
    with pytest.raises(ValueError, match=r"input_tokens must be a whole number"):
        make_workload("random-ids", 0, 10, 0)
