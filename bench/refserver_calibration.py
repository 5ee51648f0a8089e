"""Calibration benchmark: the seed profile in the virtual-time simulator vs the seed's table.

Runs ``specsweep.refserver.model.simulate_closed_loop`` (the same engine code the real-time
server runs, without sockets or sleeping) for the baseline and MTP arms at the seed's levels
(1, 4, 16, 32, 64, 128), 1000-token prompts and 1000 output tokens with ignore_eos, each client
sending ``--requests-per-client`` requests (default 4, at least 16 per level: every level runs
several full closed-loop waves, so ramp-up and drain are a small part of the window), and prints
seed vs simulated side by side with pass/fail against the calibration targets. Exit status 0 when
all checks pass.

    .venv/bin/python bench/refserver_calibration.py [--profile NAME] [--requests-per-client 4]
                                                     [--set KEY=VALUE ...] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from specsweep.refserver.calibration import SEED_PROFILE, run_calibration
from specsweep.refserver.model import resolve
from specsweep.refserver.profiles import load_profile


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default=SEED_PROFILE)
    p.add_argument("--requests-per-client", type=int, default=4)
    p.add_argument("--min-requests", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    prof = load_profile(args.profile, args.overrides)
    t0 = time.perf_counter()
    rep = run_calibration(prof, requests_per_client=args.requests_per_client,
                          min_requests=args.min_requests, seed=args.seed)
    took = time.perf_counter() - t0
    if args.json:
        print(json.dumps(rep.as_dict(), indent=2))
        return 0 if rep.passed else 1
    base, mtp = resolve(prof, "off"), resolve(prof, "mtp")
    print(f"profile {prof.name} (virtual-time simulation, {took:.1f} s of CPU)")
    print(f"  baseline: pool {base.max_total_num_tokens} tokens, cap {base.max_running_requests}; "
          f"step ms at 1/4/16/64/128 tokens: "
          + "/".join(f"{base.decode_step_ms(b):.1f}" for b in (1, 4, 16, 64, 128)))
    print(f"  mtp:      pool {mtp.max_total_num_tokens} tokens, cap {mtp.max_running_requests}, "
          f"mean accept length {mtp.mean_accept_length} (p={mtp.accept.p if mtp.accept else 0:.3f}); "
          f"spec step ms at "
          f"batch 1/4/16/32: " + "/".join(f"{mtp.spec_step_ms(b):.1f}" for b in (1, 4, 16, 32)))
    print("  workload: 1000 in / 1000 out, ignore_eos, closed loop, "
          f"{args.requests_per_client} requests per client (min {args.min_requests})")
    print()
    print("aggregate tok/s = output tokens / window; user = mean 1/TPOT; run = mean admitted "
          "requests; seed/req = the seed's per-request tok/s")
    print(rep.table())
    print()
    cross = f"{rep.crossover:.1f}" if rep.crossover else "none"
    seed_cross = f"{rep.seed_crossover:.1f}" if rep.seed_crossover else "none"
    print(f"crossover (MTP - baseline changes sign, log2-interpolated): simulated {cross}, "
          f"seed {seed_cross}")
    for name, ok in rep.checks.items():
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}")
    print("RESULT:", "PASS" if rep.passed else "FAIL")
    return 0 if rep.passed else 1


if __name__ == "__main__":
    sys.exit(main())
