"""The setup section: server, hardware, workload, command lines (secrets masked), diagnostics."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.enginecpu import stall_sentence, stalled_requests
from specsweep.markup import md_text
from specsweep.measure.config import DEFAULT_MIN_REQUESTS
from specsweep.report.reproduce import _workload_value, server_command
from specsweep.results.meta import Meta, Workload
from specsweep.servers import dialect_of
from specsweep.servers.dialect import CACHE_SALT_NOTE


def _hardware(meta: Meta) -> str | None:
    hw = dict(meta.hardware)
    if not hw:
        return None
    head = " ".join(str(x) for x in (f"{hw.pop('gpus')}×" if "gpus" in hw else None, hw.pop("gpu_model", None)) if x)
    tp = hw.pop("tp_size", None)
    rest = [head] if head else []
    if tp:
        rest.append(f"TP {tp}")
    rest += [f"{k} {v}" for k, v in hw.items()]
    return ", ".join(rest)


def _server_name(meta: Meta) -> str:
    text = " ".join(str(x) for x in (meta.server_field("name"), meta.server_field("version")) if x)
    if meta.server_field("simulated") and "simulated" not in text:
        text += " (simulated)"
    return text


def _requests_per_level(meta: Meta) -> str | None:
    sweep = meta.sweep
    value = sweep.requests_per_level
    if isinstance(value, dict):
        rule = sweep.requests_per_level_rule
        text = ", ".join(str(v) for v in value.values())
        least = sweep.min_requests_per_level or DEFAULT_MIN_REQUESTS
        return text + (f" (auto: max({least}, 2 × concurrency))" if rule == "auto" else "")
    return None if value is None else str(value)


def _workload_line(w: Workload) -> str:
    """The setup table's workload cell: the ``workload`` value, its description and why it was chosen;
    for result sets written before those were recorded, kind and token lengths."""
    head = _workload_value(w.value) if w.value else w.kind or "unknown"
    desc = w.description
    if not desc:
        lengths = [f"{n} {word}" for n, word in ((w.input_tokens, "in"), (w.output_tokens, "out")) if n is not None]
        desc = " / ".join(lengths) if lengths else None
    text = f"{head}: {desc}" if desc else head
    chosen = w.chosen_by
    if chosen and chosen != "given":
        text += f" (chosen: {chosen})"
    if w.output_length != "fixed" and "output" not in str(desc):
        text += f"; output length {w.output_length}"
    return text


def _cap_line(meta: Meta) -> Any:
    """The running-request cap as the server's dialect reads it, or why the server states none
    ("not exposed: vLLM reports no --max-num-seqs …"), or None (nothing known)."""
    dialect = dialect_of(str(meta.server.get("name") or "sglang"))
    cap = dialect.running_cap(meta.server)
    if cap is not None:
        return cap
    return dialect.cap_unexposed if meta.kind != "reference" else None


def _prompt_cache_line(meta: Meta) -> str | None:
    """What the sweep did to the server's prompt cache between levels: "emptied" only where a route
    or slot erase did it; a cold cache by per-level ``cache_salt``, or no flush at all, as such."""
    how = meta.prefix_cache_flush
    if how and how.startswith(CACHE_SALT_NOTE):
        return ("not emptied; each level's requests carried a cache_salt of their own, so no level read "
                f"prefixes another cached ({how})")
    if how and how.startswith(("none", "failed")):
        return f"not emptied between levels ({how})"
    if how:
        return f"emptied before every level: {how}"
    if meta.sweep.flush_cache is False and meta.server_field("name") == "llamacpp":
        return "not emptied between levels (flush_cache=false)"
    return None


def setup_table(comp: Comparison) -> pd.DataFrame:
    """One column per arm: what was measured, against which server, with which settings."""
    fields: list[tuple[str, Callable[[Meta], Any]]] = [
        ("label", lambda m: m.shown_label),
        ("description", lambda m: m.description),
        ("kind", lambda m: "published reference data" if m.kind == "reference" else "measured by specsweep"),
        ("model", lambda m: m.model),
        ("hardware", _hardware),
        ("server", _server_name),
        ("speculative algorithm", lambda m: m.server_field("speculative_algorithm") or "off"),
        ("speculative steps / draft tokens", lambda m: "/".join(str(m.server_field(k)) for k in ("speculative_num_steps", "speculative_num_draft_tokens")) if m.server_field("speculative_num_steps") else None),
        ("max_running_requests", _cap_line),
        ("mem_fraction_static", lambda m: m.server_field("mem_fraction_static")),
        ("server command", server_command),
        ("prompt cache", _prompt_cache_line),
        ("API", lambda m: m.api + (" (auto: the model's chat template)" if m.api_chosen_by else "")
         if m.api else None),
        ("endpoint", lambda m: m.endpoint),
        ("workload", lambda m: _workload_line(m.workload)),
        ("concurrency levels", lambda m: ", ".join(map(str, m.sweep.concurrency or []))),
        ("repeats", lambda m: m.sweep.repeats),
        ("requests per level", _requests_per_level),
        ("per-request samples", lambda m: "no (level-level figures only)" if m.level_only else "yes"),
        ("measured (UTC)", lambda m: m.started_utc),
        ("tool", lambda m: " ".join(str(x) for x in ((m.tool or {}).get("name"), (m.tool or {}).get("version")) if x)),
        ("source", lambda m: (m.source or {}).get("citation")),
    ]
    data = {}
    for arm in comp.arms:
        meta = comp.metas[arm]
        data[arm] = [fn(meta) for _, fn in fields]  # columns by short name; the label is a row, once
    frame = pd.DataFrame(data, index=[name for name, _ in fields])
    frame = frame[frame.apply(lambda r: any(v not in (None, "", "None") for v in r), axis=1)]
    return frame.fillna("—").astype(str).replace({"None": "—", "": "—"})


def manual_agreement_markdown(sets: Sequence[Any], baseline: str = "baseline") -> str:
    """Output agreement with the baseline for result sets that no study measured (a study's report
    has it in its study section): per arm and level, identical outputs for the same prompts
    (:mod:`specsweep.analyze.agreement`, paired by repeat and prompt). Empty when a study measured them, the
    baseline is absent, or no request row carries an output digest. Names are escaped."""
    from specsweep.analyze.agreement import agreement_markdown, output_agreement

    if not sets or any(rs.meta.study is not None for rs in sets):
        return ""
    table = output_agreement(sets, baseline)
    if table.empty:
        return ""
    return ("Each sweep sent the same prompts in the same order for the same parameters, so the arms' "
            "outputs can be compared prompt by prompt (temperature 0 should give identical text):\n\n"
            + agreement_markdown(table, baseline, [rs.arm for rs in sets if rs.meta.control]))


def differences_markdown(comp: Comparison) -> str:
    """Which settings differ between the arms (the thing the comparison is about), and any notes."""
    table = setup_table(comp)
    skip = {"label", "description", "measured (UTC)", "source", "endpoint", "tool"}
    diffs = [idx for idx, row in table.iterrows() if idx not in skip and row.nunique() > 1]
    lines = []
    if diffs:
        lines.append("What differs between the arms: " + "; ".join(
            f"**{d}** (" + ", ".join(f"{md_text(arm)}: {md_text(table.at[d, arm])}" for arm in table.columns) + ")"
            for d in diffs) + ".")
    else:
        lines.append("The arms' recorded settings do not differ; check that the speculative settings were captured.")
    from specsweep.analyze.workload_match import workload_differences

    differing = [a for a in comp.spec_arms if workload_differences(comp.metas[a].workload, comp.workload)]
    if differing:
        lines.append("⚠ The arms' workloads differ (" + ", ".join(map(md_text, differing)) + " vs the baseline); see the notes below.")
    else:
        lines.append(f"All arms used the same workload: {md_text(_workload_line(comp.workload))}.")
    lines.extend(comp.notes)
    lines.extend(_import_notes(comp))
    return "\n\n".join(lines)


def _import_notes(comp: Comparison) -> list[str]:
    """What each imported arm's reader noted about its files (meta.json ``notes``), one line per arm."""
    out = []
    for arm in comp.arms:
        meta = comp.metas[arm]
        notes = (meta.model_extra or {}).get("notes")
        if meta.imported and isinstance(notes, list) and notes:
            out.append(f"Import notes ({md_text(comp.labels[arm])}): "
                       + "; ".join(md_text(str(n)) for n in notes) + ".")
    return out


def _per_drafted_step_line(comp: Comparison, acc: pd.DataFrame) -> str | None:
    """llama.cpp's own accept length (per drafted step, from its counters) beside the share of decode
    steps that carried a draft, for the arms whose levels have both; None where none has."""
    cols = ("spec_accept_length_counters", "spec_draft_share")
    if not all(c in acc for c in cols):
        return None
    have = acc.dropna(subset=list(cols))
    if have.empty:
        return None
    return ("The figures above are tokens per target step (every decode step counted, as SGLang's), comparable "
            "across servers. llama.cpp's own accept length counts only the steps that carried a draft — per "
            "drafted step (its counters), with the share of decode steps that drafted: " + "; ".join(
                f"{md_text(a)}: " + ", ".join(
                    f"{r.spec_accept_length_counters:.2f} at {int(r.concurrency)} ({100 * r.spec_draft_share:.0f} %)"
                    for r in g.itertuples()) for a, g in have.groupby("arm")) + ".")


def _engine_cpu_lines(comp: Comparison) -> list[str]:
    """For CPU engines: the CPU each level's engine got against its threads', wall-clock tok/s beside tok/s
    per engine CPU-second (:mod:`specsweep.analyze.enginecpu`), and the levels a stalled request hit."""
    lv = comp.levels
    lines: list[str] = []
    if "server_cpu_got_pct" in lv and lv["server_cpu_got_pct"].notna().any():
        wall = "output_tok_s_wall" if "output_tok_s_wall" in lv else "output_tok_s"
        have = lv.dropna(subset=["server_cpu_got_pct", "output_tok_per_cpu_s"])
        lines.append("Engine CPU per level — the CPU the engine got against what its threads could use, and "
                     "wall-clock tok/s beside tok/s per engine CPU-second (means over repeats): " + "; ".join(
                         f"{md_text(a)}: " + ", ".join(
                             f"{int(r.concurrency)}: {r.server_cpu_got_pct:.0f} %, {getattr(r, wall):.1f} wall, "
                             f"{r.output_tok_per_cpu_s:.1f} per CPU-s" for r in g.itertuples())
                         for a, g in have.groupby("arm", sort=False)) + "."
                     + (f" The decision reads the {comp.aggregate_basis}." if comp.aggregate_basis else ""))
    stalls = [stalled_requests(r) for r in comp.requests.values() if r is not None]
    sentence = stall_sentence(pd.concat(stalls, ignore_index=True), _cpu_got_per_run(comp), comp.arms) if stalls else None
    if sentence:
        lines.append(sentence)
    return lines


def _cpu_got_per_run(comp: Comparison) -> dict[tuple[str, int, int], float] | None:
    """The CPU (%) each run's engine got at each level, by (arm, concurrency, repeat); None where
    the arms are not CPU engines with that figure at every level."""
    out: dict[tuple[str, int, int], float] = {}
    for arm, lv in comp.raw_levels.items():
        if "server_cpu_got_pct" not in lv or lv["server_cpu_got_pct"].isna().any():
            return None
        repeats = lv["repeat"] if "repeat" in lv else pd.Series(0, index=lv.index)
        out.update({(arm, int(c), int(r)): float(p)
                    for c, r, p in zip(lv["concurrency"], repeats, lv["server_cpu_got_pct"])})
    return out or None


def diagnostics_markdown(comp: Comparison) -> str:
    """What the diagnostics show, from the numbers: served vs offered concurrency, caps, tokens per chunk."""
    lv = comp.levels
    measured = "decoding_concurrency" in lv and lv["decoding_concurrency"].notna().any()
    col = "decoding_concurrency" if measured else "concurrency_estimate"
    lines = []
    if measured:
        lines.append("Decoding concurrency is Σ (e2e − TTFT) ÷ window: how many requests were, on average, between "
                     "their first and last token. Effective concurrency (Little's law, Σ (t_end − t_start) ÷ window) "
                     "counts queued requests too; in a closed loop it stays near the offered concurrency unless the "
                     "client falls behind.")
    else:
        lines.append("Only level-level figures are available, so the requests served at once are **estimated** as "
                     "aggregate tok/s ÷ per-request tok/s (Little's law with output tokens ÷ per-request speed standing "
                     "in for the time a request spends being served). If the per-request figure excluded queueing, "
                     "this counts requests being decoded; had it included queueing, it would come out near the offered "
                     "concurrency — so an estimate far below the offered concurrency suggests the published per-request "
                     "figure leaves queueing out.")
    bullets = []
    for arm in comp.arms:
        a = comp.arm_levels(arm)
        pairs = ", ".join(f"{v:.1f} at {int(c)}" for c, v in zip(a["concurrency"], a[col]) if not pd.isna(v))
        cap = comp.caps.get(arm)
        top = a.iloc[-1]
        line = f"- {md_text(arm)}: {pairs}."  # the short name, as all prose (the label is in Setup)
        if cap and top["concurrency"] > cap:
            line += f" Its cap is {cap}; at {int(top['concurrency'])} offered it serves {top[col]:.1f} ({top[col] / cap:.0%} of the cap)."
        if "effective_concurrency" in a and a["effective_concurrency"].notna().any():
            low = a[a["effective_concurrency"] < 0.9 * a["concurrency"]]
            if len(low):
                held = ("client_max_in_flight" in low and (low["client_max_in_flight"] >= low["concurrency"]).all()
                        and ("client_cpu_cores" not in low or (low["client_cpu_cores"].fillna(0) < 0.7).all()))
                why = ("ramp-up and drain: the client did hold all C in flight, with an idle core, but with "
                       "few requests per slot the start and end of a level weigh a lot" if held
                       else "ramp-up and drain, or a client that fell behind")
                line += (f" On average fewer of {md_text(arm)}'s requests were in flight than offered at "
                         + ", ".join(f"{int(r.concurrency)} ({r.effective_concurrency:.1f})" for r in low.itertuples())
                         + f" — {why}.")
        bullets.append(line)
    lines.append("\n".join(bullets))
    if "tokens_per_chunk_mean" in lv and lv["tokens_per_chunk_mean"].notna().any():
        tpc = lv.groupby("arm")["tokens_per_chunk_mean"].mean()
        lines.append("Tokens per streamed chunk (mean over levels): " + ", ".join(
            f"{md_text(a)} {tpc[a]:.2f}" for a in comp.arms if a in tpc and not pd.isna(tpc[a]))
                     + ". Counting chunks as tokens would understate a speculative arm by that factor; specsweep counts "
                     "the server's own token counts.")
    if "spec_accept_length" in lv and lv[~lv["arm"].isin(list(comp.chunk_counted))]["spec_accept_length"].notna().any():
        acc = lv[~lv["arm"].isin(list(comp.chunk_counted))].dropna(subset=["spec_accept_length"])
        src = {a: ", ".join(sorted(set(g.get("spec_accept_length_source", pd.Series()).dropna().astype(str)))) for a, g in acc.groupby("arm")}
        lines.append("Server-side acceptance length per level: " + "; ".join(
            f"{md_text(a)}: " + ", ".join(f"{r.spec_accept_length:.2f} at {int(r.concurrency)}" for r in g.itertuples())
            + (f" — {md_text(src[a])}" if src[a] else "")
            for a, g in acc.groupby("arm")) + ".")
        drafted = _per_drafted_step_line(comp, acc)
        if drafted:
            lines.append(drafted)
    lines.extend(_engine_cpu_lines(comp))
    if comp.chunk_counted:
        lines.append("⚠ Tokens were counted from SSE chunks, because the server reported no counts, for "
                     + ", ".join(f"{md_text(a)} ({w})" for a, w in comp.chunk_counted.items())
                     + ": under speculation those throughput figures are lower bounds, and no throughput or acceptance "
                     "verdict is given for them.")
    return "\n\n".join(lines)
