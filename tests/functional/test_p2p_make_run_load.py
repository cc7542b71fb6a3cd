"""``make run``'s topology under load (README: transactions must confirm): 3 nodes (node1
dials node0, node2 dials node1, as scripts/devnet.py), a miner on each, 5 tx/s posted to
node1 for 60 s. At least 90 % of the offered txs confirm, and all three nodes end with the
same ledger.

Bounded: 60 s of load, at most 20 s more for the last confirmations, 30 s to agree on one best
milestone with one miner left (two miners' last milestones can tie, and only a later one settles
it) and 20 s once it stops too (about 90 s in all).
"""

import logging
import time
from collections import deque
from pathlib import Path

import pytest

from dagchain.chain import Chain
from dagchain.genesis import FAUCET_ADDRESS
from dagchain.params import DEVNET
from dagchain.storage.memory import MemoryStore
from tests.dagchain.chainkit import key, transfer
from tests.functional.framework import ApiError, NodeProcess, TestNetwork, wait_until
from tests.functional.test_wallet import Miner

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LOAD_S = 60.0
TPS = 5.0
FAUCET_OUTPUTS = 64
PAYEE = key(7)[1]


def _status(node: NodeProcess, txid: str) -> str:
    return str(node.request("GET", f"/v1/txs/{txid}")["status"])


def test_make_run_topology_confirms_90_percent_of_5_tx_s_with_one_ledger(
    network: TestNetwork, tmp_path: Path
) -> None:
    nodes = network.start(3, topology="line")
    network.wait_connected(nodes)
    miners = [Miner(n, tmp_path / f"miner{i}" / "data", rate=4) for i, n in enumerate(nodes)]
    genesis = Chain(DEVNET, MemoryStore()).genesis_id
    # each faucet output is a coin chain: pay 10^6, change back, reuse the change once confirmed
    coins: deque[tuple[bytes, int, int]] = deque(
        (genesis, i, 10**14) for i in range(FAUCET_OUTPUTS)
    )
    waiting: dict[str, tuple[bytes, int]] = {}  # txid -> (its change outpoint value)
    offered: list[str] = []
    try:
        nodes[0].wait(lambda n: n.best()[1] >= 1, 30, "to mine a milestone")
        log.info("Load: %.0f tx/s to node1 for %.0f s, a miner on each node", TPS, LOAD_S)
        started = time.monotonic()
        next_at = started
        polled = started
        while time.monotonic() - started < LOAD_S:
            now = time.monotonic()
            if now - polled >= 1.0:  # recycle the change of confirmed txs
                polled = now
                for txid in list(waiting):
                    if _status(nodes[1], txid) == "confirmed":
                        tx_id, value = waiting.pop(txid)
                        coins.append((tx_id, 1, value))
            if now < next_at:
                time.sleep(min(0.05, next_at - now))
                continue
            next_at += 1.0 / TPS
            if not coins:
                continue
            prev, index, value = coins.popleft()
            pay, fee = 10**6, 1_000
            tx = transfer(
                [(prev, index)], [(pay, PAYEE), (value - pay - fee, FAUCET_ADDRESS)], DEVNET
            )
            offered.append(tx.txid.hex())
            try:
                nodes[1].request("POST", "/v1/txs", {"raw": tx.raw.hex()})
            except ApiError as exc:
                log.info("refused: %s", exc)
                continue
            waiting[tx.txid.hex()] = (tx.txid, value - pay - fee)
        log.info("Offered %d txs; waiting for their confirmation", len(offered))
        need = int(0.9 * len(offered)) + (1 if (0.9 * len(offered)) % 1 else 0)

        def confirmed(node: NodeProcess) -> int:
            return sum(1 for t in offered if _status(node, t) == "confirmed")

        wait_until(lambda: confirmed(nodes[0]) >= need, 20, f"{need} of {len(offered)} confirmed")
        # Two miners' last milestones can tie (equal chainwork): F keeps each node on the one it
        # saw first, and only a later milestone settles it. So one miner mines on until the nodes
        # agree, and a last milestone of its own cannot tie with anything.
        for m in miners[1:]:
            m.stop()
        wait_until(lambda: len({n.best() for n in nodes}) == 1, 30, "one best milestone")
    finally:
        for m in miners:
            m.stop()
    assert len(offered) >= 0.9 * LOAD_S * TPS, "the load did not run at 5 tx/s"
    log.info("Miners stopped: the nodes agree on one best milestone and one ledger")
    wait_until(lambda: len({n.best() for n in nodes}) == 1, 20, "one best milestone")
    counts = [confirmed(n) for n in nodes]
    log.info("confirmed of %d offered, per node: %s", len(offered), counts)
    assert all(c >= need for c in counts), counts
    ledgers = [
        (
            n.request("GET", f"/v1/addresses/{FAUCET_ADDRESS.hex()}"),
            n.request("GET", f"/v1/addresses/{PAYEE.hex()}"),
        )
        for n in nodes
    ]
    assert ledgers[0] == ledgers[1] == ledgers[2]
