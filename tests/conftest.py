"""Fixtures shared by every test: reference servers on 127.0.0.1 (``tiny`` profile).

``refserver`` (baseline) and ``refserver_mtp`` (speculation: 3 draft steps, mean accept length
2) start once per session; ``refserver_factory`` starts extra servers with other flags and stops
them after the test. Plain helpers live in ``helpers.py``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from specsweep.refserver.launch import RefServer

FAST = ["--health-delay-s", "0.2"]

#: most pytest-xdist workers ``-n auto`` starts: each runs its own reference servers and report
#: kernels, so past a few the machine's memory and the tests' real servers are what is shared
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per CPU this process may run on (logical, so a 2-vCPU machine gets
    2), at most :data:`MAX_WORKERS`; ``SPECSWEEP_TEST_WORKERS`` overrides."""
    import os

    explicit = os.environ.get("SPECSWEEP_TEST_WORKERS", "")
    if explicit.strip():
        return max(0, int(explicit))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cpus))


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
