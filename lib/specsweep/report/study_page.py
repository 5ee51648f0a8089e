"""What a report says about the study behind its result sets: the run order, missing arms and
repeats, the study's notes, what the running-request caps did, output agreement with the baseline.

Read from each result set's ``meta.json`` ``study`` block and its level rows; nothing here runs a
server. Kept apart from :mod:`specsweep.study.runner` (which runs studies) so that a report's kernel loads
only this, not the runner's HTTP client, process guard and study-file parser.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from specsweep.analyze.agreement import (
    DifferenceExample,
    agreement_markdown,
    first_difference_example,
    output_agreement,
)
from specsweep.markup import md_text
from specsweep.results.store import ResultSet

__all__ = ["adaptive_line", "adaptive_markdown", "cap_markdown", "run_order", "study_markdown"]

#: why an adaptive study stopped, in the page's words
STOPPED: dict[str, str] = {
    "settled": "settled",
    "budget": "on budget",
    "exhausted": "with a decision still open that no run allowed could change",
    "failed": "after a failed run, unfinished",
}


def run_order(sets: Sequence[ResultSet]) -> pd.DataFrame:
    """Every run of a study's result sets in time order: position, arm, repeat, seed, start and end (UTC).

    Empty for result sets that were not measured by a study (no ``study`` block in meta.json).
    """
    rows = [{"#": run["position"], "arm": rs.arm,
             "repeat": f"{run['repeat']} (sentinel)" if run.get("sentinel") else run["repeat"],
             "levels": ", ".join(map(str, run["levels"])) if run.get("levels") else "all",
             "prompt seed": run.get("seed"),
             "started (UTC)": run.get("started_utc"), "finished (UTC)": run.get("finished_utc")}
            for rs in sets if rs.meta.study is not None for run in rs.meta.study.runs]
    return pd.DataFrame(rows).sort_values("#").reset_index(drop=True) if rows else pd.DataFrame()


#: server settings that must be equal for two arms to differ only in their running-request cap
_SAME_BUT_CAP = ("name", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens", "max_total_num_tokens", "tp_size")


def _running(rs: ResultSet) -> pd.DataFrame:
    """Per concurrency: mean aggregate tok/s and the most requests the server ran at once (its gauge)."""
    lv = rs.levels
    if lv is None or "server_running_max" not in lv or "output_tok_s" not in lv:
        return pd.DataFrame(columns=["output_tok_s", "server_running_max"])
    return lv.groupby("concurrency").agg(output_tok_s=("output_tok_s", "mean"),
                                         server_running_max=("server_running_max", "max"))


def cap_markdown(sets: Sequence[ResultSet]) -> str:
    """What the running-request cap did, from the data: for each arm whose server reports a cap,
    the levels offering more requests than it ever ran at once, and whether the cap or something
    else (the KV pool: ⌊pool tokens ÷ (input + output tokens)⌋ requests fit) held it there; for
    each pair of arms whose servers differ only in the cap, the aggregate tok/s Δ % of the higher
    cap at the levels above the lower one. Empty when no arm reports a cap and running gauge."""
    lines: list[str] = []
    info = {rs.arm: (rs, rs.meta.server, _running(rs)) for rs in sets}
    for arm, (rs, srv, run) in info.items():
        cap = srv.get("max_running_requests")
        if not cap or run.empty:
            continue
        # a level whose gauge read 0 throughout (refreshed only every N decode steps, it can miss a
        # short level) says nothing about what ran: it is not counted as held below the offer
        held = run[(run["server_running_max"] > 0) & (run.index > run["server_running_max"])]
        if held.empty:
            continue
        most = int(held["server_running_max"].max())
        levels = ", ".join(f"C={c}" for c in held.index)
        if most >= cap:
            lines.append(f"- *{md_text(arm)}*: at {levels} the server ran at most {most} requests at once — its cap "
                         f"of {cap} binds.")
            continue
        why = ""
        pool, wl = srv.get("max_total_num_tokens"), rs.meta.workload
        per = (wl.input_tokens or 0) + (wl.output_tokens or 0)
        if pool and per:
            why = (f": its KV pool of {pool:,} tokens holds about {pool // per} requests of {per:,} tokens "
                   f"({wl.input_tokens} in + {wl.output_tokens} out), so the pool binds before the cap")
        lines.append(f"- *{md_text(arm)}*: at {levels} the server ran at most {most} requests at once (its "
                     f"running-requests gauge), below its cap of {cap}{why}.")
    arms = list(info.items())
    for i, (lo_arm, (_, lo_srv, lo_run)) in enumerate(arms):
        for hi_arm, (_, hi_srv, hi_run) in arms[i + 1:] + arms[:i]:
            lo_cap, hi_cap = lo_srv.get("max_running_requests"), hi_srv.get("max_running_requests")
            if not (lo_cap and hi_cap and hi_cap > lo_cap) or lo_run.empty or hi_run.empty \
                    or any(lo_srv.get(k) != hi_srv.get(k) for k in _SAME_BUT_CAP):
                continue
            both = lo_run.add_suffix("_lo").join(hi_run.add_suffix("_hi"), how="inner")
            both = both[both.index > lo_cap]
            if both.empty:
                continue
            deltas = ", ".join(f"{(r.output_tok_s_hi / r.output_tok_s_lo - 1) * 100:+.1f} % at C={c} (ran ≤ "
                               f"{int(r.server_running_max_hi)} vs ≤ {int(r.server_running_max_lo)})"
                               for c, r in both.iterrows())
            same = (both["server_running_max_hi"] <= both["server_running_max_lo"]).all()
            lines.append(f"- Raising the cap from {lo_cap} (*{md_text(lo_arm)}*) to {hi_cap} (*{md_text(hi_arm)}*) "
                         f"changed aggregate tok/s by {deltas}."
                         + (" The higher cap let no more requests run at once, so here it cannot recover throughput."
                            if same else ""))
    if not lines:
        return ""
    return ("**Running-request caps** (levels that offered more requests than the server ever ran at once):\n\n"
            + "\n".join(lines))


def adaptive_line(summary: dict[str, Any]) -> str:
    """'decided in X min of measurement; the full grid of the same levels would have taken about Y min'
    (``summary``: what an adaptive study records, :mod:`specsweep.study.adaptive_run`; seconds inside)."""
    return (f"decided in {_minutes(summary['measured_s'])} of measurement; the full grid of the same levels "
            f"({len(summary['levels'])} levels × {summary['max_repeats']} runs × {summary['arms']} arms) would have "
            f"taken about {_minutes(summary['full_grid_s'])}")


def _minutes(seconds: float) -> str:
    """A duration as the page says it: minutes, or seconds below two minutes."""
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def adaptive_markdown(summary: dict[str, Any]) -> str:
    """What the page says about an adaptive study: the time against the full grid's, why it stopped,
    the levels it never measured and the arms it stopped measuring, each with why (escaped)."""
    stop = str(summary.get("stop", "failed"))
    lines = [f"**Adaptive study:** {adaptive_line(summary)}. It stopped {STOPPED.get(stop, md_text(stop))}"
             + (f" — {md_text(str(summary['stop_detail']))}." if summary.get("stop_detail") else ".")]
    skipped = summary.get("skipped") or {}
    if skipped:
        lines.append("Levels not measured: " + "; ".join(f"{md_text(str(c))} ({md_text(str(why))})"
                                                        for c, why in skipped.items()) + ".")
    dropped = summary.get("dropped") or {}
    if dropped:
        lines.append("Arms no longer measured: " + "; ".join(f"{md_text(str(a))} ({md_text(str(why))})"
                                                            for a, why in dropped.items()) + ".")
    return " ".join(lines)


def study_markdown(sets: Sequence[ResultSet], baseline: str = "baseline") -> str:
    """What a report says about the study behind its result sets: missing arms, how the runs were
    ordered, the study's notes (its own Markdown), what the running-request caps did
    (:func:`cap_markdown`), output agreement. Empty when no result set came from a study. Names are escaped."""
    studies = [rs.meta.study for rs in sets if rs.meta.study is not None]
    if not studies:
        return ""
    info = studies[0]
    lines = [f"These arms were measured by the study *{md_text(info.name)}* with {info.repeats} "
             f"repeat(s), each repeat of each arm a separate run with its own prompt seed (shared by all arms), in "
             f"an interleaved order ({md_text(info.order)}) so that a slow drift of the machine weighs on "
             "every arm alike."]
    missing = sorted({m for s in studies for m in s.missing_arms})
    if missing:
        lines.append(f"\n**Missing arm(s): {', '.join(md_text(m) for m in missing)}** — no complete run (the server "
                     "failed to start or died; the study's `study.json` has the tail of its log).")
    partial = [(rs.arm, rs.meta.study.missing_repeats) for rs in sets
               if rs.meta.study is not None and rs.meta.study.missing_repeats]
    for arm, reps in partial:
        lines.append(f"\n⚠ Arm *{md_text(arm)}* lacks repeat(s) {', '.join(map(str, reps))}.")
    adaptive = (info.model_extra or {}).get("adaptive")
    if isinstance(adaptive, dict):
        lines.append("\n" + adaptive_markdown(adaptive))
    if info.notes:
        lines.append("\n" + info.notes.strip())
    caps = cap_markdown(sets)
    if caps:
        lines.append("\n" + caps)
    lines.append("\n**Output agreement with the baseline** (same prompts, temperature 0):\n")
    table = output_agreement(sets, baseline)
    lines.append(agreement_markdown(table, baseline, [rs.arm for rs in sets if rs.meta.control]))
    lines += _difference_examples(sets, table, baseline)
    return "\n".join(lines)


def _difference_examples(sets: Sequence[ResultSet], table: pd.DataFrame, baseline: str) -> list[str]:
    """Each flagged arm's earliest difference from the baseline, the text around it; arms whose earliest
    differences fall on the same baseline text (level, repeat, prompt, place) share one block, the
    baseline's text quoted once."""
    groups: dict[tuple[Any, ...], list[tuple[str, DifferenceExample]]] = {}
    for arm in table.loc[table["flagged"], "arm"].drop_duplicates() if not table.empty else []:
        ex = first_difference_example(sets, str(arm), baseline)
        if ex is not None:
            key = (ex["concurrency"], ex["repeat"], ex["prompt_id"], int(ex["offset"]), ex["position"])
            groups.setdefault(key, []).append((str(arm), ex))
    out = []
    for (level, repeat, prompt, offset, position), arms in groups.items():
        names = [md_text(a) for a, _ in arms]
        who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        quotes = "".join(f"\n  - {md_text(a)}: “{_excerpt(str(ex['arm']), offset)}”" for a, ex in arms)
        out.append(f"\n  Earliest difference of *{who}* (C={level}, repeat {repeat}, prompt {prompt}, character "
                   f"{position}), the text around it (▌ marks the first difference, ↵ a line end):\n\n"
                   f"  - baseline: “{_excerpt(str(arms[0][1]['baseline']), offset)}”{quotes}")
    return out


def _excerpt(text: str, mark: int) -> str:
    """Server text for one line of Markdown, ▌ at character ``mark``: line ends shown as ↵, Markdown
    syntax escaped."""
    def line(part: str) -> str:
        return md_text(part.replace("\r", "").replace("\n", "↵"))
    return line(text[:mark]) + "▌" + line(text[mark:])
