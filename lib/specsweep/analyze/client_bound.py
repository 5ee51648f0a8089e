"""A peer tool's client that could not keep up: an arm whose time to first token at a level is far
above what every other tool measured there.

A benchmark client that falls behind (a busy machine, a slow tokenizer in the loop) stamps the
first chunk late and sends the next request late: its TTFT and e2e grow and its throughput falls,
and those figures then describe the client, not the server. A server change moves TTFT too
(speculation's verify steps delay prefill under load), so an arm is set only against arms measured
by *other* tools at the same level, and only against the largest median TTFT any of them measured
there (their baseline and speculative arms alike): a client-bound arm stands above all of them.

Rule (a data rule, one threshold): at a level, an arm is client-bound where its median TTFT is
more than :data:`TTFT_RATIO` times the largest median TTFT that arms of other tools (``meta.json``
``source.tool``; specsweep's own runs count as one tool) measured at that level. A result set
measured by specsweep is never flagged by this rule: its own client records its lag.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from specsweep.results.meta import Meta

#: an arm's median TTFT above this many times the largest other tools' median at the level is client-bound
TTFT_RATIO: float = 2.0
#: the words every client-bound warning carries (an importer's and this rule's), which the page's ranking reads
CLIENT_BOUND: str = "client-bound"


@dataclass(frozen=True)
class ClientBound:
    """One arm's level whose median TTFT (s) stands ``ratio`` times above the other tools' largest (s)."""

    arm: str
    tool: str
    concurrency: int
    ttft_p50_s: float
    others_max_s: float

    @property
    def ratio(self) -> float:
        """The arm's median TTFT over the other tools' largest at the level."""
        return self.ttft_p50_s / self.others_max_s


def tool_of(meta: Meta) -> str:
    """The tool that measured a result set: an importer's source tool, else specsweep."""
    source = meta.source or {}
    return str(source.get("tool")) if meta.imported and source.get("tool") else "specsweep"


def client_bound_levels(levels: pd.DataFrame, metas: Mapping[str, Meta], *, ratio: float = TTFT_RATIO
                        ) -> list[ClientBound]:
    """The imported arms' levels that :data:`TTFT_RATIO` marks client-bound (see the module docstring).

    ``levels``: one row per (arm, concurrency) with ``ttft_p50_s`` (seconds; missing: not judged)."""
    if "ttft_p50_s" not in levels:
        return []
    tools = {a: tool_of(m) for a, m in metas.items()}
    rows = levels[["arm", "concurrency", "ttft_p50_s"]].dropna()
    rows = rows[rows["ttft_p50_s"] > 0]
    out = []
    for c, group in rows.groupby("concurrency"):
        for arm, ttft in zip(group["arm"], group["ttft_p50_s"]):
            if not metas[arm].imported:
                continue
            others = group.loc[[tools.get(a) != tools[arm] for a in group["arm"]], "ttft_p50_s"]
            if len(others) and ttft > ratio * float(others.max()):
                out.append(ClientBound(str(arm), tools[arm], int(c), float(ttft), float(others.max())))
    return out


def client_bound_sentence(found: list[ClientBound]) -> str:
    """One sentence naming the client-bound levels of one arm (all of ``found`` are that arm's)."""
    first = found[0]
    where = ", ".join(f"{f.concurrency} ({f.ttft_p50_s * 1e3:.1f} ms against at most {f.others_max_s * 1e3:.1f} ms, "
                      f"{f.ratio:.1f}×)" for f in found)
    return (f"{first.tool}'s client looks {CLIENT_BOUND} at concurrency {where}: its median time to first token is "
            f"more than {TTFT_RATIO:g}× the largest any other tool measured at the same level, so its throughput and "
            "latencies there likely describe the client, not the server (re-run it on a less loaded client machine)")
