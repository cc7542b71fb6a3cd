"""``dagchain-wallet`` on real devnet nodes with a real ``dagchain-miner``.

- Faucet -> wallet A -> wallet B across three connected nodes: change outputs and balances match
  the ledger of every node.
- An HD wallet receives on several addresses, pays from two of them at once with the change to a
  fresh internal address each time, and a restore of its mnemonic into a new file through
  ``--node`` finds every coin (issue 27 item 2).
- Mempool across a restart: a conflicting spend is refused with 409; after a restart the pool is
  empty (not persisted, docs/node.md) and the same tx is accepted again.
- ``send --wait`` across a node restart: the payment the restarted node forgot (its pool is not
  kept) is resubmitted by the wallet and confirms.
- A bounded load run (8 tx/s for 15 s): every accepted tx is VALID in exactly one best-chain
  block on every node, and no coin is created or lost.
"""

import json
import logging
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dagchain.crypto import encode_address
from dagchain.genesis import FAUCET_ADDRESS, FAUCET_SECRET
from dagchain.params import DEVNET
from dagchain.transactions import TxKind, TxOut, sign_transaction
from dagchain.types import TxId
from tests.functional.framework import (
    REPO_ROOT,
    ApiError,
    NodeProcess,
    TestNetwork,
    spawn,
    wait_until,
)
from wallet import hd

pytestmark = pytest.mark.integration
log = logging.getLogger("functional.wallet")

FAUCET_COINS = 10**14
FAUCET_TOTAL = 64 * FAUCET_COINS
GENESIS = "d5475c0b8b110e9dcc2f71742e6d4e72454f32eee3b4fb4a5cc669063bc5d5ee"
PAYOUT = encode_address(DEVNET.hrp, bytes(range(32)))  # the miner's rewards go elsewhere


class Miner:
    """A ``dagchain-miner`` process mining on one node; SIGKILLed at teardown."""

    def __init__(self, node: NodeProcess, datadir: Path, rate: float) -> None:
        self.log_path = datadir.parent / "miner.log"
        datadir.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            *(sys.executable, "-m", "miner.cli", "--node", node.url, "--address", PAYOUT),
            *("--token-file", str(node.datadir / "api.token"), "--datadir", str(datadir)),
            *("--rate", str(rate), "--status-interval", "5"),
        ]
        with self.log_path.open("ab") as out:
            self.process = spawn(cmd, out)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(5)


@pytest.fixture
def miners() -> Iterator[list[Miner]]:
    started: list[Miner] = []
    yield started
    for m in started:
        m.stop()
        print(f"----- {m.log_path}\n{m.log_path.read_text()[-3000:]}")


def wallet(
    *args: str, password: str = "pw-1", check: bool = True, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run ``dagchain-wallet`` (as ``python -m wallet.cli``) with the password in the env."""
    env = {**os.environ, "DAGCHAIN_WALLET_PASSWORD": password}
    result = subprocess.run(
        [sys.executable, "-m", "wallet.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def ledger(node: NodeProcess, address: str) -> dict[str, Any]:
    result: dict[str, Any] = node.request("GET", f"/v1/addresses/{address}")
    return result


def balance_lines(node: NodeProcess, wallet_file: Path) -> dict[str, str]:
    out = wallet("--wallet", str(wallet_file), "balance", "--node", node.url).stdout
    return dict(line.split(": ", 1) for line in out.strip().splitlines())


def settled(nodes: list[NodeProcess], address: str, amount: int) -> bool:
    """Every node shows ``amount`` confirmed and nothing pending for ``address``."""
    return all(
        ledger(n, address)["balance"] == ledger(n, address)["pending_balance"] == str(amount)
        for n in nodes
    )


def test_faucet_to_a_to_b_with_change_matches_every_nodes_ledger(
    network: TestNetwork, miners: list[Miner], tmp_path: Path
) -> None:
    nodes = network.start(3)
    network.wait_connected(nodes)
    miners.append(Miner(nodes[0], tmp_path / "miner" / "data", rate=8))
    a_file, b_file = tmp_path / "a.json", tmp_path / "b.json"
    a, a_words = wallet("--wallet", str(a_file), "new").stdout.strip().splitlines()
    b = wallet("--wallet", str(b_file), "new", password="pw-2").stdout.strip().splitlines()[0]
    assert wallet("--wallet", str(a_file), "address").stdout.strip() == a
    a_change = hd_address(a_words, hd.CHANGE, 0)

    log.info("Faucet pays A 10^9 units through node1")
    wallet("--devnet-faucet", "send", "--node", nodes[1].url, "--to", a, "--amount", "1000000000")
    wait_until(lambda: settled(nodes, a, 10**9), 30, "A funded on every node")

    log.info("A pays B 3*10^8 with fee 1,000 through node2; the change goes to A's change/0")
    txid = wallet(
        *("--wallet", str(a_file), "send", "--node", nodes[2].url, "--to", b),
        *("--amount", "300000000", "--fee", "1000"),
    ).stdout.strip()
    change = 10**9 - 3 * 10**8 - 1000
    wait_until(
        lambda: settled(nodes, a_change, change) and settled(nodes, b, 3 * 10**8), 30, "A -> B"
    )
    for node in nodes:
        a_utxos = ledger(node, a_change)["utxos"]
        b_utxos = ledger(node, b)["utxos"]
        assert [(u["txid"], u["index"], u["amount"]) for u in b_utxos] == [(txid, 0, "300000000")]
        assert [(u["txid"], u["index"], u["amount"]) for u in a_utxos] == [(txid, 1, str(change))]
        assert ledger(node, a)["utxos"] == []
        assert node.request("GET", f"/v1/txs/{txid}")["status"] == "confirmed"
        assert balance_lines(node, a_file)["balance"] == str(change)
        assert balance_lines(node, b_file)["balance"] == str(3 * 10**8)

    log.info("Wrong password and overspending are one-line exit-2 errors; nothing is sent")
    wrong = wallet(
        *("--wallet", str(b_file), "send", "--node", nodes[0].url, "--to", a, "--amount", "5"),
        password="nope",
        check=False,
    )
    assert (wrong.returncode, wrong.stderr.count("\n")) == (2, 1)
    assert "wrong password" in wrong.stderr
    broke = wallet(
        *("--wallet", str(b_file), "send", "--node", nodes[0].url, "--to", a),
        *("--amount", str(3 * 10**8), "--fee", "1"),  # one unit too many
        password="pw-2",
        check=False,
    )
    assert broke.returncode == 2
    assert "insufficient funds" in broke.stderr
    assert settled(nodes, b, 3 * 10**8)


def hd_address(words: str, chain: int, index: int) -> str:
    """The devnet display address at ``chain``/``index`` of a mnemonic (docs/wallet.md)."""
    account = hd.Account.from_seed(hd.seed_of(words), "devnet")
    return encode_address(DEVNET.hrp, account.address(chain, index))


def wallet_balance(node: NodeProcess, wallet_file: Path) -> int:
    return int(balance_lines(node, wallet_file)["balance"])


def test_hd_wallet_receives_on_several_addresses_and_a_restore_finds_every_coin(
    network: TestNetwork, miners: list[Miner], tmp_path: Path
) -> None:
    (node,) = network.start(1)
    miners.append(Miner(node, tmp_path / "miner" / "data", rate=8))
    a_file = tmp_path / "a.json"
    first, words = wallet("--wallet", str(a_file), "new").stdout.strip().splitlines()
    receive = [first] + [
        wallet("--wallet", str(a_file), "receive").stdout.strip() for _ in range(2)
    ]
    assert receive == [hd_address(words, hd.RECEIVE, i) for i in range(3)]

    log.info("The faucet pays 1, 2 and 3 * 10^9 to A's three receive addresses")
    for address, amount in zip(receive, (1, 2, 3), strict=True):
        wallet(
            *("--devnet-faucet", "send", "--node", node.url, "--to", address),
            *("--amount", str(amount * 10**9), "--fee", "1000"),
        )
    wait_until(lambda: wallet_balance(node, a_file) == 6 * 10**9, 60, "A's three coins")
    assert balance_lines(node, a_file)["wallet"] == "hd"

    log.info("A pays 3.5 * 10^9: coins of two addresses, each signed by its key; change/0")
    to = encode_address(DEVNET.hrp, bytes(range(1, 33)))
    wallet(
        *("--wallet", str(a_file), "send", "--node", node.url, "--to", to),
        *("--amount", str(3_500_000_000), "--fee", "1000"),
    )
    change0 = hd_address(words, hd.CHANGE, 0)
    wait_until(lambda: settled([node], to, 3_500_000_000), 60, "the payment to confirm")
    assert [settled([node], a, 0) for a in receive] == [False, True, True]
    assert settled([node], change0, 1_499_999_000)

    log.info("A pays again: change/0 is spent, the change goes to a fresh one, change/1")
    wallet(
        *("--wallet", str(a_file), "send", "--node", node.url, "--to", to),
        *("--amount", str(10**8), "--fee", "1000"),
    )
    change1 = hd_address(words, hd.CHANGE, 1)
    left = 6 * 10**9 - 3_600_000_000 - 2000
    wait_until(lambda: wallet_balance(node, a_file) == left, 60, "the second payment")
    assert settled([node], change0, 0)
    assert settled([node], change1, 1_399_998_000)
    assert "next_change: 2" in wallet("--wallet", str(a_file), "info").stdout

    log.info("Restore the mnemonic into a new file through the node: every coin is found")
    b_file = tmp_path / "restored.json"
    found = subprocess.run(
        [
            *(sys.executable, "-m", "wallet.cli", "--wallet", str(b_file), "restore"),
            *("--node", node.url, "--gap-limit", "3"),
        ],
        input=words + "\n",
        cwd=REPO_ROOT,
        env={**os.environ, "DAGCHAIN_WALLET_PASSWORD": "pw-3"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    lines = found.stdout.strip().splitlines()
    assert lines[0] == first
    assert dict(line.split(": ", 1) for line in lines[1:]) == {
        "receive_addresses": "1",  # receive/1 and /2 are spent: they look unused
        "change_addresses": "2",
        "utxos": "2",
        "balance": str(left),
    }
    assert wallet_balance(node, b_file) == left == wallet_balance(node, a_file)

    log.info("The restored wallet pays: its change goes to change/2, never used before")
    wallet(
        *("--wallet", str(b_file), "send", "--node", node.url, "--to", to),
        *("--amount", str(10**8), "--fee", "1000"),
        password="pw-3",
    )
    change2 = hd_address(words, hd.CHANGE, 2)
    wait_until(lambda: settled([node], change2, 1_299_997_000), 60, "change to change/2")


def faucet_payment(index: int, amount: int, to: bytes) -> bytes:
    tx = sign_transaction(
        TxKind.TRANSFER,
        [(TxId(bytes.fromhex(GENESIS)), index)],
        [TxOut(amount, to)],  # type: ignore[arg-type]
        [FAUCET_SECRET],
        DEVNET,
        aux_rand=os.urandom(32),
    )
    return tx.raw


def test_conflicts_get_409_and_the_mempool_is_not_kept_across_a_restart(
    network: TestNetwork,
) -> None:
    node = network.start(1)[0]
    first = faucet_payment(5, FAUCET_COINS - 100, bytes(32))
    rival = faucet_payment(5, FAUCET_COINS - 200, bytes(32))
    txid = node.request("POST", "/v1/txs", {"raw": first.hex()})["txid"]
    with pytest.raises(ApiError) as err:
        node.request("POST", "/v1/txs", {"raw": rival.hex()})
    assert (err.value.status, err.value.body["error"]["code"]) == (409, "conflict")

    log.info("Restart: the mempool starts empty, the tx is unknown and can be submitted again")
    assert node.stop() == 0
    node.start()
    assert node.request("GET", "/v1/mempool")["size"] == 0
    assert node.request("GET", f"/v1/txs/{txid}")["status"] == "unknown"
    assert node.request("POST", "/v1/txs", {"raw": rival.hex()})["txid"] != txid
    with pytest.raises(ApiError) as again:
        node.request("POST", "/v1/txs", {"raw": first.hex()})
    assert again.value.status == 409  # first seen wins again, now for the rival


def test_a_wallet_of_another_network_is_refused_by_name_and_nothing_is_sent(
    network: TestNetwork, tmp_path: Path
) -> None:
    """A testnet wallet pointed at a devnet node: ``send``, ``balance`` and ``load`` say which
    network each is on (they said 'bad address' or showed an empty balance), and the pool is
    untouched."""
    node = network.start(1)[0]
    path = tmp_path / "testnet.json"
    wallet("--wallet", str(path), "new", "--network", "testnet")
    to = wallet("--wallet", str(path), "address").stdout.strip()
    assert to.startswith("tdag1")
    want = f"is for testnet, but the node at {node.url} runs devnet"
    load = ("load", "--rate", "1", "--duration", "1")
    for args in (("send", "--to", to, "--amount", "5"), ("balance",), load):
        result = wallet("--wallet", str(path), *args, "--node", node.url, check=False)
        assert result.returncode == 2
        assert want in result.stderr
        assert result.stderr.count("\n") == 1
    assert node.request("GET", "/v1/mempool")["size"] == 0


def test_send_wait_resubmits_a_payment_the_restarted_node_forgot(
    network: TestNetwork, miners: list[Miner], tmp_path: Path
) -> None:
    node = network.start(1)[0]
    to = encode_address(DEVNET.hrp, bytes(range(1, 33)))
    out, err = tmp_path / "send.out", tmp_path / "send.err"
    log.info("send --wait with no miner running: the payment waits in the node's pool")
    with out.open("w") as out_file, err.open("w") as err_file:
        send = subprocess.Popen(
            [
                *(
                    sys.executable,
                    "-m",
                    "wallet.cli",
                    "--devnet-faucet",
                    "send",
                    "--node",
                    node.url,
                ),
                *("--to", to, "--amount", "123456", "--wait", "90"),
            ],
            cwd=REPO_ROOT,
            stdout=out_file,
            stderr=err_file,
            start_new_session=True,
        )
    try:
        wait_until(lambda: node.api.mempool().size == 1, 30, "the payment in the pool")
        (txid,) = node.api.mempool().txids

        log.info("Restart the node: it forgets the payment; then a miner starts")
        assert node.stop() == 0
        node.start()
        assert node.api.tx(txid).status in ("unknown", "mempool")
        miners.append(Miner(node, tmp_path / "miner" / "data", rate=8))
        assert send.wait(120) == 0, err.read_text()
    finally:
        if send.poll() is None:
            send.kill()
            send.wait(5)
    stderr = err.read_text()
    assert out.read_text().strip() == txid, stderr
    assert "unknown to the node (dropped from its pool): resubmitted" in stderr
    assert node.api.tx(txid).status == "confirmed"
    assert ledger(node, to)["balance"] == "123456"


def valid_inclusions(node: NodeProcess) -> Counter[str]:
    """txid -> number of best-chain blocks in which it is VALID, from every level set."""
    counts: Counter[str] = Counter()
    for height in range(node.best()[1] + 1):
        for block_hash in node.level_set(height):
            block = node.request("GET", f"/v1/blocks/{block_hash}")
            for txid, label in zip(block["txids"], block["tx_status"], strict=True):
                counts[txid] += label == "valid"
    return counts


def test_bounded_load_confirms_every_accepted_tx_once_and_keeps_every_coin(
    network: TestNetwork, miners: list[Miner], tmp_path: Path
) -> None:
    nodes = network.start(3)
    network.wait_connected(nodes)
    miner = Miner(nodes[0], tmp_path / "miner" / "data", rate=8)
    miners.append(miner)
    report_file = tmp_path / "load.json"
    log.info("Load: 8 tx/s for 15 s from the faucet through node1, 4 accounts, POST /v1/txs")
    result = wallet(
        *("--devnet-faucet", "load", "--node", nodes[1].url, "--rate", "8", "--duration", "15"),
        *("--accounts", "4", "--batch", "1", "--confirm-timeout", "30"),
        *("--report", str(report_file)),
        timeout=150,
    )
    assert result.stdout.strip().splitlines()[-1].startswith("confirmed_tps: ")
    report = json.loads(report_file.read_text())
    load = [t for t in report["txs"] if t["kind"] == "load"]
    accepted = [t for t in load if t["accepted"]]
    assert len(accepted) >= 100, result.stdout
    assert report["confirmed"] == report["exactly_once"] == len(accepted), result.stdout

    log.info("Stop mining; every node settles on one best chain")
    miner.stop()
    best = nodes[1].best()[0]
    network.wait_same_best(nodes, best, timeout=30)
    addresses = [FAUCET_ADDRESS.hex(), *report["accounts"]]
    for node in nodes:
        counts = valid_inclusions(node)
        assert [t["txid"] for t in accepted if counts[t["txid"]] != 1] == [], node.name
        fees = sum(t["fee"] for t in report["txs"] if counts[t["txid"]] == 1)
        assert not any(counts[t["txid"]] > 1 for t in report["txs"])
        held = sum(int(ledger(node, a)["balance"]) for a in addresses)
        assert held + fees == FAUCET_TOTAL, node.name
        assert all(
            ledger(node, a)["pending_balance"] == ledger(node, a)["balance"] for a in addresses
        )


def test_batched_load_posts_batches_and_confirms_every_accepted_tx_once(
    network: TestNetwork, miners: list[Miner], tmp_path: Path
) -> None:
    """``dagchain-wallet load --batch 16`` sends through ``POST /v1/txs/batch``: far fewer
    requests than txs (at 100 tx/s a batch leaves after 50 ms with about 5), and every tx the
    node accepted is VALID exactly once."""
    (node,) = network.start(1)
    miners.append(Miner(node, tmp_path / "miner" / "data", rate=8))
    report_file = tmp_path / "load.json"
    result = wallet(
        *("--devnet-faucet", "load", "--node", node.url, "--rate", "100", "--duration", "5"),
        *("--accounts", "4", "--batch", "16", "--confirm-timeout", "30"),
        *("--report", str(report_file)),
        timeout=150,
    )
    report = json.loads(report_file.read_text())
    accepted = [t for t in report["txs"] if t["kind"] == "load" and t["accepted"]]
    assert len(accepted) >= 400, result.stdout
    assert report["confirmed"] == report["exactly_once"] == len(accepted), result.stdout
    assert report["requests"] * 3 <= report["attempts"], result.stdout
    bad = wallet(
        "--devnet-faucet",
        "load",
        "--node",
        node.url,
        "--rate",
        "1",
        "--duration",
        "1",
        "--batch",
        "1001",
        check=False,
    )
    assert bad.returncode != 0
    assert "--batch must be 1..1000" in bad.stderr
