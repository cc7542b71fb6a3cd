"""The chain's persistent state: rows of PROTOCOL.md §12 and their in-memory mirror.

Every change goes through one store batch (A1 accept, A2+A3 apply or undo one milestone); the
in-memory mirror is updated only after the batch has been written, so a failure in between
leaves memory and store as they were.
"""

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from dagchain.blocks import Block, decode_stored_block
from dagchain.caches import SharedResults, UtxoSet
from dagchain.encoding import packer
from dagchain.errors import EncodingError, StorageError
from dagchain.history import BestChain, BestHeights, StoredMap
from dagchain.ledger import LevelSetDelta, Outpoint, RootRecord, UtxoEntry
from dagchain.params import DEVNET, ConsensusParams
from dagchain.pow import decode_compact, encode_compact
from dagchain.retarget import Snapshot
from dagchain.storage import KVStore, WriteBatch
from dagchain.storage import schema as S
from dagchain.types import Address, BlockId, TxId


@dataclass(frozen=True, slots=True)
class BlockMeta:
    """Per-block facts fixed at acceptance (§12 ``m`` row)."""

    seq: int
    peer_height: int
    """m(B): 1 for a registration block, m(prev) + 1 otherwise (0 for genesis)."""
    root: BlockId
    is_milestone: bool
    ms_link_height: int
    """Height of the block's milestone link (0 for genesis)."""
    work: int
    """W of S2 (0 while m <= K)."""
    span_ms: int
    """S of S2 (0 while m <= K)."""


@dataclass(frozen=True, slots=True)
class HeadRecord:
    """The ``H`` row: best milestone, its height and chainwork, and the final milestone Φ."""

    best: BlockId
    height: int
    chainwork: int
    final: BlockId


def meta_row(meta: BlockMeta) -> bytes:
    """Encode an ``m`` row."""
    return S.encode_row(
        [
            meta.seq,
            meta.peer_height,
            meta.root,
            int(meta.is_milestone),
            meta.ms_link_height,
            S.u256(meta.work),
            meta.span_ms,
        ]
    )


def parse_meta(row: list[Any]) -> BlockMeta:
    """Decode an ``m`` row."""
    seq, m, root, ms, link_h, work, span = row
    return BlockMeta(seq, m, BlockId(root), bool(ms), link_h, S.from_u256(work), span)


def snapshot_row(s: Snapshot) -> bytes:
    """Encode an ``s`` row (targets compact: exact, as stored targets are normalized)."""
    return S.encode_row(
        [
            s.height,
            S.u256(s.chainwork),
            encode_compact(s.ms_target),
            encode_compact(s.blk_target),
            S.u256(s.hash_rate),
            s.win_start_ms,
            s.win_start_height,
        ]
    )


def parse_snapshot(row: list[Any]) -> Snapshot:
    """Decode an ``s`` row."""
    h, work, ms_t, blk_t, rate, ws_ms, ws_h = row
    return Snapshot(
        h,
        S.from_u256(work),
        decode_compact(ms_t),
        decode_compact(blk_t),
        S.from_u256(rate),
        ws_ms,
        ws_h,
    )


def head_row(head: HeadRecord) -> bytes:
    """Encode the ``H`` row."""
    return S.encode_row([head.best, head.height, S.u256(head.chainwork), head.final])


def delta_row(d: LevelSetDelta, pack: Callable[[Any], bytes] = S.encode_row) -> bytes:
    """Encode a ``d`` row (§12): created, spent, roots before and after, redemptions, S7 children.

    ``pack`` is the canonical encoder (a caller may pass its own reused ``Packer.pack``).
    """
    return pack(
        [
            [(t, i, u[0], u[1]) for (t, i), u in d.created.items()],
            [
                (t, i, *u, by)
                for ((t, i), u), by in zip(d.spent.items(), d.spenders.values(), strict=True)
            ],
            [[r] if rec is None else [r, *_root_fields(rec)] for r, rec in d.roots_before],
            [[r, *_root_fields(rec)] for r, rec in d.roots_after],
            [[t, r] for t, r in d.redemptions],
            [[p, c] for p, c in d.first_children],
        ]
    )


def level_set_row(d: LevelSetDelta) -> bytes:
    """Encode an ``l`` row: height, ids in L2 order, one reason code per tx."""
    return S.encode_row([d.height, list(d.order), d.reasons])


def parse_delta(ms: BlockId, l_row: list[Any], d_row: list[Any]) -> LevelSetDelta:
    """Rebuild a delta from its ``l`` and ``d`` rows."""
    height, order, reasons = l_row
    created, spent, before, after, redemptions, first_children = d_row
    return LevelSetDelta(
        milestone=ms,
        height=height,
        order=tuple(BlockId(b) for b in order),
        reasons=reasons,
        created=MappingProxyType({(t, i): (a, Address(ad), height) for t, i, a, ad in created}),
        spent=MappingProxyType({(t, i): (a, Address(ad), h) for t, i, a, ad, h, _ in spent}),
        spenders=MappingProxyType({(t, i): TxId(sp) for t, i, _, _, _, sp in spent}),
        roots_before=tuple(
            (BlockId(r[0]), None if len(r) == 1 else RootRecord(r[1], TxId(r[2]), Address(r[3])))
            for r in before
        ),
        roots_after=tuple((BlockId(r), RootRecord(b, TxId(t), Address(a))) for r, b, t, a in after),
        redemptions=tuple((TxId(t), BlockId(r)) for t, r in redemptions),
        first_children=tuple((BlockId(p), BlockId(c)) for p, c in first_children),
    )


def _root_fields(rec: RootRecord) -> list[Any]:
    return [rec.balance, rec.anchor_txid, rec.anchor_address]


_INDEX_KEYS = [i.to_bytes(4, "big") for i in range(256)]
"""The u32 big-endian out_index of an outpoint key (storage.schema.outpoint_key) for small ones."""

DEFAULT_WINDOW_PUNCTUALITIES = 2
"""Default memory window: this many times ``punctuality`` milestones below the best head."""
CACHE_BLOCKS = 256
CACHE_ROWS = 8192
CACHE_DELTAS = 256


V2_DEVNET_SORTITION = [4, 1, 1, b"uniform"]
"""PROTOCOL.md v2 §10's devnet K, c and weighting, which a devnet store without the
``META_SORTITION`` row was written with (v2.1: c = 1/16)."""


def sortition_row(params: ConsensusParams) -> list[Any]:
    """The ``META_SORTITION`` row of a store written under ``params``."""
    return [
        params.sortition_warmup,
        params.sortition_c_num,
        params.sortition_c_den,
        params.sortition_weighting.encode("ascii"),
    ]


def _sortition_text(row: list[Any]) -> str:
    if len(row) != 4 or type(row[3]) is not bytes:
        return repr(row)
    k, c_num, c_den, weighting = row
    return f"K = {k}, c = {c_num}/{c_den}, {weighting.decode('ascii', 'replace')}"


def check_sortition_row(raw: bytes | None, params: ConsensusParams) -> None:
    """Refuse a store whose verdicts were computed with other S1-S5 parameters (decision 31).

    A store without the row predates v2.1: on devnet it was written with v2's c = 1/1, whose
    VALID sets v2.1 (c = 1/16) does not share; the other networks kept their values.

    Raises:
        StorageError: one line saying what the store was written with and what to do.
    """
    want = sortition_row(params)
    if raw is None:
        if params.network_id != DEVNET.network_id or want == V2_DEVNET_SORTITION:
            return
        raise StorageError(
            "written by a PROTOCOL.md v2 node with devnet sortition "
            f"{_sortition_text(V2_DEVNET_SORTITION)}; v2.1 uses {_sortition_text(want)} and a "
            "block's VALID set can differ: wipe this data directory (remove it) and start again"
        )
    have = S.decode_row(raw, S.META_SORTITION)
    if have != want:
        raise StorageError(
            f"written with sortition {_sortition_text(have)} while {params.network_id} uses "
            f"{_sortition_text(want)}, so its stored VALID sets do not hold: start a new data "
            "directory"
        )


def _merge(wb: WriteBatch, rows: dict[bytes, bytes | None]) -> None:
    """Write a shared row set (None: a delete) into a batch.

    At once if the batch can take a row set many stores share (``simulator.store.SimBatch.merge``),
    else row by row.
    """
    merge = getattr(wb, "merge", None)
    if merge is not None:
        merge(rows)
        return
    put, delete = wb.put, wb.delete
    for key, value in rows.items():
        if value is None:
            delete(key)
        else:
            put(key, value)


class _RowRecorder:
    """A WriteBatch that records its puts and deletes (None) in a dict, to be shared."""

    __slots__ = ("rows",)

    def __init__(self, rows: dict[bytes, bytes | None]) -> None:
        self.rows = rows

    def put(self, key: bytes, value: bytes) -> None:
        self.rows[key] = value

    def delete(self, key: bytes) -> None:
        self.rows[key] = None


def _apply_utxos(utxos: UtxoSet, delta: LevelSetDelta) -> None:
    """A2's change to the UTXO set: the outputs LS(M) created in, the ones it spent out."""
    utxos.update(delta.created)
    for op in delta.spent:
        del utxos[op]


class ChainState:
    """The stored chain state with a bounded in-memory mirror, and the batch writers that change it.

    Memory (docs/protocol.md decision 15): blocks, metas, snapshots, LS heights, level-set records
    and best-chain ids are kept in memory only for a window of ``memory_window`` milestones below
    the best head (plus pending blocks and anything newer); older rows are read from the store
    through small LRU caches. The UTXO set, root records, peer-chain heads, the pending set and
    the invalidation marks stay in memory whole: they are live state, not history, and the
    ledger's V6 hot path reads them for every input. Spent outputs (``k``), redemptions (``q``)
    and the tx index (``t``) grow with history and are read from the store only.
    """

    def __init__(
        self, params: ConsensusParams, store: KVStore, memory_window: int | None = None
    ) -> None:
        self.params = params
        self.store = store
        window = memory_window
        if window is None:
            window = DEFAULT_WINDOW_PUNCTUALITIES * params.punctuality
        if window < 1:
            raise ValueError(f"memory_window must be at least 1, not {window}")
        self.memory_window = window
        self._pack = packer()  # the A2 rows' encoder; a Chain has one owner (no threads)
        self._reset()

    def _reset(self) -> None:
        st, p = self.store, self.params

        def block(key: bytes, raw: bytes) -> Block:
            try:
                return decode_stored_block(raw, p)
            except EncodingError as exc:
                raise StorageError(f"corrupted block {key.hex()}: {exc}") from None

        self.blocks: StoredMap[Block] = StoredMap(st, S.P_BLOCK, block, CACHE_BLOCKS)
        self.meta: StoredMap[BlockMeta] = StoredMap(
            st, S.P_META, lambda k, v: parse_meta(S.decode_row(v, S.P_META + k)), CACHE_ROWS
        )
        self.snapshots: StoredMap[Snapshot] = StoredMap(
            st,
            S.P_SNAPSHOT,
            lambda k, v: parse_snapshot(S.decode_row(v, S.P_SNAPSHOT + k)),
            CACHE_ROWS,
        )
        self.ls_height: StoredMap[int] = StoredMap(
            st, S.P_LS_HEIGHT, lambda k, v: int(S.decode_row(v, S.P_LS_HEIGHT + k)[0]), CACHE_ROWS
        )
        self.deltas: StoredMap[LevelSetDelta] = StoredMap(
            st, S.P_DELTA, self._decode_delta, CACHE_DELTAS
        )
        self.best = BestChain(st, self._snapshot_height)
        self.best_height_of = BestHeights(self.best)
        self.peer_heads: dict[BlockId, tuple[BlockId, int]] = {}
        self.pending: dict[BlockId, None] = {}
        self.utxos: UtxoSet = UtxoSet()
        """The best chain's unspent outputs (``Chain.get_utxo`` makes ``Utxo`` records of them).

        Replaced, not changed, while ``_utxos_shared``: then it is a ``SharedResults`` set
        that other Chains on the same best milestone read too."""
        self.get_utxo = self.utxos.get
        self._utxos_shared = False
        self.roots: dict[BlockId, RootRecord] = {}
        self.invalidated: set[BlockId] = set()
        self.final: BlockId = BlockId(b"")
        self.next_seq = 0
        self.loaded_seq = 0
        """``next_seq`` when the store was loaded: blocks with a greater ``seq`` were accepted
        (and mirrored) by this object."""

    def _snapshot_height(self, milestone: bytes) -> int | None:
        snap = self.snapshots.get(milestone)
        return None if snap is None else snap.height

    def _decode_delta(self, ms: bytes, d_raw: bytes) -> LevelSetDelta:
        l_key = S.P_LEVEL_SET + ms
        l_raw = self.store.get(l_key)
        if l_raw is None:
            raise StorageError(f"delta without level-set record for {ms.hex()}")
        d_key = S.P_DELTA + ms
        return parse_delta(BlockId(ms), S.decode_row(l_raw, l_key), S.decode_row(d_raw, d_key))

    # --- LedgerView (§7.3) over the best chain ---
    get_utxo: Callable[[Outpoint], UtxoEntry | None]
    """LedgerView: the best chain's unspent output (the UTXO dict's own ``get``: the ledger's
    V6 hot path calls it for every input)."""

    def get_spender(self, outpoint: Outpoint) -> TxId | None:
        """LedgerView: who spent ``outpoint`` in the best chain (a ``k`` row)."""
        key = S.outpoint_key(S.P_SPENT, outpoint[0], outpoint[1])
        raw = self.store.get(key)
        return None if raw is None else TxId(S.decode_row(raw, key)[0])

    def get_root(self, root: BlockId) -> RootRecord | None:
        """LedgerView: the best chain's record of a peer chain."""
        return self.roots.get(root)

    def is_redeemed(self, txid: TxId) -> bool:
        """LedgerView: ``txid`` is a VALID redemption in the best chain (a ``q`` row)."""
        return self.store.get(S.P_REDEEMED + txid) is not None

    def get_first_child(self, previous_link: BlockId) -> BlockId | None:
        """LedgerView: S7's first child of ``previous_link`` in the best chain (a ``c`` row)."""
        key = S.P_FIRST_CHILD + previous_link
        raw = self.store.get(key)
        return None if raw is None else BlockId(S.decode_row(raw, key)[0])

    def blocks_with_tx(self, txid: bytes) -> list[BlockId]:
        """Every accepted block containing ``txid`` (``t`` rows), by block id."""
        prefix = S.P_TX_INDEX + txid
        cut = len(prefix)
        return [BlockId(key[cut:]) for key, _ in self.store.iter_prefix(prefix)]

    def is_accepted(self, bid: BlockId, milestone_link: BlockId) -> bool:
        """D1: is ``bid``, whose header names ``milestone_link``, an accepted block?

        Answered from memory, without a store read, when the milestone link was accepted since
        the store was loaded and its height is in the window: every block linking it was
        accepted after it, so by this object, and mirrored in ``meta.recent`` under that height
        (at or above the floor, which only rises); an id missing there is not stored. Otherwise
        the store answers. Issue 3: one LevelDB miss less for nearly every new block.
        """
        meta = self.meta
        return bid in meta.recent or (
            not self._mirrored_since_load(milestone_link, meta.floor) and bid in meta
        )

    def stored_delta(self, milestone: BlockId) -> LevelSetDelta | None:
        """The stored delta of ``milestone``, or None; from memory alone when that is exact.

        A delta is written (with its milestone's height as tag) only after its milestone was
        accepted, so for a milestone accepted since the store was loaded, at or above the
        window's floor, ``deltas.recent`` holds it if it exists.
        """
        deltas = self.deltas
        delta = deltas.recent.get(milestone)
        if delta is not None or self._mirrored_since_load(milestone, deltas.floor):
            return delta
        return deltas.get(milestone)

    def _mirrored_since_load(self, milestone: BlockId, floor: int) -> bool:
        """``milestone`` is a milestone accepted since the load, at a height >= ``floor``."""
        meta = self.meta.recent.get(milestone)
        if meta is None or meta.seq < self.loaded_seq:
            return False
        snap = self.snapshots.recent.get(milestone)
        return snap is not None and snap.height >= floor

    @property
    def head(self) -> HeadRecord:
        """The current head record."""
        best = self.best[-1]
        return HeadRecord(best, len(self.best) - 1, self.snapshots[best].chainwork, self.final)

    def milestones_above(self, height: int) -> list[tuple[BlockId, Snapshot]]:
        """Every accepted milestone block above ``height`` (fork choice over all candidates)."""
        snaps = self.snapshots
        # The window holds every snapshot from its floor up; below it, scan the store.
        rows = list(snaps.recent.items()) if height + 1 >= snaps.floor else list(snaps.items())
        return [(BlockId(b), s) for b, s in rows if s.height > height]

    # --- A1: accept one block ---
    def write_accept(
        self,
        block: Block,
        meta: BlockMeta,
        snapshot: Snapshot | None,
        new_peer_head: bool,
        shared: SharedResults | None = None,
    ) -> None:
        """A1: block, m, r, t, p, seq and a milestone's snapshot in one batch, then memory.

        ``shared``: the rows every node writes alike for this block (bytes, tx index rows,
        snapshot) are built once per network and merged (``SharedResults.accept_rows``).
        """
        bid = block.id
        with self.store.write_batch() as wb:
            if shared is None:
                self._accept_rows(wb.put, block, snapshot)
            else:
                rows = shared.accept_rows(bid)
                if rows is None:
                    rows = {}
                    self._accept_rows(rows.__setitem__, block, snapshot)
                    shared.add_accept_rows(bid, rows)
                _merge(wb, rows)
            wb.put(S.P_META + bid, meta_row(meta))
            if new_peer_head:
                wb.put(S.P_PEER_HEAD + meta.root, S.encode_row([bid, meta.peer_height]))
            wb.put(S.P_PENDING + bid, S.EMPTY_ROW)
            wb.put(S.META_SEQ, S.encode_row([meta.seq + 1]))
        tag = meta.ms_link_height
        self.blocks.add(bid, block, tag)
        self.meta.add(bid, meta, tag)
        self.next_seq = meta.seq + 1
        if new_peer_head:
            self.peer_heads[meta.root] = (bid, meta.peer_height)
        self.pending[bid] = None
        if snapshot is not None:
            self.snapshots.add(bid, snapshot, snapshot.height)

    # --- A2 + A3: apply or undo one milestone on the best chain ---
    def write_apply(
        self, delta: LevelSetDelta, new: bool, shared: SharedResults | None = None
    ) -> None:
        """Store (if ``new``) and apply LS(M)'s delta; M becomes the best head; Φ may advance.

        ``shared``: the rows are a pure function of (M, ``new``, Φ after the apply); the first
        Chain of a network to apply M records them and the others write the recorded rows.
        """
        h = delta.height
        final = self._advance_final(delta.milestone, h)
        if shared is None:
            with self.store.write_batch() as wb:
                self._apply_rows(wb.put, wb.delete, delta, new, final)
        else:
            rows = shared.apply_rows(delta.milestone, new, final)
            if rows is None:
                rows = {}

                def delete(key: bytes) -> None:
                    rows[key] = None

                self._apply_rows(rows.__setitem__, delete, delta, new, final)
                shared.add_apply_rows(delta.milestone, new, final, rows)
            with self.store.write_batch() as wb:
                _merge(wb, rows)
        self.deltas.add(delta.milestone, delta, h)
        if shared is None:
            _apply_utxos(self.utxos, delta)
        else:
            utxos = shared.utxo_set(delta.milestone)
            if utxos is None:
                # L(M) is a pure function of M: the first Chain on M makes the set the others
                # take; a set already shared is copied first, never changed.
                utxos = UtxoSet(self.utxos) if self._utxos_shared else self.utxos
                _apply_utxos(utxos, delta)
                shared.add_utxo_set(delta.milestone, utxos)
            self._use_utxos(utxos, True)
        for root, rec in delta.roots_after:
            self.roots[root] = rec
        for bid in delta.order:
            self.ls_height.add(bid, h, h)
            self.pending.pop(bid, None)
        self.best.append(delta.milestone)
        self.final = final
        self._evict(h - self.memory_window)

    def _use_utxos(self, utxos: UtxoSet, shared: bool) -> None:
        self.utxos = utxos
        self.get_utxo = utxos.get
        self._utxos_shared = shared

    @staticmethod
    def _accept_rows(
        put: Callable[[bytes, bytes], None], block: Block, snapshot: Snapshot | None
    ) -> None:
        """A1's rows that do not depend on the node: the block, its tx index, its snapshot."""
        bid = block.id
        put(S.P_BLOCK + bid, block.raw)
        empty, tx_index = S.EMPTY_ROW, S.P_TX_INDEX
        for tx in block.txs:
            put(tx_index + tx.txid + bid, empty)
        if snapshot is not None:
            put(S.P_SNAPSHOT + bid, snapshot_row(snapshot))

    def _apply_rows(
        self,
        put: "Callable[[bytes, bytes], None]",
        delete: "Callable[[bytes], None]",
        delta: LevelSetDelta,
        new: bool,
        final: BlockId,
    ) -> None:
        """A2's rows of applying ``delta`` with Φ = ``final`` after it, in write order."""
        h = delta.height
        pack = self._pack
        if new:
            put(S.P_LEVEL_SET + delta.milestone, level_set_row(delta))
            put(S.P_DELTA + delta.milestone, delta_row(delta, pack))
        # u, o and k rows, keys and values as in storage.schema (outpoint_key, address_key)
        empty, small = S.EMPTY_ROW, _INDEX_KEYS
        for (txid, index), utxo in delta.created.items():
            key = txid + (small[index] if index < 256 else index.to_bytes(4, "big"))
            put(b"u" + key, pack(utxo))  # [amount, address, height]
            put(b"o" + utxo[1] + key, empty)
        spenders = delta.spenders
        for op, utxo in delta.spent.items():  # u and o rows go, a k row records the spend
            index = op[1]
            key = op[0] + (small[index] if index < 256 else index.to_bytes(4, "big"))
            delete(b"u" + key)
            delete(b"o" + utxo[1] + key)
            put(b"k" + key, pack((spenders[op], h)))
        for root, rec in delta.roots_after:
            put(S.P_ROOT + root, S.encode_row(_root_fields(rec)))
        for txid, root in delta.redemptions:
            put(S.P_REDEEMED + txid, S.encode_row([root, h]))
        for previous_link, child in delta.first_children:
            put(S.P_FIRST_CHILD + previous_link, S.encode_row([child]))
        height_row = S.encode_row([h])
        for bid in delta.order:
            put(S.P_LS_HEIGHT + bid, height_row)
            delete(S.P_PENDING + bid)
        put(S.height_key(S.P_HEIGHT, h), S.encode_row([delta.milestone]))
        chainwork = self.snapshots[delta.milestone].chainwork
        put(S.HEAD, head_row(HeadRecord(delta.milestone, h, chainwork, final)))

    def _evict(self, floor: int) -> None:
        """Keep memory bounded: forget rows tagged below the window's floor (decision 15)."""
        if floor <= self.snapshots.floor:
            return
        for rows in (self.blocks, self.meta, self.snapshots, self.ls_height, self.deltas):
            rows.evict_below(floor)
        self.best.evict_below(floor)

    def write_undo(self) -> LevelSetDelta:
        """Undo the best head's level set (A3); its blocks become pending; head := parent."""
        ms = self.best[-1]
        delta = self.deltas[ms]
        h = delta.height
        parent = self.best[-2]
        with self.store.write_batch() as wb:
            spent = delta.spent
            for op in reversed(spent):
                wb.delete(S.outpoint_key(S.P_SPENT, op[0], op[1]))
                self._put_utxo(wb, op[0], op[1], spent[op])
            for (txid, index), utxo in delta.created.items():
                wb.delete(S.outpoint_key(S.P_UTXO, txid, index))
                wb.delete(S.address_key(utxo[1], txid, index))
            for root, before in delta.roots_before:
                if before is None:
                    wb.delete(S.P_ROOT + root)
                else:
                    wb.put(S.P_ROOT + root, S.encode_row(_root_fields(before)))
            for txid, _ in delta.redemptions:
                wb.delete(S.P_REDEEMED + txid)
            for previous_link, _ in delta.first_children:
                wb.delete(S.P_FIRST_CHILD + previous_link)
            for bid in delta.order:
                wb.delete(S.P_LS_HEIGHT + bid)
                wb.put(S.P_PENDING + bid, S.EMPTY_ROW)
            wb.delete(S.height_key(S.P_HEIGHT, h))
            chainwork = self.snapshots[parent].chainwork
            wb.put(S.HEAD, head_row(HeadRecord(parent, h - 1, chainwork, self.final)))
        if self._utxos_shared:
            self._use_utxos(UtxoSet(self.utxos), False)
        for op in reversed(delta.spent):
            self.utxos[op] = delta.spent[op]
        for op in delta.created:
            self.utxos.pop(op, None)
        for root, before in delta.roots_before:
            if before is None:
                self.roots.pop(root, None)
            else:
                self.roots[root] = before
        for bid in delta.order:
            self.ls_height.discard(bid)
            self.pending[bid] = None
        self.best.pop()
        return delta

    def write_marks(self, invalidated: set[BlockId], final: BlockId) -> None:
        """F8: persist the operator's invalidation marks and Φ in one batch."""
        with self.store.write_batch() as wb:
            for bid in self.invalidated - invalidated:
                wb.delete(S.P_INVALIDATED + bid)
            for bid in invalidated - self.invalidated:
                wb.put(S.P_INVALIDATED + bid, S.EMPTY_ROW)
            wb.put(
                S.HEAD,
                head_row(
                    HeadRecord(
                        self.best[-1],
                        len(self.best) - 1,
                        self.snapshots[self.best[-1]].chainwork,
                        final,
                    )
                ),
            )
        self.invalidated = set(invalidated)
        self.final = final

    def _advance_final(self, milestone: BlockId, height: int) -> BlockId:
        """F6: Φ moves up to the best-chain milestone at height H - punctuality, never down."""
        target = height - self.params.punctuality
        final_h = self.best.height_of(self.final)
        if target < 0 or target <= (-1 if final_h is None else final_h):
            return self.final
        if target == height:
            return milestone
        return self.best[target]

    def _put_utxo(self, wb: WriteBatch, txid: bytes, index: int, utxo: UtxoEntry) -> None:
        wb.put(S.outpoint_key(S.P_UTXO, txid, index), S.encode_row(list(utxo)))
        wb.put(S.address_key(utxo[1], txid, index), S.EMPTY_ROW)

    @property
    def block_count(self) -> int:
        """Accepted blocks, genesis included, in O(1).

        Meta rows are never deleted and each accepted block took the next sequence number;
        ``len(meta)`` would scan the store once the memory window has moved; this does not.
        """
        return self.next_seq

    # --- genesis and loading ---
    def write_genesis(
        self,
        genesis: Block,
        snapshot: Snapshot,
        faucet: list[tuple[int, Address, int]],
        shared: SharedResults | None = None,
    ) -> None:
        """An empty store gets genesis, its snapshot, level set and faucet UTXOs in one batch.

        ``shared``: the rows and the UTXO set are a pure function of the parameters; the first
        Chain of a network records them, the others write the recorded rows as one shared set
        and take the set instead of decoding the rows again (:meth:`load`).
        """
        if shared is None:
            with self.store.write_batch() as wb:
                self._genesis_rows(wb, genesis, snapshot, faucet)
            self.load()
            return
        gid = genesis.id
        rows = shared.genesis_rows(gid)
        if rows is None:
            rows = {}
            self._genesis_rows(_RowRecorder(rows), genesis, snapshot, faucet)
            shared.add_genesis_rows(gid, rows)
        with self.store.write_batch() as wb:
            _merge(wb, rows)
        self.load(shared)

    def _genesis_rows(
        self,
        wb: WriteBatch,
        genesis: Block,
        snapshot: Snapshot,
        faucet: list[tuple[int, Address, int]],
    ) -> None:
        gid = genesis.id
        meta = BlockMeta(0, 0, BlockId(bytes(32)), True, 0, 0, 0)
        wb.put(S.META_SCHEMA, S.encode_row([S.SCHEMA_VERSION]))
        wb.put(S.META_NETWORK, S.encode_row([self.params.network_id.encode("ascii")]))
        wb.put(S.META_GENESIS, S.encode_row([gid]))
        wb.put(S.META_SEQ, S.encode_row([1]))
        wb.put(S.META_SORTITION, S.encode_row(sortition_row(self.params)))
        wb.put(S.P_BLOCK + gid, genesis.raw)
        wb.put(S.P_META + gid, meta_row(meta))
        wb.put(S.P_SNAPSHOT + gid, snapshot_row(snapshot))
        wb.put(S.P_LEVEL_SET + gid, S.encode_row([0, [gid], b""]))
        wb.put(S.height_key(S.P_HEIGHT, 0), S.encode_row([gid]))
        wb.put(S.P_LS_HEIGHT + gid, S.encode_row([0]))
        for index, address, amount in faucet:
            self._put_utxo(wb, gid, index, (amount, address, 0))
        wb.put(S.HEAD, head_row(HeadRecord(gid, 0, 0, gid)))

    def load(self, shared: SharedResults | None = None) -> None:
        """Rebuild the in-memory part from the store (crash recovery reads only stored rows).

        Reads the head record, the ids, level sets, blocks and LS heights of the window of
        milestones below it, the pending blocks, every snapshot from the window's floor up, and
        the live state (UTXOs, roots, peer-chain heads, marks); every row read is decoded, and
        the head record is checked against the stored best chain. ``shared``: the UTXO set of
        the stored head milestone M is L(M), a pure function of M: taken from there if another
        Chain holds it (a simulated run's stores share the genesis rows), else read and recorded.

        Raises:
            StorageError: a row is missing, damaged or inconsistent with the head record.
        """
        self._reset()
        st = self.store
        check_sortition_row(st.get(S.META_SORTITION), self.params)
        head_raw = st.get(S.HEAD)
        seq_raw = st.get(S.META_SEQ)
        if head_raw is None or seq_raw is None:
            raise StorageError("store has no head record: not a dagchain database or half-written")
        best, height, chainwork, final = S.decode_row(head_raw, S.HEAD)
        self.next_seq = S.decode_row(seq_raw, S.META_SEQ)[0]
        self.loaded_seq = self.next_seq
        self.final = BlockId(final)
        floor = max(0, height - self.memory_window)
        self._load_best_chain(BlockId(best), height, S.from_u256(chainwork), floor)
        for rows in (self.blocks, self.meta, self.snapshots, self.ls_height, self.deltas):
            rows.floor = floor
        for key, value in st.iter_prefix(S.P_SNAPSHOT):
            snap = parse_snapshot(S.decode_row(value, key))
            if snap.height >= floor:
                self.snapshots.add(BlockId(key[1:]), snap, snap.height)
        for h in range(floor, height + 1):
            self._load_level_set(self.best[h], h)
        pend = [BlockId(key[1:]) for key, _ in st.iter_prefix(S.P_PENDING)]
        for bid in pend:
            self._load_block(bid)
        pend.sort(key=lambda b: self.meta[b].seq)
        self.pending = dict.fromkeys(pend)
        self._load_live_state(shared, BlockId(best))
        if self.final not in self.snapshots or self.best_height_of.get(self.final) is None:
            raise StorageError(f"final milestone {bytes(final).hex()} is not on the best chain")

    def _load_best_chain(self, best: BlockId, height: int, chainwork: int, floor: int) -> None:
        st = self.store
        ids = {}
        for h in range(floor, height + 1):
            key = S.height_key(S.P_HEIGHT, h)
            raw = st.get(key)
            if raw is None:
                raise StorageError(f"head record does not match the stored best chain (no h {h})")
            ids[h] = BlockId(S.decode_row(raw, key)[0])
        if ids[height] != best or st.get(S.height_key(S.P_HEIGHT, height + 1)) is not None:
            raise StorageError("head record does not match the stored best chain")
        self.best.set_top(ids, height + 1)
        snap = self.snapshots.get(best)
        if snap is None:
            raise StorageError(f"head milestone {bytes(best).hex()} has no snapshot row")
        if snap.height != height or snap.chainwork != chainwork:
            raise StorageError("head record does not match the head milestone's snapshot")

    def pruned_below(self) -> int:
        """The lowest best-chain height whose level set keeps its bodies (0: never pruned)."""
        raw = self.store.get(S.META_PRUNE)
        return 0 if raw is None else int(S.decode_row(raw, S.META_PRUNE)[1])

    def level_set_record(self, milestone: BlockId) -> LevelSetDelta | None:
        """The ``l`` row of ``milestone`` as a delta without ledger changes (order, reasons).

        What a pruned node keeps of a final level set whose ``d`` row it deleted (F6).
        """
        key = S.P_LEVEL_SET + milestone
        raw = self.store.get(key)
        if raw is None:
            return None
        return parse_delta(milestone, S.decode_row(raw, key), [[], [], [], [], [], []])

    def _load_level_set(self, milestone: BlockId, height: int) -> None:
        if height == 0:
            order: tuple[BlockId, ...] = (milestone,)
        else:
            delta = self.deltas.get(milestone)
            if delta is not None:
                self.deltas.add(milestone, delta, height)
            elif height < self.pruned_below():  # a pruned node deleted it (F6)
                delta = self.level_set_record(milestone)
            if delta is None:
                raise StorageError(f"best-chain milestone {milestone.hex()} has no level set")
            order = delta.order
        for bid in order:
            self._load_block(bid)
            self.ls_height.add(bid, height, height)

    def _load_block(self, bid: BlockId) -> None:
        meta = self.meta.get(bid)
        block = self.blocks.get(bid)
        if meta is None or block is None:
            raise StorageError(f"block {bid.hex()} is referenced but not stored")
        self.meta.add(bid, meta, meta.ms_link_height)
        self.blocks.add(bid, block, meta.ms_link_height)

    def _load_live_state(self, shared: SharedResults | None, best: BlockId) -> None:
        st = self.store
        for key, value in st.iter_prefix(S.P_PEER_HEAD):
            last, m = S.decode_row(value, key)
            self.peer_heads[BlockId(key[1:])] = (BlockId(last), m)
        known = shared.utxo_set(best) if shared is not None else None
        if known is not None:
            self._use_utxos(known, True)
        else:
            utxos = self.utxos
            for key, value in st.iter_prefix(S.P_UTXO):
                amount, address, h = S.decode_row(value, key)
                utxos[(key[1:33], int.from_bytes(key[33:], "big"))] = (amount, Address(address), h)
            if shared is not None:
                shared.add_utxo_set(best, utxos)
                self._use_utxos(utxos, True)
        for key, value in st.iter_prefix(S.P_ROOT):
            bal, anchor, addr = S.decode_row(value, key)
            self.roots[BlockId(key[1:])] = RootRecord(bal, TxId(anchor), Address(addr))
        self.invalidated = {BlockId(k[1:]) for k, _ in st.iter_prefix(S.P_INVALIDATED)}


__all__ = ["BlockMeta", "ChainState", "HeadRecord"]
