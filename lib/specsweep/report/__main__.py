"""``python -m specsweep.report``: build one report (see ``specsweep.report.build.main``)."""
import logging
import os
import sys

from specsweep.runtime import configure_process

# before numpy is imported; Arrow's pool is the kernel's business (this process only writes the page)
configure_process(arrow=False, single_blas_thread=True)

from specsweep.report.build import main  # noqa: E402

code = main()
# Every file is written and closed and the kernel is stopped: skip the interpreter's teardown of
# pandas, altair and nbconvert objects (about 0.3 s of a 2-core machine's time, for nothing).
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
