#!/usr/bin/env python3
"""What the metrics poller's parse costs a measuring process, per scrape: the whole ``/metrics``
exposition through ``prometheus_client``'s parser against only the sample lines the poller reads
(``specsweep.measure.probe.parse_metrics(text, names)``: the gauges polled during a level, the counters
read before and after it), side by side in one run, on each exposition at hand: the recorded
llama-server one (tests/fixtures) and the reference server's SGLang and vLLM surfaces (started
here on 127.0.0.1). Thread CPU milliseconds, medians of ``--reps`` alternating runs.

    .venv/bin/python bench/metrics_parse.py [--reps 30]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

from specsweep.measure.probe import metric_names, parse_metrics, probe
from specsweep.refserver.launch import RefServer

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "fixtures" / "llamacpp" / "real-b1-0c1e570" / "metrics.txt"


def expositions() -> dict[str, tuple[str, str]]:
    """{label: (server family, /metrics text)}."""
    out = {"llama-server (recorded)": ("llamacpp", RECORDED.read_text())}
    for surface in ("sglang", "vllm"):
        with RefServer("tiny", "mtp", ["--api-surface", surface]) as srv:
            # a few requests first, so that the histograms hold observations as on a server in use
            model = probe(srv.url).model
            for _ in range(4):
                httpx.post(srv.url + "/v1/completions", timeout=30,
                           json={"model": model, "prompt": "hello there", "max_tokens": 8}).raise_for_status()
            out[f"{surface} (reference server)"] = (surface, httpx.get(srv.url + "/metrics").text)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    print("| exposition | bytes | whole ms | gauges only ms | counters only ms | whole ÷ gauges |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, (server, text) in expositions().items():
        runs: dict[str, list[float]] = {"whole": [], "gauges": [], "counters": []}
        for _ in range(args.reps):
            for what in runs:
                names = None if what == "whole" else metric_names(server, what)
                t = time.thread_time()
                parse_metrics(text, names)
                runs[what].append(time.thread_time() - t)
        med = {k: statistics.median(v) * 1000 for k, v in runs.items()}
        print(f"| {label} | {len(text):,} | {med['whole']:.3f} | {med['gauges']:.3f} | {med['counters']:.3f} | "
              f"{med['whole'] / med['gauges']:.1f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
