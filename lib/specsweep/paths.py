"""Where things are: the repository, its notebooks, its shipped data (standard library only)."""
from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_ROOT", "REPORT_NOTEBOOK", "SEED_DATA", "STUDY_NOTEBOOK", "SWEEP_NOTEBOOK"]

#: the checkout specsweep is installed from (``pip install -e .``): notebooks/, data/ and reports/ live here
REPO_ROOT = Path(__file__).resolve().parents[2]
SWEEP_NOTEBOOK = REPO_ROOT / "notebooks" / "sweep.ipynb"
REPORT_NOTEBOOK = REPO_ROOT / "notebooks" / "report.ipynb"
STUDY_NOTEBOOK = REPO_ROOT / "notebooks" / "study.ipynb"
#: the seed's published table as a result set (the reference measurement that started the project)
SEED_DATA = REPO_ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b"
