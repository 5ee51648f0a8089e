"""The report: offline chart rendering, the notebook's text blocks, and HTML export.

``python -m specsweep.report --result-set DIR [--result-set DIR ...] --name NAME`` runs
``notebooks/report.ipynb`` through papermill and exports ``./reports/NAME.html`` with nbconvert:
no code cells, no CDN scripts (the Vega bundle that ships with vl-convert is inlined once), so
the page opens with no network and its charts keep their tooltips.

The package's modules, one job each:
``paths``, ``display``, ``verdict``, ``warnings``, ``setup_info``, ``categories``, ``definitions``, ``reproduce``, ``build``.
Everything is re-exported here, so notebooks keep calling ``report.<name>``.
"""
from __future__ import annotations

from specsweep.report.paths import (  # noqa: F401
    REPO_ROOT, REPORT_NOTEBOOK,
)
from specsweep.report.display import (  # noqa: F401
    RENDERER, vega_bundle, _CHART_SEQ, _render, enable_offline_charts, setup_notebook,
    human_number, table, _fmt, _band, _pct_or_dash, show,
)
from specsweep.report.verdict import (  # noqa: F401
    key_numbers, _crossover_line, _curve_sentence, SYNTHETIC_WORKLOADS,
    workload_caveat, verdict_markdown, shared_lines, shared_markdown,
)
from specsweep.report.warnings import (  # noqa: F401
    PageWarning, collect_warnings, warnings_markdown, top_warnings, shortest_wait,
)
from specsweep.report.setup_info import (  # noqa: F401
    _server_field, _hardware, _server_name, _requests_per_level, _workload_line, _SECRET_FLAG,
    masked_argv, server_command, _prompt_cache_line, setup_table, manual_agreement_markdown,
    differences_markdown, diagnostics_markdown,
)
from specsweep.report.categories import (  # noqa: F401
    _category_levels, has_categories, _repeat_interval, MIN_CATEGORY_LEVELS, CATEGORY_FIGURES,
    CategoryFit, _category_column, _enough_requests, category_curves, category_crossovers,
    category_deltas, _interval_cell, category_table, _pays, _quoted, _quoted_pct,
    category_sentences, _levels_text, category_crossover_sentences, category_crossover_table,
    category_markdown, _lower_first, category_intro_markdown, category_crossover_markdown,
    category_levels_markdown,
)
from specsweep.report.definitions import (  # noqa: F401
    DATA_TABLE_POSITIONS, _POSITION_COLUMN, data_table, GLOSSARY, glossary_markdown,
    _metric_definition, definitions_markdown,
)
from specsweep.report.reproduce import (  # noqa: F401
    repo_relative, _code_block, report_command, papermill_command, shell_line, _same_for_all,
    _workload_value, sweep_parameters, sweep_command, _remeasure_lines, reproduce_markdown,
)
from specsweep.report.build import (  # noqa: F401
    template_dir, kernel_manager_class, execute_notebook, _H1, page_title, export_html,
    build_report, _profiles_arg, main,
)
from specsweep.markup import markdown, md_text  # noqa: F401  (report.md_text was public before the split)
