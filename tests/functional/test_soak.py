"""The soak's short form (issue 26, item 3): ``bench/soak.py`` for a 3-minute send window.

5 nodes fully meshed through the soak's TCP proxies, 3 miners, 50 payments per second (the long
form offers 200; this machine is shared), and one round of faults: every kind once (SIGKILL and
restart, SIGSTOP for 30 s, a partition for 60 s, a restart with a skewed clock, a hostile peer),
in an order drawn from the seed. It passes when every fault reconverges, the nodes end on one
best milestone with identical ledgers, every acknowledged payment is VALID exactly once, and no
process grew without bound (bench/soak.py, docs/benchmarks.md "Soak").

Bounded: the send window (180 s, which the first round may overrun by a minute), the load's
confirmation wait and the final agreement (each at most 180 s, usually seconds); about 5 minutes
on a quiet 2-core machine. Timeouts are generous so that a loaded CI machine does not flake.
"""

import logging
from pathlib import Path

import pytest

from bench.soak import FAULT_KINDS, SoakConfig, run_soak

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_soak_short_form_one_chain_one_ledger_every_payment_once(tmp_path: Path) -> None:
    config = SoakConfig(
        minutes=3.0,
        seed=26,
        tps=50.0,
        gap_s=(3.0, 6.0),
        converge_timeout_s=180.0,
        confirm_timeout_s=180.0,
        final_timeout_s=180.0,
        out=tmp_path / "soak",
    )
    report = run_soak(config)
    assert report["failures"] == []
    assert report["faults_by_kind"] == dict.fromkeys(FAULT_KINDS, 1)
    assert report["payments"]["acknowledged"] >= 0.8 * 50 * 180
