"""What specsweep knows of each server it speaks to: API flavours, request bodies, dialects."""
from __future__ import annotations

__all__: list[str] = []
