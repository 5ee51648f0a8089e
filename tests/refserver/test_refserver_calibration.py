"""The seed profile in the virtual-time simulator meets the seed's targets (virtual time: quick)."""
from __future__ import annotations

import pytest

from specsweep.refserver.calibration import SEED_TABLE, run_calibration


@pytest.mark.parametrize("per_client, minimum", [(4, 16), (2, 8)])
def test_seed_profile_reproduces_the_seed_table(per_client: int, minimum: int) -> None:
    rep = run_calibration(requests_per_client=per_client, min_requests=minimum)
    assert rep.passed, rep.table() + "\n" + str(rep.checks)
    assert [r.concurrency for r in rep.rows] == list(SEED_TABLE)
    for r in rep.rows:
        assert abs(r.base_delta) <= 0.20 and abs(r.mtp_delta) <= 0.20
    assert rep.crossover is not None and 32 <= rep.crossover <= 64
    by_c = {r.concurrency: r for r in rep.rows}
    assert abs(by_c[1].base.mean_user_tok_s / 110 - 1) <= 0.10
    # the MTP arm saturates well below its 48 cap (the pool binds), the baseline near 100
    assert by_c[128].mtp.mean_admitted < 40 and by_c[128].base.mean_admitted > 60
    assert by_c[128].mtp.accept_length == pytest.approx(1.89, rel=0.02)
