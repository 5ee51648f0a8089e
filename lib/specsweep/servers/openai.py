"""Any other OpenAI-compatible server: the dialect of a server the probe does not recognise.

It answers ``/v1/models`` and the OpenAI routes; nothing else is assumed. No request field is
added (it may reject one it does not know), no ``/metrics`` name is read, and a prefix-cache flush
tries every route a known dialect names (the server may be one of them underneath).
"""
from __future__ import annotations

from specsweep.servers.dialect import Dialect

__all__ = ["DIALECT"]

DIALECT = Dialect(name="openai-compatible", label="an OpenAI-compatible server", flush_routes=None)
