"""A pruned devnet daemon (``--prune-depth``, issue 27 item 1) with real processes: it prunes in
the background, survives SIGKILL in the middle of it and resumes, keeps validating, answers a
pruned body with 410, and a fresh peer that cannot sync from it does not score it."""

import logging

import pytest

from apiclient.core import ApiError
from tests.functional.framework import BlockFactory, TestNetwork

log = logging.getLogger(__name__)

pytestmark = pytest.mark.integration

DEPTH = 20  # devnet's punctuality


def test_a_pruned_node_prunes_survives_sigkill_resumes_and_serves_what_it_has(
    network: TestNetwork,
) -> None:
    a = network.add_node(start=False)
    factory = BlockFactory(miners=3)
    log.info("An unpruned node takes 80 milestones")
    a.start()
    for block in factory.mine_milestones(80):
        a.submit_block(block)
    old = factory.chain.best_chain()[3]
    assert a.status().prune is not None
    assert a.status().prune.bodies_from == 1  # type: ignore[union-attr]

    # Pruning 60 level sets of empty blocks takes milliseconds, so this kill usually lands just
    # after it; tests/dagchain/storage/test_crash.py kills inside pruning steps.
    log.info("Restarted with --prune-depth %d, it is killed with SIGKILL at once", DEPTH)
    a.stop()
    a.extra_args = ["--prune-depth", str(DEPTH)]
    a.start()
    a.kill()
    log.info("Restarted after SIGKILL, it resumes and keeps bodies of the last %d only", DEPTH)
    a.start()
    best_height = a.best()[1]
    a.wait(
        lambda n: n.status().prune.bodies_from == best_height - DEPTH + 1,  # type: ignore[union-attr]
        30,
        "to prune down to the depth",
    )
    prune = a.status().prune
    assert prune is not None
    assert prune.depth == DEPTH
    with pytest.raises(ApiError) as gone:
        a.request("GET", f"/v1/blocks/{old.hex()}/raw")
    assert (gone.value.status, gone.value.code) == (410, "pruned")
    assert a.request("GET", f"/v1/blocks/{old.hex()}")["pruned"] is True

    log.info("It still validates and takes new blocks; pruning follows the head")
    for block in factory.mine_milestones(10):
        a.submit_block(block)
    want = factory.chain.best_id.hex()
    a.wait(lambda n: n.best()[0] == want, 30, "to take the new milestones")
    a.wait(
        lambda n: n.status().prune.bodies_from == n.best()[1] - DEPTH + 1,  # type: ignore[union-attr]
        30,
        "to prune the new level sets too",
    )

    log.info("A fresh node dials it: no headers below its bodies, and no score for that")
    b = network.add_node([a])
    network.wait_connected([a, b])
    b.wait(lambda n: n.status().synced, 30, "to end initial sync")
    assert b.best()[1] == 0
    assert [row.score for row in b.peer_rows()] == [0]
    assert a.peer_count() == 1
