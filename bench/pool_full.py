"""What a full mempool costs per tx it refuses (docs/protocol.md decision 41).

A devnet chain (tests/dagchain/chainkit.py) pays N coins to one key; a NodeService with a pool
of ``--pool`` txs takes the first ``--pool`` payments and refuses the rest (503
``mempool-full`` at the API). Prints the CPU microseconds per refused tx and how many
signature checks the refusals cost. Run it on two trees (``PYTHONPATH=<tree>``) to compare.

    python bench/pool_full.py --coins 2000 --pool 200
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dagchain.mempool import Mempool, MempoolFull
from dagchain.params import DEVNET
from p2p.service import NodeService
from tests.dagchain.chainkit import Node, key, transfer

OUTPUTS_PER_SPLIT = 50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coins", type=int, default=2000)
    ap.add_argument("--pool", type=int, default=200)
    args = ap.parse_args()
    node = Node(DEVNET)
    service = NodeService(DEVNET, node.chain, Mempool(DEVNET), lambda: node.now_ms)
    _, alice = key(2)
    bob_secret, bob = key(3)
    _, carol = key(4)
    warm = [node.build(node.genesis, register=alice, ms=True)]
    service.submit_block(warm[0].raw)
    for _ in range(DEVNET.sortition_warmup - 1):
        warm.append(node.build(warm[-1].id, ms=True))
        service.submit_block(warm[-1].raw)
    coin: tuple[bytes, int] = (node.genesis, 0)
    found = node.chain.get_utxo(*coin)
    assert found is not None
    left, faucet = found.amount, found.address
    payments = []
    previous = warm[-1]
    for _ in range(args.coins // OUTPUTS_PER_SPLIT):  # one split per block: §7.5 takes no
        left -= OUTPUTS_PER_SPLIT * 1_000  # child of an unconfirmed tx
        outs = [(1_000, bob)] * OUTPUTS_PER_SPLIT + [(left, faucet)]
        split = transfer([coin], outs, DEVNET, assigned_to=[previous.id])
        coin = (split.txid, OUTPUTS_PER_SPLIT)
        previous = node.build(previous.id, txs=[split], ms=True)
        service.submit_block(previous.raw)
        payments += [
            transfer([(split.txid, j)], [(995, carol)], DEVNET, bob_secret)
            for j in range(OUTPUTS_PER_SPLIT)
        ]
    service.mempool = Mempool(DEVNET, max_txs=args.pool)
    for tx in payments[: args.pool]:
        service.submit_tx(tx.raw)
    rest = payments[args.pool :]
    checks = node.chain.signature_checks
    refused = 0
    started = time.process_time()
    for tx in rest:
        try:
            service.submit_tx(tx.raw)
        except MempoolFull:
            refused += 1
    cpu = time.process_time() - started
    print(
        f"refused {refused} of {len(rest)}: {cpu / max(1, len(rest)) * 1e6:.1f} CPU us per tx, "
        f"{node.chain.signature_checks - checks} signature checks"
    )


if __name__ == "__main__":
    main()
