"""Start-up cost: defer the one transitive import that costs seconds in every process.

``jsonschema`` (imported by nbformat, altair and jupyter-events, so by papermill, nbconvert and
every report kernel) registers IRI format checkers from ``rfc3987_syntax`` when that package is
installed (jupyter-events asks for ``jsonschema[format-nongpl]``). Importing ``rfc3987_syntax``
builds about 40 Earley parsers from a Lark grammar: 2.5–3.5 s of CPU on a 2-core machine, in
every process, although no notebook or Vega-Lite schema specsweep validates uses the ``iri``
formats (``bench/import_time.py`` measures it).

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
    module = types.ModuleType(MODULE, "Deferred stand-in for rfc3987_syntax (see specsweep.startup).")
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

    module.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    module.__getattr__ = __getattr__  # type: ignore[attr-defined]
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
