#!/usr/bin/env python3
"""Peak resident memory of one closed-loop level, per level size: measuring it, then storing it.

For every (requests × output tokens) size, a fresh ``bench/fastsse_server.py`` (1 token per chunk,
unpaced, continuous usage) runs pinned to one core and a fresh client process pinned to another
runs one level with ``specsweep.measure.loadgen.run_level`` (C streams), then does with it what a sweep
does after each level: ``sweep.summarise_level`` (``requests_frame`` and ``level_metrics``) and
``store.append_level`` into a temporary run folder. The client reports (MiB = 2^20 bytes):

- ``base MB``: resident set after imports (the sweep's) and before the level;
- ``level peak MB``: the peak resident set while the level runs and is parsed into records (the
  peak is reset through ``/proc/self/clear_refs`` before each phase);
- ``store peak MB``: the peak while the level is summarised and appended to the run folder;
- ``peak MB``: the process's peak over both;
- ``records MB`` and ``B/chunk``: what the records' chunk arrays hold, counted from the arrays
  (:data:`RECORD_BYTES_PER_CHUNK` per token-carrying chunk, 8 when every chunk carried one token:
  then ``chunk_tokens`` is a view of a single 1);
- ``B/token``: (peak − base) per output token: what a larger level of the same shape costs.

``spill`` rows use the default 64 MiB budget (unparsed bytes of finished responses and of streams
in flight beyond it go to a temporary file of the level, long streams in 64 KiB steps as they
stream); ``hold`` rows keep every raw read in memory until the level ends (``parse_budget_bytes``
larger than the level: no spilling).

Run from the repository root::

    .venv/bin/python bench/level_memory.py                               # default sizes, spill
    .venv/bin/python bench/level_memory.py --sizes 1000x2000 --modes spill hold
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lib"))

#: bytes per token-carrying chunk a parsed record holds: a float64 time and an int32 token count
RECORD_BYTES_PER_CHUNK = 12


def _status_mib(key: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak since the last reset) of this process, MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def _reset_peak() -> None:
    """Start a new peak: ``VmHWM`` becomes the resident set now (Linux ``clear_refs`` 5)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _held_bytes(arr: Any) -> int:
    """Bytes an array holds of its own: none for a broadcast view (stride 0) or None."""
    if arr is None or (arr.ndim and arr.strides[0] == 0):
        return 0
    return int(arr.nbytes)


def client(url: str, n: int, tokens: int, conc: int, mode: str) -> dict[str, Any]:
    """Run one level in this process, then summarise and store it as a sweep does; its figures."""
    from specsweep.measure.config import SweepConfig
    from specsweep.measure.loadgen import run_level
    from specsweep.measure.sweep import summarise_level
    from specsweep.results.store import append_level
    from specsweep.servers.flavours import build_body

    bodies = [build_body("openai-completions", [1, 2, 3, 4], tokens, extra={"rid": i}) for i in range(n)]
    base = _status_mib("VmRSS")
    budget = (64 << 20) if mode == "spill" else (1 << 62)
    _reset_peak()
    t0 = time.perf_counter()
    res = run_level(url, "openai-completions", bodies, conc, parse_budget_bytes=budget, read_timeout_s=120)
    wall = time.perf_counter() - t0
    level_peak = _status_mib("VmHWM")
    after_level = _status_mib("VmRSS")
    got = sum(r.output_tokens or 0 for r in res.records)
    chunks = sum(len(r.chunk_times) for r in res.records)
    held = sum(_held_bytes(r.chunk_times) + _held_bytes(r.chunk_tokens) for r in res.records)
    errors = sum(1 for r in res.records if r.error)

    _reset_peak()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = SweepConfig(arm="bench", concurrency=[conc], output_tokens=tokens)
        level, req, _ = summarise_level(res, cfg=cfg, run_id="bench", concurrency=conc, repeat=0, prompt_offset=0,
                                        requested_tokens=tokens, server="openai", samples=[], before={}, after={},
                                        started_utc="")
        append_level(Path(run_dir), level, req)
        parquet = os.path.getsize(Path(run_dir) / "requests.parquet")
    store_s = time.perf_counter() - t0
    store_peak = _status_mib("VmHWM")
    peak = max(level_peak, store_peak)  # (ru_maxrss is reset with VmHWM)
    return {"n": n, "tokens": tokens, "mode": mode, "base_mib": base, "level_peak_mib": level_peak,
            "after_level_mib": after_level, "store_peak_mib": store_peak, "peak_mib": peak, "wall_s": wall,
            "store_s": store_s, "tokens_got": got, "tokens_sent": n * tokens, "chunks": chunks,
            "records_bytes": held, "parquet_bytes": parquet, "errors": errors}


def run_size(n: int, tokens: int, conc: int, mode: str, server_core: str, client_core: str) -> dict[str, Any]:
    """One size in fresh server and client processes."""
    import fastsse_server

    with fastsse_server.spawn(cpu=server_core) as (_, url):
        cmd = ["taskset", "-c", client_core, sys.executable, __file__, "--run-client", url,
               "--n", str(n), "--tokens", str(tokens), "--conc", str(conc), "--mode", mode]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            raise RuntimeError(f"client failed: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def row(r: dict[str, Any]) -> dict[str, Any]:
    """Derived figures of one measured level."""
    return {**r, "level_mib": r["level_peak_mib"] - r["base_mib"],
            "bytes_per_token": (r["peak_mib"] - r["base_mib"]) * 2**20 / r["tokens_sent"],
            "records_mib": r["records_bytes"] / 2**20,
            "bytes_per_chunk": r["records_bytes"] / r["chunks"] if r["chunks"] else float("nan"),
            "exact": r["tokens_got"] == r["tokens_sent"] and r["errors"] == 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="*", default=["1000x2000", "10000x2000"], help="REQUESTSxTOKENS")
    ap.add_argument("--modes", nargs="*", default=["spill"], help="spill and/or hold")
    ap.add_argument("--conc", type=int, default=256)
    ap.add_argument("--server-core", default="0")
    ap.add_argument("--client-core", default="1")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--run-client", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="spill", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_client:
        print(json.dumps(client(args.run_client, args.n, args.tokens, args.conc, args.mode)))
        return 0
    rows = []
    print("| requests × tokens | mode | base MB | level peak MB | store peak MB | peak MB | records MB | B/chunk | "
          "B/token | level s | store s | exact |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for size in args.sizes:
        n, tokens = (int(x) for x in size.lower().split("x"))
        for mode in args.modes:
            r = row(run_size(n, tokens, args.conc, mode, args.server_core, args.client_core))
            rows.append(r)
            print(f"| {n:,} × {tokens:,} | {mode} | {r['base_mib']:.0f} | {r['level_peak_mib']:.0f} | "
                  f"{r['store_peak_mib']:.0f} | {r['peak_mib']:.0f} | {r['records_mib']:.0f} | "
                  f"{r['bytes_per_chunk']:.1f} | {r['bytes_per_token']:.0f} | {r['wall_s']:.1f} | {r['store_s']:.1f} | "
                  f"{r['exact']} |", flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
