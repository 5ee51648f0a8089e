"""Measuring one arm: probe the server, generate load, parse streams, account tokens, sweep levels."""
from __future__ import annotations

__all__: list[str] = []
