#!/usr/bin/env python3
"""What a kernel forked from a loaded template would save against the kernels specsweep starts now.

The test suite's target (``make test`` ≤ 5 min) is bound by CPU, and about 80 kernels a run each pay
their start-up: ipykernel, then the preload (pandas, altair, specsweep's report modules). This
script measures, alternating, one kernel at a time, the CPU (user + system of the kernel process
alone, from ``wait4``/``RUSAGE_CHILDREN``) and the wall from asking for a kernel to its first
cell's reply, for two ways to get a kernel that runs one cell and is shut down:

- ``launched``: :func:`specsweep.notebooks.kernel.kernel_manager_class` with the report's preload, as
  ``build_report`` starts its kernel (``python -m specsweep.notebooks.launcher``, a fresh interpreter);
- ``forked``: ``os.fork()`` of a template process that has already run the same start-up
  (ipykernel imported, the preload run, start-up frozen); the child only builds its kernel
  (``IPKernelApp.initialize`` on its own connection file) and answers. The template's own start-up
  is printed once, beside.

It is a measurement, not the fork server a proposal would need (a jupyter_client provisioner,
pidfd signalling, the kernel's stdio passed in, one template per environment). The cell is
``1 + 1`` (``--cell 1+1``): the two ways differ only in start-up, so a notebook's own work is left
out; ``--cell seed`` adds the seed's comparison and Δ% chart, so a forked kernel's copy-on-write
cost of touching the template's memory is counted too.

Run from the repository root: ``.venv/bin/python bench/kernel_fork.py --reps 6``
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))

#: the template: the launcher's start-up (no debugger, no collector, the preload, frozen), then one
#: fork per connection file read from stdin, whose child runs :func:`specsweep.notebooks.launcher.main`
#: as a launched kernel does; the child's CPU comes back from wait4 as a JSON line
TEMPLATE = r"""
import gc, json, os, sys, time
sys.modules.setdefault("debugpy", None)
t0 = time.process_time()
gc.disable()
from ipykernel import kernelapp
exec(sys.argv[1])
gc.freeze()
print(json.dumps({"template_cpu_s": time.process_time() - t0}), flush=True)
for line in sys.stdin:
    cf = line.strip()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)  # the kernel's own stdio, not the template's reply pipe
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # the launcher's own main() on the arguments a launched kernel gets (the preload runs again,
        # its modules already loaded), so the two kernels differ only in what the fork inherited
        sys.argv = ["kernel_launcher", "-f", cf, "--HistoryManager.hist_file=:memory:", sys.argv[2]]
        from specsweep.notebooks import launcher as kernel_launcher
        kernel_launcher.main()
        os._exit(0)
    _, status, usage = os.wait4(pid, 0)
    print(json.dumps({"pid": pid, "cpu_s": usage.ru_utime + usage.ru_stime, "status": status}), flush=True)
"""


#: the cell each kernel runs (``--cell``): ``1 + 1`` measures start-up alone; ``seed`` also the
#: seed's comparison and its Δ% chart, so that what a forked kernel pays for touching the template's
#: memory (copy-on-write) shows too
CELLS = {"1+1": "1 + 1",
         "seed": ("from specsweep.report import charts\nfrom specsweep.analyze import compare\nfrom specsweep.results import store\n"
                  "comp = compare.compare(store.load_result_sets(['data/reference/seed-qwen3.5-122b-a10b']), "
                  "baseline='baseline')\n"
                  "spec = charts.delta_chart(comp).to_dict()")}
CELL = CELLS["1+1"]


async def _one_cell(kc: object) -> float:
    """Wait for the kernel, run :data:`CELL`; the wall seconds to the reply."""
    t0 = time.perf_counter()
    await kc.wait_for_ready(timeout=60)  # type: ignore[attr-defined]
    reply = await kc.execute_interactive(CELL, timeout=60, output_hook=lambda msg: None)  # type: ignore[attr-defined]
    assert reply["content"]["status"] == "ok", reply
    return time.perf_counter() - t0


def launched(preload: str) -> tuple[float, float]:
    """(wall s to the first reply, kernel CPU s) of one kernel as build_report starts it."""
    from specsweep.notebooks.kernel import kernel_manager_class, preload_arguments

    async def run() -> float:
        km = kernel_manager_class()(kernel_name="python3")
        t0 = time.perf_counter()
        await km.start_kernel(cwd=str(REPO), extra_arguments=["--HistoryManager.hist_file=:memory:",
                                                              *preload_arguments(preload)])
        kc = km.client()
        kc.start_channels()
        try:
            await _one_cell(kc)
            wall = time.perf_counter() - t0
        finally:
            kc.stop_channels()
            await km.shutdown_kernel()
        return wall

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = asyncio.run(run())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


class Template:
    """The template process: start-up once, then a forked kernel per :meth:`kernel` call."""

    def __init__(self, preload: str) -> None:
        from specsweep.notebooks.kernel import preload_arguments

        self.proc = subprocess.Popen([sys.executable, "-c", TEMPLATE, preload, *preload_arguments(preload)],
                                     cwd=REPO, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.startup_cpu_s = json.loads(self.proc.stdout.readline())["template_cpu_s"]  # type: ignore[union-attr]

    def kernel(self, tmp: Path) -> tuple[float, float]:
        """(wall s from the request to the first reply, the forked kernel's CPU s)."""
        from jupyter_client.asynchronous import AsyncKernelClient
        from jupyter_client.connect import write_connection_file

        folder = tempfile.mkdtemp(prefix="fork-", dir=tmp)
        cf, _ = write_connection_file(os.path.join(folder, "k.json"), transport="ipc", ip=os.path.join(folder, "k"))

        async def run() -> float:
            t0 = time.perf_counter()
            self.proc.stdin.write(cf + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            kc = AsyncKernelClient(connection_file=cf)
            kc.load_connection_file()
            kc.start_channels()
            try:
                await _one_cell(kc)
                wall = time.perf_counter() - t0
                kc.shutdown()
            finally:
                kc.stop_channels()
            return wall

        wall = asyncio.run(run())
        done = json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]
        return wall, done["cpu_s"]

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    from specsweep.notebooks.kernel import KERNEL_PRELOAD

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--cell", choices=sorted(CELLS), default="1+1",
                   help="what each kernel runs: 1+1 (start-up alone) or seed (the seed's comparison and Δ%% chart)")
    args = p.parse_args(argv)
    global CELL
    CELL = CELLS[args.cell]
    rows: dict[str, list[tuple[float, float]]] = {"launched": [], "forked": []}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        template = Template(KERNEL_PRELOAD)
        try:
            launched(KERNEL_PRELOAD)  # warm file caches for both (not counted)
            template.kernel(Path(tmp))
            for _ in range(args.reps):
                rows["launched"].append(launched(KERNEL_PRELOAD))
                rows["forked"].append(template.kernel(Path(tmp)))
        finally:
            template.close()
    print(f"one report kernel to its first reply (cell {args.cell!r}), medians of {args.reps} alternating; "
          f"load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at the end")
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in rows.items()}
    for key, label in (("launched", "launched (python -m specsweep.notebooks.launcher, the report's preload)"),
                       ("forked", "forked from a template that ran the same start-up")):
        print(f"  {label:<72} wall {med[key][0]:5.3f} s  kernel CPU {med[key][1]:5.3f} s")
    print(f"  the template's own start-up, once per template: CPU {template.startup_cpu_s:5.3f} s")
    saved = med["launched"][1] - med["forked"][1]
    print(f"  CPU saved per kernel {saved:5.3f} s; over 80 kernels {80 * saved:5.1f} s "
          "(about what a make test starts), less one template start per process that starts kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
