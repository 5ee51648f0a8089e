"""Fixtures shared by every test: reference servers on 127.0.0.1 (``tiny`` profile).

``refserver`` (baseline) and ``refserver_mtp`` (speculation: 3 draft steps, mean accept length
2) start once per session; ``refserver_factory`` starts extra servers with other flags and stops
them after the test. Plain helpers live in ``helpers.py``.
"""
from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator, Sequence

import pytest

from specsweep.refserver.launch import RefServer
from specsweep.runtime import single_threaded_blas

# the workers, and every process a test starts, import numpy with one OpenBLAS thread (spinning BLAS
# threads cost every process CPU; specsweep.runtime.single_threaded_blas), as specsweep's own programs do
single_threaded_blas()

if os.environ.get("PYTEST_XDIST_WORKER"):
    # a worker's collection imports every test module, specsweep, pandas and altair, and frees almost
    # nothing: no collections until it ends (pytest_collection_finish), since they would find next to
    # nothing to free and only cost CPU. Workers only: the controller collects nothing.
    gc.disable()

FAST = ["--health-delay-s", "0.2"]

#: most pytest-xdist workers ``-n auto`` starts: each runs its own reference servers and report
#: kernels, so past a few the machine's memory and the tests' real servers are what is shared
MAX_WORKERS = 4


#: workers per CPU: a good part of the suite waits on real-time servers (sweeps paced at a simulated
#: GPU's speed, a study's arms), so one worker per core leaves the cores idle meanwhile; two per core
#: keep them busy (``bench/run_all.py --test-suite`` times ``make test``)
WORKERS_PER_CPU = 2


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: :data:`WORKERS_PER_CPU` workers per CPU this process may run on (logical, so a
    2-vCPU machine gets 4), at most :data:`MAX_WORKERS`; ``SPECSWEEP_TEST_WORKERS`` overrides."""
    import os

    explicit = os.environ.get("SPECSWEEP_TEST_WORKERS", "")
    if explicit.strip():
        return max(0, int(explicit))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, WORKERS_PER_CPU * cpus))


#: the test files that take longest (wall seconds, ``pytest --durations``), longest first:
#: they are handed to workers first (``--dist loadfile --no-loadscope-reorder`` hands out files in
#: collection order; xdist would otherwise put the files with most tests first), so no
#: long file starts last and leaves the other workers idle at the end. It trims only that tail, so
#: where the suite is CPU-bound it gains little.
LONG_FILES: tuple[str, ...] = (
    "test_drift_study.py", "test_study.py", "test_verdict_draws.py", "test_demo_stability.py",
    "test_whatif_refserver.py", "test_report_build.py", "test_hardening_data.py", "test_study_hardening.py",
    "test_publish.py", "test_verdict_draws_hard.py", "test_sweep_notebook.py", "test_sweep_hardening.py",
    "test_reproduce_sequence.py", "test_llamacpp_real.py", "test_study_failures.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long files first (:data:`LONG_FILES`), each file's tests in their own order, the rest as collected."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # sort is stable


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection loaded (every test module, specsweep, pandas, altair: hundreds of
    thousands of objects a worker keeps to its end), so that the full collections the tests trigger
    do not walk it (:func:`gc.freeze`), and collect again (a worker collected nothing meanwhile).
    Tests that trigger many full collections (the verdict draws) gain most."""
    gc.freeze()
    gc.enable()


@pytest.fixture(autouse=True)
def terminal_sigint() -> Iterator[None]:
    """Each test sees Ctrl-C as a terminal delivers it: SIGINT raises KeyboardInterrupt here, and
    the processes a test starts inherit the default disposition.

    A suite started with SIGINT ignored (a background job of a non-interactive shell) passes that
    on: Python then installs no handler, pytest-xdist's workers inherit the ignored signal, an
    ignored signal survives exec, and a papermill or study a test starts ignores the SIGINT the
    test sends it (``_thread.interrupt_main`` does nothing either). The Ctrl-C tests would fail that
    way; they test our handling of SIGINT, not the disposition they were started with.
    """
    import signal

    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session")
def refserver() -> Iterator[RefServer]:
    """A baseline ``tiny`` server."""
    with RefServer("tiny", "off", FAST) as srv:
        yield srv


@pytest.fixture(scope="session")
def refserver_mtp() -> Iterator[RefServer]:
    """A ``tiny`` server with speculation (``--spec mtp``)."""
    with RefServer("tiny", "mtp", FAST) as srv:
        yield srv


@pytest.fixture
def refserver_factory() -> Iterator[Callable[..., RefServer]]:
    """Start extra servers: ``factory(spec="off", args=[...], profile="tiny")``."""
    started: list[RefServer] = []

    def start(spec: str = "off", args: Sequence[str] = (), profile: str = "tiny") -> RefServer:
        srv = RefServer(profile, spec, [*FAST, *args])
        srv.start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="session")
def chart_defaults() -> None:
    """specsweep's chart theme and data transformer, as the notebooks' ``report.setup_notebook()`` sets
    them (importing the charts module sets nothing)."""
    from specsweep.report.charts import use_chart_defaults

    use_chart_defaults()


#: set by ``make test-fast``: a test of the quick tier that starts a process or opens a socket fails there
FAST_TIER_ENV = "SPECSWEEP_FAST_TIER"


class FastTierViolation(RuntimeError):
    """A test marked ``fast`` started a subprocess or opened a socket."""


@pytest.fixture(autouse=True)
def _fast_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``make test-fast``, keep the quick tier honest: no subprocess, no socket."""
    if os.environ.get(FAST_TIER_ENV, "") in ("", "0") or request.node.get_closest_marker("fast") is None:
        return
    import socket
    import subprocess

    def refuse(what: str) -> Callable[..., None]:
        def refused(*args: object, **kwargs: object) -> None:
            raise FastTierViolation(f"{request.node.nodeid} is marked fast but starts {what}: drop its fast mark")
        return refused

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("a subprocess"))
    monkeypatch.setattr(socket.socket, "connect", refuse("a connection"))
    monkeypatch.setattr(socket.socket, "bind", refuse("a listening socket"))
