"""Prompts: seeded, paired across arms, shaped per API flavour; prompt files validated."""
from __future__ import annotations

from pathlib import Path

import pytest

from specsweep.workloads.prompts import make_workload, prompt_file, random_ids

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


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
    at = {w.record(i): i for i in range(3)}  # prompt number of each record in the first pass
    assert sorted(at) == [0, 1, 2]
    assert w.prompt(at[0], "sglang") == "hello there"
    assert w.prompt(at[1], "openai-completions") == [5, 6, 7]
    assert w.prompt(at[2], "openai-chat") == [{"role": "user", "content": "hi"}]
    assert w.prompt(at[2], "sglang") == "hi"  # messages flattened for non-chat APIs
    assert sorted(map(str, (w.prompt(i, "sglang") for i in range(3, 6)))) == \
        sorted(map(str, (w.prompt(i, "sglang") for i in range(3))))  # the next pass sends them again
    assert w.dataset_digest.startswith("sha256:")
    with pytest.raises(ValueError, match=r"token IDs, which chat endpoints do not accept"):
        w.prompt(at[1], "openai-chat")
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


def test_random_text_is_seeded_text_for_every_flavour() -> None:
    from specsweep.workloads.prompts import random_text

    w = make_workload("random-text", 50, 20, 3)
    assert w.kind == "random-text" and w == random_text(50, 20, 3)
    for flavour in ("sglang", "openai-completions", "openai-chat"):
        p = w.prompt(4, flavour)  # type: ignore[arg-type]
        assert isinstance(p, str) and len(p.split()) == 50
    assert w.prompt(4, "sglang") == make_workload("random-text", 50, 20, 3).prompt(4, "sglang")
    assert w.prompt(5, "sglang") != w.prompt(4, "sglang")
    body = w.bodies("sglang", [4], model=None, temperature=0.0)[0]
    assert "text" in body and "input_ids" not in body
    assert w.describe()["kind"] == "random-text" and "id_range" not in w.describe()


def test_warmup_prompts_are_of_the_measured_kind(tmp_path: Path) -> None:
    from specsweep.workloads.prompts import prompt_ids_range, warmup_workload

    # a text workload warms up with text: no token IDs a small-vocabulary model may lack
    text_file = tmp_path / "t.txt"
    text_file.write_text("one two three four\nfive six seven eight nine ten\n")
    for w in (make_workload("random-text", 32, 8, 0), prompt_file(text_file, 8)):
        warm = warmup_workload(w)
        assert prompt_ids_range(warm) is None
        assert all(isinstance(warm.prompt(10**9 + i, "openai-completions"), str) for i in range(3))
    # an ID file warms up with IDs from the span the file itself uses
    ids_file = tmp_path / "i.jsonl"
    ids_file.write_text('{"input_ids": [5, 9, 12]}\n{"input_ids": [7, 40]}\n')
    warm = warmup_workload(prompt_file(ids_file, 8))
    assert warm.id_range == (5, 41)
    assert all(5 <= t < 41 for t in warm.prompt(10**9, "sglang"))  # type: ignore[union-attr]
    # random IDs warm up with the same range
    assert warmup_workload(random_ids(16, 8, 1, (100, 200))).id_range == (100, 200)


def test_vocabulary_check_and_rejection_explained(tmp_path: Path) -> None:
    from specsweep.workloads.prompts import check_vocabulary, explain_rejection

    ids = random_ids(16, 8)
    with pytest.raises(ValueError, match=r"parameter 'workload'.*1,403 token IDs.*\[1000, 30000\).*random-text"):
        check_vocabulary(ids, 1403, "openai-completions")
    check_vocabulary(ids, 32000, "openai-completions")  # fits
    check_vocabulary(ids, None, "openai-completions")  # unknown: nothing to check
    check_vocabulary(ids, 1403, "openai-chat")  # chat sends text
    check_vocabulary(make_workload("random-text", 16, 8, 0), 10, "sglang")
    f = tmp_path / "i.jsonl"
    f.write_text('{"input_ids": [5, 2000]}\n')
    with pytest.raises(ValueError, match=r"token IDs up to 2000"):
        check_vocabulary(prompt_file(f, 8), 1403, "sglang")
    msg = explain_rejection("HTTP 400: Prompt contains invalid tokens", ids, "openai-completions", 1403)
    assert "go up to 29999" in msg and "random-text" in msg and "1,403" in msg
    assert explain_rejection("HTTP 400: Token id 29000 is out of vocabulary", ids, "sglang") != \
        "HTTP 400: Token id 29000 is out of vocabulary"
    # unrelated errors and text workloads are left alone
    assert explain_rejection("HTTP 500: boom", ids, "sglang") == "HTTP 500: boom"
    text = make_workload("random-text", 16, 8, 0)
    assert explain_rejection("HTTP 400: Prompt contains invalid tokens", text, "sglang").endswith("tokens")


def test_unrelated_400s_are_not_blamed_on_the_vocabulary() -> None:
    from specsweep.workloads.prompts import explain_rejection

    err = "HTTP 400: max_tokens must be >= 1, got 0"
    assert explain_rejection(err, random_ids(16, 8), "openai-completions") == err


def test_prompt_sets_go_in_a_seeded_shuffled_order_with_categories_interleaved() -> None:
    from specsweep.analyze.workload_match import workload_differences
    from specsweep.results.meta import Workload
    from specsweep.workloads.order import pass_order
    from specsweep.workloads.prompts import make_workload

    w = make_workload("builtin", 100, 32, 7)
    n = len(w.prompts)
    first = [w.record(i) for i in range(n)]
    second = [w.record(i) for i in range(n, 2 * n)]
    assert sorted(first) == sorted(second) == list(range(n)) and first != second  # each pass: its own permutation
    assert first == [make_workload("builtin", 100, 32, 7).record(i) for i in range(n)]  # same seed, same order
    assert first != [make_workload("builtin", 100, 32, 8).record(i) for i in range(n)]
    assert list(pass_order(7, n, 0)) == first
    # the file is sorted by category; the first 24 prompts sent mix at least four of its six categories
    assert w.categories == tuple(sorted(w.categories, key=w.categories.index))
    assert len({w.category(i) for i in range(24)}) >= 4
    assert w.describe()["order"] == "shuffled"
    # a result set written in record order is a different workload
    old = {**w.describe()}
    del old["order"]
    assert any("order" in d for d in workload_differences(Workload.model_validate(w.describe()), Workload.model_validate(old)))
