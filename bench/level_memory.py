#!/usr/bin/env python3
"""Peak resident memory of one closed-loop level, per level size, with and without spilling.

For every (requests × output tokens) size, a fresh ``bench/fastsse_server.py`` (1 token per chunk,
unpaced, continuous usage) runs pinned to one core and a fresh client process pinned to another
runs one level with ``specsweep.loadgen.run_level`` (C streams). The client reports:

- ``base MB``: resident set after imports and before the level (MiB);
- ``peak MB``: the process's peak resident set (``ru_maxrss``, MiB) over the level and its parse;
- ``level MB``: peak − base: what the level itself held;
- ``B/token``: level MB per output token (bytes): what a larger level of the same shape costs;
- ``records MB``: an estimate of the parsed records' share (40 bytes per chunk: a float in
  ``chunk_times``, a list slot in each of ``chunk_times`` and ``chunk_tokens``).

``spill`` rows use the default 64 MiB budget (finished, unparsed responses beyond it go to a
temporary file of the level); ``hold`` rows keep every raw read in memory until the level ends
(``parse_budget_bytes`` larger than the level, the behaviour before spilling).

Run from the repository root::

    .venv/bin/python bench/level_memory.py                               # default sizes
    .venv/bin/python bench/level_memory.py --sizes 1000x2000 2500x2000 --modes spill hold
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lib"))

#: bytes per token-carrying chunk a parsed record holds (float object 24 + two list slots 8 + 8)
RECORD_BYTES_PER_CHUNK = 40


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def client(url: str, n: int, tokens: int, conc: int, mode: str) -> dict[str, Any]:
    """Run one level in this process; return its memory figures."""
    from specsweep.client import build_body
    from specsweep.loadgen import run_level

    bodies = [build_body("openai-completions", [1, 2, 3, 4], tokens, extra={"rid": i}) for i in range(n)]
    base = _rss_mib()
    budget = (64 << 20) if mode == "spill" else (1 << 62)
    t0 = time.perf_counter()
    res = run_level(url, "openai-completions", bodies, conc, parse_budget_bytes=budget, read_timeout_s=120)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    got = sum(r.output_tokens or 0 for r in res.records)
    chunks = sum(len(r.chunk_times) for r in res.records)
    errors = sum(1 for r in res.records if r.error)
    return {"n": n, "tokens": tokens, "mode": mode, "base_mib": base, "peak_mib": peak, "wall_s": wall,
            "tokens_got": got, "tokens_sent": n * tokens, "chunks": chunks, "errors": errors}


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
    level = r["peak_mib"] - r["base_mib"]
    return {**r, "level_mib": level, "bytes_per_token": level * 2**20 / r["tokens_sent"],
            "records_mib": r["chunks"] * RECORD_BYTES_PER_CHUNK / 2**20,
            "exact": r["tokens_got"] == r["tokens_sent"] and r["errors"] == 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="*", default=["1000x2000", "2500x2000"], help="REQUESTSxTOKENS")
    ap.add_argument("--modes", nargs="*", default=["spill", "hold"])
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
    print("| requests × tokens | mode | base MB | peak MB | level MB | B/token | records MB (est.) | wall s | exact |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for size in args.sizes:
        n, tokens = (int(x) for x in size.lower().split("x"))
        for mode in args.modes:
            r = row(run_size(n, tokens, args.conc, mode, args.server_core, args.client_core))
            rows.append(r)
            print(f"| {n:,} × {tokens:,} | {mode} | {r['base_mib']:.0f} | {r['peak_mib']:.0f} | {r['level_mib']:.0f} | "
                  f"{r['bytes_per_token']:.0f} | {r['records_mib']:.0f} | {r['wall_s']:.1f} | {r['exact']} |", flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
