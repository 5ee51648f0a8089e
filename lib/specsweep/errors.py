"""The one error tree of specsweep, and the exit status each branch means.

::

    SpecsweepError                 anything specsweep raises on purpose; the message says what to do
    ├── InputError                 bad input: a parameter, a file, a study file (exit status 2)
    │     ConfigError, DatasetError, SchemaError, StudyError, ProfileError, WhatIfError,
    │     WorkloadMismatchError, NoSharedLevelError, BadInput (cli, importers), LaunchError,
    │     ApiError (a request the reference server refuses)
    └── RunError                   the input was fine, the run failed: a server, a sweep (exit status 1)
          ServerError, ProbeError, RefServerError, SweepAborted, RunLocked, ConsistencyError

Each class keeps the built-in base it had (``ValueError``, ``RuntimeError``) beside its branch, so
code that catches it by that base still does. :func:`exit_status` is the one place that turns an
exception into an exit status; every entry point (``specsweep``, ``python -m specsweep.study``,
``python -m specsweep.publish``) uses it. Standard library only, and nothing from specsweep: every
layer may import this module. In a notebook cell (IPython, papermill) each shows as its one line,
not a traceback.
"""
from __future__ import annotations

#: exit statuses of every specsweep command
OK, FAILED, BAD_INPUT = 0, 1, 2


class SpecsweepError(Exception):
    """The root of every error specsweep raises on purpose."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it in a notebook cell (and papermill then prints): the one line a
        command prints, since the message already says what to do; a traceback would bury it."""
        return [f"{type(self).__name__}: {self}"]


class InputError(SpecsweepError):
    """Input specsweep cannot use (a parameter, a file, a study file); the message names it (exit status 2)."""


class RunError(SpecsweepError):
    """The input was fine but the run failed (a server, a sweep, a report that contradicts itself; exit status 1)."""


def exit_status(exc: BaseException) -> int:
    """The exit status a command ends with when ``exc`` stops it: :data:`BAD_INPUT` for an
    :class:`InputError`, :data:`FAILED` for anything else (a :class:`RunError`, Ctrl-C, a fault)."""
    return BAD_INPUT if isinstance(exc, InputError) else FAILED
