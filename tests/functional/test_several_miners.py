"""Two ``dagchain-miner`` processes on two devnet nodes packing one mempool (§8).

With devnet's sortition (c = 1/16, uniform weighting: PROTOCOL.md v2.1 §8.1, §10) two live miners
still sometimes pack the same tx (when S5 assigns it to both their blocks) before either sees the
other's block. What a user relies on: every accepted tx is
VALID exactly once in every node's ledger; a repeat inclusion is INVALID with reason
``double-spend`` (never lost, never counted twice), and no coin is created or lost.
"""

import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from dagchain.genesis import FAUCET_ADDRESS
from tests.functional.framework import NodeProcess, TestNetwork, wait_until
from tests.functional.test_wallet import FAUCET_TOTAL, Miner, ledger, wallet

pytestmark = pytest.mark.integration
log = logging.getLogger("functional.several_miners")


def tx_labels(node: NodeProcess) -> dict[str, Counter[str]]:
    """txid -> its ``tx_status`` labels over every block of the node's best-chain level sets."""
    labels: dict[str, Counter[str]] = {}
    for height in range(node.best()[1] + 1):
        for block_hash in node.level_set(height):
            block = node.request("GET", f"/v1/blocks/{block_hash}")
            for txid, label in zip(block["txids"], block["tx_status"], strict=True):
                labels.setdefault(txid, Counter())[label] += 1
    return labels


def test_two_miners_on_two_nodes_include_each_tx_valid_once_repeats_invalid_double_spend(
    network: TestNetwork, tmp_path: Path
) -> None:
    nodes = network.start(2)
    network.wait_connected(nodes)
    miners = [Miner(n, tmp_path / f"miner{i}" / "data", rate=8) for i, n in enumerate(nodes)]
    try:
        report_file = tmp_path / "load.json"
        log.info("Load: 40 tx/s for 6 s through node1, one miner on each node")
        result = wallet(
            *("--devnet-faucet", "load", "--node", nodes[1].url, "--rate", "40"),
            *("--duration", "6", "--accounts", "8", "--confirm-timeout", "30"),
            *("--report", str(report_file)),
            timeout=120,
        )
        report = json.loads(report_file.read_text())
        load = [t for t in report["txs"] if t["kind"] == "load"]
        accepted = [t for t in load if t["accepted"]]
        assert len(accepted) >= 150, result.stdout
        assert report["confirmed"] == report["exactly_once"] == len(accepted), result.stdout

        log.info("Stop node1's miner, then node0's: its later milestones end any F2 tie")
        miners[1].stop()
        height = nodes[1].best()[1]
        wait_until(lambda: nodes[1].best()[1] >= height + 2, 30, "two more milestones of node0")
        miners[0].stop()
        wait_until(lambda: nodes[0].best() == nodes[1].best(), 30, "one best milestone")
    finally:
        for m in miners:
            m.stop()

    addresses = [FAUCET_ADDRESS.hex(), *report["accounts"]]
    for node in nodes:
        labels = tx_labels(node)
        repeats: Counter[str] = Counter()
        for t in report["txs"]:
            for label, n in labels.get(t["txid"], Counter()).items():
                if label != "valid":
                    repeats[label] += n
        log.info("%s: repeat inclusions by label %s", node.name, dict(repeats))
        assert [t["txid"] for t in accepted if labels[t["txid"]]["valid"] != 1] == [], node.name
        assert set(repeats) <= {"invalid:double-spend"}, (node.name, repeats)
        fees = sum(t["fee"] for t in report["txs"] if labels.get(t["txid"], Counter())["valid"])
        held = sum(int(ledger(node, a)["balance"]) for a in addresses)
        assert held + fees == FAUCET_TOTAL, node.name
