"""The reproduce section: the commands that re-measure and rebuild a report."""
from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsweep import __version__
from specsweep.markup import inert, md_text
from specsweep.measure.config import DEFAULT_MIN_REQUESTS
from specsweep.paths import REPO_ROOT
from specsweep.results.meta import Meta


def repo_relative(path: str | Path) -> str:
    """``path`` as a command run from the repository root should spell it.

    Inside the checkout: relative to its root (``data/runs/x``), so no path of the machine that
    built the report appears on the page. Outside it: absolute, the only spelling that works.
    """
    p = Path(path)
    absolute = p if p.is_absolute() else (Path.cwd() / p)
    absolute = Path(*absolute.parts)  # normalise
    try:
        return absolute.resolve().relative_to(REPO_ROOT).as_posix() or "."
    except ValueError:
        return str(absolute.resolve())


def _code_block(lines: Sequence[str], lang: str = "sh") -> list[str]:
    """A fenced code block whose fence no backtick run inside it can close."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, *lines, fence]


def _json_word(value: Any) -> str:
    """``value`` as JSON for a command line: non-ASCII text as typed, but every character :func:`inert`
    would remove (controls, bidirectional overrides) as a ``\\uXXXX`` escape, so the word reads back
    exactly and shows nothing that could reorder or recolour the page or a terminal."""
    return "".join(ch if inert(ch) == ch else f"\\u{ord(ch):04x}" for ch in json.dumps(value, ensure_ascii=False))


def report_command(parameters: dict[str, Any]) -> list[str]:
    """The argv of ``python -m specsweep.report`` that rebuilds a report from its notebook parameters.

    Paths are repository-relative where they can be (:func:`repo_relative`); the interpreter is the
    checkout's ``.venv/bin/python`` (``make setup``).
    """
    argv = [".venv/bin/python", "-m", "specsweep.report"]
    for path in parameters.get("result_sets") or []:
        argv += ["--result-set", repo_relative(path)]
    argv += ["--name", str(parameters.get("output_name") or "report")]
    if parameters.get("baseline") not in (None, "baseline"):
        argv += ["--baseline", str(parameters["baseline"])]
    if parameters.get("title"):
        argv += ["--title", str(parameters["title"])]
    if parameters.get("profiles") is not None:
        argv += ["--profiles", _json_word(parameters["profiles"])]
    if parameters.get("allow_workload_mismatch"):
        argv.append("--allow-workload-mismatch")
    return argv


def papermill_command(parameters: dict[str, Any], output: str = "out.ipynb") -> list[str]:
    """The argv of the papermill command that runs ``notebooks/report.ipynb`` with these parameters.

    They travel as one YAML document (``-y``) written as JSON (which is YAML), so ``yaml.safe_load``
    reads back exactly ``parameters`` (with paths made repository-relative).
    """
    params = dict(parameters)
    if params.get("result_sets") is not None:
        params["result_sets"] = [repo_relative(p) for p in params["result_sets"]]
    text = _json_word(params)
    return [".venv/bin/papermill", "notebooks/report.ipynb", output, "-y", text]


def _shell_word(word: str) -> str:
    """One shell word, quoted where it needs it; a word with a character :func:`inert` would remove
    (a control character, a bidirectional override) in ``$'…'`` with that character as an escape,
    so the command stays exact and the page shows only printable text."""
    if inert(word) == word:
        return shlex.quote(word)
    escaped = "".join("\\" + ch if ch in "\\'" else ch if inert(ch) == ch
                      else f"\\x{ord(ch):02x}" if ord(ch) < 0x80 else f"\\u{ord(ch):04x}" for ch in word)
    return f"$'{escaped}'"


def shell_line(argv: Sequence[str]) -> str:
    """``argv`` as one shell command line (POSIX, with ``$'…'`` where a word holds a control
    character), every word quoted where it needs it."""
    return " ".join(_shell_word(str(a)) for a in argv)


def _same_for_all(values: int | dict[str, Any], rule: Any) -> Any:
    """A per-level setting as the notebook parameter that produced it: one integer, or None for auto/mixed."""
    if rule == "auto" or not values:
        return None
    if isinstance(values, int):  # a hand-written file may give one number for every level
        return values
    distinct = set(values.values())
    return distinct.pop() if len(distinct) == 1 else None


def _workload_value(value: str) -> str:
    """A recorded ``workload`` parameter as a command should spell it: a file path in it (alone, or
    after a ``format:`` prefix such as ``sharegpt:``) relative to the repository where it lies inside."""
    prefix, sep, rest = value.partition(":")
    if sep and "/" not in prefix and Path(rest).is_absolute():
        return f"{prefix}:{repo_relative(rest)}"
    return repo_relative(value) if Path(value).is_absolute() else value


def sweep_parameters(meta: Meta, out_dir: str) -> dict[str, Any] | None:
    """The ``notebooks/sweep.ipynb`` parameters that measure this arm again, from its ``meta.json``;
    None for published reference data (measured outside specsweep) or a prompt file of unknown
    path. Only what differs from the notebook's defaults, plus arm, label, levels and workload
    lengths; per-level warm-up counts are left to the notebook's rule."""
    if meta.kind != "run":
        return None
    sweep, workload = meta.sweep, meta.workload
    params: dict[str, Any] = {"arm": meta.arm}
    if meta.label and meta.label != meta.arm:
        params["label"] = meta.label
    embedded = meta.embedded_server
    if embedded:
        params.update(embedded_profile=embedded.get("profile"), embedded_spec=embedded.get("spec"))
        if embedded.get("args"):
            params["embedded_args"] = list(embedded["args"])
    else:
        params["endpoint"] = meta.endpoint
        if meta.model:
            params["model"] = meta.model
    params.update(concurrency=list(sweep.concurrency or []), input_tokens=workload.input_tokens,
                  output_tokens=workload.output_tokens)
    if workload.value:
        params["workload"] = _workload_value(workload.value)
    elif workload.kind != "random-ids":
        if not workload.path:
            return None  # a prompt file whose path was not recorded: no command can name it
        params["workload"] = repo_relative(workload.path)
    if workload.output_length != "fixed":
        params["output_length"] = workload.output_length
    fixed = _same_for_all(sweep.requests_per_level or {}, sweep.requests_per_level_rule)
    if fixed is not None:
        params["requests_per_level"] = fixed
    elif sweep.requests_per_level_rule == "auto" and sweep.min_requests_per_level not in (None, DEFAULT_MIN_REQUESTS):
        params["min_requests_per_level"] = sweep.min_requests_per_level
    for key, default in (("api", "auto"), ("repeats", 1), ("request_timeout_s", 600.0), ("seed", 0),
                         ("temperature", 0.0), ("client_workers", 1)):
        value = getattr(sweep, key)
        if value is not None and value != default:
            params[key] = value
    params["out_dir"] = out_dir
    return {k: v for k, v in params.items() if v is not None}


def sweep_command(params: dict[str, Any]) -> list[str]:
    """The argv of the papermill command that runs ``notebooks/sweep.ipynb`` with ``params`` (one ``-y``
    JSON document, which YAML reads back exactly), its progress streamed to the terminal."""
    return [".venv/bin/papermill", "notebooks/sweep.ipynb", f"out-{params.get('arm', 'arm')}.ipynb",
            "--stdout-file", "/dev/stdout", "--stderr-file", "/dev/stderr",
            "-y", _json_word(params)]


#: where the printed re-measure commands write their runs (relative to the repository root), per report name
REMEASURE_DIR: str = "data/runs/remeasured"


def remeasure_folder(parameters: dict[str, Any]) -> str:
    """The folder the printed re-measure commands write to: ``data/runs/remeasured/<report name>``
    (one per report, so the rebuild that follows reads this report's arms and nothing else)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", str(parameters.get("output_name") or "report")).strip("-.") or "report"
    return f"{REMEASURE_DIR}/{name}"


_SECRET_FLAG = re.compile(r"key|token|secret|password|passwd|credential|auth", re.IGNORECASE)


def masked_argv(argv: Sequence[Any]) -> list[str]:
    """``argv`` with secret values replaced by ``***``: the value after a flag whose name says key,
    token, secret, password, … (``--api-key K``, ``--hf-token=T``) and the ``SPECSWEEP_API_KEY``
    value wherever it appears."""
    from specsweep.results.redact import redact_text

    out: list[str] = []
    hide_next = False
    for raw in map(str, argv):
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        if raw.startswith("-") and "=" in raw and _SECRET_FLAG.search(raw.split("=", 1)[0]):
            out.append(raw.split("=", 1)[0] + "=***")
            continue
        hide_next = raw.startswith("-") and bool(_SECRET_FLAG.search(raw))
        out.append(redact_text(raw))
    return out


def server_command(meta: Meta) -> str | None:
    """How the arm's server was started, as one shell line (secrets masked), or None where the
    result set does not say: the argv ``specsweep.engines.llamacpp`` recorded in ``/props``
    (``server.launch.argv``; for llama.cpp the only record of its speculative settings), a
    ``serve.argv`` recorded with the run, or the embedded reference server's arguments."""
    launch = meta.server_field("launch")
    serve = meta.serve
    argv = None
    if isinstance(launch, dict) and isinstance(launch.get("argv"), list):
        argv = launch["argv"]
    elif isinstance(serve, dict) and isinstance(serve.get("argv"), list):
        argv = serve["argv"]
    elif meta.embedded_server is not None:
        e = meta.embedded_server
        argv = ["python", "-m", "specsweep.refserver", *[str(x) for x in e.get("argv") or e.get("args") or []]]
    return shell_line(masked_argv(argv)) if argv else None


def _one_line(text: object) -> str:
    """Untrusted text for one line of a shell comment (newlines and runs of space folded)."""
    return " ".join(str(text).split())


def server_to_start(meta: Meta) -> str | None:
    """For an arm measured against an endpoint: one shell comment saying which server configuration to
    start before its sweep — the command it was started with where the run recorded one, else the
    speculative and capacity settings the server reported; None for the embedded server (the sweep
    starts it)."""
    if meta.embedded_server is not None:
        return None
    from specsweep.decide.ties import SERVER_SETTINGS

    how = server_command(meta)
    if how is None:
        settings = [f"{k}={meta.server[k]}" for k in SERVER_SETTINGS if meta.server.get(k) is not None]
        how = ("a server configured with " + ", ".join(settings)) if settings else \
            "the server as this arm ran it (its settings are in the Setup table)"
    return _one_line(f"# first start, at {meta.endpoint or 'the endpoint'}, {meta.arm}'s server: {how}")


def _remeasure_lines(parameters: dict[str, Any]) -> list[str]:
    """The re-measure block: one sweep per arm specsweep measured, into :func:`remeasure_folder`, then the
    report command that rebuilds the page from those new runs (published reference arms from their own
    folders). Measuring again and rebuilding again uses the newest complete run of each arm
    (:func:`specsweep.results.store.newest_per_arm`)."""
    from specsweep.results.store import find_result_sets, load_result_set

    folder = remeasure_folder(parameters)
    commands, reference, keep = [], [], []
    for given in parameters.get("result_sets") or []:
        for found in find_result_sets(given):
            rs = load_result_set(found)
            params = sweep_parameters(rs.meta, folder)
            if params is None:
                reference.append(rs.arm)  # the short name, as all prose
                keep.append(str(found))
            else:
                start = server_to_start(rs.meta)
                commands += [start] if start else []
                commands.append(shell_line(sweep_command(params)))
    lines: list[str] = []
    if commands:
        rebuild = report_command({**parameters, "result_sets": [*keep, folder]})
        lines += ["", "Measure the arms again (one sweep per arm, each a new run in "
                  f"`{folder}`; the embedded server needs nothing else, another server must be running at its "
                  "endpoint, started before each sweep as the comment above it says):", "", *_code_block(commands), "",
                  "then rebuild the page from the new runs (measured again more than once, the newest complete run "
                  "of each arm is used):", "", *_code_block([shell_line(rebuild)])]
    if reference:
        lines += ["", "Published reference data (" + ", ".join(md_text(r) for r in reference)
                  + ") was measured outside specsweep; its source is in the Setup table."]
    return lines


def reproduce_markdown(parameters: dict[str, Any]) -> str:
    """How to rebuild this report: commands to paste into a shell at the repository root.

    No build time or machine path appears (the page is byte-identical when rebuilt from the same
    data and code); every word is shell-quoted, so titles with quotes or ``$`` survive. Arms that
    specsweep measured get the sweep command that measures them again.
    """
    return "\n".join([
        f"Built by specsweep {__version__}. Rebuild it from the repository root, after `make setup`:",
        "",
        *_code_block([shell_line(report_command(parameters))]),
        "",
        "or run the notebook yourself (then open `out.ipynb` in JupyterLab):",
        "",
        *_code_block([shell_line(papermill_command(parameters))]),
        *_remeasure_lines(parameters),
    ])
