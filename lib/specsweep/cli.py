"""The ``specsweep`` console script: one command for the notebooks and modules.

    specsweep sweep  --endpoint URL --arm NAME [--PARAM VALUE ...]   notebooks/sweep.ipynb via papermill
    specsweep report DIR [DIR ...] --name NAME [...]                 python -m specsweep.report
    specsweep study  FILE [...]                                       python -m specsweep.study
    specsweep serve  [...]                                            the reference server (python -m specsweep.refserver)
    specsweep serve llamacpp [...]                                    specsweep.engines.llamacpp, when installed
    specsweep import TOOL FILE [FILE ...] --arm NAME [--out DIR]      a peer tool's results as a result set
    specsweep capture --endpoint URL --out FILE                      a live server's shapes, for serve --replay
    specsweep gate --reference REF_DIR NEW_DIR                       CI: exit 1 where decisions or metrics moved

Exit status: 0 done; 1 the command ran and failed (a sweep or a report that did not finish);
2 bad input (an unknown option, a bad value, a file that cannot be read), with a message naming it.
An error a command raises is mapped by :func:`specsweep.errors.exit_status` (its tree: an
``InputError`` is 2, anything else 1).
``specsweep sweep --help`` lists the notebook's parameters, their types and units, from its
``parameters`` cell (as ``papermill --help-notebook`` does). Every subcommand takes ``--help``.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsweep import __version__
from specsweep.errors import BAD_INPUT, OK, InputError, RunError, SpecsweepError, exit_status
from specsweep.paths import REPORT_NOTEBOOK, STUDY_NOTEBOOK, SWEEP_NOTEBOOK
from specsweep.runtime import configure_process

PROG = "specsweep"


class BadInput(InputError, ValueError):
    """Input the command cannot use; the message says which and what to do."""


# ------------------------------------------------------------------------ notebook parameters


@dataclass(frozen=True)
class NotebookParameter:
    """One line of a notebook's ``parameters`` cell: ``name = default  # type: T  help``."""

    name: str
    default: Any
    type: str
    help: str


_PARAM = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>.+?)\s*#\s*type:\s*(?P<type>\S+)\s*(?P<help>.*)$")


def notebook_parameters(notebook: Path = SWEEP_NOTEBOOK) -> list[NotebookParameter]:
    """The parameters of ``notebook``'s cell tagged ``parameters``, in order."""
    nb = json.loads(notebook.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise BadInput(f"{notebook}: needs exactly one cell tagged 'parameters', found {len(cells)}")
    out = []
    for line in "".join(cells[0]["source"]).splitlines():
        m = _PARAM.match(line.strip())
        if not m:
            continue
        out.append(NotebookParameter(m["name"], ast.literal_eval(m["value"]), m["type"], m["help"].strip()))
    return out


def _convert(param: NotebookParameter, text: str) -> Any:
    """A command-line value for ``param``, by its declared type (YAML for lists; see the notebook)."""
    import yaml

    kinds = param.type.split("|")
    if text.lower() in {"none", "null"} and "None" in kinds:
        return None
    for kind in kinds:
        try:
            if kind == "int":
                return int(text)
            if kind == "float":
                return float(text)
            if kind == "bool":
                if text.lower() in {"true", "1", "yes"}:
                    return True
                if text.lower() in {"false", "0", "no"}:
                    return False
                raise ValueError(text)
            if kind.startswith("list"):
                value = yaml.safe_load(text)
                if isinstance(value, (int, float, str)):
                    value = [value]
                if not isinstance(value, list):
                    raise ValueError(text)
                inner = kind[5:-1] if kind.startswith("list[") else ""
                if inner == "int" and not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                    raise ValueError(text)
                if inner == "str":
                    value = [str(v) for v in value]
                return value
        except (ValueError, yaml.YAMLError):
            continue
        if kind == "str":
            return text
    raise argparse.ArgumentTypeError(f"--{param.name.replace('_', '-')}: {text!r} is not a {param.type} "
                                     f"(e.g. --{param.name.replace('_', '-')} {json.dumps(param.default)})")


def _add_sweep(sub: Any) -> None:
    params = notebook_parameters()
    p = sub.add_parser("sweep", help="measure one arm across concurrency levels (notebooks/sweep.ipynb)",
                       description="Run notebooks/sweep.ipynb through papermill with these parameters (the notebook's "
                                   "parameters cell; units in each line). Lists take YAML or comma-free single "
                                   "values: --concurrency '[1, 4, 16]'.")
    for param in params:
        p.add_argument(f"--{param.name.replace('_', '-')}", dest=f"nb_{param.name}", metavar=param.type.upper(),
                       type=lambda text, param=param: _convert(param, text), default=argparse.SUPPRESS,
                       help=f"{param.help} (default: {json.dumps(param.default)})".replace("%", "%%"))
    p.add_argument("--output-notebook", metavar="PATH", default=None,
                   help="where the executed notebook goes (default: OUT_DIR/sweep-ARM.ipynb)")
    p.add_argument("--log-output", action="store_true", help="log every cell's output through papermill (the sweep's "
                   "progress and level lines show without it)")
    p.set_defaults(func=_run_sweep)


#: errors the sweep notebook raises for parameters or files it cannot use (exit status 2): the
#: specsweep ones are :class:`~specsweep.errors.InputError` classes, named here because only the
#: name crosses the kernel boundary
BAD_INPUT_ERRORS: frozenset[str] = frozenset({"ConfigError", "DatasetError", "SchemaError", "ValidationError"})


def _check_sweep_values(values: dict[str, Any]) -> None:
    """Check the options as the notebook will check its parameters, before a kernel starts or a
    notebook is written; a bad value is named as the option that set it."""
    from specsweep.measure.config import ConfigError, parse_config

    try:
        parse_config(values, spelling="cli")
    except ConfigError as exc:
        raise BadInput(str(exc)) from None


def _run_sweep(args: argparse.Namespace) -> int:
    from papermill.exceptions import PapermillExecutionError

    from specsweep.notebooks.execute import execute_notebook
    from specsweep.notebooks.kernel import SWEEP_PRELOAD

    values = {k[3:]: v for k, v in vars(args).items() if k.startswith("nb_")}
    _check_sweep_values(values)
    defaults = {p.name: p.default for p in notebook_parameters()}
    target = _sweep_target(values.get("arm", defaults["arm"]), values.get("out_dir", defaults["out_dir"]),
                           args.output_notebook)
    try:
        # the kernel every specsweep sweep runs in (a study arm's too): unix sockets, no debugger, the
        # notebook's modules preloaded
        execute_notebook(SWEEP_NOTEBOOK, target, values, cwd=Path.cwd(), log_output=args.log_output,
                         save_each_cell=True, preload=SWEEP_PRELOAD)
    except PapermillExecutionError as exc:
        bad = exc.ename in BAD_INPUT_ERRORS or (exc.ename == "ValueError" and str(exc.evalue).startswith("parameter '"))
        raise (InputError if bad else RunError)(f"{exc.ename}: {exc.evalue} (the executed notebook is {target})") from None
    print(f"{PROG} sweep: done; the executed notebook is {target}")
    return OK


def _sweep_target(arm: str, out_dir: str, output_notebook: str | None) -> Path:
    """Where the executed sweep notebook goes, every name that becomes a path checked before the
    kernel starts (papermill writes the notebook before the notebook checks its parameters)."""
    from specsweep.results.outpath import check_name, inside, writable_dir

    check_name(arm, "--arm")
    folder = writable_dir(out_dir, "--out-dir")
    if output_notebook is None:
        return inside(folder, folder / f"sweep-{arm}.ipynb", "--arm")
    target = Path(output_notebook)
    if target.is_dir() or target.suffix != ".ipynb":
        raise BadInput(f"--output-notebook {output_notebook}: give a file name ending in .ipynb")
    if target.resolve() in {nb.resolve() for nb in (SWEEP_NOTEBOOK, REPORT_NOTEBOOK, STUDY_NOTEBOOK)}:
        raise BadInput(f"--output-notebook {output_notebook}: is one of specsweep's own notebooks; give another file")
    writable_dir(target.parent, "--output-notebook")
    return target


# --------------------------------------------------------------------------------- report


def _add_report(sub: Any) -> None:
    p = sub.add_parser("report", help="build the offline HTML report of result sets (python -m specsweep.report)",
                       description="Compare result sets (or study folders holding them) against a baseline arm and "
                                   "write OUT_DIR/NAME.html, a self-contained page.")
    p.add_argument("result_sets", nargs="*", metavar="DIR", help="result-set or study folders")
    p.add_argument("--result-set", action="append", default=[], dest="more", metavar="DIR",
                   help="another result-set folder (repeatable; as python -m specsweep.report)")
    p.add_argument("--name", required=True, help="report name: writes OUT_DIR/NAME.html")
    p.add_argument("--baseline", default="baseline", help="arm name of the baseline (default: baseline)")
    p.add_argument("--title", default=None, help="report title")
    p.add_argument("--profiles", default=None, metavar="YAML", help="workload profiles as a YAML list")
    p.add_argument("--out-dir", default="reports", help="where NAME.html goes (default: ./reports)")
    p.add_argument("--allow-workload-mismatch", action="store_true", help="compare arms measured with different workloads")
    p.set_defaults(func=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from specsweep import report
    from specsweep.results.outpath import check_name, writable_dir
    from specsweep.results.store import load_result_sets

    check_name(args.name, "--name")
    writable_dir(args.out_dir, "--out-dir")
    dirs = list(args.result_sets) + list(args.more)
    if not dirs:
        raise BadInput("name at least one result-set or study folder, e.g. specsweep report data/runs/imported --name x")
    sets = load_result_sets(dirs)  # a folder that cannot be read: SchemaError, an InputError
    if args.baseline not in {rs.arm for rs in sets}:
        raise BadInput(f"--baseline {args.baseline!r} is not among the arms ({', '.join(rs.arm for rs in sets)}); "
                       "pass --baseline ARM")
    from specsweep.analyze.compare import compare
    from specsweep.decide.decision import one_arm_message

    if len({rs.arm for rs in sets}) < 2:
        raise BadInput(one_arm_message(args.baseline))
    try:  # a comparison that cannot be made (workloads, levels, definitions) is bad input, said before the notebook runs
        compare(sets, args.baseline, allow_workload_mismatch=args.allow_workload_mismatch, n_boot=0)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    argv = [a for d in dirs for a in ("--result-set", d)] + ["--name", args.name, "--baseline", args.baseline,
                                                             "--out-dir", args.out_dir]
    if args.title:
        argv += ["--title", args.title]
    if args.profiles:
        argv += ["--profiles", args.profiles]
    if args.allow_workload_mismatch:
        argv.append("--allow-workload-mismatch")
    return int(report.main(argv))


# --------------------------------------------------------------------------------- import


def _add_import(sub: Any) -> None:
    from specsweep.importers import TOOLS

    tools = "\n".join(f"  {name:<9} {what}" for name, (_, what) in TOOLS.items())
    p = sub.add_parser("import", help="turn a peer tool's result files into a result set",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Read the result files one tool wrote for one configuration (one file per "
                                   "concurrency, or one file holding them all) and write them as the result set "
                                   "OUT/ARM, ready for `specsweep report OUT --name NAME`.",
                       epilog="tools:\n" + tools + "\n\nThe page names the tool, and each definition that differs "
                              "from specsweep's; two arms compare only the metrics whose definitions agree.")
    p.add_argument("tool", choices=list(TOOLS), metavar="TOOL", help="one of: " + ", ".join(TOOLS))
    p.add_argument("files", nargs="+", metavar="FILE", help="the tool's result files for this arm")
    p.add_argument("--arm", required=True, help="name of the configuration measured (folder-safe), e.g. baseline, mtp")
    p.add_argument("--out", default="data/runs/imported", metavar="DIR",
                   help="the result set goes to DIR/ARM (default: data/runs/imported)")
    p.add_argument("--label", default=None, help="human-readable description of the arm for reports")
    p.add_argument("--output-tokens", type=_positive, default=None, metavar="N",
                   help="requested output length per request, tokens (where the file does not say)")
    p.add_argument("--input-tokens", type=_positive, default=None, metavar="N", help="prompt length per request, tokens")
    p.add_argument("--select", default=None, metavar="WORD",
                   help="table only: the word in the headers that marks this arm's columns (default: the arm name)")
    p.add_argument("--force", action="store_true", help="replace an imported result set already at OUT/ARM")
    p.add_argument("--tool-version", default=None, metavar="VERSION",
                   help="the benchmark tool's (client's) version, for files that record none (vllm bench serve's "
                        "is null); refused where the file records another")
    p.set_defaults(func=_run_import)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _run_import(args: argparse.Namespace) -> int:
    from specsweep.importers import import_files
    from specsweep.results.outpath import check_name, writable_dir

    check_name(args.arm, "--arm")
    writable_dir(args.out, "--out")
    # files the tool's reader cannot use raise importers' BadInput, an InputError
    path = import_files(args.tool, args.files, args.arm, args.out, label=args.label,
                        output_tokens=args.output_tokens, input_tokens=args.input_tokens,
                        select=args.select, force=args.force, tool_version=args.tool_version)
    print(f"wrote {path}")
    return OK


# --------------------------------------------------------------------------------- capture


def _add_capture(sub: Any) -> None:
    p = sub.add_parser("capture", help="record a live server's shapes into a small redacted bundle",
                       description="Probe the server, record its routes, /metrics before and after, the first and "
                                   "last events of a short stream per API flavour, /tokenize and its flush routes, "
                                   "and write them (API key redacted) to OUT; `specsweep serve --replay OUT` serves "
                                   "them back. Attach OUT to a bug report, or drop it into the tests.")
    p.add_argument("--endpoint", required=True, metavar="URL", help="the server, e.g. http://127.0.0.1:30000")
    p.add_argument("--out", required=True, metavar="FILE", help="the bundle to write, e.g. vllm.capture.json")
    p.add_argument("--max-tokens", type=_positive, default=16, metavar="N",
                   help="output tokens of each recorded stream (default 16)")
    p.set_defaults(func=_run_capture)


def _run_capture(args: argparse.Namespace) -> int:
    from specsweep.measure.capture import capture, write_bundle

    path = write_bundle(capture(args.endpoint, max_tokens=args.max_tokens), args.out)
    print(f"wrote {path}")
    return OK


# --------------------------------------------------------------------------------- gate


def _add_gate(sub: Any) -> None:
    p = sub.add_parser("gate", help="CI check: exit 1 where a new study's decisions or metrics differ from a reference",
                       description="Compare NEW_DIR (a study or result-set folder) with the stored reference: exit 1 "
                                   "with a one-screen diff where a profile's decision (class, arm, ties, crossover "
                                   "bracket) changed credibly, a level or arm is missing, or aggregate tok/s, accept "
                                   "length or TTFT p99 moved beyond what the runs' own noise explains (t tests per "
                                   "level and over all levels, Bonferroni over every test); a decision change with "
                                   "every figure within noise is listed, not failed; exit 0 otherwise (docs/gate.md).")
    p.add_argument("new", metavar="NEW_DIR", help="the new study or result-set folder")
    p.add_argument("--reference", required=True, metavar="REF_DIR", help="the reference study or result-set folder")
    p.add_argument("--baseline", default="baseline", help="arm name of the baseline (default: baseline)")
    p.add_argument("--profiles", default=None, metavar="YAML", help="workload profiles as a YAML list (default: the "
                                                                     "report's)")
    p.set_defaults(func=_run_gate)


def _gate_sets(path: str, option: str, baseline: str) -> Any:
    """The result sets of one side of the gate, or bad input naming ``option``."""
    from specsweep.results.store import load_result_sets

    try:
        sets = load_result_sets([path])
    except (SpecsweepError, OSError, ValueError) as exc:
        raise BadInput(f"{option} {path}: {exc}") from None
    arms = {rs.arm for rs in sets}
    if baseline not in arms:
        raise BadInput(f"{option} {path}: no arm {baseline!r} (arms: {', '.join(sorted(arms))}); pass --baseline ARM")
    if len(arms) < 2:
        raise BadInput(f"{option} {path}: holds the baseline arm alone; the gate compares decisions between arms")
    return sets


def _run_gate(args: argparse.Namespace) -> int:
    import yaml

    from specsweep.decide.gate import gate, gate_text
    from specsweep.errors import FAILED

    profiles = None
    if args.profiles:
        try:
            profiles = yaml.safe_load(args.profiles)
        except yaml.YAMLError as exc:
            raise BadInput(f"--profiles: not YAML ({exc})") from None
        if not isinstance(profiles, list):
            raise BadInput("--profiles: give a YAML list of profiles, e.g. '[{name: t, objective: throughput}]'")
    reference = _gate_sets(args.reference, "--reference", args.baseline)
    new = _gate_sets(args.new, "NEW_DIR", args.baseline)
    try:
        result = gate(reference, new, args.baseline, profiles)
    except ValueError as exc:  # a comparison that cannot be made (levels, workloads, a bad profile)
        raise BadInput(f"NEW_DIR {args.new}: {exc}") from None
    print(gate_text(result, args.reference, args.new))
    return OK if result.passed else FAILED


# --------------------------------------------------------------------- pass-through commands


def _delegate(module: str, prog: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        mod = importlib.import_module(module)
        old = sys.argv[0]
        sys.argv[0] = prog
        try:  # each module's main takes the command as typed, so that its help and errors name `specsweep ...`
            return int(mod.main(argv, prog=prog) or 0)
        except SystemExit as exc:  # argparse: 2 for bad input, 0 for --help
            return int(exc.code) if isinstance(exc.code, int) else BAD_INPUT
        finally:
            sys.argv[0] = old
    return run


LLAMACPP_ENGINE = "specsweep.engines.llamacpp"


def _serve(argv: list[str]) -> int:
    if argv[:1] == ["llamacpp"]:
        if importlib.util.find_spec("specsweep.engines") is None or importlib.util.find_spec(LLAMACPP_ENGINE) is None:
            print(f"{PROG} serve llamacpp: the llama.cpp engine ({LLAMACPP_ENGINE}) is not installed in this "
                  "specsweep; install a specsweep that has it (pip install 'specsweep[llamacpp]'), or start "
                  "llama-server yourself and pass its URL as --endpoint", file=sys.stderr)
            return BAD_INPUT
        return _delegate(LLAMACPP_ENGINE, f"{PROG} serve llamacpp")(argv[1:])
    configure_process(arrow=False, single_blas_thread=True)  # as python -m specsweep.refserver: before numpy
    return _delegate("specsweep.refserver.cli", f"{PROG} serve")(argv)


#: subcommands whose options belong to the module they wrap (its own --help lists them)
PASS_THROUGH: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "study": (_delegate("specsweep.study.runner", f"{PROG} study"),
              "run a study file: several arms, repeats, one report (python -m specsweep.study; --help for its options)"),
    "serve": (_serve, "start the reference server (python -m specsweep.refserver; --help for its options), "
                      "or 'serve llamacpp ...' for the llama.cpp engine"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].replace("``", ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="exit status: 0 done, 1 failed, 2 bad input")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_sweep(sub)
    _add_report(sub)
    for name, (_, text) in PASS_THROUGH.items():
        sub.add_parser(name, help=text, add_help=False)
    _add_import(sub)
    _add_capture(sub)
    _add_gate(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns the exit status (0 / 1 / 2, see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PASS_THROUGH:
        return PASS_THROUGH[argv[0]][0](argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else BAD_INPUT
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return BAD_INPUT
    try:
        return args.func(args)
    except (SpecsweepError, KeyboardInterrupt) as exc:
        print(f"{PROG} {args.command}: {exc if isinstance(exc, SpecsweepError) else 'interrupted'}", file=sys.stderr)
        return exit_status(exc)


def entry() -> None:
    """The console script."""
    configure_process(arrow=False)  # the result-set commands set Arrow's pool when they load pandas
    sys.exit(main())


if __name__ == "__main__":
    entry()
