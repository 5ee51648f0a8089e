"""The Jupyter kernel every specsweep notebook runs in: its manager class, launcher, preload, secrets.

:func:`kernel_manager_class` is the manager a report build, a study arm and the ``specsweep sweep``
command all use; :class:`EarlyKernel` starts one before the caller loads papermill and nbconvert.
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specsweep.results.redact import REDACT_ENV

__all__ = ["KERNEL_PRELOAD", "SWEEP_PRELOAD", "EarlyKernel", "kernel_manager_class", "kernel_manager_with_env",
           "kernel_manager_with_secrets", "preload_arguments"]


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


def kernel_manager_with_secrets(base: type, values: Sequence[str]) -> type:
    """A subclass of the (async) Jupyter kernel manager ``base`` whose kernels get ``values`` in
    :data:`REDACT_ENV` (JSON), so the sweep they run masks them in every file it writes."""
    extra = {REDACT_ENV: json.dumps(list(values))}
    return kernel_manager_with_env(base, lambda env: env.update(extra), f"{base.__name__}WithSecrets")


def _lean_kernel(base: type) -> type:
    """``base`` whose kernels start with :mod:`specsweep.notebooks.launcher` (ipykernel without the
    debugger, less CPU per kernel; start-up and its preload without the cyclic collector, then
    frozen) in place of ``-m ipykernel_launcher``, unless ``SPECSWEEP_KERNEL_DEBUGGER=1``."""
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
    many (:func:`specsweep.runtime.single_threaded_blas`: spinning BLAS threads cost every kernel CPU)."""
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
#: quantiles, the what-if model's interpolation: imports every report's cells would otherwise pay
#: while this process waits on them). At start-up they load while this process loads papermill and
#: nbconvert; the preload then outlasts those imports a little, still less than the cells would pay
#: (``bench/import_time.py`` builds an empty notebook on this kernel beside the plain floor)
KERNEL_PRELOAD = ("import specsweep.runtime, specsweep.report, specsweep.report.charts, specsweep.analyze.compare, specsweep.decide, "
                  "specsweep.results.store, specsweep.markup, specsweep.report.whatif_section, specsweep.report.study_page, "
                  "specsweep.report.consistency, specsweep.report.decision, specsweep.report.summary, specsweep.report.carried, specsweep.decide.flip, "
                  "scipy.special, scipy.interpolate")

#: what a study arm's kernel imports while it starts, for the same reason: the sweep notebook's
#: imports. They then load without the collector and are frozen with start-up
#: (:mod:`specsweep.notebooks.launcher`), which saves CPU in every arm's kernel
SWEEP_PRELOAD = ("import specsweep.runtime, specsweep.measure.sweep, specsweep.report.charts, specsweep.analyze.compare, specsweep.results.store, "
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
