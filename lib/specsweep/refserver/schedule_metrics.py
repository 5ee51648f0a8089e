"""How well the simulator kept its profile's schedule, as Prometheus counters on every API surface.

The reference server simulates an engine in real time on a CPU (``engine.py``): each step is
scheduled to end at an absolute time and its chunks are written then. On a machine too busy to keep
up, steps wake late (their tokens reach the client late) and, more than ``resync_s`` behind, the
clock is reset (the simulated server then ran slower than its profile). A sweep reads these
counters before and after each level (``servers.SIM_COUNTERS``, ``sim_*``) to tell such a level apart:

- ``specsweep_refserver_steps_total``: engine steps run;
- ``specsweep_refserver_step_seconds_total``: their scheduled lengths, summed (seconds);
- ``specsweep_refserver_step_lag_seconds_total``: how late each step woke after its scheduled
  end, summed (seconds; 0 for a step on time);
- ``specsweep_refserver_late_steps_total``: steps that woke more than 1 ms late;
- ``specsweep_refserver_clock_resyncs_total`` and ``specsweep_refserver_resync_lost_seconds_total``:
  clock resets, and the schedule time they dropped (seconds).

The names carry the simulator's prefix under every surface: no real server has them, so they can
never be mistaken for a real engine's figures.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specsweep.refserver.engine import Engine

__all__ = ["SCHEDULE_COUNTERS", "schedule_exposition"]

#: name -> (help text, the engine attribute it reads)
SCHEDULE_COUNTERS: dict[str, tuple[str, str]] = {
    "specsweep_refserver_steps_total": ("Engine steps the SIMULATED server ran.", "steps_timed"),
    "specsweep_refserver_step_seconds_total": ("Scheduled length of those steps, summed (seconds).",
                                               "step_s_total"),
    "specsweep_refserver_step_lag_seconds_total": (
        "How late each step woke after its scheduled end, summed (seconds): the machine's CPU, not the profile.",
        "lag_s_total"),
    "specsweep_refserver_late_steps_total": ("Steps that woke more than 1 ms late.", "late_steps"),
    "specsweep_refserver_clock_resyncs_total": (
        "Clock resets after the simulator fell more than resync_s behind its schedule.", "resyncs"),
    "specsweep_refserver_resync_lost_seconds_total": (
        "Schedule time the clock resets dropped (seconds): the simulated server ran that much slower "
        "than its profile.", "resync_lost_s"),
}


def schedule_exposition(engine: Engine) -> bytes:
    """The counters of :data:`SCHEDULE_COUNTERS` as Prometheus text (appended to a surface's own)."""
    lines = []
    for name, (doc, attr) in SCHEDULE_COUNTERS.items():
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter", f"{name} {float(getattr(engine, attr))!r}"]
    return ("\n".join(lines) + "\n").encode()
