"""Running a notebook: the kernel specsweep starts, its launcher, papermill."""
from __future__ import annotations

__all__: list[str] = []
