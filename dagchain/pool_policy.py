"""Pool membership (PROTOCOL.md v2 §7.5, §4.4 policy): how a mempool follows the best chain.

One home for the policy that the node's service layer and the simulator's full nodes both run:

- a tx leaves the pool only when it or a conflicting tx is VALID in the best chain (an input is
  spent there), or when it expires; a block that merely *carries* it changes nothing here (the
  template skips it, §3.4), so a copy that comes out INVALID (`warmup`, `sortition`) or sits in
  a block no one orders costs the tx nothing;
- after a reorganisation, pool txs whose inputs left the best chain's UTXO set are dropped, and
  the VALID txs of the undone level sets go back through admission (the same checks in the same
  order; their signatures are in the cache H9 filled), oldest level set first.
"""

from collections.abc import Iterable, Iterator

from dagchain.chain import Chain, Reorg
from dagchain.errors import InvalidTransaction, Reason
from dagchain.ledger import LevelSetDelta
from dagchain.mempool import Mempool, MempoolError
from dagchain.transactions import Transaction

__all__ = ["admit", "follow_reorg", "valid_txs"]


def valid_txs(chain: Chain, deltas: Iterable[LevelSetDelta]) -> Iterator[Transaction]:
    """The VALID txs of ``deltas`` in total order."""
    for delta in deltas:
        for tx, reason in chain.level_set_txs(delta):
            if reason == Reason.VALID:
                yield tx


def admit(chain: Chain, mempool: Mempool, tx: Transaction, now_ms: int) -> bool:
    """§7.5 admission against the best chain; False (pool unchanged) if the tx is refused."""
    try:
        fee = chain.check_transaction(tx)
        mempool.add(tx, fee, now_ms)
    except (InvalidTransaction, MempoolError):
        return False
    return True


def follow_reorg(
    chain: Chain, mempool: Mempool, reorg: Reorg, now_ms: int, *, readmit: bool = True
) -> int:
    """Apply one best-chain change to the pool; returns how many undone txs were re-admitted.

    ``readmit`` False skips the re-admission (P10: not during initial sync).
    """
    applied = list(valid_txs(chain, reorg.applied))
    mempool.remove_confirmed(applied)
    if not reorg.undone:
        return 0
    _drop_unspendable(chain, mempool)
    if not readmit:
        return 0
    confirmed = {tx.txid for tx in applied}
    readded = 0
    # undone is newest first: re-admit in the old total order, oldest level set first
    for tx in valid_txs(chain, reversed(reorg.undone)):
        if tx.txid not in confirmed and admit(chain, mempool, tx, now_ms):
            readded += 1
    return readded


def _drop_unspendable(chain: Chain, mempool: Mempool) -> None:
    """After an undo, drop pool txs whose inputs left the best chain's UTXO set."""
    for txid in mempool.txids_by_fee_rate():
        entry = mempool.get(txid)
        if entry is None:
            continue
        if any(chain.get_utxo(i.txid, i.out_index) is None for i in entry.tx.inputs):
            mempool.remove(txid)
