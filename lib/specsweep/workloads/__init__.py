"""Prompt sets: synthetic prompts, published data sets, and the order a sweep sends them in."""
from __future__ import annotations

__all__: list[str] = []
