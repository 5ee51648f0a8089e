"""Where the repository and the report notebook are."""
from __future__ import annotations

from pathlib import Path


REPO_ROOT = Path(__file__).resolve().parents[3]


REPORT_NOTEBOOK = REPO_ROOT / "notebooks" / "report.ipynb"
