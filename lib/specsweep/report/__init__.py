"""The report: offline chart rendering, the notebook's text blocks, and HTML export.

``python -m specsweep.report --result-set DIR [--result-set DIR ...] --name NAME`` runs
``notebooks/report.ipynb`` through papermill and exports ``./reports/NAME.html`` with nbconvert:
no code cells, no CDN scripts (the Vega bundle that ships with vl-convert is inlined once), so
the page opens with no network and its charts keep their tooltips.

The package's modules, one job each:
``paths``, ``display``, ``verdict``, ``warnings``, ``setup_info``, ``categories``, ``definitions``, ``reproduce``, ``build``.
Everything is re-exported here, so notebooks keep calling ``report.<name>``; each name is imported
on first use (PEP 562), so that ``python -m specsweep.report`` starts its report kernel before it
loads pandas, altair and the notebook tools (start-up runs on both cores: ``build.EarlyKernel``).
"""
from __future__ import annotations

import importlib
from typing import Any

from specsweep.paths import REPO_ROOT, REPORT_NOTEBOOK  # noqa: F401  (light: no pandas)

#: the names this package re-exports lazily, by the module that defines them (``paths``, which
#: imports nothing heavy, is imported above)
_EXPORTS: dict[str, tuple[str, ...]] = {
    "specsweep.report.display": (
        "RENDERER", "vega_bundle", "_CHART_SEQ", "_render", "enable_offline_charts", "setup_notebook",
        "human_number", "table", "_fmt", "_band", "_pct_or_dash", "show",
    ),
    "specsweep.report.verdict": (
        "key_numbers", "_crossover_line", "_curve_sentence", "SYNTHETIC_WORKLOADS", "workload_caveat",
        "verdict_markdown", "shared_lines", "shared_markdown",
    ),
    "specsweep.report.warnings": (
        "PageWarning", "collect_warnings", "warnings_markdown", "top_warnings", "shortest_wait",
    ),
    "specsweep.report.setup_info": (
        "_server_field", "_hardware", "_server_name", "_requests_per_level", "_workload_line", "_SECRET_FLAG",
        "masked_argv", "server_command", "_prompt_cache_line", "setup_table", "manual_agreement_markdown",
        "differences_markdown", "diagnostics_markdown",
    ),
    "specsweep.report.categories": (
        "_category_levels", "has_categories", "_repeat_interval", "MIN_CATEGORY_LEVELS", "CATEGORY_FIGURES",
        "CategoryFit", "_category_column", "_enough_requests", "category_curves", "category_crossovers",
        "category_deltas", "_interval_cell", "category_table", "_pays", "_quoted", "_quoted_pct",
        "category_sentences", "_levels_text", "category_crossover_sentences", "category_crossover_table",
        "category_markdown", "_lower_first", "category_intro_markdown", "category_crossover_markdown",
        "category_levels_markdown",
    ),
    "specsweep.report.definitions": (
        "DATA_TABLE_POSITIONS", "_POSITION_COLUMN", "data_table", "GLOSSARY", "glossary_markdown",
        "_metric_definition", "definitions_markdown",
    ),
    "specsweep.report.reproduce": (
        "repo_relative", "_code_block", "report_command", "papermill_command", "shell_line", "_same_for_all",
        "_workload_value", "sweep_parameters", "sweep_command", "_remeasure_lines", "reproduce_markdown",
    ),
    "specsweep.report.build": (
        "template_dir", "kernel_manager_class", "execute_notebook", "_H1", "page_title", "export_html",
        "build_report", "_profiles_arg", "main",
    ),
    "specsweep.markup": ("markdown", "md_text"),  # report.md_text was public before the split
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
_SUBMODULES = ("paths", "display", "verdict", "warnings", "setup_info", "categories", "definitions", "reproduce",
               "build", "decision", "summary")


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


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE) | set(_SUBMODULES))
