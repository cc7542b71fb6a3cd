"""The Chain façade: block acceptance, orphans, fork choice and reorganisation.

``Chain.on_block(raw, now_ms)`` runs the acceptance procedure of PROTOCOL.md §3.3 in its order
(cheap checks first, signatures last), stores an accepted block in one batch (A1), releases the
orphans that waited for it and, for a milestone block, runs fork choice (F2) which evaluates the
ledger only when the best chain changes (§4.3, §4.4). An invalid block raises and changes
nothing; a block with unknown links is held as an orphan ("not yet valid", never invalid).
"""

from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

from dagchain import rules
from dagchain.blocks import Block, compute_merkle_root, decode_block
from dagchain.caches import DecodeCache, LevelSetCache, SharedResults, SignatureCache
from dagchain.crypto import address_from_pubkey
from dagchain.errors import (
    EncodingError,
    InvalidBlock,
    InvalidTransaction,
    MalformedBlock,
    NotYetValid,
    RejectedBlock,
    StorageError,
)
from dagchain.genesis import FAUCET_ADDRESS, genesis_block
from dagchain.ledger import (
    BlockContext,
    LevelSetDelta,
    RootRecord,
    Utxo,
    evaluate_level_set,
    genesis_delta,
)
from dagchain.levelset import compute_level_set
from dagchain.orphans import OrphanPool
from dagchain.params import ConsensusParams
from dagchain.pow import compute_work, decode_compact
from dagchain.retarget import Snapshot, compute_snapshot, genesis_snapshot
from dagchain.sortition import SortitionWindow, compute_window_span
from dagchain.state import BlockMeta, ChainState
from dagchain.storage import KVStore
from dagchain.storage import schema as S
from dagchain.storage.group import GroupingStore
from dagchain.transactions import (
    Transaction,
    TxKind,
    check_tx_stateless,
    verify_tx_signatures,
)
from dagchain.types import Address, BlockId, TxId

INVALID_CACHE_SIZE = 10_000
WINDOW_RING_CACHE = 1024
"""S2 window rings kept (one per peer-chain tip in use; 16 bytes per block of K each)."""


class WindowRing:
    """S2's window of one line of a peer chain (PROTOCOL.md §8.1: a per-root ring buffer).

    The last (up to K) blocks of the line ending at a tip, each as (work of its target,
    timestamp of its milestone link), with their work summed: for a block whose previous link is
    the tip, W is ``work`` and S is taken from ``oldest_ms_ts`` once the ring is full. A circular
    buffer in two machine-integer arrays (16 bytes a block; the works become a list only if one
    does not fit in 64 bits); ``_start`` is the oldest slot once the ring is full.
    """

    __slots__ = ("_ms_ts", "_start", "_works", "work")

    def __init__(self, entries: list[tuple[int, int]]) -> None:
        """``entries``: (work, milestone-link timestamp) of each block, oldest first."""
        self._works: array[int] | list[int] = array("Q")
        self._ms_ts: array[int] = array("q")
        self._start = 0
        self.work = 0
        for work, ts in entries:
            self._append(work, ts)

    @property
    def oldest_ms_ts(self) -> int:
        """ts(milestone_link(b_K)) for a child of the tip (the ring holds K blocks)."""
        return self._ms_ts[self._start]

    def push(self, entry: tuple[int, int], k: int) -> None:
        """The tip's child joins the ring; the oldest block leaves it once there are K."""
        work, ts = entry
        if len(self._ms_ts) < k:
            self._append(work, ts)
            return
        start = self._start
        self.work -= self._works[start]
        try:
            self._works[start] = work
        except OverflowError:
            self._works = list(self._works)
            self._works[start] = work
        self._ms_ts[start] = ts
        self._start = (start + 1) % k
        self.work += work

    def _append(self, work: int, ts: int) -> None:
        try:
            self._works.append(work)
        except OverflowError:
            self._works = [*self._works, work]
        self._ms_ts.append(ts)
        self.work += work


class BlockStatus(StrEnum):
    """Outcome of ``on_block`` when the block is not invalid."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    ORPHAN = "orphan"


@dataclass(frozen=True, slots=True)
class Reorg:
    """A best-chain change: milestones undone (newest first) and applied (oldest first)."""

    old_head: BlockId
    new_head: BlockId
    undone: tuple[LevelSetDelta, ...]
    applied: tuple[LevelSetDelta, ...]


@dataclass(frozen=True, slots=True)
class BlockOutcome:
    """What happened to a submitted block (and to the orphans its acceptance released)."""

    status: BlockStatus
    block_id: BlockId
    is_milestone: bool = False
    accepted: tuple[BlockId, ...] = ()
    """Newly accepted blocks in acceptance order: this block, then released orphans."""
    missing: tuple[BlockId, ...] = ()
    """For an orphan: the links to fetch."""
    reorgs: tuple[Reorg, ...] = ()
    rejected_orphans: tuple[tuple[BlockId, InvalidBlock], ...] = field(default=())
    evicted_orphans: tuple[str, ...] = ()
    """For an orphan: the suppliers (peer ids) of the orphans evicted to hold it, one entry per
    evicted orphan (P13: at a limit the sender's own oldest orphans go first)."""


class Chain:
    """The consensus state machine over a KVStore (one owner; not thread-safe by design)."""

    def __init__(
        self,
        params: ConsensusParams,
        store: KVStore,
        *,
        memory_window: int | None = None,
        signature_cache: SignatureCache | None = None,
        decode_cache: DecodeCache | None = None,
        level_set_cache: LevelSetCache | None = None,
        shared_results: SharedResults | None = None,
    ) -> None:
        """Open (or initialise) the chain stored in ``store``.

        ``memory_window``: milestones below the best head whose blocks, level sets and indexes
        stay in memory (default twice punctuality, at least 1); older history is read from the
        store on demand (docs/protocol.md decision 15). ``signature_cache`` and
        ``decode_cache`` may be shared by several Chains of one process (the simulator); by
        default each Chain has its own signature cache and decodes every block it receives.
        ``level_set_cache`` (same sharing) hands a level set evaluated by one Chain to the
        others (the simulator's shared memo). ``shared_results`` (same sharing) hands one
        Chain's tx and block verdicts and a milestone's ledger rows to the others
        (``dagchain.caches.SharedResults``).
        """
        self.params = params
        self.store = store
        self._writes = GroupingStore(store, S.PUT_ONLY_WHEN_ABSENT)
        self.genesis = genesis_block(params)
        self.state = ChainState(params, self._writes, memory_window)
        self.orphans = OrphanPool(params)
        self._invalid: OrderedDict[BlockId, str] = OrderedDict()
        self._sig_ok = signature_cache if signature_cache is not None else SignatureCache()
        self._decode_cache = decode_cache
        self._level_sets = level_set_cache
        self._shared = shared_results
        self._work_of_bits: dict[int, int] = {}
        self._rings: OrderedDict[BlockId, WindowRing | None] = OrderedDict()
        """S2 window rings by tip block id, least recently used first (``_ring_of``)."""
        self.signature_checks = 0
        """Transactions whose signatures were verified (not answered from the cache)."""
        self._open()

    # ------------------------------------------------------------------ opening / recovery
    def _open(self) -> None:
        """§12 crash recovery: check schema/network/genesis, init an empty store, re-run F2."""
        schema = self.store.get(S.META_SCHEMA)
        if schema is None:
            if next(iter(self.store.iter_prefix(b"")), None) is not None:
                raise StorageError("store is not empty but has no schema version: half-written?")
            self.state.write_genesis(
                self.genesis, genesis_snapshot(self.params), self._faucet(), self._shared
            )
            return
        self._check_schema_version(S.decode_row(schema, S.META_SCHEMA))
        net_raw = self.store.get(S.META_NETWORK)
        network = S.decode_row(net_raw, S.META_NETWORK)[0] if net_raw else b""
        if network != self.params.network_id.encode("ascii"):
            raise StorageError(
                f"database belongs to network {network!r}, not {self.params.network_id}"
            )
        gen_raw = self.store.get(S.META_GENESIS)
        genesis = S.decode_row(gen_raw, S.META_GENESIS)[0] if gen_raw else b""
        if genesis != self.genesis.id:
            raise StorageError(f"database genesis {bytes(genesis).hex()} is not this network's")
        self.state.load(self._shared)
        self._reselect_best()

    @staticmethod
    def _check_schema_version(row: list[object]) -> None:
        """A newer schema is never opened by older code; an older one needs a migration (§12)."""
        version = row[0] if len(row) == 1 else None
        if type(version) is not int:
            raise StorageError(f"database schema row is damaged: {row!r}")
        if version > S.SCHEMA_VERSION:
            raise StorageError(
                f"database schema version {version} is newer than this software's version "
                f"{S.SCHEMA_VERSION}: upgrade dagchain to open it"
            )
        if version == 1:
            raise StorageError(
                "database schema version 1 holds PROTOCOL.md v1 blocks, which this software "
                f"(schema {S.SCHEMA_VERSION}, protocol v2) neither reads nor migrates: start a "
                "new data directory (move this one away)"
            )
        if version != S.SCHEMA_VERSION:
            raise StorageError(
                f"database schema version {version} is older than this software's version "
                f"{S.SCHEMA_VERSION} and no migration exists"
            )

    def _faucet(self) -> list[tuple[int, Address, int]]:
        if not self.params.faucet:
            return []
        return [
            (i, FAUCET_ADDRESS, self.params.faucet_amount)
            for i in range(self.params.faucet_outputs)
        ]

    # ------------------------------------------------------------------ grouped writes (§12)
    @contextmanager
    def write_group(self) -> Iterator[None]:
        """Write every batch of the enclosed calls as ONE store batch when the block ends.

        PROTOCOL.md §12 A1: blocks downloaded by P9 are never acknowledged, so one batch covers
        a whole level set (and, with it, the A2+A3 batch of the milestone that completes it,
        §13 "synced batch ... per level set in sync"). Inside the block, ``on_block`` and the
        fork choice it runs behave exactly as outside (reads see the pending writes), but
        nothing reaches the store until the block exits; then the A1, A2+A3 (and any undo)
        batches are written together, atomically: a crash leaves the store either before the
        whole group or after it. The group is written also when the block raises (what was
        applied before the exception is complete A1/A3 units, already in memory).

        Nothing applied inside may be acknowledged (relay, inv, getdata answer, submit-RPC
        success) before the block has exited. Nested groups join the outermost one.

        Raises:
            StorageError: the group could not be written; the in-memory state is then ahead of
                the store, so the owner must reopen the chain (§12 recovery).
        """
        with self._writes.group():
            yield

    @property
    def in_write_group(self) -> bool:
        """True inside :meth:`write_group` (writes not yet in the store)."""
        return self._writes.grouping

    # ------------------------------------------------------------------ queries
    @property
    def genesis_id(self) -> BlockId:
        """The network's genesis id."""
        return self.genesis.id

    @property
    def best_id(self) -> BlockId:
        """The best milestone (head of the best chain, F2)."""
        return self.state.best[-1]

    @property
    def best_height(self) -> int:
        """Height of the best milestone."""
        return len(self.state.best) - 1

    @property
    def best_snapshot(self) -> Snapshot:
        """Snapshot of the best milestone."""
        return self.state.snapshots[self.best_id]

    @property
    def final_id(self) -> BlockId:
        """The final milestone Φ (F6)."""
        return self.state.final

    @property
    def signature_cache(self) -> SignatureCache:
        """The §7.5 signature cache this Chain reads (the one passed in, or its own).

        The attribute cannot be replaced. A caller may ``add`` a txid only after that
        transaction passed T1-T5 and T6 (e.g. checked ahead of time in a worker process during
        sync); ``on_block`` and ``check_transaction`` then skip those checks for it.
        """
        return self._sig_ok

    def best_chain(self) -> list[BlockId]:
        """Best-chain milestone ids by height, genesis first."""
        return list(self.state.best)

    def has_block(self, block_id: bytes, milestone_link: bytes | None = None) -> bool:
        """True if the block is accepted.

        ``milestone_link``: the milestone link its header names, when the caller has the block's
        bytes (P14's stale filter): then D1's answer from memory for a recent link
        (``ChainState.is_accepted``), without a store read for a block not accepted.
        """
        if milestone_link is not None:
            return self.state.is_accepted(BlockId(block_id), BlockId(milestone_link))
        return block_id in self.state.meta

    def get_block(self, block_id: bytes) -> Block | None:
        """An accepted block."""
        return self.state.blocks.get(BlockId(block_id))

    def get_meta(self, block_id: bytes) -> BlockMeta | None:
        """Acceptance facts of a block (peer height, root, milestone status...)."""
        return self.state.meta.get(BlockId(block_id))

    def get_snapshot(self, milestone_id: bytes) -> Snapshot | None:
        """Snapshot of an accepted milestone block (or genesis)."""
        return self.state.snapshots.get(BlockId(milestone_id))

    def level_set(self, milestone_id: bytes) -> LevelSetDelta | None:
        """The stored evaluation of a milestone's level set (order, reasons, delta)."""
        if milestone_id == self.genesis.id:
            return genesis_delta(self.genesis.id)
        ms = BlockId(milestone_id)
        delta = self.state.deltas.get(ms)
        # a pruned node deleted the delta of a final level set (F6) and kept its ``l`` row
        return delta if delta is not None else self.state.level_set_record(ms)

    def confirmations(self, block_id: bytes) -> int:
        """F7: best height - LS height(B) + 1 on the best chain; 0 while pending or unknown."""
        h = self.state.ls_height.get(BlockId(block_id))
        return 0 if h is None else self.best_height - h + 1

    def redeemable(self, root: bytes) -> int:
        """R8: balance(root) on the best chain, what a miner may claim (0 if unknown)."""
        rec = self.state.roots.get(BlockId(root))
        return 0 if rec is None else rec.balance

    def ls_height(self, block_id: bytes) -> int | None:
        """LS height of a block on the best chain, None while pending."""
        return self.state.ls_height.get(BlockId(block_id))

    def pending_blocks(self) -> list[BlockId]:
        """Accepted blocks in no best-chain level set, in acceptance order."""
        return sorted(self.state.pending, key=lambda b: self.state.meta[b].seq)

    def get_utxo(self, txid: bytes, index: int) -> Utxo | None:
        """A best-chain unspent output."""
        entry = self.state.utxos.get((txid, index))
        return None if entry is None else Utxo(*entry)

    def utxos(self) -> dict[tuple[bytes, int], Utxo]:
        """A copy of the best chain's UTXO set."""
        return {op: Utxo(*entry) for op, entry in self.state.utxos.items()}

    def get_root(self, root: bytes) -> RootRecord | None:
        """Best-chain reward record of a peer chain (balance, anchor)."""
        return self.state.roots.get(BlockId(root))

    def roots(self) -> dict[BlockId, RootRecord]:
        """A copy of every peer chain's record on the best chain."""
        return dict(self.state.roots)

    def peer_chain_head(self, root: bytes) -> tuple[BlockId, int] | None:
        """Last accepted block of a peer chain and its peer height (§12 r)."""
        return self.state.peer_heads.get(BlockId(root))

    def blocks_with_tx(self, txid: bytes) -> list[BlockId]:
        """Every accepted block that contains the txid."""
        return self.state.blocks_with_tx(txid)

    def is_known_invalid(self, block_id: bytes) -> bool:
        """True if the block id is in the invalid cache."""
        return block_id in self._invalid

    # ------------------------------------------------------------------ acceptance (§3.3)
    def on_block(self, raw: bytes, now_ms: int, peer: str = "local") -> BlockOutcome:
        """Run the acceptance procedure on canonical block bytes.

        Raises:
            MalformedBlock: H1 or H7 (not remembered as invalid).
            RejectedBlock: any REJECT rule; the id enters the invalid cache.
            NotYetValid: H11 (timestamp too far in the future): retry later, never penalise.
        """
        first = self._process(raw, now_ms, peer)
        if first.status is not BlockStatus.ACCEPTED:
            return first
        accepted = list(first.accepted)
        reorgs = list(first.reorgs)
        rejected: list[tuple[BlockId, InvalidBlock]] = []
        queue = list(first.accepted)
        while queue:
            parent = queue.pop(0)
            for orphan in self.orphans.pop_waiting_on(parent):
                try:
                    out = self._process(orphan.raw, now_ms, orphan.peer)
                except InvalidBlock as exc:
                    rejected.append((orphan.block_id, exc))
                    continue
                except NotYetValid:
                    continue
                if out.status is BlockStatus.ACCEPTED:
                    accepted.extend(out.accepted)
                    queue.extend(out.accepted)
                    reorgs.extend(out.reorgs)
        if not rejected and len(accepted) == len(first.accepted):
            return first  # no orphan released or rejected: the common case, as it stands
        return BlockOutcome(
            BlockStatus.ACCEPTED,
            first.block_id,
            first.is_milestone,
            tuple(accepted),
            (),
            tuple(reorgs),
            tuple(rejected),
        )

    def _process(self, raw: bytes, now_ms: int, peer: str) -> BlockOutcome:
        p = self.params
        st = self.state
        # (1) H1
        if len(raw) > p.max_block_bytes:
            raise MalformedBlock("H1", f"block of {len(raw)} bytes exceeds max_block_bytes")
        try:
            block = (
                decode_block(raw, p)
                if self._decode_cache is None
                else self._decode_cache.decode(raw)
            )
        except EncodingError as exc:
            raise MalformedBlock("H1", str(exc)) from None
        bid = block.id
        # (2) D1 (the orphan key hashes the whole block: only when some orphan is held)
        if st.is_accepted(bid, block.header.milestone_link) or (
            self.orphans and OrphanPool.key_of(raw) in self.orphans
        ):
            return BlockOutcome(
                BlockStatus.DUPLICATE, bid, bid in st.meta and st.meta[bid].is_milestone
            )
        if bid in self._invalid:
            raise RejectedBlock("D1", "block is in the invalid cache", bid)
        try:
            return self._check_and_accept(block, raw, now_ms, peer)
        except RejectedBlock as exc:
            self._remember_invalid(bid, exc.rule)
            self._reject_descendant_orphans(bid)
            raise

    def _check_and_accept(self, block: Block, raw: bytes, now_ms: int, peer: str) -> BlockOutcome:
        p = self.params
        st = self.state
        bid = block.id
        h = block.header
        gid = self.genesis.id
        shared = self._shared
        if shared is not None and shared.block_passed(bid):
            return self._accept_passed(block, raw, now_ms, peer)
        # (3) H2, H3, H5 (header part); H7 for tips_root; H5 (tip list): nothing reads a tip
        # link before tips_root passed, so a mutated body never reaches the invalid cache.
        rules.check_header_fields(h, bid, p)
        rules.check_tips_root(h, block.tip_links, bid)
        rules.check_tip_list(h, block.tip_links, bid, gid, p)
        # (4) milestone link known?
        ms = h.milestone_link
        if ms in self._invalid:
            raise RejectedBlock("D2", "milestone link is an invalid block", bid)
        if ms not in st.meta:
            return self._hold_orphan(block, raw, (ms,), peer, now_ms)
        # (5) D3, D4, H4
        snap = st.snapshots.get(ms)
        if snap is None:
            raise RejectedBlock("D3", "milestone link is not a milestone block", bid)
        rules.check_block_target(h, snap.blk_target, bid)
        pow_value = rules.check_pow(bid, snap.blk_target)
        # (6) H11
        rules.check_not_future(h, now_ms, p)
        # (7) D6 against the milestone link; D5a, D5b, D6 for accepted links
        rules.check_timestamp_order(h, st.blocks[ms].header.timestamp_ms, "milestone", bid)
        self._check_link_rules(block, snap.height)
        # (8) H7 for merkle_root
        if h.merkle_root != compute_merkle_root(block.txs):
            raise MalformedBlock("H7", "merkle root does not match the transactions", bid)
        # (9) H6, H8, H10
        self._check_body(block)
        # (10) D2 for the previous and tip links, then the orphan test
        missing = self._missing_links(block)
        if missing:
            return self._hold_orphan(block, raw, missing, peer, now_ms)
        # (11) H9
        for tx in block.txs:
            if tx.txid not in self._sig_ok:
                self.signature_checks += 1
                if not verify_tx_signatures(tx, p):
                    raise RejectedBlock("H9", f"bad signature in tx {tx.txid.hex()}", bid)
                self._remember_signature(tx.txid)
        if shared is not None:
            shared.add_block_pass(bid)
        # (12) store and acknowledge
        return self._accept(block, snap, pow_value <= snap.ms_target)

    def _accept_passed(self, block: Block, raw: bytes, now_ms: int, peer: str) -> BlockOutcome:
        """Steps (3)-(12) for a block another Chain of this network passed.

        Its checks that read only its bytes and its ancestors passed there
        (``SharedResults.block_passes``); what depends on this node still runs here, in the same
        order: D2 against its invalid cache, the orphan test against what it holds, H11 against
        its clock.
        """
        st = self.state
        bid = block.id
        h = block.header
        ms = h.milestone_link
        if ms in self._invalid:
            raise RejectedBlock("D2", "milestone link is an invalid block", bid)
        if ms not in st.meta:
            return self._hold_orphan(block, raw, (ms,), peer, now_ms)
        snap = st.snapshots[ms]
        rules.check_not_future(h, now_ms, self.params)
        missing = self._missing_links(block)
        if missing:
            return self._hold_orphan(block, raw, missing, peer, now_ms)
        return self._accept(block, snap, rules.check_pow(bid, snap.blk_target) <= snap.ms_target)

    def _missing_links(self, block: Block) -> tuple[BlockId, ...]:
        """Step (10): D2 for the previous and tip links; the ones not accepted here, in order."""
        meta, invalid = self.state.meta, self._invalid
        missing: list[BlockId] = []
        for link in (block.header.previous_link, *block.tip_links):
            if link in invalid:
                raise RejectedBlock("D2", "links an invalid block", block.id)
            if link not in meta and link not in missing:
                missing.append(link)
        return tuple(missing)

    def _check_link_rules(self, block: Block, ms_height: int) -> None:
        """D5a, D5b and D6 for the previous and tip links that are already accepted (F4)."""
        st = self.state
        h = block.header
        bid = block.id
        p = self.params
        prev = h.previous_link
        if prev != self.genesis.id and prev in st.meta:
            rules.check_milestone_link_order(ms_height, st.meta[prev].ms_link_height, bid)
            if not rules.is_punctual(ms_height, self.msh(prev), p):
                raise RejectedBlock("D5b", "previous link is not punctual", bid)
            rules.check_timestamp_order(h, st.blocks[prev].header.timestamp_ms, "previous", bid)
        for tip in block.tip_links:
            if tip in st.meta and not rules.is_punctual(ms_height, self.msh(tip), p):
                raise RejectedBlock("D5b", "a tip link is not punctual", bid)

    def msh(self, block_id: bytes) -> int:
        """The milestone height of an accepted block (§1; ``rules.milestone_height_of_link``)."""
        meta = self.state.meta[BlockId(block_id)]
        own = self.state.snapshots[BlockId(block_id)].height if meta.is_milestone else 0
        return rules.milestone_height_of_link(meta.is_milestone, own, meta.ms_link_height)

    def _check_body(self, block: Block) -> None:
        """H6, H8 (distinct txids, T1-T5) and H10 (placement of REGISTRATION and REDEMPTION)."""
        p = self.params
        bid = block.id
        txs = block.txs
        if len(txs) > p.block_capacity:
            raise RejectedBlock("H6", f"{len(txs)} txs exceed block_capacity", bid)
        if len({t.txid for t in txs}) != len(txs):
            raise RejectedBlock("H8", "two transactions with the same txid", bid)
        verified = self._sig_ok
        for tx in txs:
            if tx.txid in verified:
                continue  # passed T1-T6 before (T1-T5 always run ahead of T6)
            try:
                check_tx_stateless(tx, p)
            except InvalidTransaction as exc:
                raise RejectedBlock(
                    "H8", f"tx {tx.txid.hex()} fails {exc.rule}: {exc.message}", bid
                ) from None
        registration = block.header.previous_link == self.genesis.id
        if registration and (not txs or txs[0].kind != TxKind.REGISTRATION):
            raise RejectedBlock("H10", "a registration block must start with a REGISTRATION", bid)
        for index, tx in enumerate(txs):
            if tx.kind == TxKind.REGISTRATION and (index != 0 or not registration):
                raise RejectedBlock(
                    "H10", "REGISTRATION outside tx[0] of a registration block", bid
                )
            if tx.kind == TxKind.REDEMPTION and (index != 0 or registration):
                raise RejectedBlock(
                    "H10", "REDEMPTION outside tx[0] of a non-registration block", bid
                )

    def _hold_orphan(
        self, block: Block, raw: bytes, missing: tuple[BlockId, ...], peer: str, now_ms: int
    ) -> BlockOutcome:
        evicted = self.orphans.add(raw, block.id, missing, peer, now_ms)
        return BlockOutcome(
            BlockStatus.ORPHAN,
            block.id,
            missing=missing,
            evicted_orphans=tuple(o.peer for o in evicted),
        )

    def _accept(self, block: Block, ms_snap: Snapshot, is_milestone: bool) -> BlockOutcome:
        """(12) A1: compute m(B), root, W, S and a milestone's snapshot; store; fork choice."""
        st = self.state
        h = block.header
        bid = block.id
        if h.previous_link == self.genesis.id:
            peer_height, root = 1, bid
        else:
            pm = st.meta[h.previous_link]
            peer_height, root = pm.peer_height + 1, pm.root
        window = self._compute_window(h.previous_link, h.milestone_link, peer_height)
        ms_link_ts = st.blocks[h.milestone_link].header.timestamp_ms
        meta = BlockMeta(
            st.next_seq,
            peer_height,
            root,
            is_milestone,
            ms_snap.height,
            window.work,
            window.span_ms,
        )
        snapshot = None
        if is_milestone:
            snapshot = compute_snapshot(
                ms_snap, h.milestone_link == self.genesis.id, h.timestamp_ms, self.params
            )
        head = st.peer_heads.get(root)
        st.write_accept(block, meta, snapshot, head is None or peer_height > head[1], self._shared)
        self._advance_ring(block, peer_height, ms_link_ts)
        reorgs: tuple[Reorg, ...] = ()
        if is_milestone:
            reorg = self._fork_choice(bid)
            reorgs = (reorg,) if reorg is not None else ()
        return BlockOutcome(BlockStatus.ACCEPTED, bid, is_milestone, (bid,), (), reorgs)

    def _compute_window(
        self, previous_link: BlockId, milestone_link: BlockId, peer_height: int
    ) -> SortitionWindow:
        """S2: W and S over the K previous blocks b_1..b_K (zero while m <= K).

        §8.1: from the window ring of ``previous_link`` (its line's last K blocks, O(1)), not a
        K-step walk; the ring is rebuilt by a walk only when it is not cached (a block on a
        previous link that already has a child, the first block of a peer chain after a
        reopen, a ring evicted from the LRU).
        """
        k = self.params.sortition_warmup
        if peer_height <= k:
            return SortitionWindow(peer_height, 0, 0)
        ring = self._ring_of(previous_link)
        span = compute_window_span(
            self.state.blocks[milestone_link].header.timestamp_ms, ring.oldest_ms_ts, self.params
        )
        return SortitionWindow(peer_height, ring.work, span)

    def _ring_of(self, tip: BlockId) -> WindowRing:
        """The window ring of ``tip``'s line (cached, else walked from the stored blocks)."""
        rings = self._rings
        ring = rings.get(tip)
        if ring is not None:
            rings.move_to_end(tip)
            return ring
        blocks = self.state.blocks
        ms_ts: dict[BlockId, int] = {}
        entries: list[tuple[int, int]] = []
        cursor = tip
        gid = self.genesis.id
        for _ in range(self.params.sortition_warmup):
            if cursor == gid:
                break
            hdr = blocks[cursor].header
            link = hdr.milestone_link
            ts = ms_ts.get(link)
            if ts is None:
                ts = ms_ts[link] = blocks[link].header.timestamp_ms
            entries.append((self._work(hdr.target), ts))
            cursor = hdr.previous_link
        entries.reverse()
        ring = WindowRing(entries)
        self._remember_ring(tip, ring)
        return ring

    def _remember_ring(self, tip: BlockId, ring: WindowRing) -> None:
        rings = self._rings
        rings[tip] = ring
        if len(rings) > WINDOW_RING_CACHE:
            rings.popitem(last=False)

    def _advance_ring(self, block: Block, peer_height: int, ms_link_ts: int) -> None:
        """After A1: the ring of the accepted block is its previous link's, moved one block on.

        The previous link's ring is taken over (its line usually grows only through this
        block); should the previous link get another child, its ring is walked again.
        """
        h = block.header
        entry = (self._work(h.target), ms_link_ts)
        if peer_height == 1:
            ring = WindowRing([entry])
        else:
            ring_or_none = self._rings.pop(h.previous_link, None)
            if ring_or_none is not None:
                ring = ring_or_none
            else:
                ring = self._ring_of(h.previous_link)
                del self._rings[h.previous_link]
            ring.push(entry, self.params.sortition_warmup)
        self._remember_ring(block.id, ring)

    def compute_window(self, previous_link: bytes, milestone_link: bytes) -> SortitionWindow:
        """S2 window of a prospective block on ``previous_link`` linking ``milestone_link``."""
        prev = BlockId(previous_link)
        peer_height = 1 if prev == self.genesis.id else self.state.meta[prev].peer_height + 1
        return self._compute_window(prev, BlockId(milestone_link), peer_height)

    def _work(self, bits: int) -> int:
        work = self._work_of_bits.get(bits)
        if work is None:
            work = compute_work(decode_compact(bits), self.params.max_target)
            self._work_of_bits[bits] = work
        return work

    def _reject_descendant_orphans(self, block_id: BlockId) -> None:
        """A block with a REJECTed parent is itself REJECTed (§1): drop and remember its orphans."""
        queue = [block_id]
        while queue:
            for orphan in self.orphans.pop_waiting_on(queue.pop()):
                if orphan.block_id not in self._invalid:
                    self._remember_invalid(orphan.block_id, "D2")
                    queue.append(orphan.block_id)

    def _remember_invalid(self, block_id: BlockId, rule: str) -> None:
        self._invalid[block_id] = rule
        if len(self._invalid) > INVALID_CACHE_SIZE:
            self._invalid.popitem(last=False)

    def _remember_signature(self, txid: TxId) -> None:
        self._sig_ok.add(txid)

    # ------------------------------------------------------------------ fork choice (§4)
    def _fork_choice(self, candidate: BlockId) -> Reorg | None:
        """F2 for a newly accepted milestone: switch if it has strictly more chainwork.

        F3: a losing branch is never discarded; its blocks stay accepted and enter best-chain level
        sets once something reachable from a best-chain milestone links them.
        """
        st = self.state
        if st.snapshots[candidate].chainwork <= self.best_snapshot.chainwork:
            return None
        path = self._path_from_best(candidate)
        if path is None:
            return None
        return self._switch_to(path)

    def _path_from_best(self, candidate: BlockId) -> list[BlockId] | None:
        """Milestones from the fork point (excluded) up to ``candidate``, or None if ineligible.

        Ineligible (F2): the branch forks below Φ or contains an invalidated milestone. F5: such a
        branch's blocks are still accepted one by one; it just never becomes best.
        """
        st = self.state
        path: list[BlockId] = []
        cursor = candidate
        while cursor not in st.best_height_of:
            if cursor in st.invalidated:
                return None
            path.append(cursor)
            cursor = st.blocks[cursor].header.milestone_link
        if st.best_height_of[cursor] < st.best_height_of[st.final]:
            return None
        path.reverse()
        return path

    def _switch_to(self, path: list[BlockId]) -> Reorg:
        """§4.4 switch_to: undo down to the fork point, then evaluate/apply up the new branch."""
        st = self.state
        old_head = self.best_id
        fork = st.blocks[path[0]].header.milestone_link
        undone = []
        while self.best_id != fork:
            undone.append(st.write_undo())
        applied = []
        for ms in path:
            delta = st.stored_delta(ms)
            if delta is None:
                delta = self._evaluate(ms)
                st.write_apply(delta, True, self._shared)
            else:
                st.write_apply(delta, False, self._shared)
            applied.append(delta)
        return Reorg(old_head, self.best_id, tuple(undone), tuple(applied))

    def _evaluate(self, ms: BlockId) -> LevelSetDelta:
        """§4.3: LS(M) and every verdict, with the stored ledger exactly L(parent(M))."""
        shared = self._level_sets
        if shared is not None and (found := shared.get(ms)) is not None:
            return found  # a pure function of M's past (dagchain.caches.LevelSetCache)
        st = self.state
        blocks = st.blocks
        pending = st.pending
        # in_earlier(b) = "b has an LS height in this ledger": every accepted block either has
        # one or is pending, and the pending set is always whole in memory, so no store read
        # for the new blocks (which have no x row yet; decision 22).
        order = compute_level_set(ms, lambda b: blocks[b].links, lambda b: b not in pending)
        height = st.snapshots[ms].height
        delta = evaluate_level_set(
            ms, height, order, blocks.__getitem__, self._context, st, self.params, self.genesis.id
        )
        if shared is not None:
            shared.add(delta)
        return delta

    def sortition_window(self, block_id: bytes) -> SortitionWindow:
        """The S2 values of an accepted block, fixed at acceptance (§12 ``m`` row)."""
        meta = self.state.meta[BlockId(block_id)]
        return SortitionWindow(meta.peer_height, meta.work, meta.span_ms)

    def hash_rate_of(self, block_id: bytes) -> int:
        """Hr (S3) of an accepted block: its milestone link's snapshot ``hash_rate``."""
        link = self.state.blocks[BlockId(block_id)].header.milestone_link
        return self.state.snapshots[link].hash_rate

    def _context(self, block_id: BlockId) -> BlockContext:
        st = self.state
        meta = st.meta[block_id]
        link = st.blocks[block_id].header.milestone_link
        return BlockContext(
            meta.root,
            meta.peer_height,
            meta.ms_link_height,
            SortitionWindow(meta.peer_height, meta.work, meta.span_ms),
            st.snapshots[link].hash_rate,
        )

    def _reselect_best(self) -> Reorg | None:
        """F2 over every accepted milestone (recovery, invalidate, reconsider)."""
        st = self.state
        final_h = st.snapshots[st.final].height
        eligible: dict[BlockId, bool] = {st.final: st.final not in st.invalidated}
        best = st.final
        ordered = sorted(
            (snap.height, st.meta[ms].seq, ms, snap) for ms, snap in st.milestones_above(final_h)
        )
        for _, seq, ms, snap in ordered:
            parent = st.blocks[ms].header.milestone_link
            ok = eligible.get(parent, False) and ms not in st.invalidated
            eligible[ms] = ok
            if ok:
                b = st.snapshots[best]
                if (snap.chainwork, -seq) > (b.chainwork, -st.meta[best].seq):
                    best = ms
        if best == self.best_id:
            return None
        return self._switch_to_any(best)

    def _switch_to_any(self, target: BlockId) -> Reorg:
        st = self.state
        path: list[BlockId] = []
        cursor = target
        while cursor not in st.best_height_of:
            path.append(cursor)
            cursor = st.blocks[cursor].header.milestone_link
        if not path:  # target is on the best chain, below the head: undo down to it
            old = self.best_id
            undone = []
            while self.best_id != target:
                undone.append(st.write_undo())
            return Reorg(old, target, tuple(undone), ())
        path.reverse()
        return self._switch_to(path)

    # ------------------------------------------------------------------ operator healing (F8)
    def invalidate(self, milestone_id: bytes) -> Reorg | None:
        """F8 invalidate: drop M and its descendants from F2's candidates.

        Raises:
            KeyError: M is not an accepted milestone block other than genesis.
            ValueError: M is on the best chain below a pruned node's bodies (``--prune-depth``).
        """
        ms = BlockId(milestone_id)
        st = self.state
        if ms not in st.snapshots or ms == self.genesis.id:
            raise KeyError("not an accepted milestone (genesis cannot be invalidated)")
        height = st.best_height_of.get(ms)
        if height is not None and height < st.pruned_below():
            raise ValueError(
                f"milestone at height {height} is below this pruned node's bodies and undo "
                f"records (height {st.pruned_below()} up): it cannot be undone here"
            )
        final = st.final
        if ms in st.best_height_of and st.best_height_of[ms] <= st.best_height_of[final]:
            final = st.blocks[ms].header.milestone_link
        st.write_marks(st.invalidated | {ms}, final)
        return self._reselect_best()

    def reconsider(self, milestone_id: bytes) -> Reorg | None:
        """F8 reconsider: clear the mark and re-run fork choice."""
        ms = BlockId(milestone_id)
        st = self.state
        if ms not in st.invalidated:
            return None
        st.write_marks(st.invalidated - {ms}, st.final)
        return self._reselect_best()

    # ------------------------------------------------------------------ mempool admission (§7.5)
    def check_transaction(
        self, tx: Transaction, before_signatures: Callable[[int], None] | None = None
    ) -> int:
        """Policy checks of a relayed tx against the best chain; returns its fee.

        Order, cheapest first: T1-T5 and T7; inputs unspent in the best chain; V7; V8; T6.
        ``before_signatures(fee)`` runs before T6 when the signatures are still to be checked
        (the mempool's room, decision 41); what it raises ends the check, and nothing is cached.

        Raises:
            InvalidTransaction: rule ``T1``..``T7`` (REJECT), ``V6`` (spent or missing input:
                ``message`` says which), ``V7`` or ``V8`` (DROP).
        """
        shared = self._shared
        if shared is None:
            return self._check_transaction(tx, before_signatures)
        best = self.state.best[-1]  # the verdict is a pure function of the tx and L(best)
        found = shared.tx_verdict(tx.txid, best)
        if found is not None:
            if isinstance(found, int):
                return found
            raise InvalidTransaction(found[0], found[1], tx.txid)
        try:
            fee = self._check_transaction(tx, before_signatures)
        except InvalidTransaction as exc:
            shared.add_tx_verdict(tx.txid, best, (exc.rule, exc.message))
            raise
        shared.add_tx_verdict(tx.txid, best, fee)
        return fee

    def _check_transaction(
        self, tx: Transaction, before_signatures: Callable[[int], None] | None = None
    ) -> int:
        p = self.params
        if tx.txid not in self._sig_ok:  # a cached txid passed T1-T6 already
            check_tx_stateless(tx, p)
        if tx.kind != TxKind.TRANSFER:
            raise InvalidTransaction(
                "T7", "registrations and redemptions are never relayed", tx.txid
            )
        total_in = 0
        found = []
        for inp in tx.inputs:
            utxo = self.state.utxos.get((inp.txid, inp.out_index))
            if utxo is None:
                spent = self.state.get_spender((inp.txid, inp.out_index)) is not None
                raise InvalidTransaction("V6", "spent-input" if spent else "missing-input", tx.txid)
            found.append(utxo)
            total_in += utxo[0]  # UtxoEntry: amount, address, height
        for inp, utxo in zip(tx.inputs, found, strict=True):
            if address_from_pubkey(inp.pubkey) != utxo[1]:
                raise InvalidTransaction("V7", "input key does not match the spent output", tx.txid)
        fee = total_in - sum(o.amount for o in tx.outputs)
        if fee < 0:
            raise InvalidTransaction("V8", "outputs exceed inputs", tx.txid)
        if tx.txid not in self._sig_ok:
            if before_signatures is not None:
                before_signatures(fee)
            self.signature_checks += 1
            if not verify_tx_signatures(tx, p):
                raise InvalidTransaction("T6", "invalid signature", tx.txid)
            self._remember_signature(tx.txid)
        return fee

    def expire_orphans(self, now_ms: int) -> int:
        """Drop orphans older than the expiry (P13); returns how many."""
        return len(self.orphans.expire(now_ms))

    def level_set_txs(self, delta: LevelSetDelta) -> Iterable[tuple[Transaction, int]]:
        """Each tx of a level set in total order with its reason code."""
        i = 0
        for bid in delta.order:
            for tx in self.state.blocks[bid].txs:
                yield tx, delta.reasons[i]
                i += 1


__all__ = ["BlockOutcome", "BlockStatus", "Chain", "Reorg"]
