"""NodeService: the single owner of Chain + Mempool inside the daemon's event loop.

No I/O and no consensus rule here: it hands blocks and transactions to the core, keeps the
mempool in step with the best chain (PROTOCOL.md §4.4 and §7.5 policy) and tells its listeners
what changed through :class:`NodeEvent`. The peer-to-peer side, the HTTP API and the metrics
all go through this one object, so the chain is never touched from two places at once: every
change (a block, a tx, a template, an invalidation) is a method here; readers (the API's block,
DAG and address views, the metrics) read ``chain`` and ``mempool`` through the core's read-only
queries (``dagchain.queries``) on the same thread, and never write to them.
"""

from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, final

from dagchain.chain import BlockOutcome, BlockStatus, Chain, Reorg
from dagchain.errors import (
    EncodingError,
    InvalidBlock,
    InvalidTransaction,
    NotYetValid,
    Reason,
)
from dagchain.fees import FeeEstimate, FeeEstimator
from dagchain.ledger import LevelSetDelta
from dagchain.mempool import (
    Mempool,
    MempoolConflict,
    MempoolDuplicate,
    MempoolEntry,
    MempoolError,
)
from dagchain.params import ConsensusParams
from dagchain.pool_policy import WaitingTxs, follow_reorg
from dagchain.rules import is_stale_relay
from dagchain.template import BlockTemplate, try_build_template
from dagchain.transactions import Transaction, decode_transaction
from dagchain.types import Address, BlockId, TxId
from p2p.gossip import RecentTxs
from p2p.serveholds import ServeHolds
from p2p.sync import MAX_LEVEL_SETS_IN_FLIGHT
from p2p.wire import block_frame_milestone_link

__all__ = ["EventKind", "NodeEvent", "NodeService"]

EventKind = Literal["block", "milestone", "reorg", "tx"]

LOCATOR_DENSE = 10
"""P7: the locator lists the last 10 heights one by one, then steps back 2, 4, 8, ..."""
LOCATOR_MAX = 64
FEE_CACHE_MS = 1_000
"""``GET /v1/fees`` answers from an estimate at most this old (or a new level set's)."""


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A state change, emitted after it happened.

    ``data`` holds JSON-ready values only (hex strings, ints, bools), so the API can push it
    as it is: ``{"type": kind, **data}``.
    """

    kind: EventKind
    block_id: BlockId | None = None
    txid: TxId | None = None
    data: dict[str, Any] = field(default_factory=dict)
    from_sync: bool = False
    """A block of a downloaded level set (P9): the exchange does not relay it."""

    def to_json(self) -> dict[str, Any]:
        """The WebSocket message of ``GET /v1/events``."""
        return {"type": self.kind, **self.data}


@final
class NodeService:
    """Chain and mempool glue for the daemon; every method runs on the event loop's thread.

    Args:
        params: Network parameters.
        chain: The consensus state machine (owned here from now on).
        mempool: The transaction pool (owned here from now on).
        clock: Milliseconds since the epoch; the daemon passes wall time, tests a fixed value.
        decode_tx: Decodes a tx's bytes (T1); the simulator passes its shared
            ``DecodeCache.decode_tx`` (None: ``decode_transaction``).
        block_txs: What :meth:`has_tx` asks besides the pool (decision 42); None: the txids of
            the blocks accepted here lately (``RecentTxs``, the last 50,000).
    """

    def __init__(
        self,
        params: ConsensusParams,
        chain: Chain,
        mempool: Mempool,
        clock: Callable[[], int],
        decode_tx: Callable[[bytes], Transaction] | None = None,
        block_txs: Container[bytes] | None = None,
    ) -> None:
        self.params = params
        self._decode_tx: Callable[[bytes], Transaction] = (
            decode_tx if decode_tx is not None else lambda raw: decode_transaction(raw, params)
        )
        self.chain = chain
        self.mempool = mempool
        self.clock = clock
        self._listeners: list[Callable[[NodeEvent], None]] = []
        self.rejected: Counter[str] = Counter()
        """Rejected blocks and txs by rule id (``block:H4``, ``tx:T6``), for /metrics."""
        self.reorg_count = 0
        self.readded_txs = 0
        """Txs of undone level sets that went back into the mempool (§4.4 policy)."""
        self.waiting = WaitingTxs(mempool.max_txs, mempool.expiry_ms)
        """Txs a reorganisation left without their parents, until those are confirmed again
        (docs/protocol.md decision 37)."""
        self._deferred: list[tuple[BlockOutcome, int, str]] | None = None
        """Inside :meth:`sync_batch`: the outcomes to report once the batch is written."""
        self.fees = FeeEstimator(params, chain.best_height, clock())
        """What this node saw of recent level sets and its pool's txs (``GET /v1/fees``)."""
        self._fee_cache: tuple[int, int, FeeEstimate] | None = None
        """(best height, time, estimate): :meth:`fee_estimate` walks the whole pool."""
        self.serve_holds = ServeHolds()
        """Level sets we listed to syncing peers: pruning keeps them (decision 40)."""
        self._recent_txs: RecentTxs | None = None
        if block_txs is None:
            block_txs = self._recent_txs = RecentTxs()
        self.block_txs: Container[bytes] = block_txs
        """Txids of accepted blocks that :meth:`has_tx` counts as had (decision 42): the last
        50,000 by default; a caller that knows them otherwise (the simulator) passes its own."""

    # ------------------------------------------------------------------ events
    def subscribe(self, listener: Callable[[NodeEvent], None]) -> None:
        """Call ``listener`` with every event after the state change it reports."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[NodeEvent], None]) -> None:
        """Stop calling ``listener`` (no error if it was not subscribed)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _emit(self, event: NodeEvent) -> None:
        for listener in list(self._listeners):
            listener(event)

    # ------------------------------------------------------------------ blocks
    def submit_block(self, raw: bytes, peer: str = "local") -> BlockOutcome:
        """Run a block through the chain, then update the mempool and tell the listeners.

        Raises:
            MalformedBlock: H1 or H7.
            RejectedBlock: any REJECT rule (the rule id is ``exc.rule``).
            NotYetValid: H11: the timestamp is too far ahead; retry later.
        """
        now = self.clock()
        outcome = self._run_block(raw, now, peer)
        self._after_block(outcome, now, peer)
        return outcome

    def submit_level_set(self, raws: Iterable[bytes], peer: str) -> list[BlockOutcome]:
        """P9: a downloaded level set's blocks in order, stored as ONE synced batch (§12 A1).

        The blocks go through the chain inside :meth:`Chain.write_group`; the listeners and the
        mempool hear of them only after the group has been written, so nothing is announced
        before it is durable. If a block raises, the blocks before it are written and reported
        as usual and the exception propagates. Inside :meth:`sync_batch` the level set joins
        that batch and is reported when it is written.

        Raises:
            MalformedBlock, RejectedBlock, NotYetValid: as :meth:`submit_block`, for the first
                block that fails (later ones are not tried).
        """
        now = self.clock()
        outcomes: list[BlockOutcome] = []
        error: InvalidBlock | NotYetValid | None = None
        with self.chain.write_group():
            for raw in raws:
                try:
                    outcomes.append(self._run_block(raw, now, peer))
                except (InvalidBlock, NotYetValid) as exc:
                    error = exc
                    break
        if self._deferred is not None:
            self._deferred.extend((outcome, now, peer) for outcome in outcomes)
        else:
            for outcome in outcomes:
                self._after_block(outcome, now, peer, from_sync=True)
        if error is not None:
            raise error
        return outcomes

    @contextmanager
    def sync_batch(self) -> Iterator[None]:
        """Consecutive downloaded level sets (P9) as one synced batch, events after it.

        Every :meth:`submit_level_set` inside joins one :meth:`Chain.write_group`: a crash
        leaves the store at a level-set boundary, and no block is announced before the batch
        is written (§12: downloaded blocks are never acknowledged; docs/protocol.md Decisions).
        Nested calls join the outer one.
        """
        if self._deferred is not None:
            yield
            return
        deferred: list[tuple[BlockOutcome, int, str]] = []
        self._deferred = deferred
        body_error: BaseException | None = None
        try:
            with self.chain.write_group():
                try:
                    yield
                except BaseException as exc:  # written too (complete units); re-raised below
                    body_error = exc
        finally:
            self._deferred = None
        for outcome, now, peer in deferred:
            self._after_block(outcome, now, peer, from_sync=True)
        if body_error is not None:
            raise body_error

    def _run_block(self, raw: bytes, now: int, peer: str) -> BlockOutcome:
        try:
            return self.chain.on_block(raw, now, peer)
        except InvalidBlock as exc:
            self.rejected[f"block:{exc.rule}"] += 1
            raise
        except NotYetValid as exc:
            self.rejected[f"block:{exc.rule}"] += 1
            raise

    def _after_block(
        self, outcome: BlockOutcome, now: int, peer: str, from_sync: bool = False
    ) -> None:
        if outcome.status is not BlockStatus.ACCEPTED:
            return
        for _, orphan_error in outcome.rejected_orphans:
            self.rejected[f"block:{orphan_error.rule}"] += 1
        recent = self._recent_txs
        if recent is not None:
            for block_id in outcome.accepted:
                block = self.chain.get_block(block_id)
                if block is not None:
                    for tx in block.txs:
                        recent.add(tx.txid)
        if self._listeners:  # an event is built only for someone to read
            for block_id in outcome.accepted:
                self._emit(self._block_event(block_id, now, peer, from_sync))
        for reorg in outcome.reorgs:
            self._on_reorg(reorg)

    def _block_event(
        self, block_id: BlockId, now_ms: int, peer: str, from_sync: bool = False
    ) -> NodeEvent:
        block = self.chain.get_block(block_id)
        meta = self.chain.get_meta(block_id)
        if block is None or meta is None:  # pragma: no cover - accepted blocks are stored
            raise RuntimeError(f"accepted block {block_id.hex()} is not stored")
        header = block.header
        return NodeEvent(
            "block",
            block_id=block_id,
            data={
                "hash": block_id.hex(),
                "is_milestone": meta.is_milestone,
                "milestone_link": header.milestone_link.hex(),
                "previous_link": header.previous_link.hex(),
                "tip_links": [t.hex() for t in block.tip_links],
                "root": meta.root.hex(),
                "peer_height": meta.peer_height,
                "timestamp_ms": header.timestamp_ms,
                "txs": len(block.txs),
                "delay_ms": now_ms - header.timestamp_ms,
                "peer": peer,
            },
            from_sync=from_sync,
        )

    def _on_reorg(self, reorg: Reorg) -> None:
        """§4.4 mempool policy, then one ``reorg`` event (if anything was undone) and one
        ``milestone`` event per level set applied, oldest first."""
        now = self.clock()
        for delta in reorg.applied:  # before the pool forgets the txs it confirms
            self._record_fees(delta, now)
        self.readded_txs += follow_reorg(self.chain, self.mempool, reorg, now, waiting=self.waiting)
        if reorg.undone:
            self.reorg_count += 1
            self._emit(
                NodeEvent(
                    "reorg",
                    block_id=reorg.new_head,
                    data={
                        "old_head": reorg.old_head.hex(),
                        "new_head": reorg.new_head.hex(),
                        "undone": [d.milestone.hex() for d in reorg.undone],
                        "applied": [d.milestone.hex() for d in reorg.applied],
                    },
                )
            )
        if self._listeners:
            for delta in reorg.applied:
                self._emit(self._milestone_event(delta))

    def _record_fees(self, delta: LevelSetDelta, now: int) -> None:
        """Tell the fee estimator which pool txs this level set made VALID, and when (their
        pool entries, as the pool has them)."""
        get = self.mempool.get
        confirmed: list[MempoolEntry] = []
        for tx, reason in self.chain.level_set_txs(delta):
            if reason == Reason.VALID:
                entry = get(tx.txid)
                if entry is not None:
                    confirmed.append(entry)
        self.fees.on_level_set(delta.height, now, confirmed, len(delta.order))

    def fee_estimate(self) -> FeeEstimate:
        """Fee rates to be VALID within 1, 3 and 10 milestones (``dagchain.fees``), computed
        again after ``FEE_CACHE_MS`` or a new level set (a full pool takes tens of ms)."""
        now, height = self.clock(), self.fees.best_height
        cached = self._fee_cache
        if cached is None or cached[0] != height or not 0 <= now - cached[1] < FEE_CACHE_MS:
            cached = self._fee_cache = (height, now, self.fees.estimate(self.mempool))
        return cached[2]

    def _milestone_event(self, delta: LevelSetDelta) -> NodeEvent:
        block = self.chain.get_block(delta.milestone)
        ts = block.header.timestamp_ms if block is not None else 0
        return NodeEvent(
            "milestone",
            block_id=delta.milestone,
            data={
                "hash": delta.milestone.hex(),
                "height": delta.height,
                "timestamp_ms": ts,
                "level_set_size": len(delta.order),
                "txs": len(delta.reasons),
                "valid_txs": sum(1 for r in delta.reasons if r == Reason.VALID),
            },
        )

    def drop_stale_relay(self, block_id: bytes, raw: bytes) -> tuple[int, int] | None:
        """P14 (policy, §11.6): should a *relayed* block be dropped as stale?

        True when the block is not accepted yet (D1 decides otherwise), its milestone link is
        an accepted milestone at height h with best height - h >= ``punctuality``, and no held
        orphan waits for it (a block an orphan needs is fetched for that orphan, never
        filtered). Nothing is remembered: the id enters no cache, so a later fetch of the same
        block (for an orphan, or in sync) runs the full procedure. A dropped block is counted
        as ``block:P14`` in :attr:`rejected`.

        The caller decides that the block was relayed (pushed, or fetched after an ``inv``)
        and not fetched during sync (P9).

        Returns:
            (milestone link height, best height) if the block is to be dropped, else None.
        """
        ms_link = block_frame_milestone_link(raw)
        if ms_link is None or self.chain.has_block(block_id, ms_link):
            return None
        snap = self.chain.get_snapshot(ms_link)
        if snap is None:  # unknown link (ORPHAN) or not a milestone (D3): the core decides
            return None
        best = self.chain.best_height
        if not is_stale_relay(snap.height, best, self.params):
            return None
        if self.chain.orphans and BlockId(block_id) in self.chain.orphans.missing_links():
            return None
        self.rejected["block:P14"] += 1
        return snap.height, best

    # ------------------------------------------------------------------ transactions
    def submit_tx(self, raw: bytes, peer: str = "local") -> TxId:
        """Admit a relayed or submitted TRANSFER into the mempool (§7.5).

        Raises:
            InvalidTransaction: T1-T7 (REJECT), V6 (spent or missing input), V7, V8 (DROP).
            MempoolError: duplicate, conflict with a pool tx, or pool full.
        """
        try:
            tx = self._admit(raw)
        except InvalidTransaction as exc:
            self.rejected[f"tx:{exc.rule}"] += 1
            raise
        except MempoolError as exc:
            self.rejected[f"tx:{exc.code}"] += 1
            raise
        if self._listeners:
            self._emit(
                NodeEvent(
                    "tx",
                    txid=tx.txid,
                    data={"txid": tx.txid.hex(), "size": len(tx.raw), "peer": peer},
                )
            )
        return tx.txid

    def lacks_inputs(self, raw: bytes) -> bool:
        """True if some input of the tx in ``raw`` is not an unspent output of the best chain.

        A cheap look (decode and UTXO lookups, no rule checked) for the §7.5 cap on missing-input
        txs; undecodable bytes answer False, so they are examined (and scored) normally.
        """
        try:
            tx = decode_transaction(raw, self.params)
        except EncodingError:
            return False
        return any(self.chain.get_utxo(i.txid, i.out_index) is None for i in tx.inputs)

    def _admit(self, raw: bytes) -> Transaction:
        try:  # T1, size included: the decoder reads at most max_tx_bytes
            tx = self._decode_tx(raw)
        except EncodingError as exc:
            raise InvalidTransaction("T1", str(exc)) from None
        pool = self.mempool
        if tx.txid in pool:
            raise MempoolDuplicate("transaction already in the mempool", tx.txid)
        # A pool conflict is cheaper to find than a signature check (§7.5 order).
        spender = pool.conflicts_with(tx.outpoints)
        if spender is not None and all(self.chain.get_utxo(i.txid, i.out_index) for i in tx.inputs):
            raise MempoolConflict(
                f"an input is already spent by mempool tx {spender.hex()}", tx.txid, spender
            )
        # a full pool refuses before the signature check, the costliest (decision 41)
        fee = self.chain.check_transaction(tx, lambda fee: pool.check_room(tx, fee))
        pool.add(tx, fee, self.clock())
        return tx

    # ------------------------------------------------------------------ maintenance
    def expire(self) -> tuple[int, int]:
        """Drop expired mempool txs and orphans; returns (txs, orphans) dropped."""
        now = self.clock()
        return len(self.mempool.expire(now)), self.chain.expire_orphans(now)

    def invalidate(self, milestone_id: bytes) -> Reorg | None:
        """F8 operator tool; the mempool follows the resulting reorganisation.

        Raises:
            KeyError: not an accepted milestone other than genesis.
            ValueError: a best-chain milestone below a pruned node's bodies.
        """
        reorg = self.chain.invalidate(milestone_id)
        if reorg is not None:
            self._on_reorg(reorg)
        return reorg

    def reconsider(self, milestone_id: bytes) -> Reorg | None:
        """F8: clear an invalidation mark; the mempool follows any reorganisation."""
        reorg = self.chain.reconsider(milestone_id)
        if reorg is not None:
            self._on_reorg(reorg)
        return reorg

    # ------------------------------------------------------------------ mining and admin (API)
    def build_template(
        self, *, root: bytes | None = None, register: Address | None = None
    ) -> BlockTemplate:
        """§3.4: a block template for the peer chain of ``root`` (or a registration block paying
        ``register``), from the chain and mempool as they are now, timed by the node's clock.

        Raises:
            KeyError: no peer chain with that root.
            TemplateUnavailable: no template can be built now (its ``code`` says why).
        """
        return try_build_template(
            self.chain, self.mempool, self.clock(), root=root, register=register
        )

    def is_milestone(self, block_id: bytes) -> bool:
        """True for an accepted milestone other than genesis (what F8's tools act on)."""
        chain = self.chain
        return block_id != chain.genesis_id and chain.get_snapshot(block_id) is not None

    # ------------------------------------------------------------------ queries (p2p)
    def has_block(self, block_id: bytes) -> bool:
        """True if the block is accepted."""
        return self.chain.has_block(block_id)

    def get_block_raw(self, block_id: bytes) -> bytes | None:
        """Canonical bytes of an accepted block (None once its body is pruned: ``notfound``)."""
        block = self.chain.get_block(block_id)
        return None if block is None or block.pruned else block.raw

    def has_tx(self, txid: bytes) -> bool:
        """True if the tx is in the mempool or in a recently accepted block: an announced tx we
        have is not fetched (decision 42; only mempool txs are relayed, §11.3)."""
        return txid in self.mempool or txid in self.block_txs

    def get_tx_raw(self, txid: bytes) -> bytes | None:
        """Canonical bytes of a mempool tx (only mempool txs are relayed, §11.3)."""
        entry = self.mempool.get(txid)
        return None if entry is None else entry.tx.raw

    def best(self) -> tuple[BlockId, int, int]:
        """(best milestone id, height, chainwork)."""
        return self.chain.best_id, self.chain.best_height, self.chain.best_snapshot.chainwork

    def locator(self) -> list[BlockId]:
        """P7: the last 10 best-chain heights, then steps of 2, 4, 8, ..., ending at genesis."""
        best = self.chain.state.best
        height = len(best) - 1
        heights: list[int] = []
        step = 1
        while height > 0 and len(heights) < LOCATOR_MAX - 1:
            heights.append(height)
            if len(heights) >= LOCATOR_DENSE:
                step *= 2
            height -= step
        heights.append(0)
        return [best[h] for h in heights]

    def milestone_headers_after(
        self, locator: list[bytes], limit: int = 2000, key: str | None = None
    ) -> list[bytes]:
        """P7 responder: headers of best-chain milestones after the first locator entry we
        have on our best chain (genesis if none), ascending, at most ``limit``.

        ``key``: the asking peer; a non-empty answer holds pruning below what it lists
        (:attr:`serve_holds`, decision 40).
        """
        state = self.chain.state
        fork = 0
        for entry in locator:
            height = state.best_height_of.get(BlockId(bytes(entry)))
            if height is not None:
                fork = height
                break
        below = state.pruned_below()
        if below and fork + 1 < below + MAX_LEVEL_SETS_IN_FLIGHT:
            # A pruned node cannot serve those level sets (nor, soon, the next few: pruning
            # follows the head while the peer fetches up to 8 at a time): an empty answer ends
            # the peer's round with no score (P9, "an unbacked claim"); it syncs elsewhere.
            return []
        ids = state.best[fork + 1 : fork + 1 + max(0, limit)]
        if ids and key is not None:
            self.serve_holds.listed(key, fork + 1, int(self.clock()))
        return [state.blocks[b].header_bytes for b in ids]

    def level_set_ids(self, ms_id: bytes, key: str | None = None) -> list[BlockId] | None:
        """P9 responder: the level set of a milestone in L2 order (milestone last), or None
        (also once its bodies are pruned: ``notfound``, never ids we cannot serve).

        ``key``: the asking peer, whose pruning hold moves up (decision 40).
        """
        state = self.chain.state
        height = state.best_height_of.get(BlockId(bytes(ms_id)))
        if height is not None and key is not None:
            self.serve_holds.fetching(key, height, int(self.clock()))
        if height is not None and 0 < height < state.pruned_below():
            return None
        delta = self.chain.level_set(ms_id)
        return None if delta is None else list(delta.order)

    def pending_ids(self, limit: int = 4096) -> list[BlockId]:
        """P9 ``getpending`` responder: the newest pending blocks in acceptance order."""
        if limit <= 0:
            return []
        return self.chain.pending_blocks()[-limit:]
