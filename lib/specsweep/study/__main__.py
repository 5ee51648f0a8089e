"""``python -m specsweep.study FILE``: run a study (see :func:`specsweep.study.runner.main`)."""
from __future__ import annotations

import sys

from specsweep.study.runner import main

sys.exit(main())
