"""Start-up cost: defer the one transitive import that costs seconds in every process.

``jsonschema`` (imported by nbformat, altair and jupyter-events, so by papermill, nbconvert and
every report kernel) registers IRI format checkers from ``rfc3987_syntax`` when that package is
installed (jupyter-events asks for ``jsonschema[format-nongpl]``). Importing ``rfc3987_syntax``
builds about 40 Earley parsers from a Lark grammar: seconds of CPU in every process, although
no notebook or Vega-Lite schema specsweep validates uses the ``iri`` formats
(``bench/import_time.py`` measures it).

:func:`defer_rfc3987_syntax` puts a light stand-in for ``rfc3987_syntax`` in ``sys.modules``
before anything imports it. The stand-in offers the same names: its ``is_valid_syntax`` (the only
name jsonschema imports) and any other attribute load the real package on first use and answer
exactly as it does, so validation behaves as before and only pays when an IRI is really checked.
``specsweep/__init__`` calls it, so every process that imports specsweep before jsonschema (the
library's own entry points, the notebooks' kernels) gets it. ``SPECSWEEP_EAGER_IMPORTS=1`` turns
it off.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

MODULE = "rfc3987_syntax"
_lock = threading.Lock()


def _real() -> types.ModuleType:
    """Import the real ``rfc3987_syntax`` (once) and leave it in ``sys.modules``."""
    with _lock:
        current = sys.modules.get(MODULE)
        if current is not None and not getattr(current, "__specsweep_deferred__", False):
            return current
        stand_in = sys.modules.pop(MODULE, None)
        try:
            module = importlib.import_module(MODULE)
        except BaseException:
            if stand_in is not None:
                sys.modules[MODULE] = stand_in
            raise
        if stand_in is not None:
            stand_in.__dict__["__specsweep_real__"] = module
        return module


def _stand_in(spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
    module = types.ModuleType(MODULE, "Deferred stand-in for rfc3987_syntax (see specsweep.runtime).")
    module.__dict__["__specsweep_deferred__"] = True
    module.__spec__ = spec
    module.__file__ = spec.origin
    if spec.submodule_search_locations is not None:
        module.__path__ = list(spec.submodule_search_locations)

    def is_valid_syntax(term: str, value: str) -> bool:
        """``rfc3987_syntax.is_valid_syntax``, loaded on first call."""
        return bool(_real().is_valid_syntax(term, value))

    def __getattr__(name: str) -> Any:  # PEP 562: every other name comes from the real package
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_real(), name)

    # set in the namespace: typeshed's ModuleType lacks is_valid_syntax and has __getattr__ as a method
    module.__dict__.update(is_valid_syntax=is_valid_syntax, __getattr__=__getattr__)
    return module


def defer_rfc3987_syntax() -> bool:
    """Install the stand-in; True when installed, False when not needed or not possible
    (already imported, not installed, or ``SPECSWEEP_EAGER_IMPORTS=1``)."""
    if os.environ.get("SPECSWEEP_EAGER_IMPORTS", "") not in ("", "0"):
        return False
    if MODULE in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(MODULE)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    sys.modules[MODULE] = _stand_in(spec)
    return True


def use_system_allocator() -> bool:
    """Make the C library's malloc Arrow's default memory pool, unless ``ARROW_DEFAULT_MEMORY_POOL``
    chose one; True when it did.

    Arrow holds more than Parquet files here: pandas keeps string columns in Arrow buffers, so a
    level's request frame (tens of MB of text and digests for 10,000 requests) lives in Arrow's
    pool. pyarrow's default pool (mimalloc) keeps more resident through a level's summary and
    store than malloc does, whose free memory specsweep hands back after each level (see
    ``measure.loadgen``); ``bench/level_memory.py`` measures it.
    """
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return False
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    return True


def configure_process(*, arrow: bool = True, single_blas_thread: bool = False) -> None:
    """The process set-up a specsweep entry point makes first; importing specsweep changes nothing.

    - :func:`defer_rfc3987_syntax`: a light stand-in for a package whose import costs seconds;
    - ``arrow``: Arrow's default memory pool becomes the C library's malloc (:func:`use_system_allocator`);
    - ``single_blas_thread``: one OpenBLAS thread (:func:`single_threaded_blas`), for processes that
      start no server of the user's.

    The entry points (``python -m specsweep.publish``, ``.study``, ``.report``, ``.refserver``, the
    ``specsweep`` console script) and every kernel specsweep starts (``notebooks.launcher``) call it;
    a notebook run in another kernel calls it in its first code cell. Call it before numpy, pandas
    or jsonschema is imported; calling it again does no harm.
    """
    if single_blas_thread:
        single_threaded_blas()
    defer_rfc3987_syntax()
    if arrow:
        use_system_allocator()


# ------------------------------------------------------------------------------ the Vega bundle, cached on disk
#
# ``vl_convert.javascript_bundle`` bundles vega + vega-lite + vega-embed from its embedded sources
# on every first call in a process: seconds of CPU (the GIL released), in every report kernel.
# Its answer depends only on the vl-convert version and the Vega-Lite version asked for, so it is
# kept in a per-user cache file and read back, which is cheap (``bench/import_time.py`` builds the
# seed report with a warm cache and with an empty one). A file lock serialises the first build
# across processes (a report's own process can start it in a thread while its kernel starts:
# :func:`warm_vega_bundle`); a missing, unreadable or unwritable cache only costs the rebuild.


#: the environment variable that sets how many threads OpenBLAS (the BLAS of numpy's PyPI wheels) starts
BLAS_THREADS = "OPENBLAS_NUM_THREADS"
#: the variables OpenBLAS reads for its thread count, in its order: any of them set means the user chose
BLAS_THREAD_SETTINGS = (BLAS_THREADS, "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def single_threaded_blas(env: MutableMapping[str, str] | None = None) -> None:
    """Ask OpenBLAS for one thread (in ``env``, default this process's environment), unless the
    environment already says how many (``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS`` or
    ``OMP_NUM_THREADS``).

    When numpy is imported, OpenBLAS starts a thread for every other core, and those threads spin
    before they sleep, so ``import numpy`` costs more CPU the more cores the machine has.
    specsweep's arrays are never large enough for BLAS threads to pay (a verdict draw's compare and
    decide take as long with one), and on a CPU engine every spinning thread is taken from the
    server measured. It acts only before numpy is imported. Only processes that start no server of
    the user's call it: the reference server and ``python -m specsweep.report`` first thing, and
    every kernel specsweep starts gets it in its environment
    (``notebooks.kernel.kernel_manager_class``). A study's runner does not: the servers it starts
    (``serve`` arms) inherit its environment, and an engine measured must run as its user set it.
    """
    env = os.environ if env is None else env
    if not any(env.get(name) for name in BLAS_THREAD_SETTINGS):
        env[BLAS_THREADS] = "1"


def cache_dir() -> Path:
    """Where specsweep keeps derived files: ``$SPECSWEEP_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/specsweep``, else ``~/.cache/specsweep``."""
    explicit = os.environ.get("SPECSWEEP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specsweep"


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


def bundle_cache_path() -> Path:
    """The cache file for this environment's bundle: named by the vl-convert and Altair versions
    (Altair's version fixes the Vega-Lite version it asks vl-convert for), so that an upgrade of
    either reads a new file. Costs no import of either."""
    key = f"{_version('vl-convert-python')}-altair{_version('altair')}"
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in key)
    return cache_dir() / f"vega-bundle-{safe}.js"


def _build_bundle() -> str:
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    # the stub makes ``snippet`` required; the function defaults it (signature ``snippet=None``)
    return str(vlc.javascript_bundle(vl_version=vl_version_for_vl_convert()))  # type: ignore[call-arg]


def vega_bundle_cached(build: Callable[[], str] = _build_bundle) -> str:
    """The vega + vega-lite + vega-embed bundle matching Altair's schema: from the cache when there,
    else made by ``build`` (default: vl-convert, about 900 KB) and stored. ``SPECSWEEP_CACHE_DIR=off``
    or a cache that cannot be written makes it every time."""
    if os.environ.get("SPECSWEEP_CACHE_DIR", "").lower() == "off":
        return build()
    path = bundle_cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(path.name + ".lock"), "a+b")
    except OSError:
        return build()
    with lock:
        try:
            import fcntl

            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # one build at a time; the others read its file
        except (ImportError, OSError):
            pass
        try:
            text = path.read_text(encoding="utf-8")
            if text.endswith(_END):
                return text[: -len(_END)]
        except (OSError, UnicodeDecodeError):
            pass
        bundle = build()
        try:
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(bundle + _END, encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            pass
        return bundle


_END = "\n//specsweep-bundle-complete\n"  # a file cut short (disk full, killed writer) is made again


def warm_vega_bundle() -> threading.Thread | None:
    """When the bundle is not cached yet, make it in a daemon thread (vl-convert releases the GIL),
    so that a report kernel started meanwhile waits on the cache lock and reads the file instead of
    making it too. None when it is cached already (checked without importing Altair) or caching is
    off. Errors in the thread are ignored: the kernel's own call then makes it and reports them."""
    if os.environ.get("SPECSWEEP_CACHE_DIR", "").lower() == "off" or bundle_cache_path().is_file():
        return None

    def run() -> None:
        try:
            vega_bundle_cached()
        except Exception:  # noqa: BLE001 - the kernel's own call reports real errors
            pass

    thread = threading.Thread(target=run, name="specsweep-vega-bundle", daemon=True)
    thread.start()
    return thread
