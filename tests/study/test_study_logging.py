"""The study's live papermill output goes to the stderr of the moment, not to the stream that was
current when the handler was first installed (a replaced stderr — a test's capture, a host
application's redirect — once swallowed every later study's per-level progress lines)."""
from __future__ import annotations

import io
import logging
import sys

import pytest

from specsweep.study import arm as study  # the per-arm machinery installs the handler


def test_progress_lines_follow_the_current_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("papermill")
    monkeypatch.setattr(logger, "handlers", [])  # as in a fresh process
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    study._papermill_logging()
    study._papermill_logging()  # installed once
    monkeypatch.setattr(sys, "stderr", second)
    logger.info("C=1 repeat 0: 12.5 tok/s")
    assert first.getvalue() == ""
    assert second.getvalue() == "    C=1 repeat 0: 12.5 tok/s\n"
    assert sum(getattr(h, "_specsweep", False) for h in logger.handlers) == 1
