"""specsweep's own processes start numpy with one OpenBLAS thread unless told otherwise
(specsweep.runtime.single_threaded_blas): the reference server, ``python -m specsweep.report`` and
every kernel specsweep starts; never a study's runner, whose ``serve`` servers inherit its
environment.

OpenBLAS starts a thread per extra core when numpy is imported, and those threads spin before they
sleep, taking CPU from every process. The checks are on real processes: the
server's thread count beside one told to use two BLAS threads, the kernel's own environment.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import psutil
import pytest

from specsweep.refserver.launch import RefServer
from specsweep.runtime import BLAS_THREAD_SETTINGS, BLAS_THREADS, single_threaded_blas


def test_one_thread_is_asked_for_unless_the_environment_says_how_many() -> None:
    env: dict[str, str] = {}
    single_threaded_blas(env)
    assert env == {BLAS_THREADS: "1"}
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):  # what OpenBLAS reads
        env = {name: "8"}
        single_threaded_blas(env)
        assert env == {name: "8"}, name  # the user's setting stands


def _server_threads(env: dict[str, str]) -> int:
    with RefServer("tiny", "off", ["--health-delay-s", "0.1"], env=env) as srv:
        assert srv.process is not None
        return psutil.Process(srv.process.pid).num_threads()


def test_the_reference_server_imports_numpy_with_one_blas_thread() -> None:
    base = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_SETTINGS}
    own = _server_threads(base)
    told = _server_threads({**base, BLAS_THREADS: "2"})  # a setting of its own is kept
    # OpenBLAS starts (threads - 1) threads of its own, at most one per CPU this process may use
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    assert told == own + (1 if usable >= 2 else 0), (own, told, usable)


@pytest.mark.parametrize("given, seen", [(None, "1"), ("3", "3")])
def test_specsweep_kernels_get_one_blas_thread_unless_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          given: str | None, seen: str) -> None:
    from specsweep.notebooks.execute import execute_notebook

    for name in BLAS_THREAD_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    if given is not None:
        monkeypatch.setenv(BLAS_THREADS, given)
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("import os\nprint(os.environ.get('OPENBLAS_NUM_THREADS'))")]
    src, out = tmp_path / "env.ipynb", tmp_path / "env.out.ipynb"
    nbformat.write(nb, src)
    execute_notebook(src, out, {})
    printed = "".join(o.get("text", "") for o in nbformat.read(out, as_version=4).cells[0].outputs)
    assert printed.strip() == seen, printed


_PROBE = """
import os, runpy, sys
for name in {settings!r}:
    os.environ.pop(name, None)
import specsweep.runtime as startup
real, seen = startup.single_threaded_blas, []
def spy(env=None):
    seen.append("numpy" in sys.modules)
    real(env)
startup.single_threaded_blas = spy
sys.argv = ["x", "--help"]
try:
    runpy.run_module({module!r}, run_name="__main__")
except SystemExit:
    pass
print("BLAS", os.environ.get("OPENBLAS_NUM_THREADS"), "numpy-before-call", seen)
"""


@pytest.mark.parametrize("module, sets", [("specsweep.refserver", True), ("specsweep.report", True),
                                          ("specsweep.study", False), ("specsweep.publish", False)])
def test_the_programs_that_start_no_user_server_set_it_before_numpy(module: str, sets: bool) -> None:
    """The reference server and the report builder set it first thing, before anything imports numpy;
    a study's runner and ``make reports``' publisher leave the environment as the user set it, since
    the servers a study starts inherit it."""
    import subprocess

    code = _PROBE.format(settings=BLAS_THREAD_SETTINGS, module=module)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("BLAS "))
    assert line == ("BLAS 1 numpy-before-call [False]" if sets else "BLAS None numpy-before-call []"), (line, done.stderr[-800:])
