"""§7.5 mempool policy through NodeService on a real devnet Chain.

The pool's own rules are tested in tests/dagchain/test_mempool.py; these check what a node does
with them: eviction at a byte cap keeps the best fee rates, a conflicting spend is refused, and a
reorganisation that makes a pool tx's input spent elsewhere drops that tx.
"""

import pytest

from dagchain.blocks import Block
from dagchain.chain import BlockStatus
from dagchain.errors import InvalidTransaction
from dagchain.mempool import Mempool, MempoolConflict, MempoolFull
from dagchain.params import DEVNET
from dagchain.transactions import Transaction
from p2p.service import NodeService
from tests.dagchain.chainkit import Node, key, transfer

FAUCET_COINS = 10**14
_, ALICE = key(2)
_, BOB = key(3)
_, CAROL = key(4)


def service(max_bytes: int | None = None) -> tuple[Node, NodeService]:
    node = Node(DEVNET)
    pool = Mempool(DEVNET, max_bytes=max_bytes)
    return node, NodeService(DEVNET, node.chain, pool, lambda: node.now_ms)


def pay(index: int, fee: int) -> Transaction:
    """Faucet output ``index`` to Bob, paying ``fee`` (every such tx has the same size)."""
    return transfer([(Node(DEVNET).genesis, index)], [(FAUCET_COINS - fee, BOB)], DEVNET)


def test_byte_cap_evicts_the_lowest_fee_rates_and_keeps_the_highest() -> None:
    size = len(pay(0, 1).raw)
    _, svc = service(max_bytes=4 * size)
    fees = [50, 10, 40, 20, 30, 60]
    txs = [pay(i, fee) for i, fee in enumerate(fees)]
    for tx in txs[:4]:
        svc.submit_tx(tx.raw)
    svc.submit_tx(txs[4].raw)  # 30 evicts 10
    svc.submit_tx(txs[5].raw)  # 60 evicts 20
    entries = [svc.mempool.get(t) for t in svc.mempool.txids_by_fee_rate()]
    kept = sorted(e.fee for e in entries if e is not None)
    assert kept == [30, 40, 50, 60]
    assert svc.mempool.total_bytes <= 4 * size
    with pytest.raises(MempoolFull):
        svc.submit_tx(pay(6, 25).raw)  # below the eviction floor: refused, pool unchanged
    assert len(svc.mempool) == 4
    assert svc.rejected["tx:full"] == 1


def test_conflicting_spend_is_refused_first_seen_wins() -> None:
    _, svc = service()
    first = pay(3, 10)
    svc.submit_tx(first.raw)
    with pytest.raises(MempoolConflict) as err:
        svc.submit_tx(pay(3, 10_000).raw)  # a higher fee does not replace (no RBF in v1)
    assert err.value.conflicting_txid == first.txid
    assert first.txid in svc.mempool


def test_tx_whose_input_a_reorganisation_spends_leaves_the_mempool() -> None:
    """A pool tx loses its input to a conflicting spend confirmed by a heavier branch."""
    node, svc = service()

    def mine(previous: bytes, **kw: object) -> Block:
        block = node.build(previous, **kw)  # type: ignore[arg-type]
        assert svc.submit_block(block.raw).status is BlockStatus.ACCEPTED
        return block

    warm = [mine(node.genesis, register=ALICE, ms=True)]
    for _ in range(DEVNET.sortition_warmup - 1):
        warm.append(mine(warm[-1].id, ms=True))
    fork = warm[-1]
    losing = mine(fork.id, ms=True)  # the best chain for now
    to_bob = pay(9, 5)
    to_carol = transfer(
        [(node.genesis, 9)], [(FAUCET_COINS - 7, CAROL)], DEVNET, assigned_to=[fork.id]
    )  # S5 (devnet c = 1/16): a tx w5 may carry
    svc.submit_tx(to_bob.raw)
    assert node.chain.best_id == losing.id
    assert to_bob.txid in svc.mempool

    w5 = mine(fork.id, milestone=fork.id, tip=warm[0].id, txs=[to_carol], ms=True)
    w6 = mine(w5.id, milestone=w5.id, ms=True)

    assert (node.chain.best_id, svc.reorg_count) == (w6.id, 1)
    assert node.chain.get_utxo(to_carol.txid, 0) is not None
    assert to_bob.txid not in svc.mempool
    with pytest.raises(InvalidTransaction) as err:
        svc.submit_tx(to_bob.raw)  # and it cannot come back: its input is spent
    assert err.value.rule == "V6"
