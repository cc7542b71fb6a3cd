"""Scenario 3, partition and heal: two groups mine apart, reconnect, converge (§4.2, §4.4)."""

import logging

import pytest

from dagchain.params import DEVNET
from tests.dagchain.chainkit import key, transfer
from tests.functional.framework import BlockFactory, TestNetwork

log = logging.getLogger(__name__)

pytestmark = pytest.mark.integration


def test_groups_mining_apart_converge_on_the_heavier_chain(network: TestNetwork) -> None:
    a = network.add_node()
    b = network.add_node([a])
    c = network.add_node()
    d = network.add_node([c])
    network.wait_connected([a, b, c, d])
    log.info("Both groups start from one common history")
    common = BlockFactory(miners=2)
    for block in common.mine(30):
        a.submit_block(block)
        c.submit_block(block)
    network.wait_same_best([a, b, c, d], common.chain.best_id.hex())

    log.info("Group {c, d} confirms a faucet payment on its own (lighter) chain")
    light = common.fork(first_key=300)
    genesis = common.chain.genesis_id
    light_blocks = light.mine(12)
    # S5 (devnet c = 1/16): signed so that the next block's previous link is assigned it.
    payment = transfer(
        [(genesis, 5)], [(10**13, key(77)[1])], DEVNET, assigned_to=[light.next_previous()]
    )
    light_blocks += light.mine(1, txs=[payment])
    light_blocks += light.mine_milestones(3)
    assert light.tx_status(payment.txid) == "valid"
    for block in light_blocks:
        c.submit_block(block)
    log.info("Group {a, b} mines more milestones apart")
    heavy = common.fork(first_key=200)
    heavy_blocks = heavy.mine_milestones(light.chain.best_height - common.chain.best_height + 6)
    for block in heavy_blocks:
        a.submit_block(block)
    network.wait_same_best([c, d], light.chain.best_id.hex())
    network.wait_same_best([a, b], heavy.chain.best_id.hex())
    assert d.request("GET", f"/v1/txs/{payment.txid.hex()}")["status"] == "confirmed"

    log.info("Heal: node3 restarts dialing both groups; everyone adopts the heavier chain")
    d.kill()
    d.peers = [c.p2p_address, a.p2p_address]
    d.start()
    network.wait_same_best([a, b, c, d], heavy.chain.best_id.hex(), timeout=60)
    log.info("The losing side's payment is back in the mempool, spendable on the winner")
    for node in (c, d):
        node.wait(
            lambda n: payment.txid.hex() in n.request("GET", "/v1/mempool")["txids"],
            20,
            "to hold the payment in its mempool again",
        )
        # its old block is an ordinary pending block now (F3), so the API says pending
        tx = node.request("GET", f"/v1/txs/{payment.txid.hex()}")
        assert (tx["status"], tx["confirmations"]) == ("pending", 0)
