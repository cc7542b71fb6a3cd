"""Bounded caches a Chain may share with other Chains of the same process (simulator, tests).

All are sound to share between Chains of one network (same params): a txid commits to every
signature of its transaction, a decoded block is a pure function of its bytes and the network
parameters, and an evaluated level set is a pure function of its milestone's past.
"""

from collections import OrderedDict
from weakref import WeakValueDictionary

from dagchain.blocks import Block, decode_block
from dagchain.ledger import LevelSetDelta, Outpoint, UtxoEntry
from dagchain.params import ConsensusParams
from dagchain.transactions import Transaction, decode_transaction
from dagchain.types import BlockId, TxId


class SignatureCache:
    """Txids that passed T1-T6 (the §7.5 signature cache), least recently used out.

    T1-T5 always run before T6 (H8 before H9; admission checks before signatures), so a txid
    here has passed every stateless rule. Share one cache only between Chains of one network.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._items: OrderedDict[TxId, None] = OrderedDict()

    def __contains__(self, txid: object) -> bool:
        return txid in self._items

    def __len__(self) -> int:
        return len(self._items)

    def add(self, txid: TxId) -> None:
        """Remember a verified txid."""
        self._items[txid] = None
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)


class DecodeCache:
    """Decoded blocks and txs by their exact bytes (H1, T1), shared by many receivers."""

    def __init__(self, params: ConsensusParams, capacity: int = 4096) -> None:
        self.params = params
        self.capacity = capacity
        self._items: OrderedDict[bytes, Block] = OrderedDict()
        self._txs: OrderedDict[bytes, Transaction] = OrderedDict()

    def decode(self, raw: bytes) -> Block:
        """``decode_block(raw, params)``, answered from the cache when these bytes were seen.

        Raises:
            EncodingError: as ``decode_block`` (failures are not cached).
        """
        found = self._items.get(raw)
        if found is not None:
            return found
        block = decode_block(raw, self.params)
        self._items[raw] = block
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)
        return block

    def decode_tx(self, raw: bytes) -> Transaction:
        """``decode_transaction(raw, params)`` through the same bounded cache.

        Raises:
            EncodingError: as ``decode_transaction`` (failures are not cached).
        """
        found = self._txs.get(raw)
        if found is not None:
            return found
        tx = decode_transaction(raw, self.params)
        self._txs[raw] = tx
        if len(self._txs) > self.capacity:
            self._txs.popitem(last=False)
        return tx


class LevelSetCache:
    """Evaluated level sets (§4.3) by milestone id, least recently used out.

    LS(M), its verdicts and its ledger delta are a pure function of M's past: the DFS of §5 reads
    only the links of blocks reachable from M and which of them lie in the level sets of chain(M),
    and the ledger it starts from is L(parent(M)), fixed by the milestone chain M commits to. So
    the first Chain that evaluates M may hand the result to every other Chain of the same network,
    which then only applies it (the simulator's 1,000 nodes evaluate each level set once). Share
    one cache only between Chains with identical params; the deltas are immutable.
    """

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._items: OrderedDict[BlockId, LevelSetDelta] = OrderedDict()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, milestone: BlockId) -> LevelSetDelta | None:
        """The evaluation of LS(milestone), if some Chain stored it."""
        found = self._items.get(milestone)
        if found is not None:
            self.hits += 1
        return found

    def add(self, delta: LevelSetDelta) -> None:
        """Remember an evaluation (keyed by its milestone)."""
        self._items[delta.milestone] = delta
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)


class UtxoSet(dict[Outpoint, UtxoEntry]):
    """A best chain's unspent outputs: a plain dict that ``SharedResults`` can hold weakly.

    A set registered there is shared by every Chain whose best milestone is the key and is
    never changed again (``ChainState`` copies it before it changes its own).
    """

    __slots__ = ("__weakref__",)


class SharedResults:
    """The core's deterministic results, computed by one Chain, read by the others of a network.

    The simulator's ``engine.share_results``; never a module global.

    Three bounded memos, least recently used out; each key holds everything its result depends
    on, so a hit is exactly what the reader would have computed:

    - ``tx_verdict``: a relayed tx checked against a best chain (``Chain.check_transaction``):
      key (txid, best milestone id), since the ledger L(M) and the spent-output index it reads
      are a pure function of the best milestone M; value the fee, or the (rule, message) of the
      rejection. The pool checks (duplicate, conflict, capacity) stay per node.
    - ``block_passes``: ids of blocks whose checks that read only their bytes and their ancestors
      passed (H1-H10 but H11, D3-D6, signatures). A node still runs its own D1, D2 (its invalid
      cache), the orphan test (its links present here) and H11 (its clock); a block that fails
      anywhere is never recorded, so every node rejects an invalid block itself.
    - ``accept_rows``: the store rows of accepting a block that do not depend on the node (A1:
      its bytes, its tx index rows, a milestone's snapshot; not its meta row, whose sequence
      number is the node's), key the block id.
    - ``apply_rows``: the store rows of applying LS(M) (A2), key (M, whether the level set's own
      rows are written, Φ after the apply), a pure function of them (the delta is a pure function
      of M, the chainwork is M's snapshot's).
    - ``utxo_set``: the UTXO set of a best chain whose head is M, key M (the ledger L(M) is a
      pure function of M, as for ``tx_verdict``), held weakly: a set lives while some Chain is
      on M, so the Chains of a network that agree on the best chain hold one copy of it.
    - ``genesis_rows``: the rows an empty store gets (§12: genesis, its snapshot and level set,
      the faucet UTXOs), a pure function of the network's parameters, key the genesis id; one
      entry, kept for the run (a simulation with ``load.prefunded_outputs`` writes hundreds of
      thousands of faucet rows into every full node's store otherwise).
    """

    def __init__(self, tx_capacity: int = 200_000, block_capacity: int = 100_000) -> None:
        self.tx_capacity = tx_capacity
        self.block_capacity = block_capacity
        self._txs: OrderedDict[tuple[TxId, BlockId], int | tuple[str, str]] = OrderedDict()
        self._blocks: OrderedDict[BlockId, None] = OrderedDict()
        self._rows: OrderedDict[tuple[BlockId, bool, BlockId], dict[bytes, bytes | None]] = (
            OrderedDict()
        )
        self._accepts: OrderedDict[BlockId, dict[bytes, bytes | None]] = OrderedDict()
        self._utxo_sets: WeakValueDictionary[BlockId, UtxoSet] = WeakValueDictionary()
        self._genesis: tuple[BlockId, dict[bytes, bytes | None]] | None = None
        self.hits = {"tx": 0, "block": 0, "rows": 0, "accept": 0, "utxos": 0}
        self.lookups = {"tx": 0, "block": 0, "rows": 0, "accept": 0, "utxos": 0}

    def tx_verdict(self, txid: TxId, best: BlockId) -> int | tuple[str, str] | None:
        """The fee, or (rule, message) of the rejection, of ``txid`` against ``best``.

        None if no Chain recorded it.
        """
        self.lookups["tx"] += 1
        found = self._txs.get((txid, best))
        if found is not None:
            self.hits["tx"] += 1
        return found

    def add_tx_verdict(self, txid: TxId, best: BlockId, verdict: int | tuple[str, str]) -> None:
        """Record a check's outcome."""
        self._txs[(txid, best)] = verdict
        if len(self._txs) > self.tx_capacity:
            self._txs.popitem(last=False)

    def block_passed(self, block_id: BlockId) -> bool:
        """True if some Chain found the block's bytes-and-ancestors checks passed."""
        self.lookups["block"] += 1
        if block_id in self._blocks:
            self.hits["block"] += 1
            return True
        return False

    def add_block_pass(self, block_id: BlockId) -> None:
        """Record that the block passed them."""
        self._blocks[block_id] = None
        if len(self._blocks) > self.block_capacity:
            self._blocks.popitem(last=False)

    def accept_rows(self, block_id: BlockId) -> dict[bytes, bytes | None] | None:
        """The rows of accepting a block that every node writes alike, if recorded.

        Its bytes, its tx index rows, a milestone's snapshot.
        """
        self.lookups["accept"] += 1
        found = self._accepts.get(block_id)
        if found is not None:
            self.hits["accept"] += 1
        return found

    def add_accept_rows(self, block_id: BlockId, rows: dict[bytes, bytes | None]) -> None:
        """Record them (the dict is never changed afterwards)."""
        self._accepts[block_id] = rows
        if len(self._accepts) > 4096:
            self._accepts.popitem(last=False)

    def apply_rows(
        self, milestone: BlockId, new: bool, final: BlockId
    ) -> dict[bytes, bytes | None] | None:
        """The rows (value None: a delete) of applying LS(milestone), if recorded."""
        self.lookups["rows"] += 1
        found = self._rows.get((milestone, new, final))
        if found is not None:
            self.hits["rows"] += 1
        return found

    def add_apply_rows(
        self, milestone: BlockId, new: bool, final: BlockId, rows: dict[bytes, bytes | None]
    ) -> None:
        """Record them (the dict is never changed afterwards)."""
        self._rows[(milestone, new, final)] = rows
        if len(self._rows) > 256:
            self._rows.popitem(last=False)

    def genesis_rows(self, genesis: BlockId) -> dict[bytes, bytes | None] | None:
        """The rows of an empty store with ``genesis``, if a Chain recorded them."""
        found = self._genesis
        return found[1] if found is not None and found[0] == genesis else None

    def add_genesis_rows(self, genesis: BlockId, rows: dict[bytes, bytes | None]) -> None:
        """Record them (the dict is never changed afterwards)."""
        self._genesis = (genesis, rows)

    def utxo_set(self, milestone: BlockId) -> UtxoSet | None:
        """The UTXO set of the best chain ending at ``milestone``, if some Chain holds it."""
        self.lookups["utxos"] += 1
        found = self._utxo_sets.get(milestone)
        if found is not None:
            self.hits["utxos"] += 1
        return found

    def add_utxo_set(self, milestone: BlockId, utxos: UtxoSet) -> None:
        """Record it; the caller and every later reader never change it."""
        self._utxo_sets[milestone] = utxos


__all__ = ["DecodeCache", "LevelSetCache", "SharedResults", "SignatureCache", "UtxoSet"]
