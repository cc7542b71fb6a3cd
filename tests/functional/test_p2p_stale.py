"""P14 stale relay filter on real nodes (PROTOCOL.md §11.6, §11.7; docs/p2p.md).

A fake peer pushes a valid block whose milestone link is genesis to a devnet node 22 milestones
ahead (punctuality 20): the node drops it without storing it, without penalty and without
remembering it, and counts it in /metrics. The same block is accepted when the node fetches it
for an orphan, and a fresh node catching up from that node fetches a stale pending block in sync.
"""

import logging

import pytest

from dagchain.blocks import Block
from p2p import wire
from tests.dagchain.builders import address_of_secret, build_block, secret_of
from tests.functional.framework import BlockFactory, FakePeer, NodeProcess, TestNetwork

log = logging.getLogger(__name__)

pytestmark = pytest.mark.integration

PUNCTUALITY = 20  # devnet


def stale_registration(factory: BlockFactory, key: int) -> Block:
    """A valid registration block whose milestone link is genesis (height 0)."""
    genesis = factory.chain.genesis_id
    return build_block(
        factory.chain,
        previous=genesis,
        milestone=genesis,
        register=address_of_secret(secret_of(key)),
    )


def p14_drops(node: NodeProcess) -> float:
    return node.metric("dagchain_rejected_total", kind="block", reason="P14")


def test_a_stale_relayed_block_is_dropped_unpenalised_and_still_accepted_when_needed(
    network: TestNetwork,
) -> None:
    (node,) = network.start(1)
    factory = BlockFactory(miners=2)
    for block in factory.mine_milestones(PUNCTUALITY + 2):
        node.submit_block(block)
    best = factory.chain.best_id.hex()
    network.wait_same_best([node], best, timeout=10)
    stale = stale_registration(factory, key=60)

    log.info("A fake peer pushes a block whose milestone link is 22 below the node's best")
    peer = FakePeer(node)
    try:
        peer.connect()
        peer.send(wire.BlockMsg(stale.raw))
        peer.barrier()
        assert not node.has_block(stale.id), "the stale relayed block was stored"
        assert p14_drops(node) == 1
        (row,) = [r for r in node.peer_rows() if r.node_id == peer.node_id.hex()]
        assert row.score == 0, "a P14 drop was penalised"

        log.info("Its child (recent enough) is an orphan: the node fetches the stale parent")
        factory.add(stale)
        child = build_block(
            factory.chain, previous=stale.id, milestone=factory.chain.best_chain()[PUNCTUALITY - 1]
        )
        peer.send(wire.BlockMsg(child.raw))
        peer.wait_for(
            lambda m: isinstance(m, wire.GetData) and any(i == stale.id for _, i in m.items),
            10,
            "the node to getdata the orphan's stale parent",
        )
        peer.send(wire.BlockMsg(stale.raw))
        peer.barrier()
        node.wait(lambda n: n.has_block(stale.id) and n.has_block(child.id), 10, "to accept both")
        assert p14_drops(node) == 1
        (row,) = [r for r in node.peer_rows() if r.node_id == peer.node_id.hex()]
        assert row.score == 0
        assert not peer.is_closed()
    finally:
        peer.close()

    log.info("A fresh node catching up fetches a stale pending block during sync (P9 exempt)")
    pending_stale = stale_registration(factory, key=61)
    node.submit_block(pending_stale)
    fresh = network.add_node([node])
    network.wait_same_best([fresh], best, timeout=15)
    want = node.status().blocks
    fresh.wait(lambda n: n.status().blocks == want, 10, f"to hold all {want} blocks")
    assert fresh.has_block(pending_stale.id), "P14 dropped a block fetched in sync"
    assert p14_drops(fresh) == 0
