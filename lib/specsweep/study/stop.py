"""Stopping a running study on a signal, wherever in the process it runs.

A study measured with ``parallel`` workers stops in order only when its runner sees an interrupt:
it asks each worker to stop its server, waits for them, records the study as interrupted and keeps
the finished levels for ``--resume`` (:mod:`specsweep.study.parallel`). Two ways that did not happen:

- ``SIGTERM`` (a supervisor's ``kill``, ``timeout``) ended the runner at once, without that stop; the
  workers noticed only by watching its pid, each after its own poll, and died mid-write.
  :func:`sigterm_as_interrupt` makes ``SIGTERM`` raise :class:`KeyboardInterrupt` in the main thread,
  as Ctrl-C does.
- A study run in a thread (``python -m specsweep.publish`` measures each study in one) never sees the
  main thread's :class:`KeyboardInterrupt`: the main thread waited for the study thread, and the
  workers went on measuring. :func:`request_stop`, called by the thread that caught the interrupt,
  makes every study this process runs stop the same way.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_lock = threading.Lock()
_running: set[threading.Event] = set()  # one per study measuring now, set to ask it to stop


@contextmanager
def stop_event() -> Iterator[threading.Event]:
    """For a study's measuring loop: an event :func:`request_stop` sets, registered while the block runs."""
    event = threading.Event()
    with _lock:
        _running.add(event)
    try:
        yield event
    finally:
        with _lock:
            _running.discard(event)


def request_stop() -> None:
    """Ask every study this process measures now to stop as on Ctrl-C (from any thread)."""
    with _lock:
        for event in _running:
            event.set()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, ``SIGTERM`` raises :class:`KeyboardInterrupt` in the main thread (so the
    study stops its workers and keeps what they finished); elsewhere than the main thread, nothing
    changes (Python lets only the main thread set a handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
