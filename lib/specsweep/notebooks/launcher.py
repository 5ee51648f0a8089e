"""``python -m specsweep.notebooks.launcher -f CONNECTION_FILE``: ipykernel's own launcher, without the debugger.

Every kernel specsweep starts (a report, a sweep, a study's arm) runs one notebook under papermill
and exits; nothing attaches a debugger to it. ipykernel imports debugpy at start all the same, a
cost paid by every kernel a test suite, a study or a report starts (``bench/kernel_fork.py`` times
a kernel from launch to its first cell's reply; ``SPECSWEEP_KERNEL_DEBUGGER=1`` gives the stock
launcher's figure).

This launcher marks debugpy absent (``sys.modules["debugpy"] = None``, which makes ``import
debugpy`` raise ImportError), so ipykernel starts as it does where debugpy is not installed (its
documented fallback: no debugger, everything else the same), then does what ``ipykernel_launcher``
does. :func:`specsweep.notebooks.kernel.kernel_manager_class` starts kernels with it in place of
``-m ipykernel_launcher``; ``SPECSWEEP_KERNEL_DEBUGGER=1`` keeps the stock launcher.

It also runs the kernel's start-up (ipykernel, and what ``--IPKernelApp.exec_lines`` preloads:
pandas, altair and specsweep's modules for a report) without the cyclic garbage collector, then
freezes what start-up left (:func:`gc.freeze`) before the first cell: start-up makes hundreds of
thousands of objects and frees almost none, so the collections it triggered found next to nothing,
and the full collections a notebook triggers later do not walk the loaded modules, which saves CPU
in every report build (``bench/report_build.py`` times one). The price is the start-up's own
cyclic garbage (a few thousand objects for a report kernel), never freed in a process that runs
one notebook and exits.
"""
from __future__ import annotations

import gc
import sys
from pathlib import Path

#: the kernel spec's module this launcher stands in for
STOCK_LAUNCHER = "ipykernel_launcher"
#: this module, as ``python -m`` names it
LAUNCHER = "specsweep.notebooks.launcher"


def launcher_argv(argv: list[str]) -> list[str]:
    """A kernel command with ``-m ipykernel_launcher`` replaced by ``-m specsweep.notebooks.launcher``;
    any other command (another kernel, another launcher) unchanged."""
    for i in range(len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] == STOCK_LAUNCHER:
            return [*argv[: i + 1], LAUNCHER, *argv[i + 2:]]
    return list(argv)


def main() -> None:
    # as ipykernel_launcher: the working directory leaves sys.path while ipykernel loads, and the
    # kernel puts it back itself (InteractiveShellApp.init_path)
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    # a None entry makes `import debugpy` raise ImportError (no debugger); typeshed allows only modules
    sys.modules.setdefault("debugpy", None)  # type: ignore[arg-type]
    gc.disable()  # start-up allocates and keeps: no collections until the first cell (module docstring)
    from specsweep.runtime import configure_process

    configure_process()  # every kernel specsweep starts: before the preload imports altair and pandas
    from ipykernel import kernelapp

    # kernelapp.launch_new_instance(), step by step: start-up (preload included), then the kernel runs
    app = kernelapp.IPKernelApp.instance()
    app.initialize()
    gc.freeze()  # what start-up left stays for the kernel's life: later collections skip it
    gc.enable()
    app.start()


if __name__ == "__main__":
    main()
