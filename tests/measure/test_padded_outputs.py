"""A natural-length level whose every request reports exactly the requested count, finishing by
'length', while the texts differ severalfold in length: what a server that pads its streams with
end-of-sequence tokens (SGLang's --padded-output-tokens) looks like; it is flagged, nothing else is."""
from __future__ import annotations

import pandas as pd
import pytest

from specsweep.measure.plausibility import padded_outputs
from specsweep.results.records import output_fingerprint

pytestmark = pytest.mark.fast


def _level(texts: list[str], counts: list[int], finish: list[str], requested: int = 64) -> pd.DataFrame:
    return pd.DataFrame({"output_tokens": counts, "requested_output_tokens": [requested] * len(texts),
                         "finish_reason": finish, "error": [None] * len(texts),
                         "output_blocks": [output_fingerprint(t)[2] for t in texts]})


PADDED = ["Yes.", "No, not today.", "x" * 300, "A longer answer " * 20]  # 4 to 320 characters, all "64 tokens"


def test_padded_counts_are_flagged_with_the_text_lengths() -> None:
    why = padded_outputs(_level(PADDED, [64] * 4, ["length"] * 4))
    assert why is not None and "64 tokens requested" in why and "--padded-output-tokens" in why


@pytest.mark.parametrize(("texts", "counts", "finish"), [
    (["w " * 120] * 4, [64] * 4, ["length"] * 4),                        # similar texts at the limit: a real run
    (PADDED, [3, 5, 64, 64], ["stop", "stop", "length", "length"]),      # short answers stopped: natural
    (PADDED, [64] * 4, ["length", "length", "stop", "length"]),          # one stopped by itself: not all padded
    (PADDED[:3], [64] * 3, ["length"] * 3),                              # too few requests to judge
])
def test_what_is_not_padding_is_not_flagged(texts: list[str], counts: list[int], finish: list[str]) -> None:
    assert padded_outputs(_level(texts, counts, finish)) is None
