"""The control arm's caveat says when its deviation keeps one sign at every level, with the chance of
that under noise around zero — drawn over many synthetic studies, a control with zero-mean noise and
one measured after the machine slowed."""
from __future__ import annotations

import numpy as np

from specsweep.analyze.compare import compare
from specsweep.decide.caveats import drift_sentences
from specsweep.decide.draws import draw_study

SAID = "possibly an offset between two identical configurations"


def _rate(case: str, n: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    said = 0
    for _ in range(n):
        comp = compare(draw_study(case, rng), baseline="baseline", n_boot=0)
        text = " ".join(drift_sentences(comp))
        assert "configured like the baseline" in text  # the control's own caveat is there either way
        said += SAID in text
    return said / n


def test_a_control_with_noise_around_zero_is_rarely_called_one_sided() -> None:
    # eight levels: under zero-mean noise all of one sign has a chance of 2 × 0.5^8 ≈ 0.8 %
    assert _rate("control_noise_only", 40, seed=3) <= 0.10


def test_a_control_measured_after_the_machine_slowed_is_called_one_sided() -> None:
    # the machine 4 % slower per arm, the control measured two arms after the baseline: about −8 % at each
    # level against a level's noise of about 4 %, so all eight below with a chance of about 0.97^8 ≈ 0.8
    assert _rate("drift_control", 40, seed=4) >= 0.60
