"""What a notebook kernel also shows on the terminal that started it (plain ``papermill``).

papermill shows no cell output while a notebook runs unless given ``--log-output``, so a sweep run
as the README prints it would show a cell counter for minutes. A kernel's own stderr is the
terminal of the process that started it: :func:`echo` writes a line into the notebook (as
``print`` does) and there too, and :func:`progress_stream` lets a progress bar reach it.

Nothing goes to the terminal outside a kernel (``print`` already does), under a Jupyter server
(its front end shows the output; it sets ``JPY_SESSION_NAME``), or when the process running the
notebook shows the cell output itself and says so in :data:`OUTPUT_SHOWN_ENV`
(:func:`specsweep.notebooks.execute.execute_notebook` does when it logs or streams it).
"""
from __future__ import annotations

import io
import os
import sys
from typing import IO, Any

__all__ = ["OUTPUT_SHOWN_ENV", "echo", "explain_transport_warning", "progress_stream", "terminal"]

#: set to 1 in a kernel's environment when the process that runs the notebook shows its output
OUTPUT_SHOWN_ENV = "SPECSWEEP_OUTPUT_SHOWN"


def terminal() -> IO[str] | None:
    """The kernel's terminal (its original stderr) when the cell output does not reach it otherwise, else None."""
    if os.environ.get(OUTPUT_SHOWN_ENV, "") not in ("", "0") or os.environ.get("JPY_SESSION_NAME"):
        return None
    iostream = sys.modules.get("ipykernel.iostream")
    if iostream is None or not isinstance(sys.stderr, iostream.OutStream):
        return None
    try:  # ipykernel pipes fd 2 into the notebook; fileno() is its copy of the original stderr
        fd = sys.stderr.fileno()
    except (OSError, ValueError):  # fd 2 is not captured: it is the terminal itself
        return sys.__stderr__
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8", errors="replace",
                            line_buffering=True)


def echo(line: str) -> None:
    """``print(line)`` into the notebook, and the same line on the kernel's terminal (see the module doc)."""
    print(line, flush=True)
    out = terminal()
    if out is not None:
        out.write(line + "\n")
        out.flush()


class _Tee:
    """A text stream that writes to several (a progress bar drawn in the notebook and on the terminal)."""

    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


def progress_stream() -> Any:
    """Where a progress bar draws: ``sys.stderr`` (the notebook), and the kernel's terminal as
    well when that is an interactive one (a bar redrawn into a log file is noise)."""
    out = terminal()
    if out is None or not out.isatty():
        return sys.stderr
    return _Tee(sys.stderr, out)


def explain_transport_warning() -> None:
    """Under plain papermill, say on the terminal what Jupyter's "Kernel is running over TCP without
    encryption" warning (printed as the kernel started) means for this run."""
    out = terminal()
    app = sys.modules.get("ipykernel.kernelapp")
    kernel = app.IPKernelApp.instance() if app is not None and app.IPKernelApp.initialized() else None
    if (out is None or kernel is None or kernel.transport != "tcp"
            or getattr(kernel, "curve_secretkey", None) is not None):
        return
    # on a new line: papermill's own progress bar is drawn without one
    out.write(f"\nspecsweep: Jupyter's warning above is about the link between papermill and this notebook's kernel, "
              f"ports on {kernel.ip} with signed, unencrypted messages; `specsweep sweep` runs the same notebook "
              "over private unix sockets and prints no such warning\n")
    out.flush()
