"""``python -m specsweep.report``: build one report (see ``specsweep.report.build.main``)."""
import sys

from specsweep.report.build import main

sys.exit(main())
