"""specsweep: decide whether to enable speculative decoding on an LLM server.

Sweep a server across concurrency levels (one configuration, an "arm", at a time), store tidy
result sets, compare arms against a baseline, and publish an offline HTML report with a
recommendation. See README.md and the design notes for the data model and metric definitions.
"""
from __future__ import annotations

from importlib import metadata as _metadata

from specsweep.startup import defer_rfc3987_syntax as _defer_rfc3987_syntax

_defer_rfc3987_syntax()  # before anything imports jsonschema: see specsweep.startup

try:
    __version__: str = _metadata.version("specsweep")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
