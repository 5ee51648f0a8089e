"""Check a report's claims against their numbers before the page is written.

Every finding a recommendation states is a :class:`~specsweep.decide.claims.Claim` carrying its numbers.
:func:`check_page` checks all of a page's claims, and the grammar of every sentence, against the
comparison the page is built from; :func:`assert_consistent` raises :class:`ConsistencyError`
listing every violation (the report notebook calls it, so a contradicting page is never written).

The rules (``Violation.rule``):

- ``sign``: a gain's measured Δ% lie in the metric's better direction (up for throughput, down
  for waits), a loss's in the worse one, and no signed figure outside a band's brackets in the
  claim's sentence says otherwise.
- ``credibility``: a gain or loss is credible — recomputed from the comparison: its band excludes
  0 in that direction at every level it names, and the level's own measured Δ does not lie on the
  other side of 0 by more than its own noise — and its sentence says nothing is "within noise";
  a claim that is not credible uses no gain/loss words ("credibly raises", "is faster", "takes
  longer" without "may" or "not").
- ``agreement``: a gauge claim says "agrees" only when the gauge and the estimate before it put the
  running requests on the same side of ``WELL_BELOW_CAP`` × cap (recomputed), "disagrees" only when not.
- ``levels``: every level a claim names was tested for that arm (an experiment's levels were not),
  and a point that was not tested ("up to about 37", a crossover) names the tested levels bounding it
  — the ones just around it, with no tested level between them (one bracket everywhere).
- ``deciding-metric``: a verdict's deciding metric is shown beside it (the profile's table), and a
  verdict placing a point between tested levels quotes that metric's Δ at both.
- ``experiment-metric``: a next experiment targets the profile's own deciding metric (no
  throughput break-even for a latency profile).
- ``advice``: the server arguments advised parse with that server's own parser (the embedded
  reference server's argparse and profile overrides) or, for a real server, are flags it has.
- ``cap-conclusion``: what a profile says about its arm's cap, pool and gauges comes to one
  conclusion — the cap bound, or it did not — once the server's gauge has overruled an estimate
  ("trust the gauge"), the estimate's own reading no longer counts.
- ``slo-range``: an SLO profile's decision is enabled only at levels where the arm meets the SLO
  (the first screen's range, :func:`specsweep.report.decision.decision_rows`).
- ``grammar``: no "is looks", "is takes" … (a label followed by a verb after "is"), no doubled words.
"""
from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from specsweep.analyze.compare import ESTIMATED_WAIT, WAIT_METRICS, Comparison
from specsweep.decide.claims import Claim, lower_is_better, pct
from specsweep.decide.text import deciding_word
from specsweep.errors import RunError

#: flags each real server has for the settings specsweep advises (checked, not guessed: SGLang's
#: server_args, vLLM's engine args, llama.cpp's server)
REAL_SERVER_FLAGS: dict[str, set[str]] = {
    "sglang": {"--max-running-requests", "--mem-fraction-static", "--speculative-num-steps",
               "--speculative-eagle-topk", "--speculative-num-draft-tokens"},
    "vllm": {"--max-num-seqs", "--gpu-memory-utilization"},
    "llama.cpp": {"--parallel", "-np", "--ctx-size", "-c"},
    # specsweep's own launcher (python -m specsweep.engines.llamacpp) for the llama.cpp engine
    "llamacpp": {"--slots", "--ctx-per-slot", "--threads"},
    "trtllm": {"--max_batch_size", "--kv_cache_free_gpu_memory_fraction", "--max_num_tokens"},
}

#: a verb right after "is"/"are": "mtp is looks faster", "MTP (tiny) is takes longer"
_IS_VERB = re.compile(r"\b(?:is|are|was|were)\s+(looks|takes|waits|makes|wins|loses|runs|delivers|keeps|raises|"
                      r"lowers|differs|costs|pays|gains|needs|shows|ran|has)\b", re.I)
_DOUBLED = re.compile(r"\b(\w{2,})\s+\1\b", re.I)
_SIGNED = re.compile(r"(?<![\w.])([+\-−])(\d+(?:\.\d+)?)%")
_BRACKETS = re.compile(r"\[[^\]]*\]|\(fitted [^)]*\)")
_GAIN_WORDS = re.compile(r"(?<!not )(?<!not\s)\b(credibly (?:raises|faster|lowers|slower)|is faster|takes longer|"
                         r"waits longer|wins on|loses on)\b", re.I)


@dataclass(frozen=True)
class Violation:
    """One place where a page's words and its numbers disagree."""

    rule: str
    profile: str
    sentence: str
    detail: str

    def __str__(self) -> str:
        where = f" [{self.profile}]" if self.profile else ""
        return f"{self.rule}{where}: {self.detail} — in: {self.sentence[:240]}"


class ConsistencyError(RunError, ValueError):
    """A report would contradict itself; the message lists every violation."""

    def __init__(self, violations: Sequence[Violation]):
        self.violations = list(violations)
        super().__init__(f"the report would contradict its own numbers in {len(self.violations)} place(s):\n"
                         + "\n".join(f"- {v}" for v in self.violations))


def grammar_errors(text: str) -> list[str]:
    """Grammar a template can produce with an odd label: 'is looks', 'is takes', doubled words."""
    out = [f"'{m.group(0)}'" for m in _IS_VERB.finditer(text)]
    out += [f"doubled word '{m.group(0)}'" for m in _DOUBLED.finditer(text)
            if not m.group(1).isdigit()]
    return out


def _signed_numbers(sentence: str) -> list[float]:
    """Signed percentages in a sentence outside band brackets (and 'fitted …' asides)."""
    plain = _BRACKETS.sub("", sentence)
    return [(-1.0 if s in "-−" else 1.0) * float(v) for s, v in _SIGNED.findall(plain)]


def _credible_direction(comp: Comparison, arm: str, metric: str, c: int) -> int:
    """+1 where the arm is credibly better at level c on metric (its band excludes 0 that way), −1 worse, 0 neither."""
    row = comp.delta_rows(arm, metric).get(int(c))
    if row is None:
        return 0
    lo, hi = row.get("ci_low_pct", math.nan), row.get("ci_high_pct", math.nan)
    if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)):
        return 0
    up = 1 if lo > 0 else -1 if hi < 0 else 0
    tested = comp.delta_rows(arm, metric)
    if _contradicted(row, up, end=int(c) in (min(tested), max(tested))):
        up = 0
    return -up if lower_is_better(metric) else up


def _contradicted(row: dict[str, Any], up: int, *, end: bool) -> bool:
    """Whether the level's own measured Δ lies on the other side of 0 from ``up`` by more than its own
    noise (one standard deviation of its ln-ratio; at an ``end`` level, by anything): then no band,
    however it lies, makes it credible."""
    own, se = row.get("level_delta_pct", math.nan), row.get("level_noise_ln", math.nan)
    if own is None or se is None or math.isnan(own) or math.isnan(se) or own <= -100:
        return False
    # the tolerance: the verdict's own test, not rounding, decides a level on the line
    return up * math.log1p(own / 100.0) < -(0.0 if end else se) * (1 + 1e-9) - 1e-12


def _tested(comp: Comparison, arm: str) -> set[int]:
    return {int(c) for c in comp.levels.loc[comp.levels["arm"] == arm, "concurrency"]}


#: a rule broken by one claim: (rule, detail)
Breach = tuple[str, str]


def check_claim(comp: Comparison, claim: Claim, *, well_below: float = 0.75) -> list[Violation]:
    """The rules that one claim can break on its own (see the module docstring)."""
    found: list[Breach] = [("grammar", g) for g in grammar_errors(claim.sentence)]
    if claim.kind in ("gain", "loss") and claim.values:
        found += _directed_breaches(comp, claim)
    if claim.kind == "no-difference" and not claim.credible:
        m = _GAIN_WORDS.search(claim.sentence)
        if m:
            found.append(("credibility", f"a difference within noise said as '{m.group(0)}'"))
    if claim.kind == "gauge":
        found += _gauge_breaches(claim, well_below)
    if claim.arm in comp.arms and claim.levels:
        found += _level_breaches(comp, claim)
    if claim.at is not None and claim.arm in comp.arms:
        found += _point_breaches(comp, claim)
    if claim.kind == "advice":
        found += _advice_breaches(comp, claim)
    return [Violation(rule, claim.profile, claim.sentence, detail) for rule, detail in found]


def _directed_breaches(comp: Comparison, claim: Claim) -> list[Breach]:
    """A gain's or loss's sign (its values and the figures its sentence quotes) and credibility."""
    out: list[Breach] = []
    s, want = claim.sentence, claim.kind == "gain"
    wrong = [c for c, ok in zip(claim.levels, claim.improved()) if ok != want]
    if wrong:
        out.append(("sign", f"a {claim.kind} on {claim.metric} whose measured Δ points the other way at {wrong}"))
    flip = -1.0 if lower_is_better(claim.metric) else 1.0
    if any((flip * v > 0) != want for v in _signed_numbers(s) if v != 0):
        out.append(("sign", f"a {claim.kind} sentence quoting a figure of the opposite sign"))
    if not claim.credible:
        out.append(("credibility", f"a {claim.kind} claim not marked credible"))
    if "within noise" in s:
        out.append(("credibility", f"a {claim.kind} sentence that says 'within noise'"))
    if claim.arm in comp.arms and claim.metric:
        expect = 1 if want else -1
        notcred = [c for c in claim.levels if _credible_direction(comp, claim.arm, claim.metric, c) != expect]
        if notcred:
            out.append(("credibility", f"{claim.kind} at {notcred} where {claim.metric}'s band does not exclude 0 that way"))
    missing = next((v for v in claim.values if pct(v) not in s), None)
    if missing is not None and s.count("%") and " to " not in s:
        out.append(("sign", f"the sentence does not show the claim's figure {pct(missing)}"))
    return out


def _gauge_breaches(claim: Claim, well_below: float) -> list[Breach]:
    """A gauge says 'agrees' or 'disagrees' with the estimate before it only as the numbers do."""
    s = claim.sentence
    says_agree = bool(re.search(r"\bagrees\b", s))
    says_disagree = bool(re.search(r"\b(disagrees|contradicts)\b", s))
    gauge, cap, est = (claim.extra.get(k) for k in ("gauge_max", "cap", "estimate_below"))
    if gauge is None or cap is None or est is None:
        return [("agreement", "says the gauge agrees or disagrees with no estimate to compare it with")] \
            if says_agree or says_disagree else []
    agree = (float(gauge) < well_below * float(cap)) == bool(est)
    out: list[Breach] = []
    if says_agree and not agree:
        out.append(("agreement", f"says 'agrees' but the gauge ({gauge} of cap {cap}) and the estimate "
                                 f"({'well below' if est else 'near'} the cap) disagree"))
    if says_disagree and agree:
        out.append(("agreement", "says 'disagrees' but the gauge and the estimate agree"))
    if not says_agree and not says_disagree:
        out.append(("agreement", "a gauge compared with an estimate says neither 'agrees' nor 'disagrees'"))
    return out


def _level_breaches(comp: Comparison, claim: Claim) -> list[Breach]:
    """Every level a claim names was tested for its arm; an experiment's levels were not."""
    tested = _tested(comp, claim.arm)
    if claim.kind == "experiment":
        seen = sorted(set(claim.levels) & _tested(comp, comp.baseline) & tested)
        return [("levels", f"asks to measure {seen}, already measured")] if seen else []
    if claim.kind in ("gauge", "advice"):
        return []
    missing = sorted(set(claim.levels) - tested)
    return [("levels", f"names level(s) {missing} that {claim.arm} did not test")] if missing else []


def _point_breaches(comp: Comparison, claim: Claim) -> list[Breach]:
    """A point that was not tested ('up to about 37', a crossover) names the tested levels bounding it."""
    assert claim.at is not None
    tested = _tested(comp, claim.arm) & _tested(comp, comp.baseline)
    if round(claim.at) in tested:  # "about 8" where 8 was tested names a measured level
        return []
    if claim.bounds is None:
        return [("levels", f"names {claim.at:.0f}, not a tested level, without the tested levels bounding it")]
    lo, hi = claim.bounds
    if lo not in tested or hi not in tested or not lo <= claim.at <= hi:
        return [("levels", f"bounds {lo}–{hi} of {claim.at:.1f} are not tested levels around it")]
    inside = sorted(c for c in tested if lo < c < hi)
    if inside:  # one bracket everywhere: the tested levels just around X, nothing tested between them
        return [("levels", f"bounds {lo}–{hi} of {claim.at:.0f} have tested level(s) {inside} between them")]
    if not re.search(rf"\b{lo}\b.*\b{hi}\b", claim.sentence):
        return [("levels", f"does not name the tested levels {lo} and {hi} bounding {claim.at:.0f}")]
    return []


def _advice_breaches(comp: Comparison, claim: Claim) -> list[Breach]:
    """Advised server arguments run on that server, and the sentence shows them."""
    err = advice_error(claim.server, claim.argv, comp.metas[claim.arm].server.get("profile"))
    if err:
        return [("advice", err)]
    if claim.argv and " ".join(claim.argv) not in claim.sentence:
        return [("advice", f"the sentence does not show the arguments {' '.join(claim.argv)}")]
    return []


def advice_error(server: str, argv: Sequence[str], profile: str | None = None) -> str | None:
    """Why ``argv`` would not run on ``server`` ('refserver', 'sglang', 'vllm', 'llama.cpp'), else None.

    The reference server's arguments are parsed by its own parser, and ``--set`` overrides are
    applied to its profile (``profile``, else the first shipped one); a real server's flags are
    checked against :data:`REAL_SERVER_FLAGS`.
    """
    if not argv:
        return None
    if server == "refserver":
        from specsweep.refserver.cli import build_parser
        from specsweep.refserver.profiles import ProfileError, available_profiles, load_profile

        parser = build_parser()

        def fail(message: str) -> Any:
            raise ValueError(message)

        parser.error = fail  # type: ignore[method-assign]
        name = profile if profile in available_profiles() else available_profiles()[0]
        try:
            args = parser.parse_args(["--profile", name, *argv])
            load_profile(name, list(args.overrides))
        except (ValueError, ProfileError, argparse.ArgumentError, SystemExit) as exc:
            return f"the embedded reference server rejects {' '.join(argv)!r}: {exc}"
        return None
    known = REAL_SERVER_FLAGS.get(server)
    if known is None:
        return None  # a server specsweep knows no flags of: nothing to check against
    flags = [a for a in argv if a.startswith("-")]
    unknown = [f for f in flags if f not in known]
    return f"{server} has no {', '.join(unknown)}" if unknown else None


def _deciding_family(objective: str, user_metric: str) -> set[str]:
    """Metrics a profile's verdict (and so its next experiments) can be decided by."""
    if objective == "throughput":
        return {"output_tok_s", user_metric}  # the SLO's per-user metric may decide a level
    if objective == "latency":
        return {*WAIT_METRICS, ESTIMATED_WAIT, user_metric, "request_tok_s_mean", "user_tok_s_mean"}
    return {"output_tok_s", user_metric}


#: phrases that conclude the cap bound (True) or did not (False)
_CAP_STANCES: tuple[tuple[re.Pattern[str], bool], ...] = (
    (re.compile(r"\bcap did not bind|\bnot the cap\b|\bcap is not the cause", re.I), False),
    (re.compile(r"\bcap did bind\b|\bconsistent with the cap binding\b|\bthe cap bound\b", re.I), True),
)


def _cap_stance(sentence: str) -> bool | None:
    """What a sentence concludes about the cap: True (it bound), False (it did not), None (neither)."""
    return next((stance for pattern, stance in _CAP_STANCES if pattern.search(sentence)), None)


def cap_conclusion(rec: Any) -> list[Violation]:
    """The ``cap-conclusion`` rule over one recommendation's reasons and next experiments."""
    overruled = any(c.kind == "gauge" and c.agrees is False for c in rec.claims)
    estimates = {c.sentence for c in rec.claims if c.kind == "cap" and "estimate" in c.extra}
    texts = [t for t in (*rec.reasons, *rec.next_experiments) if not (overruled and t in estimates)]
    stances = [(t, s) for t in texts if (s := _cap_stance(t)) is not None]
    if len({s for _, s in stances}) < 2:
        return []
    said = "; ".join(f"{'binds' if s else 'does not bind'}: {t[:80]}" for t, s in stances)
    return [Violation("cap-conclusion", rec.profile.name, stances[-1][0], f"the cap both bound and did not ({said})")]


def _bound_quotes(comp: Comparison, rec: Any, claim: Claim) -> list[Violation]:
    """A verdict placing X at or between tested levels quotes, at each, the Δ of the metric the table
    says decided that level (never another metric named as deciding there)."""
    decided = {int(r.concurrency): str(r.deciding_metric) for r in rec.levels.itertuples()
               if r.arm == claim.arm} if "deciding_metric" in rec.levels else {}
    out = []
    for c in dict.fromkeys(claim.bounds or ()):
        metric = decided.get(c, claim.metric)
        r = comp.delta_rows(claim.arm, metric).get(c)
        if r is not None and pct(float(r["delta_pct"])) not in claim.sentence:
            out.append(Violation("deciding-metric", rec.profile.name, claim.sentence,
                                 f"does not quote {metric}'s Δ at {c}, the metric the table says decided it"))
        other = re.escape(deciding_word(claim.metric, comp.aggregate_basis))
        if metric != claim.metric and re.search(rf"{other}:? [+\-−]?[\d.]+%(?: \[[^\]]*\])? at {c}\b", claim.sentence):
            out.append(Violation("deciding-metric", rec.profile.name, claim.sentence,
                                 f"quotes {claim.metric} at {c}, which the table says {metric} decided"))
    return out


def check_recommendation(comp: Comparison, rec: Any) -> list[Violation]:
    """Every claim of one recommendation, its deciding metric shown, its experiments on target, its grammar."""
    out: list[Violation] = []
    for claim in rec.claims:
        out += check_claim(comp, claim)
        if claim.kind == "verdict" and not rec.levels.empty and claim.metric not in rec.shown_metrics:
            out.append(Violation("deciding-metric", rec.profile.name, claim.sentence,
                                 f"decided by {claim.metric}, which the table beside it does not show"))
        if claim.kind == "verdict" and claim.bounds is not None:
            out += _bound_quotes(comp, rec, claim)
        if claim.kind == "experiment" and claim.metric and \
                claim.metric not in _deciding_family(rec.profile.objective, comp.user_metric):
            out.append(Violation("experiment-metric", rec.profile.name, claim.sentence,
                                 f"a {rec.profile.objective} profile's experiment targets {claim.metric}"))
    out += cap_conclusion(rec)
    texts = [rec.headline, *rec.reasons, *rec.caveats, *rec.next_experiments, *(b.sentence for b in rec.bands)]
    said = {c.sentence for c in rec.claims}
    for t in texts:
        if t in said:
            continue  # checked with its claim
        for g in grammar_errors(t):
            out.append(Violation("grammar", rec.profile.name, t, g))
    return out


def slo_range(comp: Comparison, recs: Sequence[Any]) -> list[Violation]:
    """The ``slo-range`` rule over a page's first screen."""
    from specsweep.report.decision import decision_rows

    out = []
    for rec, row in zip(recs, decision_rows(comp, recs)):
        lv = rec.levels[rec.levels["arm"] == row.arm] if row.arm and not rec.levels.empty else rec.levels.iloc[0:0]
        if "arm_meets_slo" not in lv or lv["arm_meets_slo"].isna().all():
            continue
        missed = sorted(set(row.enable_levels) & {int(c) for c, ok in zip(lv["concurrency"], lv["arm_meets_slo"])
                                                   if ok is not True and ok != 1})
        if missed:
            out.append(Violation("slo-range", rec.profile.name, f"{row.decision}, {row.enable_at}",
                                 f"enabled at {', '.join(map(str, missed))}, where {row.arm} misses the SLO"))
    return out


def check_page(comp: Comparison, recs: Iterable[Any], texts: Sequence[str] = ()) -> list[Violation]:
    """Every recommendation of a page, and the grammar of any other text it shows (``texts``)."""
    out: list[Violation] = []
    recs = list(recs)
    for rec in recs:
        out += check_recommendation(comp, rec)
    out += slo_range(comp, recs)
    for t in texts:
        for g in grammar_errors(t):
            out.append(Violation("grammar", "", t, g))
    return out


_PROSE_BLOCK = re.compile(r"<(p|li|h[1-6])\b[^>]*>(.*?)</\1>", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*(⚠])")


def page_sentences(page: str) -> list[str]:
    """The prose sentences of a built page (HTML), in order: the text of its paragraphs, list items and
    headings (tables, charts, scripts and styles left out), split at sentence ends; five words or more."""
    import html

    body = re.sub(r"<script\b.*?</script>|<style\b.*?</style>|<table\b.*?</table>", " ", page, flags=re.S)
    out = []
    for _, block in _PROSE_BLOCK.findall(body):
        text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", block))).strip()
        out += [s for s in _SENTENCE_END.split(text) if len(s.split()) >= 5]
    return out


def repeated_sentences(page: str) -> list[str]:
    """Every prose sentence a page says more than once, verbatim (say it once: a repeat becomes a reference)."""
    seen: dict[str, int] = {}
    for s in page_sentences(page):
        seen[s] = seen.get(s, 0) + 1
    return [s for s, n in seen.items() if n > 1]


def assert_consistent(comp: Comparison, recs: Sequence[Any], texts: Sequence[str] = ()) -> None:
    """Raise :class:`ConsistencyError` listing every violation of :func:`check_page`; return None if none."""
    violations = check_page(comp, recs, texts)
    if violations:
        raise ConsistencyError(violations)
