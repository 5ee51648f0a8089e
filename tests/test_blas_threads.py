"""specsweep's own processes start numpy with one OpenBLAS thread unless told otherwise
(specsweep.startup.single_threaded_blas): the reference server, and every kernel specsweep starts.

OpenBLAS starts a thread per extra core when numpy is imported, and those threads spin before they
sleep (about 0.1 s of CPU per process on a 2-core machine). The checks are on real processes: the
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
from specsweep.startup import BLAS_THREADS, single_threaded_blas


def test_one_thread_is_asked_for_unless_the_environment_says_how_many() -> None:
    env: dict[str, str] = {}
    single_threaded_blas(env)
    assert env == {BLAS_THREADS: "1"}
    env = {BLAS_THREADS: "8"}
    single_threaded_blas(env)
    assert env == {BLAS_THREADS: "8"}  # the user's setting stands


def _server_threads(env: dict[str, str]) -> int:
    with RefServer("tiny", "off", ["--health-delay-s", "0.1"], env=env) as srv:
        assert srv.process is not None
        return psutil.Process(srv.process.pid).num_threads()


def test_the_reference_server_imports_numpy_with_one_blas_thread() -> None:
    base = {k: v for k, v in os.environ.items() if k != BLAS_THREADS}
    own = _server_threads(base)
    told = _server_threads({**base, BLAS_THREADS: "2"})  # a setting of its own is kept: one more thread
    assert told == own + 1, (own, told)


@pytest.mark.parametrize("given, seen", [(None, "1"), ("3", "3")])
def test_specsweep_kernels_get_one_blas_thread_unless_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          given: str | None, seen: str) -> None:
    from specsweep.report.build import execute_notebook

    if given is None:
        monkeypatch.delenv(BLAS_THREADS, raising=False)
    else:
        monkeypatch.setenv(BLAS_THREADS, given)
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("import os\nprint(os.environ.get('OPENBLAS_NUM_THREADS'))")]
    src, out = tmp_path / "env.ipynb", tmp_path / "env.out.ipynb"
    nbformat.write(nb, src)
    execute_notebook(src, out, {})
    printed = "".join(o.get("text", "") for o in nbformat.read(out, as_version=4).cells[0].outputs)
    assert printed.strip() == seen, printed


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_the_programs_set_it_before_numpy_is_imported() -> None:
    """``python -m specsweep.report``/``study``/``publish`` and the server set it at their top, before any
    import of numpy; imported as a library they leave the environment alone."""
    import subprocess

    code = ("import os, sys; os.environ.pop('OPENBLAS_NUM_THREADS', None); import specsweep.study, specsweep.publish; "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split()[0] == "None"  # a library import changes nothing
    for module in ("specsweep.study", "specsweep.publish"):
        probe = (f"import os, runpy, sys; os.environ.pop('OPENBLAS_NUM_THREADS', None); sys.argv = ['x', '--help']\n"
                 f"try:\n    runpy.run_module('{module}', run_name='__main__')\nexcept SystemExit:\n    pass\n"
                 "print('BLAS', os.environ.get('OPENBLAS_NUM_THREADS'))")
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        assert "BLAS 1" in done.stdout, (module, done.stdout[-500:], done.stderr[-500:])
