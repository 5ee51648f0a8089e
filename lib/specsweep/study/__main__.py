"""``python -m specsweep.study FILE``: run a study (see :func:`specsweep.study.runner.main`)."""
from __future__ import annotations

import sys

from specsweep.runtime import configure_process

configure_process()

from specsweep.study.runner import main  # noqa: E402

sys.exit(main())
