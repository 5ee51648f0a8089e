"""What if: predict a configuration nobody measured, say why each speedup is what it is, and show how
good the prediction is — from result sets alone (see ``model.py`` for the model, ``predict.py`` for
what can be changed, ``validate.py`` for the error figures, ``decompose.py`` for the speedup's parts).

Notebook use::

    from specsweep import whatif
    whatif.predict(comp, "mtp", max_running_requests=128, concurrency=[48, 64, 96, 128], sets=sets)
"""
from __future__ import annotations

from .decompose import decompose
from .observe import WhatIfError
from .predict import predict
from .section import next_experiment
from .validate import validate

__all__ = ["WhatIfError", "decompose", "next_experiment", "predict", "validate"]
