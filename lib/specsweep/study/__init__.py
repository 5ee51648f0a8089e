"""Many arms: the study file, the runner, one arm's lifecycle, its server guard, the executors."""
from __future__ import annotations

__all__: list[str] = []
