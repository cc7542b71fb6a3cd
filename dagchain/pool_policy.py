"""Pool membership (PROTOCOL.md v2 §7.5, §4.4 policy): how a mempool follows the best chain.

One home for the policy that the node's service layer and the simulator's full nodes both run:

- a tx leaves the pool only when it or a conflicting tx is VALID in the best chain (an input is
  spent there), or when it expires; a block that merely *carries* it changes nothing here (the
  template skips it, §3.4), so a copy that comes out INVALID (`warmup`, `sortition`) or sits in
  a block no one orders costs the tx nothing;
- after a reorganisation, pool txs whose inputs left the best chain's UTXO set are dropped, and
  the VALID txs of the undone level sets go back through admission (the same checks in the same
  order; their signatures are in the cache H9 filled), oldest level set first;
- a tx of either kind refused only because an input is missing (its parent was undone too, and
  §7.5 admits no unconfirmed parents) waits in :class:`WaitingTxs` and is admitted once every
  input is back in the best chain's UTXO set (docs/protocol.md decision 37: otherwise a payment
  the node acknowledged and confirmed is lost by a reorganisation).
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dagchain.chain import Chain, Reorg
from dagchain.errors import InvalidTransaction, Reason
from dagchain.ledger import LevelSetDelta
from dagchain.mempool import Mempool, MempoolError
from dagchain.transactions import Transaction

__all__ = ["WaitingTxs", "admit", "follow_reorg", "valid_txs"]


def valid_txs(chain: Chain, deltas: Iterable[LevelSetDelta]) -> Iterator[Transaction]:
    """The VALID txs of ``deltas`` in total order."""
    for delta in deltas:
        for tx, reason in chain.level_set_txs(delta):
            if reason == Reason.VALID:
                yield tx


def admit(chain: Chain, mempool: Mempool, tx: Transaction, now_ms: int) -> bool:
    """§7.5 admission against the best chain; False (pool unchanged) if the tx is refused."""
    return _admit(chain, mempool, tx, now_ms) is None


def _admit(chain: Chain, mempool: Mempool, tx: Transaction, now_ms: int) -> str | None:
    """:func:`admit`; None if admitted, else why not (``missing-input`` for V6's missing one)."""
    try:
        fee = chain.check_transaction(tx)
        mempool.add(tx, fee, now_ms)
    except InvalidTransaction as exc:
        return exc.message if exc.rule == "V6" else exc.rule
    except MempoolError:
        return "mempool"
    return None


@dataclass(slots=True)
class _Waiting:
    tx: Transaction
    since_ms: int


class WaitingTxs:
    """Txs a reorganisation left without their parents (decision 37).

    §7.5 refuses such a tx while a parent is unconfirmed, so it waits here, at most
    ``max_txs`` (oldest dropped first) and ``expiry_ms`` each, until every input is an unspent
    output of the best chain again; then they go through admission like any tx.

    Args:
        max_txs: Bound on the txs held (the network's ``mempool_max_txs`` in the node).
        expiry_ms: A tx held this long is dropped (the network's ``mempool_expiry``).
    """

    def __init__(self, max_txs: int, expiry_ms: int) -> None:
        self.max_txs = max_txs
        self.expiry_ms = expiry_ms
        self._held: dict[bytes, _Waiting] = {}
        self.dropped = 0
        """Txs dropped at the bound or at expiry (a count for tests and diagnostics)."""

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, txid: object) -> bool:
        return txid in self._held

    def txids(self) -> list[bytes]:
        """The held txs' ids, in the order held."""
        return list(self._held)

    def hold(self, tx: Transaction, now_ms: int) -> None:
        """Keep ``tx`` until its inputs are back (a tx already held keeps its time)."""
        if tx.txid in self._held or self.max_txs <= 0:
            return
        while len(self._held) >= self.max_txs:
            del self._held[next(iter(self._held))]
            self.dropped += 1
        self._held[tx.txid] = _Waiting(tx, now_ms)

    def forget(self, txids: Iterable[bytes]) -> None:
        """The best chain confirmed these txs: none of them waits any more."""
        for txid in txids:
            self._held.pop(txid, None)

    def retry(self, chain: Chain, mempool: Mempool, now_ms: int) -> int:
        """Admit the held txs whose inputs are all unspent in the best chain; returns how many.

        In the order they were held (a parent before its child); the expired ones and those
        refused for any other reason (a conflict won) are dropped.
        """
        admitted = 0
        for txid, waiting in list(self._held.items()):
            if now_ms - waiting.since_ms >= self.expiry_ms:
                del self._held[txid]
                self.dropped += 1
                continue
            tx = waiting.tx
            if any(chain.get_utxo(i.txid, i.out_index) is None for i in tx.inputs):
                continue
            del self._held[txid]
            admitted += _admit(chain, mempool, tx, now_ms) is None
        return admitted


def follow_reorg(
    chain: Chain,
    mempool: Mempool,
    reorg: Reorg,
    now_ms: int,
    *,
    readmit: bool = True,
    waiting: WaitingTxs | None = None,
) -> int:
    """Apply one best-chain change to the pool; returns how many txs it (re-)admitted.

    ``readmit`` False skips the re-admission (P10: not during initial sync). With ``waiting``,
    txs refused only for a missing input wait there (decision 37) instead of being dropped, and
    the waiting ones are tried again whenever level sets are applied.
    """
    applied = list(valid_txs(chain, reorg.applied))
    mempool.remove_confirmed(applied)
    readded = 0
    if reorg.undone:
        unspendable = _drop_unspendable(chain, mempool)
        if readmit:
            confirmed = {tx.txid for tx in applied}
            # undone is newest first: re-admit in the old total order, oldest level set first
            for tx in valid_txs(chain, reversed(reorg.undone)):
                if tx.txid in confirmed:
                    continue
                why = _admit(chain, mempool, tx, now_ms)
                if why is None:
                    readded += 1
                elif why == "missing-input" and waiting is not None:
                    waiting.hold(tx, now_ms)
            if waiting is not None:
                for tx in unspendable:
                    waiting.hold(tx, now_ms)
    if waiting is not None and reorg.applied and len(waiting):
        waiting.forget(tx.txid for tx in applied)
        readded += waiting.retry(chain, mempool, now_ms)
    return readded


def _drop_unspendable(chain: Chain, mempool: Mempool) -> list[Transaction]:
    """After an undo, drop pool txs whose inputs left the best chain's UTXO set.

    Returns them best fee rate first.
    """

    def unspendable(tx: Transaction) -> bool:
        return any(chain.get_utxo(i.txid, i.out_index) is None for i in tx.inputs)

    return mempool.remove_where(unspendable)
