"""SimNode: a real ``dagchain.Chain`` and ``Mempool`` on an in-memory store, fed by the network.

Blocks and transactions arrive as their real canonical bytes and go through the real acceptance
procedure (``Chain.on_block``) and mempool admission (``Chain.check_transaction`` then
``Mempool.add``): every rule, signatures included, runs on every node. Expected verdicts
(invalid, orphan, not yet valid) are caught here, at the delivery boundary, and counted.

Relay policy: a node pushes each block it accepts (and each tx it admits) to all neighbours but
the sender. ``Hub.send_*`` suppresses a push to a neighbour that already holds the item or has it
in flight to arrive sooner, as an inventory/getdata exchange would (the announcement's bytes are
not modelled). ``node.gossip``/``node.sync`` do not exist yet; when they land, this class should
drive them instead of this push policy.
"""

from typing import Protocol, final

from dagchain.caches import DecodeCache, LevelSetCache, SignatureCache
from dagchain.chain import BlockOutcome, BlockStatus, Chain
from dagchain.errors import EncodingError, InvalidBlock, InvalidTransaction, NotYetValid, Reason
from dagchain.mempool import Mempool, MempoolError
from dagchain.params import ConsensusParams
from dagchain.transactions import decode_transaction
from dagchain.types import BlockId, TxId
from simulator.knowledge import Knowledge, node_ids
from simulator.store import SimStore


class Hub(Protocol):
    """What a node needs from the simulation: the clock, relay, and event sinks."""

    known_blocks: Knowledge
    known_txs: Knowledge

    @property
    def now_ms(self) -> float: ...

    def send_block(self, src: int, block_id: BlockId, raw: bytes, exclude: int) -> None: ...

    def send_tx(self, src: int, txid: TxId, raw: bytes, exclude: int) -> None: ...

    def retry_block(
        self, node: int, block_id: BlockId, raw: bytes, src: int, at_ms: float
    ) -> None: ...

    def on_accepted(self, node: "NodeRef", outcome: BlockOutcome) -> None: ...

    def on_relayed(self, node: int, accepted: tuple[BlockId, ...]) -> None:
        """A relay-only node accepted these blocks (in order; no level set, no reorg)."""


class NodeRef(Protocol):
    """What the hub reads of a node that accepted blocks (a SimNode or a RelayNode)."""

    @property
    def index(self) -> int: ...


@final
class SimNode:
    """One simulated full node (index ``index``)."""

    __slots__ = (
        "chain",
        "decoder",
        "hub",
        "index",
        "known_blocks",
        "known_txs",
        "mempool",
        "orphaned",
        "params",
        "rejected_blocks",
        "rejected_txs",
        "root",
    )

    def __init__(
        self,
        index: int,
        params: ConsensusParams,
        hub: Hub,
        caches: tuple[SignatureCache, DecodeCache, LevelSetCache] | None = None,
    ) -> None:
        self.index = node_ids(index + 1)[index]
        self.params = params
        self.hub = hub
        sig_cache, decode_cache, ls_cache = caches if caches is not None else (None, None, None)
        self.decoder = decode_cache
        # Every node runs every block rule and applies every level set to its own state; the
        # shared caches only skip re-verifying a signature (a txid commits to its signatures),
        # re-decoding identical bytes and re-evaluating a level set another node evaluated (a
        # pure function of the milestone's past).
        self.chain = Chain(
            params,
            SimStore(),
            signature_cache=sig_cache,
            decode_cache=decode_cache,
            level_set_cache=ls_cache,
        )
        self.mempool = Mempool(params)
        self.known_blocks = hub.known_blocks
        """Shared with every node: which node knows which block."""
        self.known_txs = hub.known_txs
        self.root: BlockId | None = None
        """This node's own peer chain, once its registration block is accepted."""
        self.rejected_blocks = 0
        self.rejected_txs = 0
        self.orphaned = 0

    def now(self) -> int:
        """The engine clock as the integer ms the core takes."""
        return int(self.hub.now_ms)

    # ------------------------------------------------------------------ blocks
    def on_deliver_block(self, block_id: BlockId, raw: bytes, src: int) -> None:
        """A block arrives from neighbour ``src`` (or from this node's miner, src = own index)."""
        if not self.known_blocks.learn(self.index, block_id):
            return
        try:
            outcome = self.chain.on_block(raw, self.now(), str(src))
        except NotYetValid:
            self.known_blocks.forget(self.index, block_id)
            retry = self.hub.now_ms + self.params.max_future_drift_ms / 2
            self.hub.retry_block(self.index, block_id, raw, src, retry)
            return
        except InvalidBlock:
            self.rejected_blocks += 1
            return
        if outcome.status is BlockStatus.ORPHAN:
            self.orphaned += 1
            return
        if outcome.status is BlockStatus.ACCEPTED:
            self._after_accept(outcome, src)

    def _after_accept(self, outcome: BlockOutcome, src: int) -> None:
        chain = self.chain
        index = self.index
        learn_tx = self.known_txs.learn
        for bid in outcome.accepted:
            self.known_blocks.learn(index, bid)
            block = chain.get_block(bid)
            if block is None:  # pragma: no cover - accepted blocks are stored
                raise RuntimeError("accepted block missing")
            for tx in block.txs:
                learn_tx(index, tx.txid)
                self.mempool.remove(tx.txid)
            self.hub.send_block(self.index, bid, block.raw, src if bid == outcome.block_id else -1)
        for reorg in outcome.reorgs:
            for delta in reorg.applied:
                valid = [t for t, r in chain.level_set_txs(delta) if r == Reason.VALID]
                self.mempool.remove_confirmed(valid)
        self.hub.on_accepted(self, outcome)

    # ------------------------------------------------------------------ transactions
    def on_deliver_tx(self, txid: TxId, raw: bytes, src: int) -> None:
        """A relayed tx arrives: decode, check against the best chain, admit, relay."""
        if not self.known_txs.learn(self.index, txid):
            return
        try:
            tx = (
                self.decoder.decode_tx(raw)
                if self.decoder
                else decode_transaction(raw, self.params)
            )
            fee = self.chain.check_transaction(tx)
            self.mempool.add(tx, fee, self.now())
        except (EncodingError, InvalidTransaction, MempoolError):
            self.rejected_txs += 1
            return
        self.hub.send_tx(self.index, txid, raw, src)


__all__ = ["Hub", "NodeRef", "SimNode"]
