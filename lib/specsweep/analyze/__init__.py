"""From result sets to figures: metric definitions, the join of arms, curves and noise, agreement, what-if."""
from __future__ import annotations

__all__: list[str] = []
