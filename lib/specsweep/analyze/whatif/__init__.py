"""What if: predict a configuration nobody measured, say why each speedup is what it is, and show how
good the prediction is — from result sets alone (see ``model.py`` for the model, ``predict.py`` for
what can be changed, ``validate.py`` for the error figures, ``decompose.py`` for the speedup's parts,
``experiment.py`` for where to measure next).

Notebook use::

    from specsweep.analyze import whatif
    whatif.predict(comp, "mtp", max_running_requests=128, concurrency=[48, 64, 96, 128], sets=sets)
"""
from __future__ import annotations

from specsweep.analyze.whatif.decompose import decompose
from specsweep.analyze.whatif.experiment import least_certain
from specsweep.analyze.whatif.observe import WhatIfError
from specsweep.analyze.whatif.predict import predict
from specsweep.analyze.whatif.validate import validate

__all__ = ["WhatIfError", "decompose", "least_certain", "predict", "validate"]
