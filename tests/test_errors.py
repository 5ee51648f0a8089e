"""The error tree: every error specsweep raises on purpose is an input error (exit 2) or a run error (exit 1)."""
from __future__ import annotations

import pytest

from specsweep.analyze.join import NoSharedLevelError
from specsweep.analyze.whatif.observe import WhatIfError
from specsweep.analyze.workload_match import WorkloadMismatchError
from specsweep.cli import BadInput
from specsweep.engines.llamacpp import LaunchError
from specsweep.errors import BAD_INPUT, FAILED, InputError, RunError, SpecsweepError, exit_status
from specsweep.importers.common import BadInput as ImportBadInput
from specsweep.measure.config import ConfigError
from specsweep.measure.probe import ProbeError
from specsweep.measure.sweep import SweepAborted
from specsweep.refserver.app import ApiError, VocabError
from specsweep.refserver.launch import RefServerError
from specsweep.refserver.profiles import ProfileError
from specsweep.report.consistency import ConsistencyError
from specsweep.results.store import RunLocked, SchemaError
from specsweep.study.arm import ServerError
from specsweep.study.file import StudyError
from specsweep.workloads.datasets import DatasetError

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess

#: (class, its branch, the built-in base callers may still catch it by)
TREE: list[tuple[type[Exception], type[SpecsweepError], type[Exception]]] = [
    (BadInput, InputError, ValueError),
    (ImportBadInput, InputError, ValueError),
    (ConfigError, InputError, ValueError),
    (DatasetError, InputError, ValueError),
    (SchemaError, InputError, ValueError),
    (StudyError, InputError, ValueError),
    (ProfileError, InputError, ValueError),
    (WhatIfError, InputError, ValueError),
    (WorkloadMismatchError, InputError, ValueError),
    (NoSharedLevelError, InputError, ValueError),
    (LaunchError, InputError, Exception),
    (ApiError, InputError, Exception),
    (VocabError, InputError, Exception),
    (ServerError, RunError, RuntimeError),
    (ProbeError, RunError, RuntimeError),
    (RefServerError, RunError, RuntimeError),
    (SweepAborted, RunError, RuntimeError),
    (RunLocked, RunError, RuntimeError),
    (ConsistencyError, RunError, ValueError),
]


@pytest.mark.parametrize(("cls", "branch", "builtin"), TREE, ids=[c.__name__ for c, _, _ in TREE])
def test_each_error_sits_on_its_branch_and_keeps_its_builtin_base(
        cls: type[Exception], branch: type[SpecsweepError], builtin: type[Exception]) -> None:
    assert issubclass(cls, SpecsweepError) and issubclass(cls, branch) and issubclass(cls, builtin)
    other = RunError if branch is InputError else InputError
    assert not issubclass(cls, other)


def test_input_errors_exit_2_and_everything_else_exits_1() -> None:
    assert (BAD_INPUT, FAILED) == (2, 1)
    assert exit_status(StudyError("bad study file")) == 2
    assert exit_status(InputError("bad")) == 2
    assert exit_status(ServerError("server died")) == 1
    assert exit_status(RunError("failed")) == 1
    assert exit_status(KeyboardInterrupt()) == 1  # Ctrl-C: the command ran and did not finish
    assert exit_status(ValueError("not ours")) == 1


def test_the_sweep_notebooks_bad_input_names_are_input_errors() -> None:
    """The console script knows the notebook's errors by name only; each specsweep one it calls bad input is an InputError."""
    from specsweep.cli import BAD_INPUT_ERRORS

    ours = {cls.__name__: cls for cls, _, _ in TREE}
    named = [name for name in BAD_INPUT_ERRORS if name in ours]
    assert sorted(named) == ["ConfigError", "DatasetError", "SchemaError"]
    assert all(issubclass(ours[name], InputError) for name in named)


@pytest.mark.parametrize(("error", "status"), [(SchemaError("no meta.json"), 2), (RunLocked("held by pid 1"), 1)])
def test_publish_maps_the_tree_to_its_exit_status(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                 error: SpecsweepError, status: int) -> None:
    from specsweep import publish

    def fail(pubs: object) -> None:
        raise error

    monkeypatch.setattr(publish, "decision_tables", fail)
    assert publish.main(["--decisions"]) == status
    assert capsys.readouterr().err.strip() == f"python -m specsweep.publish: {error}"
