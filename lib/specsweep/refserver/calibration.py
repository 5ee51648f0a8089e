"""Calibration of a profile against the seed's table, in the virtual-time simulator.

The seed (``data/reference/seed-qwen3.5-122b-a10b``, whose README names its source):
Qwen3.5-122B-A10B on 4x RTX PRO 6000 under SGLang, 1000-token prompts, 1000 output tokens
(ignore_eos), closed loop at concurrency 1, 4, 16, 32, 64, 128, baseline vs MTP (NEXTN).
``run_calibration`` simulates both arms at every level with ``simulate_closed_loop`` (each client
sends ``requests_per_client`` requests, at least ``min_requests`` in all) and checks the
calibration targets:

* aggregate output tok/s of both arms within +-20 % of the seed at every level;
* MTP ahead of the baseline at 1-16, behind at 64 and 128, so the crossover (where the
  aggregate delta changes sign, interpolated in log2 concurrency) lies between 32 and 64;
* baseline per-user decode speed (1/TPOT) at concurrency 1 within +-10 % of 110 tok/s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from specsweep.paths import SEED_DATA
from specsweep.refserver.model import SimResult, simulate_closed_loop
from specsweep.refserver.profiles import Profile, load_profile

__all__ = ["SEED_PROFILE", "SEED_TABLE", "CalibrationReport", "LevelRow", "run_calibration"]

SEED_PROFILE = "qwen3.5-122b-a10b-4x-rtxpro6000"



def _seed_table() -> dict[int, tuple[float, float, float, float]]:
    """concurrency -> (baseline agg tok/s, MTP agg tok/s, baseline per-request, MTP per-request),
    read from the seed's reference result sets (``data/reference/``), the one copy of the table."""
    from specsweep.results.store import load_result_sets

    arms = {rs.arm: rs.levels.set_index("concurrency") for rs in load_result_sets(SEED_DATA)}
    base, mtp = arms["baseline"], arms["mtp"]
    return {int(c): (float(base.at[c, "output_tok_s"]), float(mtp.at[c, "output_tok_s"]),
                     float(base.at[c, "request_tok_s_mean"]), float(mtp.at[c, "request_tok_s_mean"]))
            for c in sorted(base.index)}


#: concurrency -> (baseline agg tok/s, MTP agg tok/s, baseline per-request, MTP per-request)
SEED_TABLE: dict[int, tuple[float, float, float, float]] = _seed_table()
AGG_TOLERANCE = 0.20
USER_TOLERANCE = 0.10
SEED_USER_TOK_S_C1 = 110.0


@dataclass
class LevelRow:
    """Seed vs simulated at one concurrency."""

    concurrency: int
    n_requests: int
    base: SimResult
    mtp: SimResult
    seed_base: float
    seed_mtp: float
    seed_base_user: float
    seed_mtp_user: float

    @property
    def base_delta(self) -> float:
        """Simulated / seed - 1, baseline aggregate."""
        return self.base.output_tok_s / self.seed_base - 1

    @property
    def mtp_delta(self) -> float:
        """Simulated / seed - 1, MTP aggregate."""
        return self.mtp.output_tok_s / self.seed_mtp - 1

    @property
    def mtp_vs_base(self) -> float:
        """Simulated MTP / baseline - 1."""
        return self.mtp.output_tok_s / self.base.output_tok_s - 1

    @property
    def ok(self) -> bool:
        """Both arms within the aggregate tolerance."""
        return abs(self.base_delta) <= AGG_TOLERANCE and abs(self.mtp_delta) <= AGG_TOLERANCE


@dataclass
class CalibrationReport:
    """All levels plus the checks."""

    rows: list[LevelRow]
    checks: dict[str, bool] = field(default_factory=dict)
    crossover: float | None = None
    seed_crossover: float | None = None

    @property
    def passed(self) -> bool:
        """True when every check passed."""
        return all(self.checks.values())

    def table(self) -> str:
        """A plain-text table, seed vs simulated side by side."""
        head = (f"{'C':>4} {'n':>4} | {'seed base':>9} {'sim base':>9} {'d%':>6} | "
                f"{'seed mtp':>9} {'sim mtp':>9} {'d%':>6} | {'mtp/base':>8} | "
                f"{'user base':>9} {'user mtp':>9} | {'seed/req b':>10} {'seed/req m':>10} | "
                f"{'run base':>8} {'run mtp':>8} | {'accept':>6} | ok")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            lines.append(
                f"{r.concurrency:>4} {r.n_requests:>4} | {r.seed_base:>9.1f} "
                f"{r.base.output_tok_s:>9.1f} {r.base_delta * 100:>+6.1f} | {r.seed_mtp:>9.1f} "
                f"{r.mtp.output_tok_s:>9.1f} {r.mtp_delta * 100:>+6.1f} | "
                f"{r.mtp_vs_base * 100:>+7.1f}% | {r.base.mean_user_tok_s:>9.1f} "
                f"{r.mtp.mean_user_tok_s:>9.1f} | {r.seed_base_user:>10.1f} "
                f"{r.seed_mtp_user:>10.1f} | {r.base.mean_admitted:>8.1f} "
                f"{r.mtp.mean_admitted:>8.1f} | {r.mtp.accept_length or 0:>6.2f} | "
                f"{'PASS' if r.ok else 'FAIL'}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able summary."""
        return {
            "passed": self.passed,
            "checks": self.checks,
            "crossover_concurrency": self.crossover,
            "seed_crossover_concurrency": self.seed_crossover,
            "levels": [{
                "concurrency": r.concurrency, "n_requests": r.n_requests,
                "seed_base_tok_s": r.seed_base, "sim_base_tok_s": round(r.base.output_tok_s, 2),
                "base_delta_pct": round(r.base_delta * 100, 2),
                "seed_mtp_tok_s": r.seed_mtp, "sim_mtp_tok_s": round(r.mtp.output_tok_s, 2),
                "mtp_delta_pct": round(r.mtp_delta * 100, 2),
                "sim_base_user_tok_s": round(r.base.mean_user_tok_s, 2),
                "sim_mtp_user_tok_s": round(r.mtp.mean_user_tok_s, 2),
                "sim_base_mean_running": round(r.base.mean_admitted, 2),
                "sim_mtp_mean_running": round(r.mtp.mean_admitted, 2),
                "sim_mtp_accept_length": r.mtp.accept_length,
            } for r in self.rows],
        }


def _crossover(levels: list[int], deltas: list[float]) -> float | None:
    for (c0, d0), (c1, d1) in zip(zip(levels, deltas), zip(levels[1:], deltas[1:])):
        if d0 > 0 >= d1 or d0 < 0 <= d1:
            x0, x1 = math.log2(c0), math.log2(c1)
            x = x0 + (x1 - x0) * d0 / (d0 - d1)
            return 2 ** x
    return None


def run_calibration(profile: Profile | str = SEED_PROFILE, *, requests_per_client: int = 4,
                    min_requests: int = 16, levels: tuple[int, ...] = tuple(SEED_TABLE),
                    input_tokens: int = 1000, output_tokens: int = 1000,
                    seed: int = 0) -> CalibrationReport:
    """Simulate both arms at the seed's levels and check them against the seed's table."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    rows = []
    for c in levels:
        n = max(requests_per_client * c, min_requests)
        base = simulate_closed_loop(prof, "off", c, n, input_tokens, output_tokens, seed)
        mtp = simulate_closed_loop(prof, "mtp", c, n, input_tokens, output_tokens, seed)
        sb, sm, sbu, smu = SEED_TABLE[c]
        rows.append(LevelRow(c, n, base, mtp, sb, sm, sbu, smu))
    rep = CalibrationReport(rows)
    by_c = {r.concurrency: r for r in rows}
    rep.checks["aggregate within +-20% at every level (both arms)"] = all(r.ok for r in rows)
    rep.checks["MTP ahead at 1-16"] = all(
        by_c[c].mtp_vs_base > 0 for c in (1, 4, 16) if c in by_c)
    rep.checks["MTP behind at 64 and 128"] = all(
        by_c[c].mtp_vs_base < 0 for c in (64, 128) if c in by_c)
    lv = [r.concurrency for r in rows]
    rep.crossover = _crossover(lv, [r.mtp_vs_base for r in rows])
    rep.seed_crossover = _crossover(lv, [SEED_TABLE[c][1] / SEED_TABLE[c][0] - 1 for c in lv])
    rep.checks["crossover between 32 and 64"] = (
        rep.crossover is not None and 32 <= rep.crossover <= 64)
    if 1 in by_c:
        u = by_c[1].base.mean_user_tok_s
        rep.checks["baseline per-user tok/s at C=1 within +-10% of 110"] = (
            abs(u / SEED_USER_TOK_S_C1 - 1) <= USER_TOLERANCE)
    return rep
