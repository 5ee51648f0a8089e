"""A result set on disk: its files, typed metadata, reading and writing, redaction, provenance."""
from __future__ import annotations

__all__: list[str] = []
