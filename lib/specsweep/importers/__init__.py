"""Bring your own benchmark: read peer tools' result files into ordinary result sets.

``specsweep import TOOL FILE... --arm NAME [--out DIR]`` (see :mod:`specsweep.cli`), or
:func:`import_files`. One module per tool reads its files into
:class:`~specsweep.importers.common.ToolRun` (each module's docstring pins the peer version read
and says what each of the tool's figures means); :mod:`specsweep.importers.common` writes them.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsweep.importers.common import BadInput, ToolRun, write_result_set

#: tool name on the command line -> (module, the command that writes the files it reads: the one description,
#: which README.md and docs/importers.md quote)
TOOLS: dict[str, tuple[str, str]] = {
    "vllm": ("specsweep.importers.vllm", "vllm bench serve --max-concurrency C --save-result [--save-detailed]: "
                                         "one JSON per concurrency (--save-detailed adds per-request rows)"),
    "sglang": ("specsweep.importers.sglang", "python -m sglang.bench_serving --max-concurrency C --output-file "
                                             "base.jsonl: JSON lines, one per run"),
    "guidellm": ("specsweep.importers.guidellm", "guidellm run --profile kind=concurrent ... --output kind=json: "
                                                 "benchmarks.json (older releases: guidellm benchmark --outputs)"),
    "aiperf": ("specsweep.importers.aiperf", "aiperf profile --concurrency C (add --use-server-token-count): "
                                             "profile_export_aiperf.json, one per concurrency"),
    "llamacpp": ("specsweep.importers.llamacpp", "llama-batched-bench -npl 1,4,16 --output-format jsonl: "
                                                 "parallel sequences as the concurrency"),
    "table": ("specsweep.importers.table", "a pasted Markdown or CSV table: | concurrency | baseline tok/s | "
                                           "mtp tok/s | (per-user tok/s columns optional)"),
}


def read_files(tool: str, files: Sequence[str | Path], **options: Any) -> list[ToolRun]:
    """Each file read by ``tool``'s reader; :class:`BadInput` for an unknown tool or a bad file."""
    if tool not in TOOLS:
        raise BadInput(f"unknown tool {tool!r}; choose one of {', '.join(TOOLS)}")
    module = importlib.import_module(TOOLS[tool][0])
    runs = []
    for f in files:
        path = Path(f)
        if not path.is_file():
            raise BadInput(f"{path}: no such file")
        try:
            runs.append(module.read(path, **options) if options else module.read(path))
        except BadInput:
            raise
        except (AttributeError, KeyError, IndexError, TypeError, ValueError, ArithmeticError, RecursionError,
                MemoryError) as exc:  # a shape the reader does not expect: the file, not specsweep, is at fault
            raise BadInput(f"{path}: not a {tool} result file specsweep can read ({type(exc).__name__}: "
                           f"{str(exc)[:120]}); pass the file the tool wrote, unedited") from None
    return runs


#: a version as given on the command line: what release names are made of, at most 64 characters
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_~-]{0,63}")


def given_version(runs: Sequence[ToolRun], version: str) -> None:
    """Set ``version`` as the tool's version of the runs whose file records none; :class:`BadInput`
    where it is no release name or a file records another (the file's own word stands)."""
    if not _VERSION.fullmatch(version):
        raise BadInput(f"--tool-version {version[:40]!r}: give the tool's release, e.g. 0.13.0 (letters, digits, "
                       "'.', '+', '_', '~', '-'; at most 64 characters)")
    for run in runs:
        if run.version is None:
            run.version = version
        elif run.version != version:
            raise BadInput(f"--tool-version {version}: {run.source.name} records {run.tool} {run.version[:40]}; "
                           "leave --tool-version out, or pass the files of that version only")


def import_files(tool: str, files: Sequence[str | Path], arm: str, out_dir: str | Path = "data/runs/imported", *,
                 label: str | None = None, output_tokens: int | None = None, input_tokens: int | None = None,
                 select: str | None = None, force: bool = False, tool_version: str | None = None) -> Path:
    """Read ``files`` with ``tool``'s reader and write them as the result set ``out_dir/arm``;
    ``tool_version``: the tool's (client's) version where a file records none."""
    options = {"select": select or arm} if tool == "table" else {}
    runs = read_files(tool, files, **options)
    if tool_version is not None:
        given_version(runs, tool_version)
    return write_result_set(runs, arm, out_dir, label=label, output_tokens=output_tokens,
                            input_tokens=input_tokens, force=force)


__all__ = ["TOOLS", "BadInput", "read_files", "import_files", "given_version"]
