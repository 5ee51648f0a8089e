"""``python -m specsweep.refserver --profile NAME [options]``: the reference server (see :mod:`specsweep.refserver.cli`)."""
from __future__ import annotations

import sys

from specsweep.runtime import configure_process

configure_process(arrow=False, single_blas_thread=True)  # before the model imports numpy

from specsweep.refserver.cli import main  # noqa: E402

sys.exit(main())
