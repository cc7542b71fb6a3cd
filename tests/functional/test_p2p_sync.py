"""Scenario 2, late join: a fresh node downloads a DAG of 2,000+ blocks (PROTOCOL.md §11.4)."""

import logging
import time

import pytest

from tests.functional.framework import BlockFactory, TestNetwork

log = logging.getLogger(__name__)

pytestmark = pytest.mark.integration

BLOCKS = 2_000


def test_a_fresh_node_reaches_the_same_best_milestone_and_ledger(network: TestNetwork) -> None:
    a, b = network.start(2)
    network.wait_connected([a, b])
    factory = BlockFactory(miners=4)
    started = time.monotonic()
    blocks = factory.mine(BLOCKS)
    log.info("Built %d blocks in %.1f s; submit them to node0", BLOCKS, time.monotonic() - started)
    started = time.monotonic()
    for block in blocks:
        a.submit_block(block)
    log.info("Submitted in %.1f s", time.monotonic() - started)
    best = factory.chain.best_id.hex()
    network.wait_same_best([a, b], best, timeout=60)
    log.info("A fresh node joins node1 and syncs by milestone locator and level sets")
    started = time.monotonic()
    c = network.add_node([b])
    network.wait_same_best([c], best, timeout=60)
    c.wait(lambda n: n.status().blocks == BLOCKS + 1, 30, "to hold every block")
    c.wait(lambda n: n.status().synced, 10, "to report synced")
    log.info("Synced %d blocks in %.1f s", BLOCKS, time.monotonic() - started)
    assert c.ledger_digest() == a.ledger_digest()
