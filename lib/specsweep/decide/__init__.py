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

The package's modules, one job each:
``profiles``, ``text``, ``result``, ``judge``, ``sentences``, ``experiments``, ``decision``.
Everything is re-exported here, so callers keep using ``recommend.<name>``.
"""
from __future__ import annotations

from specsweep.decide.caps import _cap_sentences, _server_gauge_sentences  # noqa: F401
from specsweep.decide.caveats import caveat_sentences, drift_sentences  # noqa: F401
from specsweep.decide.decision import (  # noqa: F401
    Decision,
    decide,
    recommend,
)
from specsweep.decide.experiments import (  # noqa: F401
    _candidate_levels,
    _where_uncertain,
)
from specsweep.decide.judge import (  # noqa: F401
    _ROWS,
    _bands,
    _crossing,
    _latency_outcome,
    _level_rows,
    _level_value,
    _levels_of,
    _lookup,
    _meets,
    _sign,
    _slo_checks,
    _verdict,
    _wait_size,
    judge_levels,
    wait_metrics,
)
from specsweep.decide.profiles import (  # noqa: F401
    DEFAULT_PROFILES,
    SYNTHETIC_KINDS,
    Objective,
    Profile,
    parse_profile,
)
from specsweep.decide.result import (  # noqa: F401
    Band,
    Recommendation,
)
from specsweep.decide.sentences import (  # noqa: F401
    _deciding_word,
    _headline,
    _no_difference_size,
    _slo_sentences,
    _throughput_sentence,
    _user_sentence,
    _wait_note,
    aggregate_quote,
    wait_sentence,
)
from specsweep.decide.text import (  # noqa: F401
    _DECIDING,
    WAIT_WORDS,
    _band_text,
    _fit,
    _levels_text,
    _num,
    _pct,
    _range_pct,
)
from specsweep.decide.verdicts import (  # noqa: F401
    DecisionKind,
    Outcome,
    Verdict,
    decision_class,
)
