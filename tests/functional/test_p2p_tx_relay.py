"""Tx relay in ``make run``'s topology (PROTOCOL.md P11, docs/p2p.md): a payment posted to
node1 reaches the miner's node, node0, and confirms everywhere, even when node1 accepted it
before it was connected to node0 (each side announces its mempool once a connection is ready,
P11)."""

import logging
from pathlib import Path

import pytest

from dagchain.chain import Chain
from dagchain.params import DEVNET
from dagchain.storage.memory import MemoryStore
from tests.dagchain.chainkit import key, transfer
from tests.functional.framework import NodeProcess, TestNetwork, wait_until
from tests.functional.test_wallet import Miner

log = logging.getLogger(__name__)

pytestmark = pytest.mark.integration


def _tx_state(node: NodeProcess, txid: str) -> str:
    return str(node.request("GET", f"/v1/txs/{txid}")["status"])


def _knows(node: NodeProcess, txid: str) -> bool:
    return _tx_state(node, txid) in ("mempool", "pending", "confirmed")


@pytest.mark.parametrize("topology", ["line", "star"])
def test_a_payment_posted_to_node1_before_it_reached_node0_gets_to_the_miner_and_confirms(
    network: TestNetwork, tmp_path: Path, topology: str
) -> None:
    """node1 dials node0; node2 dials node1 (``line``, as scripts/devnet.py) or node0 (``star``);
    the only miner mines on node0; the payment is posted to node1, as the load does, while
    node1's dial to node0 has not succeeded yet (in ``make run`` every process starts at once)."""
    node0 = network.add_node(start=False)
    node1 = network.add_node([node0], start=False)
    node2 = network.add_node([node1 if topology == "line" else node0], start=False)
    node1.start()
    node2.start()
    genesis = Chain(DEVNET, MemoryStore()).genesis_id
    payment = transfer([(genesis, 11)], [(10**12, key(6)[1])], DEVNET)
    txid = payment.txid.hex()
    log.info("The payment is posted to node1 before node0 is up")
    node1.request("POST", "/v1/txs", {"raw": payment.raw.hex()})
    if topology == "line":
        network.wait_connected([node1, node2])
        node2.wait(lambda n: _knows(n, txid), 20, "to hold the payment")
    log.info("node0 and its miner start; node1 reaches node0 by its next dial")
    node0.start()
    miner = Miner(node0, tmp_path / "miner" / "data", rate=4)
    try:
        network.wait_connected([node0, node1, node2])
        wait_until(lambda: node0.peer_count() == 2 or node1.peer_count() == 2, 30, "all links")
        for node in (node0, node1, node2):
            node.wait(lambda n: _knows(n, txid), 20, "to know the payment")
        for node in (node0, node1, node2):
            node.wait(lambda n: _tx_state(n, txid) == "confirmed", 30, "to confirm the payment")
    finally:
        miner.stop()
