"""A CPU engine's share of the CPU, aggregate throughput per engine CPU-second, and stalled requests.

On a shared CPU (a laptop, a CI runner) another process can take a core from the engine being
measured: its wall-clock tok/s then falls for a reason that has nothing to do with its
configuration, and a difference between arms (or a control arm's deviation) measures the machine.
Each level already records the engine's CPU seconds (``server_cpu_s``) and cores
(``server_cpu_cores`` = CPU s ÷ the level's wall s, ``specsweep.measure.cpushare``); the engine's
compute threads (the launcher's record, ``meta.server["launch"]["threads"]``) say what it could
have used. Per level:

- ``server_cpu_got_pct`` = 100 × ``server_cpu_cores`` ÷ threads: the CPU the engine got against
  what its threads could use (%; about 100 on a quiet machine, a little over with its HTTP thread);
- ``output_tok_per_cpu_s`` = ``output_tok_s`` ÷ ``server_cpu_cores``: output tokens per engine
  CPU-second (the aggregate over the window, spread over the CPU the engine got in it);
- a level is **starved** where ``server_cpu_got_pct`` < :data:`STARVED_PCT` (in a closed loop the
  engine waits for requests only between one's end and the next's start; a level whose engine idled
  longer, an open loop or a client that fell behind, reads as starved too).

Where every arm is such a CPU engine and some level of some arm was starved,
:func:`normalise_aggregate` makes the comparison decide on ``output_tok_per_cpu_s × threads``
("tok/s at the engine's full CPU": what the level would have given had the engine had all its
threads' CPU), keeps the wall-clock figure as ``output_tok_s_wall`` and returns a note naming the
basis; otherwise nothing changes. Invariant: rows are never dropped, only ``output_tok_s`` is
replaced, in every arm at once (one basis per comparison).

A **stalled request** (:func:`stalled_requests`) is one whose TPOT is at least
:data:`STALL_FACTOR` × its level's median TPOT.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from specsweep.markup import md_text
from specsweep.results.meta import Meta

__all__ = ["BASIS_CPU", "STALL_FACTOR", "STARVED_PCT", "cpu_figures", "engine_threads", "normalise_aggregate",
           "stall_sentence", "stalled_requests", "starved_levels"]

#: a level where the engine got less than this share of its threads' CPU (%) is starved
STARVED_PCT = 85.0
#: a request whose TPOT is at least this many times its level's median TPOT stalled
STALL_FACTOR = 3.0
#: how the page names the normalised aggregate
BASIS_CPU = ("aggregate tok/s at the engine's full CPU (output tokens per engine CPU-second × its threads), "
             "not wall-clock tok/s")


def engine_threads(meta: Meta) -> int | None:
    """The compute threads of a CPU engine the launcher started (``server.launch.threads``), else None."""
    launch = meta.server.get("launch") if isinstance(meta.server, dict) else None
    threads = launch.get("threads") if isinstance(launch, dict) else None
    return threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else None


def cpu_figures(levels: pd.DataFrame, threads: int) -> pd.DataFrame:
    """``levels`` with ``server_cpu_got_pct`` (%) and ``output_tok_per_cpu_s`` (tokens per engine
    CPU-second) added; NaN where the level has no engine CPU figure."""
    out = levels.copy()
    cores = pd.to_numeric(out.get("server_cpu_cores", pd.Series(math.nan, index=out.index)), errors="coerce")
    cores = cores.where(cores > 0)
    out["server_cpu_got_pct"] = 100.0 * cores / threads
    out["output_tok_per_cpu_s"] = pd.to_numeric(out["output_tok_s"], errors="coerce") / cores
    return out


def starved_levels(levels: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`cpu_figures` output where the engine got less than :data:`STARVED_PCT` of its threads' CPU."""
    if "server_cpu_got_pct" not in levels:
        return levels.iloc[0:0]
    return levels[levels["server_cpu_got_pct"] < STARVED_PCT]


def normalise_aggregate(raw_levels: Mapping[str, pd.DataFrame], metas: Mapping[str, Meta]
                        ) -> tuple[dict[str, pd.DataFrame], str | None]:
    """(each arm's level rows, the note naming the basis or None): see the module notes. Level rows
    gain :func:`cpu_figures`' columns wherever the arm is a CPU engine; ``output_tok_s`` is replaced
    only where every arm is one with every level's CPU figure and some level was starved."""
    threads = {a: engine_threads(metas[a]) for a in raw_levels}
    if any(t is None for t in threads.values()):
        return dict(raw_levels), None
    figs = {a: cpu_figures(lv, threads[a] or 1) for a, lv in raw_levels.items()}
    starved = {a: starved_levels(lv) for a, lv in figs.items()}
    complete = all(lv["output_tok_per_cpu_s"].notna().all() for lv in figs.values())
    if not complete or all(s.empty for s in starved.values()):
        return figs, None
    for a, lv in figs.items():
        lv["output_tok_s_wall"] = lv["output_tok_s"]
        lv["output_tok_s"] = lv["output_tok_per_cpu_s"] * (threads[a] or 1)
    where = "; ".join(f"{md_text(a)} at " + ", ".join(f"{int(r.concurrency)} ({r.server_cpu_got_pct:.0f} %)"
                                             for r in s.itertuples())
                      for a, s in starved.items() if not s.empty)
    note = (f"The engine got markedly less CPU than its threads could use (under {STARVED_PCT:.0f} %) at some "
            f"levels — {where} — so another process took CPU from it there. The decision uses the {BASIS_CPU}, "
            "in every arm at every level; Diagnostics show both figures.")
    return figs, note


def stalled_requests(requests: pd.DataFrame, factor: float = STALL_FACTOR) -> pd.DataFrame:
    """Requests whose ``tpot_s`` is at least ``factor`` × their level's median (one level: arm,
    concurrency, repeat): columns ``arm``, ``concurrency``, ``repeat``, ``request_index``, ``tpot_s``,
    ``level_tpot_p50_s``; empty where none stalled or the rows carry no TPOT."""
    cols = ["arm", "concurrency", "repeat", "request_index", "tpot_s", "level_tpot_p50_s"]
    if requests is None or "tpot_s" not in requests or requests.empty:
        return pd.DataFrame(columns=cols)
    keys = [k for k in ("arm", "concurrency", "repeat") if k in requests]
    rows = requests[requests["tpot_s"].notna()].copy()
    rows["level_tpot_p50_s"] = rows.groupby(keys)["tpot_s"].transform("median")
    hit = rows[rows["tpot_s"] >= factor * rows["level_tpot_p50_s"]]
    return hit[[c for c in cols if c in hit]].reset_index(drop=True)


def stall_sentence(stalled: pd.DataFrame, cpu_got: Mapping[tuple[str, int, int], float] | None = None,
                   arms: Sequence[str] = ()) -> str | None:
    """One Markdown line saying which levels a stalled request hit (figures only), or None.

    ``cpu_got``: the CPU (%) each level's engine got against its threads', by (arm, concurrency,
    repeat). With it the line says whether another process could have caused the stalls (a level
    under :data:`STARVED_PCT`) or not (every stalled level at or above it); without it, that the
    engine CPU figures decide. ``arms``: every arm compared, to name those with no stall."""
    if stalled.empty:
        return None
    parts: list[str] = []
    got: list[float] = []
    starved: list[str] = []
    for key, g in stalled.groupby(["arm", "concurrency", "repeat"], sort=True):
        arm, c, r = key
        worst = g.loc[g["tpot_s"].idxmax()]
        parts.append(f"{md_text(str(arm))} at {int(c)} (repeat {int(r)}): {len(g)} request(s), TPOT up to "
                     f"{1e3 * float(worst.tpot_s):.0f} ms against the level's median {1e3 * float(worst.level_tpot_p50_s):.0f} ms")
        pct = (cpu_got or {}).get((str(arm), int(c), int(r)))
        if pct is not None and math.isfinite(pct):
            got.append(pct)
            if pct < STARVED_PCT:
                starved.append(f"{md_text(str(arm))} at {int(c)} (repeat {int(r)}, {pct:.0f} %)")
    levels = len(parts)
    if starved:
        cause = (f" The engine got under {STARVED_PCT:.0f} % of the CPU its threads could use at "
                 f"{'; '.join(starved)}: another process took its core there.")
    elif cpu_got is not None and len(got) == levels:
        cause = (f" The engine got {min(got):.0f} % or more of the CPU its threads could use at every one of these "
                 "levels, so no other process took its core: the stalls are the engine's own.")
    else:
        cause = (" Whether another process took the engine's core then is in the engine CPU figures above "
                 f"(under {STARVED_PCT:.0f} % it did).")
    hit = set(stalled["arm"].astype(str))
    calm = [a for a in arms if a not in hit]
    without = f" No stalled request in {', '.join(md_text(a) for a in calm)}." if calm and len(calm) < len(arms) else ""
    return (f"**Stalled requests** (TPOT at least {STALL_FACTOR:g}× their level's median): " + "; ".join(parts)
            + "." + without + cause)
