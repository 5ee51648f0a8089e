"""specsweep: decide whether to enable speculative decoding on an LLM server.

Sweep a server across concurrency levels (one configuration, an "arm", at a time), store tidy
result sets, compare arms against a baseline, and publish an offline HTML report with a
recommendation. See README.md and the design notes for the data model and metric definitions.
"""
from __future__ import annotations

from specsweep.runtime import defer_rfc3987_syntax as _defer_rfc3987_syntax

_defer_rfc3987_syntax()  # before anything imports jsonschema: see specsweep.runtime

#: the release, as pyproject.toml's ``version`` (tests/test_packaging.py keeps them equal). Written
#: out rather than read with importlib.metadata: that import costs about 35 ms of CPU in every
#: process that imports specsweep (each reference server, report kernel and study arm)
__version__: str = "0.1.0"

__all__ = ["__version__"]
