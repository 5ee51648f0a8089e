"""The report: offline chart rendering, the notebook's text blocks, and HTML export.

``python -m specsweep.report --result-set DIR [--result-set DIR ...] --name NAME`` runs
``notebooks/report.ipynb`` through papermill and exports ``./reports/NAME.html`` with nbconvert:
no code cells, no CDN scripts (the Vega bundle that ships with vl-convert is inlined once), so
the page opens with no network and its charts keep their tooltips.

The package's modules, one job each: ``build`` (run the notebook, export the page), ``display``,
``charts`` and ``chartdata`` (rendering), the sections (``decision``, ``verdict``, ``warnings``,
``setup_info``, ``categories``, ``definitions``, ``reproduce``, ``study_page``, ``whatif_section``),
``consistency`` (claims checked before the page is written) and ``summary`` (the Markdown beside it).
Their public names are re-exported here, so notebooks call ``report.<name>``; each name is imported
on first use (PEP 562), so that ``python -m specsweep.report`` starts its report kernel before it
loads pandas, altair and the notebook tools (start-up runs on both cores: :class:`specsweep.notebooks.kernel.EarlyKernel`).
"""
from __future__ import annotations

import importlib
from typing import Any

#: the names this package re-exports lazily, by the module that defines them
_EXPORTS: dict[str, tuple[str, ...]] = {
    "specsweep.report.display": (
        "RENDERER", "vega_bundle", "enable_offline_charts", "setup_notebook", "human_number", "table",
        "show",
    ),
    "specsweep.report.verdict": (
        "key_numbers", "verdict_markdown", "shared_lines", "shared_markdown",
    ),
    "specsweep.report.warnings": (
        "PageWarning", "collect_warnings", "warnings_markdown", "top_warnings",
        "shortest_wait", "workload_caveat",
    ),
    "specsweep.report.setup_info": (
        "setup_table", "manual_agreement_markdown", "differences_markdown",
        "diagnostics_markdown",
    ),
    "specsweep.report.categories": (
        "has_categories", "MIN_CATEGORY_LEVELS", "CATEGORY_FIGURES", "CategoryFit", "category_curves",
        "category_crossovers", "category_deltas", "category_table", "category_sentences",
        "category_crossover_sentences", "category_crossover_table", "category_markdown",
        "category_intro_markdown", "category_crossover_markdown", "category_levels_markdown",
    ),
    "specsweep.report.definitions": (
        "DATA_TABLE_POSITIONS", "data_table", "column_title", "full_data_html", "GLOSSARY", "glossary_markdown", "definitions_markdown",
    ),
    "specsweep.report.reproduce": (
        "masked_argv", "server_command", "repo_relative", "report_command", "papermill_command", "shell_line", "sweep_parameters",
        "sweep_command", "reproduce_markdown",
    ),
    "specsweep.report.build": (
        "page_title", "export_html", "build_report", "main",
    ),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
_SUBMODULES = ("display", "verdict", "warnings", "setup_info", "categories", "definitions", "reproduce",
               "build", "decision", "summary", "charts", "chartdata", "consistency", "study_page", "whatif_section")


def __getattr__(name: str) -> Any:
    """A re-exported name (or a submodule), imported on first use and kept."""
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = sorted(_WHERE)  # noqa: PLE0605 - every name _EXPORTS lists


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE) | set(_SUBMODULES))
