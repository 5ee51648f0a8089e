"""Building a report: run notebooks/report.ipynb with papermill, export offline HTML, the CLI."""
from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence
from specsweep.paths import REPORT_NOTEBOOK, REPO_ROOT


def template_dir() -> Path:
    """Folder holding specsweep's nbconvert templates (``offline``)."""
    return Path(str(resources.files("specsweep") / "templates"))


def kernel_manager_class() -> type:
    """The kernel manager every specsweep kernel runs under (report build, study arms, the CLI).

    On POSIX the kernel talks over IPC (unix sockets in a private 0700 folder of its own), not TCP.
    Over TCP, jupyter_client picks five free ports by binding and closing them, and the kernel binds
    them moments later; a kernel started beside it, or any outgoing connection, can take one in
    between, and the kernel dies with ``ZMQError: Address already in use`` (seen when a study's arms
    start kernels together). IPC has no such window, no port to take, and ipykernel prints no
    "running over TCP without encryption" warning for it (the folder's permissions keep other users
    out). Elsewhere (Windows), TCP with CurveZMQ keys (``transport_encryption="auto"``) where pyzmq
    has Curve and jupyter_client knows the setting, so that warning is not printed either; else the
    default manager.
    """
    if os.name == "posix":
        return _ipc_kernel_manager()
    return _lean_kernel(_single_blas_thread(_windows_kernel_manager()))


def _windows_kernel_manager() -> type:
    import zmq
    from jupyter_client import AsyncKernelManager

    if not zmq.has("curve") or "transport_encryption" not in AsyncKernelManager.class_trait_names():
        return AsyncKernelManager

    class EncryptedKernelManager(AsyncKernelManager):  # type: ignore[misc,valid-type]
        """AsyncKernelManager with CurveZMQ transport encryption provisioned when the kernel supports it."""

        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("transport_encryption", "auto")
            super().__init__(**kwargs)

    return EncryptedKernelManager


def kernel_manager_with_env(base: type, edit: Callable[[dict[str, str]], None], name: str | None = None) -> type:
    """A subclass of the (async) Jupyter kernel manager ``base`` whose kernels start with the
    environment they would have had (the ``env`` given, else this process's), changed in place by
    ``edit``; named ``name`` (default: ``base``'s name)."""

    class WithEnv(base):  # type: ignore[misc,valid-type]
        async def start_kernel(self, **kw: Any) -> Any:
            env = dict(kw.get("env") or os.environ)
            edit(env)
            kw["env"] = env
            return await super().start_kernel(**kw)

    WithEnv.__name__ = WithEnv.__qualname__ = name or base.__name__
    return WithEnv


def _lean_kernel(base: type) -> type:
    """``base`` whose kernels start with :mod:`specsweep.notebooks.launcher` (ipykernel without the
    debugger, about 0.05 s of CPU less per kernel; start-up and its preload without the cyclic
    collector, then frozen) in place of ``-m ipykernel_launcher``, unless ``SPECSWEEP_KERNEL_DEBUGGER=1``."""
    from specsweep.notebooks.launcher import launcher_argv

    class Lean(base):  # type: ignore[misc,valid-type]
        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            cmd = super().format_kernel_cmd(extra_arguments)
            if os.environ.get("SPECSWEEP_KERNEL_DEBUGGER", "") not in ("", "0"):
                return cmd
            return launcher_argv(cmd)

    Lean.__name__ = Lean.__qualname__ = base.__name__
    return Lean


def _single_blas_thread(base: type) -> type:
    """``base`` whose kernels start with one OpenBLAS thread unless the environment given says how
    many (:func:`specsweep.runtime.single_threaded_blas`: about 0.1 s of CPU per kernel)."""
    from specsweep.runtime import single_threaded_blas

    return kernel_manager_with_env(base, single_threaded_blas)


@functools.cache
def _ipc_kernel_manager() -> type:
    """The ``IpcKernelManager`` class, built once on first use (jupyter_client is imported only then)."""
    import shutil
    import tempfile
    import weakref

    from jupyter_client import AsyncKernelManager

    class IpcKernelManager(AsyncKernelManager):  # type: ignore[misc,valid-type]
        """AsyncKernelManager whose kernel listens on unix sockets ``<private dir>/k-<n>``.

        The folder is short (unix socket paths are limited to about 107 bytes, which a connection
        file's own folder may exceed), made 0700 by :func:`tempfile.mkdtemp`, and removed when the
        kernel is shut down (or, failing that, when the manager is collected).
        """

        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("transport", "ipc")
            super().__init__(**kwargs)
            if self.transport == "ipc" and "ip" not in kwargs:
                folder = tempfile.mkdtemp(prefix="specsweep-kernel-")
                self.ip = os.path.join(folder, "k")
                self._ipc_folder_finalizer = weakref.finalize(self, shutil.rmtree, folder, True)

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            await super()._async_cleanup_resources(restart=restart)
            finalizer = getattr(self, "_ipc_folder_finalizer", None)
            if not restart and finalizer is not None:
                finalizer()

    return _lean_kernel(_single_blas_thread(IpcKernelManager))


#: what the report kernel imports while it starts (before it answers papermill), so that the
#: notebook's first cell finds them loaded: the notebook's own imports, pandas and altair among them,
#: and the parts of scipy the library imports where it first needs them (``compare``'s t and F
#: quantiles, the what-if model's interpolation: 0.3 s of CPU every report's cells paid while this
#: process waited on them). At start-up they load while this process loads papermill and nbconvert;
#: the preload then outlasts those imports a little (an empty notebook on this kernel: 1.17× the
#: floor, 1.05× before), still less than the cells paid
KERNEL_PRELOAD = ("import specsweep.report, specsweep.report.charts, specsweep.analyze.compare, specsweep.decide, "
                  "specsweep.results.store, specsweep.markup, specsweep.report.whatif_section, specsweep.report.study_page, "
                  "specsweep.report.consistency, specsweep.report.decision, specsweep.report.summary, "
                  "scipy.special, scipy.interpolate")

#: what a study arm's kernel imports while it starts, for the same reason: the sweep notebook's
#: imports. They then load without the collector and are frozen with start-up
#: (:mod:`specsweep.notebooks.launcher`): 0.13 s of CPU less per arm's kernel (medians of 8 alternating
#: kernels running the notebook's imports and a small comparison, 1.17 -> 1.05 s)
SWEEP_PRELOAD = ("import specsweep.measure.sweep, specsweep.report.charts, specsweep.analyze.compare, specsweep.results.store, "
                 "specsweep.report, specsweep.markup")


def preload_arguments(preload: str) -> list[str]:
    """The kernel arguments that run ``preload`` (Python) while the kernel starts, before it answers."""
    return [f"--IPKernelApp.exec_lines={preload}"]


class EarlyKernel:
    """A report kernel started before this process imports papermill and nbconvert, so that the
    kernel's start-up (ipykernel, then :data:`KERNEL_PRELOAD`) runs on the other core while this
    process loads the notebook tools; papermill then runs the notebook on it (``km=``).

    ``preload``: Python the kernel runs before it answers (default: the report notebook's imports;
    None for another notebook). The kernel is this process's to stop (:meth:`stop`); papermill only
    stops kernels it started.
    ``SPECSWEEP_EAGER_IMPORTS=1``, a running event loop in this thread (a notebook cell) or a start
    that fails leaves ``km`` None: papermill starts its own.
    """

    def __init__(self, cwd: Path, preload: str | None = KERNEL_PRELOAD) -> None:
        self.km: Any = None
        self._clients: list[Any] = []
        if os.environ.get("SPECSWEEP_EAGER_IMPORTS", "") not in ("", "0"):
            return
        import asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # no event loop runs in this thread: start the kernel here
        else:
            return  # called from a running loop (a notebook cell): papermill starts its kernel as usual

        base = kernel_manager_class()
        clients = self._clients

        class _Tracked(base):  # type: ignore[misc,valid-type]
            """Remembers the clients papermill makes, so that their channels close with the kernel."""

            def client(self, **kwargs: Any) -> Any:
                kc = super().client(**kwargs)
                clients.append(kc)
                return kc

        km = _Tracked(kernel_name="python3")
        try:
            asyncio.run(km.start_kernel(cwd=str(cwd), extra_arguments=[
                "--HistoryManager.hist_file=:memory:", *(preload_arguments(preload) if preload else [])]))
        except Exception:  # no kernel this way: papermill starts one the usual way and says why if it cannot
            self.km = km
            self.stop()  # a kernel process the failed start left running goes too
            return
        self.km = km

    def stop(self) -> None:
        """Stop the kernel and close every client channel (idempotent)."""
        import asyncio

        for kc in self._clients:
            try:
                kc.stop_channels()
            except Exception:
                pass
        self._clients.clear()
        km, self.km = self.km, None
        if km is not None and km.has_kernel:
            try:
                asyncio.run(km.shutdown_kernel(now=True))
            except Exception:
                pass


def execute_notebook(notebook: Path, output: Path, parameters: dict[str, Any], *, stream: bool = False,
                     km: Any = None) -> Any:
    """Run ``notebook`` with papermill in the repository root; ``stream`` copies the kernel's
    stdout/stderr (progress bars included) to this process's terminal as it runs; ``km``: a kernel
    already started (:class:`EarlyKernel`), else papermill starts one."""
    import papermill as pm

    extra: dict[str, Any] = {"stdout_file": sys.stdout, "stderr_file": sys.stderr} if stream else {}
    if km is not None:
        extra["km"] = km
    # unless streamed (a long run someone watches), the notebook is written once at the end (and on
    # error), not after every cell: each save re-encodes the whole notebook, the 900 KB bundle included
    return pm.execute_notebook(str(notebook), str(output), parameters=parameters, cwd=str(REPO_ROOT),
                               kernel_name="python3", progress_bar=False, log_output=False,
                               request_save_on_cell_execute=stream,
                               kernel_manager_class=kernel_manager_class(), **extra)


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
) -> Path:
    """Run the report notebook with these parameters and export ``<out_dir>/<name>.html``.

    Relative ``result_sets`` and ``out_dir`` are taken relative to the current directory. The
    executed notebook is kept beside the page in ``<out_dir>/_build/<name>.ipynb`` for inspection.
    Without ``title``, one study folder gives its study's title (``study.json``), and its arms come
    in the study's order (:func:`specsweep.results.store.find_result_sets`): the page its study built.
    """
    if not name or any(ch in name for ch in "/\\") or name.startswith("."):
        raise ValueError(f"report name {name!r} must be a plain file name (no slashes, not hidden)")
    if not notebook.is_file():
        raise FileNotFoundError(f"{notebook}: report notebook not found; run from a specsweep checkout")
    out_dir = Path(out_dir).absolute()
    executed = out_dir / "_build" / f"{name}.ipynb"
    executed.parent.mkdir(parents=True, exist_ok=True)
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

        write_summary(nb, out_dir / f"{name}.md")  # the Markdown summary beside the page (and out of it)
        return export_html(nb, out_dir / f"{name}.html", exporter)  # the executed notebook as run, not read back
    finally:
        if stopping is not None:
            stopping.join()
        kernel.stop()  # idempotent: a no-op once the thread has stopped it


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
    args = parser.parse_args(argv)
    try:  # papermill is imported by build_report, after its kernel has started
        path = build_report(args.result_sets, args.name, baseline=args.baseline, title=args.title,
                            profiles=args.profiles, allow_workload_mismatch=args.allow_workload_mismatch,
                            out_dir=args.out_dir)
    except (ValueError, FileNotFoundError) as exc:
        print(f"python -m specsweep.report: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        from papermill.exceptions import PapermillExecutionError

        if not isinstance(exc, PapermillExecutionError):
            raise
        print(f"python -m specsweep.report: {exc.ename}: {exc.evalue}", file=sys.stderr)  # the notebook's own error
        return 1
    print(f"wrote {path}")
    return 0
