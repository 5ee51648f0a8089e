"""Building a report: run notebooks/report.ipynb with papermill, export offline HTML, the CLI."""
from __future__ import annotations

import argparse
import re
import sys
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from specsweep.errors import BAD_INPUT, FAILED, exit_status
from specsweep.notebooks.execute import execute_notebook
from specsweep.notebooks.kernel import KERNEL_PRELOAD, EarlyKernel
from specsweep.paths import REPO_ROOT, REPORT_NOTEBOOK
from specsweep.results.outpath import check_name, inside, writable_dir


def template_dir() -> Path:
    """Folder holding specsweep's nbconvert templates (``offline``)."""
    return Path(str(resources.files("specsweep") / "templates"))


_H1 = re.compile(r"<h1[^>]*>(.*?)</h1>", re.S | re.I)


def page_title(nb: Any) -> str | None:
    """The text of the first ``<h1>`` among the notebook's outputs (tags stripped, entities decoded):
    the report's own title, for the HTML page's ``<title>``; None when no output has one."""
    import html as _html

    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            m = _H1.search(str((out.get("data") or {}).get("text/html", "")))
            if m:
                text = _html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).strip()
                return " ".join(text.split()) or None
    return None


def offline_exporter() -> Any:
    """nbconvert's HTML exporter with specsweep's ``offline`` template: no code, no prompts."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="offline", extra_template_basedirs=[str(template_dir())], exclude_input=True)
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    return exporter


class _ExportReady(threading.Thread):
    """Loads what the export needs (nbconvert, the compiled ``offline`` template, the summary
    module, the exporter's first-page costs) in a daemon thread while the kernel runs the notebook;
    :meth:`exporter` joins it.
    A failure here is left for the export itself to raise."""

    def __init__(self) -> None:
        super().__init__(name="specsweep-export-ready", daemon=True)
        self._exporter: Any = None
        self.start()

    def run(self) -> None:
        try:
            import nbformat

            import specsweep.report.summary  # noqa: F401

            exporter = offline_exporter()
            # one export of an empty notebook: the template compiles, and what the exporter does only
            # on its first page (importing BeautifulSoup, compiling its entity table and the three CSS
            # selectors of HTMLExporter's accessibility pass) happens here, on the core the kernel
            # leaves idle, instead of after the notebook has run
            exporter.from_notebook_node(nbformat.v4.new_notebook())
            self._exporter = exporter
        except Exception:  # noqa: BLE001 - the export's own call reports it
            pass

    def exporter(self) -> Any:
        self.join()
        return self._exporter


def export_html(notebook: Path | Any, html_path: Path, exporter: Any = None) -> Path:
    """Export an executed notebook to self-contained HTML: no code, no stderr, no CDN scripts.
    ``exporter``: an :func:`offline_exporter` made beforehand (default: a new one).

    Papermill's injected-parameters cell (no outputs, a random cell id) is dropped, so the same
    notebook outputs always give the same bytes.
    """
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4) if isinstance(notebook, (str, Path)) else notebook
    nb.cells = [c for c in nb.cells if "injected-parameters" not in (c.get("metadata", {}).get("tags") or [])]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    heading = page_title(nb)
    if heading:
        nb.metadata["title"] = heading  # the browser tab and bookmarks show the report's title, not "Notebook"
    body, _ = (exporter or offline_exporter()).from_notebook_node(nb)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(body, encoding="utf-8")
    return html_path


def build_report(
    result_sets: Sequence[str | Path],
    name: str,
    *,
    baseline: str = "baseline",
    title: str | None = None,
    profiles: list[dict[str, Any]] | None = None,
    allow_workload_mismatch: bool = False,
    out_dir: Path | str = REPO_ROOT / "reports",
    notebook: Path = REPORT_NOTEBOOK,
    flip_resamples: int | None = None,
) -> Path:
    """Run the report notebook with these parameters and export ``<out_dir>/<name>.html``.

    Relative ``result_sets`` and ``out_dir`` are taken relative to the current directory. The
    executed notebook is kept beside the page in ``<out_dir>/_build/<name>.ipynb`` for inspection.
    Without ``title``, one study folder gives its study's title (``study.json``), and its arms come
    in the study's order (:func:`specsweep.results.store.find_result_sets`): the page its study built.
    ``flip_resamples``: simulated reruns behind each decision's flip chance (0: none estimated, the page
    says nothing about it; None: the notebook's default). The decision rows the page printed are kept
    in ``<out_dir>/_build/<name>.decisions.json`` (:mod:`specsweep.report.carried`).
    """
    check_name(name, "report name")
    if flip_resamples is not None and flip_resamples < 0:
        raise ValueError(f"flip_resamples {flip_resamples}: must be 0 (no flip chance) or more resamples")
    if not notebook.is_file():
        raise FileNotFoundError(f"{notebook}: report notebook not found; run from a specsweep checkout")
    out_dir = writable_dir(Path(out_dir).absolute(), "report folder (--out-dir)")
    executed = inside(out_dir, writable_dir(out_dir / "_build", "report folder (--out-dir)") / f"{name}.ipynb",
                      "report name")
    for page in (f"{name}.html", f"{name}.md", f"{name}.txt"):
        inside(out_dir, out_dir / page, "report name")  # a link there that leads out is refused, not followed
    params: dict[str, Any] = {
        "result_sets": [str(Path(p).absolute()) for p in result_sets],
        "baseline": baseline,
        "output_name": name,
        "allow_workload_mismatch": allow_workload_mismatch,
    }
    if not title:
        from specsweep.results.study_record import study_title  # standard library only: no pandas before the kernel

        title = study_title(result_sets)
    if title:
        params["title"] = title
    if profiles is not None:
        params["profiles"] = profiles
    if flip_resamples is not None:
        params["flip_resamples"] = flip_resamples
    # the kernel starts on the other core while papermill and nbconvert load here
    kernel = EarlyKernel(REPO_ROOT, KERNEL_PRELOAD if notebook.resolve() == REPORT_NOTEBOOK.resolve() else None)
    stopping: threading.Thread | None = None
    try:
        import papermill  # noqa: F401 - first, so that the threads below do not slow its import

        from specsweep.runtime import warm_vega_bundle

        warm_vega_bundle()  # a first build makes the chart bundle while the kernel starts
        ready = _ExportReady()  # nbconvert and its template load while the kernel runs
        nb = execute_notebook(notebook, executed, params, km=kernel.km)
        exporter = ready.exporter()
        # the kernel's work is done: it is stopped while the page is written (jupyter_client waits for
        # the killed process in 0.1 s sleeps), and joined below before this returns or raises
        stopping = threading.Thread(target=kernel.stop, name="specsweep-kernel-stop", daemon=True)
        stopping.start()
        from specsweep.report.summary import write_summary

        write_summary(nb, out_dir / f"{name}.md")  # the Markdown summary and its .txt beside the page (and out of it)
        from specsweep.report.carried import take_decisions, write_carried

        write_carried(take_decisions(nb), out_dir / f"{name}.html")  # for publish: its flip chances computed once
        return export_html(nb, out_dir / f"{name}.html", exporter)  # the executed notebook as run, not read back
    finally:
        if stopping is not None:
            stopping.join()
        kernel.stop()  # idempotent: a no-op once the thread has stopped it


#: errors of the report notebook that mean bad input (exit status 2), by name: only the name crosses the kernel boundary
BAD_INPUT_ERRORS: frozenset[str] = frozenset({"OneArmError", "AllFailedError"})


def _profiles_arg(text: str) -> list[dict[str, Any]]:
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"not valid YAML ({exc}); give a list such as "
                                         "'[{name: Chat, objective: latency}]'") from exc
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise argparse.ArgumentTypeError("must be a YAML list of profiles, e.g. '[{name: Chat, objective: latency}]'")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specsweep.report``: build one report; relative paths are relative to the current directory."""
    parser = argparse.ArgumentParser(prog="python -m specsweep.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--result-set", action="append", required=True, dest="result_sets",
                        help="result-set or study folder (repeatable; relative to the current directory)")
    parser.add_argument("--name", required=True, help="report name: writes OUT_DIR/NAME.html")
    parser.add_argument("--baseline", default="baseline", help="arm name of the baseline (default: baseline)")
    parser.add_argument("--title", default=None, help="report title (default: a study folder's title, else the notebook's)")
    parser.add_argument("--profiles", type=_profiles_arg, default=None,
                        help="workload profiles as a YAML list (default: the built-in three); see README")
    parser.add_argument("--out-dir", default="reports", help="where NAME.html goes (default: ./reports)")
    parser.add_argument("--allow-workload-mismatch", action="store_true")
    parser.add_argument("--flip-resamples", type=int, default=None, metavar="N",
                        help="simulated reruns behind each decision's flip chance (0: none; default: the notebook's)")
    args = parser.parse_args(argv)
    if args.flip_resamples is not None and args.flip_resamples < 0:
        parser.error(f"--flip-resamples {args.flip_resamples}: must be 0 (no flip chance) or more")
    try:  # papermill is imported by build_report, after its kernel has started
        path = build_report(args.result_sets, args.name, baseline=args.baseline, title=args.title,
                            profiles=args.profiles, allow_workload_mismatch=args.allow_workload_mismatch,
                            out_dir=args.out_dir, flip_resamples=args.flip_resamples)
    except (ValueError, FileNotFoundError) as exc:
        print(f"python -m specsweep.report: {exc}", file=sys.stderr)
        return exit_status(exc)
    except Exception as exc:
        from papermill.exceptions import PapermillExecutionError

        if not isinstance(exc, PapermillExecutionError):
            raise
        print(f"python -m specsweep.report: {exc.ename}: {exc.evalue}", file=sys.stderr)  # the notebook's own error
        return BAD_INPUT if exc.ename in BAD_INPUT_ERRORS else FAILED
    print(f"wrote {path}")
    return 0
