"""Scenario 1, relay: blocks submitted to one node of 3 reach all (PROTOCOL.md §11.5 P11)."""

import logging

import pytest

from dagchain.chain import Chain
from dagchain.params import DEVNET
from dagchain.storage.memory import MemoryStore
from tests.dagchain.chainkit import key, transfer
from tests.functional.framework import BlockFactory, TestNetwork

log = logging.getLogger(__name__)

pytestmark = pytest.mark.integration


def test_blocks_submitted_to_one_node_reach_all_and_agree_on_level_sets(
    network: TestNetwork,
) -> None:
    a, b, c = network.start(3, topology="line")
    network.wait_connected([a, b, c])
    factory = BlockFactory(miners=3)
    log.info("Submit 60 real-PoW blocks to node0 only; node2 hears of them through node1")
    blocks = factory.mine(60)
    for block in blocks:
        a.submit_block(block)
    best = factory.chain.best_id.hex()
    network.wait_same_best([a, b, c], best, timeout=30)
    for node in (b, c):
        node.wait(lambda n: n.status().blocks == len(blocks) + 1, 30, "to hold every block")
    log.info("Every level set agrees, block for block, in total order")
    height = factory.chain.best_height
    for h in range(height + 1):
        sets = [n.level_set(h) for n in (a, b, c)]
        assert sets[0] == sets[1] == sets[2], f"level set {h} differs"
        delta = factory.chain.level_set(factory.chain.best_chain()[h])
        assert delta is not None
        assert sets[0] == [bytes(x).hex() for x in delta.order]
    log.info("/metrics counts the frames each node wrote: node1 relayed every block to node2")
    sent = "dagchain_p2p_messages_sent_total"
    assert b.metric(sent, type="block") >= len(blocks)
    assert b.metric("dagchain_p2p_bytes_sent_total", type="block") >= sum(
        len(block.raw) for block in blocks
    )
    assert b.metric(sent, type="hello") == 2  # one per connection
    assert c.metric(sent, type="block") == 0  # its one peer sent it every block
    assert a.metric(sent, type="block") >= len(blocks)


def test_a_transaction_submitted_to_one_node_reaches_every_mempool(network: TestNetwork) -> None:
    a, b, c = network.start(3, topology="line")
    network.wait_connected([a, b, c])
    log.info("A faucet payment posted to node0 is announced by batched inv, hop by hop")
    payment = transfer(
        [(Chain(DEVNET, MemoryStore()).genesis_id, 9)], [(10**12, key(5)[1])], DEVNET
    )
    answer = a.request("POST", "/v1/txs", {"raw": payment.raw.hex()})
    assert answer["txid"] == payment.txid.hex()
    for node in (b, c):
        node.wait(
            lambda n: payment.txid.hex() in n.request("GET", "/v1/mempool")["txids"],
            20,
            "to hold the payment in its mempool",
        )
