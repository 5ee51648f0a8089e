"""Turn a comparison and a workload profile into a recommendation with its reasons.

Every sentence is computed from the comparison: the numbers quoted are the data's, and which
sentences appear depends on what the data shows (caps, effective concurrency, SLOs, intervals,
workload kind). Nothing here knows about any particular data set.

Judging one level (an arm against the baseline at one concurrency both measured), on the fitted
delta curves of :mod:`specsweep.analyze.compare`:

- A delta counts as a *gain* or a *loss* only where it is credible — its 95 % simultaneous band
  excludes 0 — and its fitted value exceeds ``min_effect_pct``; otherwise it is *neutral* (no
  measurable difference).
- An arm with no successful requests (or no per-user figure) at a level loses it; so does one that
  fails more requests than the baseline by more than ``max_error_rate_increase``.
- ``throughput``: the aggregate output tok/s delta decides.
- ``latency``: the whole wait — TTFT and end-to-end p50/p99, or the Little's-law estimate of the
  mean request time for level-only data — and per-user speed. Loss where any wait is credibly
  longer (TTFT sized by its extra seconds as a share of the baseline's e2e), else where per-user
  speed is credibly slower; gain where per-user speed (or a wait) is credibly better, no end-to-end
  wait's fitted value is longer and no TTFT's fitted increase outweighs the per-user gain. On
  level-only data (the wait is the Little's-law estimate, the inverse of aggregate throughput) a
  gain needs that wait credibly shorter, so the latency crossover is the aggregate crossover.
  ``decided_by`` names the deciding metric.
- Control arms (:attr:`Comparison.controls`) are never candidates.
- ``balanced``: a gain needs per-user speed credibly up and aggregate not credibly down by more than
  ``max_throughput_loss_pct``; a loss is per-user speed credibly down, or aggregate down by more.
- SLOs come first, but only a credible difference in the SLO's own metric moves a level across the
  line: where the arm breaks an SLO the baseline meets, a loss; where it meets every SLO the
  baseline breaks, a gain; otherwise neutral ("within noise of the SLO", "both break an SLO").
- Arms whose token counts came from SSE chunks get no throughput, balanced or per-user-SLO verdict
  (``no_verdict``); their latency verdict uses the waits only.

The verdict follows the outcomes over the profile's range: all gains (or neutral) → enable; all
losses or neutral → disable; gains then losses → enable up to X, where X is where the deciding
metric's fitted curve crosses 0 between the last gain and the first loss (the last gain when it
does not cross there); losses then gains → enable from X; anything else → mixed, level by level.
The decision an operator reads (:class:`DecisionKind`) follows from the verdict: disable is "keep
off" where a level was lost and "no measurable difference" where none was; mixed and no verdict are
"not established" (:mod:`specsweep.decide.verdicts`).

The package's modules, one job each: ``verdicts`` (the decision's words), ``profiles``, ``text``,
``claims``, ``result``, ``judge``, ``ties``, ``decision`` (deciding, then the recommendation), the
prose rendered from its claims (``sentences``, ``caps``, ``caveats``, ``experiments``), ``decisions``
(the decision table and ``decisions.json``) and ``draws`` (how often the rules decide right on
simulated pairs). The public names are listed below; anything else is imported from its module.
"""
from __future__ import annotations

from specsweep.decide.decision import decide, recommend
from specsweep.decide.profiles import DEFAULT_PROFILES, SYNTHETIC_KINDS, Objective, Profile, parse_profile
from specsweep.decide.result import Band, Decision, Recommendation
from specsweep.decide.sentences import aggregate_quote
from specsweep.decide.verdicts import DecisionKind, Outcome, Verdict, decision_class

__all__ = [
    "DEFAULT_PROFILES", "SYNTHETIC_KINDS", "Band", "Decision", "DecisionKind", "Objective", "Outcome", "Profile",
    "Recommendation", "Verdict", "aggregate_quote", "decide", "decision_class", "parse_profile", "recommend",
]
