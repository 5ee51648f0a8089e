"""The full-data table, the glossary, and every metric's definition as shown on the page."""
from __future__ import annotations

import re

import pandas as pd

from specsweep.analyze.compare import DERIVED, METHOD, Comparison, info
from specsweep.markup import html_text, md_text
from specsweep.results.columns import METRICS
from specsweep.servers import dialect_of

#: per-draft-position columns shown in the full-data table (the rest stay in levels.parquet)
DATA_TABLE_POSITIONS = 4


_POSITION_COLUMN = re.compile(r"^spec_accept(?:_rate|ed)_pos_(\d+)$")


def data_table(comp: Comparison) -> pd.DataFrame:
    """Every metric of every arm and level (averaged over repeats), rounded for reading; of the
    per-draft-position acceptance columns only the first :data:`DATA_TABLE_POSITIONS` are shown
    (an n-gram drafter of 48–64 tokens has that many, which would flood the table)."""
    lv = comp.levels.copy()
    lv.insert(0, "arm", lv.pop("arm"))  # short names, as all tables (the label is in Setup)
    keep = [c for c in lv.columns if not lv[c].isna().all()
            and not ((m := _POSITION_COLUMN.match(str(c))) and int(m.group(1)) >= DATA_TABLE_POSITIONS)]
    return lv[keep].round(4)


def column_title(col: str) -> str:
    """A full-data column as the glossary names it, with its unit ('Aggregate output throughput (tok/s)')."""
    if col == "arm":
        return "arm"
    m = info(col)
    return f"{m.label} ({m.unit})" if m.unit else m.label


def full_data_html(comp: Comparison) -> str:
    """:func:`data_table` as the page shows it: glossary names with units in the header, each column's raw
    name (as in levels.parquet) on hover, every cell escaped, scrolling sideways inside the page's width."""
    from specsweep.report.display import human_number

    frame = data_table(comp)
    head = "".join(f'<th title="{html_text(c)}">{html_text(column_title(str(c)))}</th>' for c in frame.columns)
    numeric = {c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])}

    def cell(c: str, v: object) -> str:
        text = "—" if v is None or (isinstance(v, float) and pd.isna(v)) else human_number(v) if c in numeric else str(v)
        return f"<td>{html_text(text)}</td>"

    body = "".join("<tr>" + "".join(cell(str(c), v) for c, v in zip(frame.columns, row)) + "</tr>"
                   for row in frame.itertuples(index=False))
    return (f'<div style="overflow-x:auto;max-width:100%"><table class="dataframe"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


GLOSSARY: dict[str, str] = {
    "Concurrency": "how many requests the client keeps in flight at once (a closed loop: each finished request "
                   "starts the next).",
    "Aggregate throughput": "output tokens per second summed over all requests in flight (the server's capacity).",
    "TPOT": "time per output token after the first: (end-to-end time − TTFT) ÷ (output tokens − 1), in seconds.",
    "Per-user decode speed": "1 ÷ TPOT, in tok/s: how fast one request streams once its first token has arrived.",
    "TTFT": "time to first token: from sending a request to the first chunk that carries a token (queueing and "
            "prefill included). A chunk's time is taken as the client receives its bytes, in the socket callback "
            "and before any parsing.",
    "End-to-end time (e2e)": "from sending a request to its last token; p50 and p99 are the median and the 99th "
                             "percentile over requests.",
    "Speculative decoding": "a cheap *draft* proposes several tokens and the model checks them in one *verify* pass; "
                            "accepted tokens are emitted together, so one step can yield several tokens.",
    "Draft model": "a separate small model that proposes the draft tokens.",
    "MTP / NEXTN": "multi-token prediction: the model's own extra prediction head(s) draft the next tokens; SGLang "
                   "calls the algorithm NEXTN (it reports it as EAGLE internally).",
    "EAGLE": "a speculative method whose light draft head reads the model's hidden states to propose a tree of tokens.",
    "n-gram": "speculation that drafts by looking up the continuation of the latest tokens in the prompt and output "
              "so far; no draft model.",
    "Points (of the aggregate Δ)": "the share of an arm's aggregate Δ% one factor of the speedup decomposition "
                                   "accounts for, in percentage points: the factors' points add up to the whole "
                                   "Δ% (a factor of −3 points takes 3 percentage points off it).",
    "Accept length": "output tokens per step of the target model, averaged over every step: a step that verified "
                     "a draft emits 1 + its accepted draft tokens, a step with no draft emits 1 (SGLang's figure). "
                     "Higher means more of the drafts were right. A server that counts per drafted step only "
                     "(llama.cpp) has that figure converted, and shown under its own name where the page gives it.",
    "Flip chance": "the estimated probability that a rerun of the same design (same levels, runs and requests) "
                   "decides this profile otherwise — another class, or an arm outside the tie — from simulated "
                   "reruns drawn around the fitted curves with the measured noise (the number of resamples is given).",
    "Levels credible": "of the levels a profile judged, those whose outcome is a gain or a loss (a credible "
                       "difference in the metric that decides there); the rest show no measurable difference.",
    "Little's law": "in a steady system, requests in flight = arrival rate × mean time in the system. In a closed loop "
                    "of C requests this gives the mean request time W = C × output tokens ÷ aggregate tok/s.",
    "Δ% and the 95% band": "Δ% = (arm ÷ baseline − 1) × 100 at the same concurrency; the band is where the fitted "
                           "delta curve lies with 95% confidence at all tested levels at once (see Definitions).",
    "Credible": "a difference whose 95% simultaneous band excludes 0 (and that exceeds the profile's minimum effect); "
                "anything else is *no measurable difference*.",
}


def acceptance_definitions(comp: Comparison) -> list[str]:
    """What each measured server's accept length counts (its dialect's ``acceptance_definition``),
    one item per server the arms ran on, where the page shows an accept length at all."""
    if "spec_accept_length" not in comp.levels or not comp.levels["spec_accept_length"].notna().any():
        return []
    names = dict.fromkeys(str(comp.metas[a].server.get("name") or "") for a in comp.arms)
    said = [dialect_of(n).acceptance_definition for n in names if dialect_of(n).acceptance_definition]
    return [f"- **Accept length, as the server counts it**: {text}." for text in dict.fromkeys(said)]  # our own text


def glossary_markdown(comp: Comparison) -> str:
    """The terms the report uses, defined once, before they are needed."""
    return "\n".join(["## Terms", ""] + [f"- **{k}**: {v}" for k, v in GLOSSARY.items()])


def _metric_definition(comp: Comparison, col: str) -> str:
    """The one definition of a metric in this report: the data's own where every arm states it, else ours."""
    own = {a: comp.metas[a].metric_definitions.get(col) for a in comp.arms}
    given = {a: t for a, t in own.items() if t}
    if given and len(set(given.values())) == 1 and len(given) == len(own):
        return md_text(next(iter(given.values())))
    if given:
        return "; ".join(f"{md_text(a)}: {md_text(t) if t else md_text(info(col).definition)}" for a, t in own.items())
    return info(col).definition


def definitions_markdown(comp: Comparison) -> str:
    """One definition per number on the page: metrics, Δ%, the curve model and band, crossover, Little's law,
    and how often the verdicts were right on synthetic data with known answers."""
    from specsweep.decide import draws

    shown = [c for c in comp.levels.columns
             if (c in METRICS or c in DERIVED) and comp.levels[c].notna().any()]
    lines = ["| metric | unit | better | definition |", "|---|---|---|---|"]
    for c in shown:
        i = info(c)
        lines.append(f"| `{c}` | {i.unit} | {i.better} | {_metric_definition(comp, c)} |")
    methods = [f"{md_text(a)}, {info(m).label[0].lower() + info(m).label[1:]}: {curve.method()}"
               for (a, m), curve in comp.curves.items() if m in ("output_tok_s", comp.user_metric)]
    lines += [
        "",
        "- **Δ%** = (arm ÷ baseline − 1) × 100 at the same concurrency, from values averaged over repeats.",
        f"- **Delta curve and 95% band**: {METHOD}",
    ]
    if methods:
        lines.append("- In this report: " + "; ".join(methods) + ".")
    lines += [
        "- **Verdict per level**: a level is a gain or a loss for a profile only where the deciding delta is credible "
        "(its band excludes 0) and its fitted value exceeds the profile's minimum effect (2% by default). Throughput "
        "profiles decide on aggregate throughput. Latency profiles lose a level where any wait (TTFT p50/p99, e2e "
        "p50/p99, or the Little's-law estimate when those are absent) is credibly longer by more than the minimum "
        "effect (for TTFT, the extra seconds as a share of the baseline's end-to-end time at the same percentile, so "
        "a few milliseconds more before a long answer do not count), and win it where per-user "
        "speed or a wait is credibly better, no end-to-end wait's fitted value is longer and no TTFT's fitted increase "
        "outweighs the per-user gain; on level-only data, where the wait is the Little's-law estimate, a gain needs "
        "that wait credibly shorter, so the latency crossover is the aggregate crossover. A control arm is never "
        "recommended. The recommendation names the deciding metric per level. An SLO moves a level only where the difference in the SLO's metric is credible.",
        "- **Crossover**: only where the fitted aggregate delta is credibly positive at one level and credibly "
        "negative at a later one (or the reverse) with no credible level between; placed where the fitted curve "
        "crosses 0 between them, on log2(concurrency). *Enable up to X* uses the same curve.",
        "- **Little's law** (level-only data): with C requests always in flight, requests complete at λ = aggregate "
        "tok/s ÷ output tokens per request, so the mean request time is W = C ÷ λ = C × output tokens ÷ aggregate "
        "tok/s, queueing included. It is an estimate (ramp-up and drain ignored) and, at one concurrency, the arm's W "
        "÷ the baseline's W = the baseline's aggregate ÷ the arm's.",
        "- **Smallest detectable difference**: (band critical value + 0.84) × the smallest standard error of the "
        "fitted curve, as a %: the delta that would be called credible with 80% power at the best-measured level.",
        "- **Pareto frontier**: (per-user speed, aggregate tok/s) points that no other arm or level beats on one axis "
        "without losing on the other.",
        "- Tokens are the server's own counts (`usage.completion_tokens`, SGLang `meta_info.completion_tokens`), never "
        "SSE chunks: under speculation one chunk carries several tokens.",
    ]
    lines += acceptance_definitions(comp)
    if draws.QUOTED:
        lines.append("- **How often these verdicts are right**, measured by the test suite (`tests/test_verdict_draws.py`) "
                     "on 500 fresh synthetic arm pairs per case from this noise model: " + draws.MODEL_TEXT)
        lines += ["", "| case | form | result | share of draws |", "|---|---|---|---|"]
        for (case, form), figures in draws.QUOTED.items():
            for what, share in figures.items():
                lines.append(f"| {draws.CASE_TEXT[case]} | {draws.FORM_TEXT[form]} | {draws.RESULT_TEXT[what]} | {share:.1%} |")
    if draws.HARD_QUOTED:
        lines.append("")
        lines.append(f"- **Harder cases** (`tests/test_verdict_draws_hard.py`, {draws.HARD_N} fresh synthetic studies "
                     "per case, measured in time order): " + draws.HARD_MODEL_TEXT)
        lines += ["", "| case | result | share of draws |", "|---|---|---|"]
        for case, figures in draws.HARD_QUOTED.items():
            for what, share in figures.items():
                lines.append(f"| {draws.HARD_CASE_TEXT[case]} | {draws.HARD_RESULT_TEXT[what]} | {share:.1%} |")
    return "\n".join(lines)
