"""specsweep: decide whether to enable speculative decoding on an LLM server.

Sweep a server across concurrency levels (one configuration, an "arm", at a time), store tidy
result sets, compare arms against a baseline, and publish an offline HTML report with a
recommendation. See README.md and docs/ for the layout, the data model and metric definitions.
Importing it changes nothing in the process: entry points call
:func:`specsweep.runtime.configure_process` first.
"""
from __future__ import annotations

#: the release, as pyproject.toml's ``version`` (tests/test_packaging.py keeps them equal). Written
#: out rather than read with importlib.metadata: that import is not free, and every process that
#: imports specsweep would pay it (each reference server, report kernel and study arm)
__version__: str = "0.1.0"

__all__ = ["__version__"]
