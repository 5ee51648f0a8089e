"""Run one notebook with papermill in the kernel specsweep starts (:mod:`specsweep.notebooks.kernel`)."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsweep.notebooks.kernel import (
    kernel_manager_class,
    kernel_manager_with_env,
    kernel_manager_with_secrets,
    preload_arguments,
)
from specsweep.notebooks.terminal import OUTPUT_SHOWN_ENV
from specsweep.paths import REPO_ROOT

__all__ = ["execute_notebook"]


def execute_notebook(notebook: Path, output: Path, parameters: dict[str, Any], *, cwd: Path | str = REPO_ROOT,
                     stream: bool = False, log_output: bool = False, save_each_cell: bool | None = None,
                     km: Any = None, preload: str | None = None, secrets: Sequence[str] | None = None) -> Any:
    """Run ``notebook`` with papermill in ``cwd`` (default: the repository root) and write ``output``.

    ``stream``: copy the kernel's stdout/stderr (progress bars included) to this process's terminal
    as it runs. ``log_output``: papermill logs the cells' output instead. ``save_each_cell``: write
    ``output`` after every cell (default: only when streamed). ``km``: a kernel already started
    (:class:`~specsweep.notebooks.kernel.EarlyKernel`), else papermill starts one of
    :func:`~specsweep.notebooks.kernel.kernel_manager_class`, preloading ``preload`` (Python) and
    handing it ``secrets`` to mask in everything it writes (``None``: the environment's, as inherited).
    """
    import papermill as pm

    extra: dict[str, Any] = {"stdout_file": sys.stdout, "stderr_file": sys.stderr} if stream else {}
    if km is not None:
        extra["km"] = km
    if preload:
        extra["extra_arguments"] = preload_arguments(preload)
    manager = kernel_manager_class()
    if secrets is not None:
        manager = kernel_manager_with_secrets(manager, secrets)
    if stream or log_output:  # the cells' output reaches the terminal this way: the notebook need not echo it
        manager = kernel_manager_with_env(manager, lambda env: env.update({OUTPUT_SHOWN_ENV: "1"}))
    # unless streamed (a long run someone watches) or asked, the notebook is written once at the end
    # (and on error), not after every cell: each save re-encodes the whole notebook, the chart bundle included
    return pm.execute_notebook(str(notebook), str(output), parameters=parameters, cwd=str(cwd),
                               kernel_name="python3", progress_bar=False, log_output=log_output,
                               request_save_on_cell_execute=stream if save_each_cell is None else save_each_cell,
                               kernel_manager_class=manager, **extra)
