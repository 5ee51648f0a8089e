"""The Markdown summary written beside every HTML report (``reports/<name>.md``), and its plain-text
variant (``reports/<name>.txt``, :mod:`specsweep.report.plaintext`) for chat tools that show Markdown
as typed.

The decision table and the key numbers, ready to paste into a pull request or a chat, built from
the same claims as the page (:mod:`specsweep.report.decision`). Every untrusted string — the
title, profile names, arm names and labels, server names — is escaped for Markdown.

The report notebook displays the summary as an output of MIME type :data:`SUMMARY_MIME`, which
the HTML export does not show; :func:`write_summary` takes it from the executed notebook, so the
summary is computed once, with the page, and the ``.txt`` is read from the same text.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsweep.analyze.compare import Comparison
from specsweep.decide import Recommendation
from specsweep.decide.claims import half_up
from specsweep.decide.text import band_text, basis_suffix
from specsweep.markup import md_text
from specsweep.report.decision import decision_markdown, verdict_prose
from specsweep.report.plaintext import plain_text
from specsweep.results.meta import Meta

#: the MIME type of the notebook output that carries the summary
SUMMARY_MIME = "text/x-specsweep-summary+markdown"


def _server_name(meta: Meta) -> str:
    """The server's name, or what the result set says instead (an imported one names its tool)."""
    server = meta.server
    tool = (meta.source or {}).get("tool")
    name = str(server.get("name") or (f"not recorded ({tool})" if tool else "not recorded"))
    return f"{name} (simulated)" if server.get("simulated") else name


def _tok_s(x: float) -> str:
    """A throughput in whole tok/s with thousands separators, halves away from zero (400.5 → 401)."""
    return f"{int(half_up(float(x), 0)):,}"


def key_numbers_markdown(comp: Comparison, recs: Sequence[Recommendation]) -> str:
    """Aggregate output tok/s of the baseline and each candidate arm per level, with the arm's Δ and band."""
    arms = [a for a in comp.candidate_arms if comp.delta_rows(a, "output_tok_s")]
    if not arms:
        return ""
    levels = sorted({c for a in arms for c in comp.delta_rows(a, "output_tok_s")})
    head = ["concurrency", "baseline (tok/s)"] + [f"{md_text(a)} (tok/s)" for a in arms] + [f"{md_text(a)} Δ [95% band]" for a in arms]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in levels:
        rows = [comp.delta_rows(a, "output_tok_s").get(c) for a in arms]
        base = next((r["baseline_value"] for r in rows if r is not None), None)
        cells = [str(c), _tok_s(base) if base is not None else "—"]
        cells += [_tok_s(r["arm_value"]) if r is not None else "—" for r in rows]
        cells += [md_text(band_text(r)) if r is not None else "—" for r in rows]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_markdown(comp: Comparison, recs: Sequence[Recommendation], title: str,
                     page: str | None = None) -> str:
    """The summary: title, decision table, the verdict in a few sentences, key numbers, the arms, the source."""
    lines = [f"## {md_text(title)}", "", decision_markdown(comp, recs), "", verdict_prose(comp, recs), ""]
    numbers = key_numbers_markdown(comp, recs)
    if numbers:
        lines += [f"**Aggregate output throughput{basis_suffix(comp.aggregate_basis)}** (measured; Δ against the baseline with the 95% simultaneous band "
                  "of the fitted curve)", "", numbers, ""]
    lines += ["**Arms**", ""]
    for a in comp.arms:
        meta = comp.metas[a]
        lines.append(f"- {md_text(a)}: {md_text(comp.labels.get(a, a))} — server {md_text(_server_name(meta))}"
                     + (" (control)" if a in comp.controls else "") + (" (baseline)" if a == comp.baseline else ""))
    lines.append("")
    lines.append("Built by specsweep" + (f"; the full report: {md_text(page)}" if page else "") + ".")
    return "\n".join(lines) + "\n"


def summary_text(comp: Comparison, recs: Sequence[Recommendation], title: str, page: str | None = None) -> str:
    """:func:`summary_markdown` as plain text: the same sentences and figures, no Markdown syntax, no
    escapes, no control characters (:func:`specsweep.report.plaintext.plain_text`)."""
    return plain_text(summary_markdown(comp, recs, title, page))


def summary_output(comp: Comparison, recs: Sequence[Recommendation], title: str, page: str | None = None) -> None:
    """Display the summary as a :data:`SUMMARY_MIME` output (hidden in the HTML page, written by the build)."""
    from IPython.display import display

    display({SUMMARY_MIME: summary_markdown(comp, recs, title, page)}, raw=True)


def summary_from_notebook(nb: Any) -> str | None:
    """The summary an executed report notebook carries, or None."""
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = (out.get("data") or {}).get(SUMMARY_MIME)
            if text:
                return "".join(text) if isinstance(text, list) else str(text)
    return None


def write_summary(executed: Path | Any, md_path: Path) -> Path | None:
    """Write the summary of an executed report notebook to ``md_path`` and its plain text
    (:func:`~specsweep.report.plaintext.plain_text`) beside it, ``md_path`` with ``.txt``; None
    (nothing written, stale files removed) when the notebook carries none."""
    import nbformat

    nb = nbformat.read(str(executed), as_version=4) if isinstance(executed, (str, Path)) else executed
    text = summary_from_notebook(nb)
    if text is not None:  # the page does not show it: drop it there (in memory, and on disk when read from it)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = [o for o in cell.get("outputs", []) if SUMMARY_MIME not in (o.get("data") or {})]
        if isinstance(executed, (str, Path)):
            nbformat.write(nb, str(executed))
    txt_path = md_path.with_suffix(".txt")
    if text is None:
        md_path.unlink(missing_ok=True)
        txt_path.unlink(missing_ok=True)
        return None
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(text, encoding="utf-8")
    txt_path.write_text(plain_text(text), encoding="utf-8")
    return md_path
