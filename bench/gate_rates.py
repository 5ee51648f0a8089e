"""How often the CI gate passes an A/A pair and fails an injected regression, per truth.

An A/A pair is two studies drawn independently from one truth (:mod:`specsweep.decide.draws`:
several noise models, effects far from and near a decision threshold). Per truth, ``--pairs``
pairs are gated (:func:`specsweep.decide.gate.gate`); the share that pass is printed with what
failed the others (a decision change, a metric shift: which metric) and how many pairs changed a
decision within noise (reported, not failed); then the share of the same pairs failed once the new
study's speculative arm regresses: 20 % lower aggregate throughput, 20 % lower accept length (the
draws' speculative arm is given one, 2.4 tokens per step with the runs' noise), and — a change the
decision may feel before any one metric test — 10 % lower aggregate and per-user speed.

    PYTHONPATH=lib .venv/bin/python bench/gate_rates.py [--pairs 100] [--seed 0]

Prints numbers only; tests/decide/test_gate.py checks a smaller draw.
"""
from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from specsweep.decide.draws import HARD_CASE_TEXT, draw_pair, draw_study
from specsweep.decide.gate import GateResult, gate
from specsweep.results.store import ResultSet

#: the truths gated: far from a decision threshold, then near one (where a rerun's decision may flip)
TRUTHS: tuple[str, ...] = ("nominal_none", "nominal_none_one_run", "growing_noise", "pair:better", "noise_2x_one_run",
                           "drift_control", "plus6_one_run", "nominal_plus4", "latency_crossover_24_3runs")


def draw(case: str, rng: np.random.Generator) -> list[ResultSet]:
    """One study of ``case``: a hard case, or 'pair:NAME' for the two-arm draws of :func:`draw_pair`."""
    return draw_pair(case[5:], "repeats", rng) if case.startswith("pair:") else draw_study(case, rng)


def scaled(sets: list[ResultSet], arm: str, factor: float, *metrics: str) -> list[ResultSet]:
    """The study with ``arm``'s ``metrics`` × ``factor`` at every level."""
    return [replace(rs, levels=rs.levels.assign(**{m: rs.levels[m] * factor for m in metrics}))
            if rs.arm == arm else rs for rs in sets]


def with_accept(sets: list[ResultSet], rng: np.random.Generator, sigma: float = 0.03) -> list[ResultSet]:
    """The study with an accept length on the speculative arm: 2.4 tokens per step, log-normal noise per run."""
    return [replace(rs, levels=rs.levels.assign(spec_accept_length=2.4 * np.exp(sigma * rng.standard_normal(len(rs.levels)))))
            if rs.arm == "spec" else rs for rs in sets]


#: name -> the new study regressed
REGRESSIONS: dict[str, Callable[[list[ResultSet]], list[ResultSet]]] = {
    "aggregate −20%": lambda s: scaled(s, "spec", 0.8, "output_tok_s"),
    "accept length −20%": lambda s: scaled(s, "spec", 0.8, "spec_accept_length"),
    "both speeds −10%": lambda s: scaled(s, "spec", 0.9, "output_tok_s", "request_tok_s_mean"),
}


def why(result: GateResult) -> str:
    """What failed a gate: 'decision', 'metric <name>' or 'missing' (the first kind listed)."""
    first = result.differences[0]
    if first.startswith("metric"):
        return "metric " + next(s.metric for s in result.shifts if s.beyond)
    return first.split()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{args.pairs} pairs per truth; regressions: share of the pairs failed")
    print(f"{'truth':28} {'A/A pass':>8} {'noted':>6}  " + "  ".join(f"{r:>18}" for r in REGRESSIONS)
          + "  A/A failures")
    for case in TRUTHS:
        rng = np.random.default_rng(args.seed)
        passed, noted, reasons = 0, 0, Counter[str]()
        caught = dict.fromkeys(REGRESSIONS, 0)
        for _ in range(args.pairs):
            ref, new = with_accept(draw(case, rng), rng), with_accept(draw(case, rng), rng)
            aa = gate(ref, new)
            passed += aa.passed
            noted += bool(aa.within_noise)
            if not aa.passed:
                reasons[why(aa)] += 1
            for name, regress in REGRESSIONS.items():
                caught[name] += not gate(ref, regress(new)).passed
        print(f"{case:28} {passed / args.pairs:8.0%} {noted / args.pairs:6.0%}  "
              + "  ".join(f"{caught[r] / args.pairs:18.0%}" for r in REGRESSIONS) + "  "
              + (", ".join(f"{k} {v}" for k, v in reasons.most_common()) or "—"), flush=True)
    print("\nnoted: pairs whose decision changed within noise (reported on the gate's screen, not failed)")
    for case in TRUTHS:
        print(f"  {case}: {HARD_CASE_TEXT.get(case, 'two arms, +10% everywhere, 3 runs per level (decide.draws.draw_pair)')}")


if __name__ == "__main__":
    main()
