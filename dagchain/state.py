"""The chain's persistent state: rows of PROTOCOL.md §12 and their in-memory mirror.

Every change goes through one store batch (A1 accept, A2+A3 apply or undo one milestone); the
in-memory mirror is updated only after the batch has been written, so a failure in between
leaves memory and store as they were.
"""

from dataclasses import dataclass
from typing import Any

from dagchain.blocks import Block, decode_block
from dagchain.encoding import pack
from dagchain.errors import EncodingError, StorageError
from dagchain.ledger import LevelSetDelta, Outpoint, RootRecord, SpentOutput, Utxo
from dagchain.params import ConsensusParams
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


def delta_row(d: LevelSetDelta) -> bytes:
    """Encode a ``d`` row (§12): created, spent, roots before, roots after, redemptions."""
    return S.encode_row(
        [
            [[t, i, u.amount, u.address] for t, i, u in d.created],
            [
                [s.txid, s.index, s.utxo.amount, s.utxo.address, s.utxo.height, s.spending_txid]
                for s in d.spent
            ],
            [[r] if rec is None else [r, *_root_fields(rec)] for r, rec in d.roots_before],
            [[r, *_root_fields(rec)] for r, rec in d.roots_after],
            [[t, r] for t, r in d.redemptions],
        ]
    )


def level_set_row(d: LevelSetDelta) -> bytes:
    """Encode an ``l`` row: height, ids in L2 order, one reason code per tx."""
    return S.encode_row([d.height, list(d.order), d.reasons])


def parse_delta(ms: BlockId, l_row: list[Any], d_row: list[Any]) -> LevelSetDelta:
    """Rebuild a delta from its ``l`` and ``d`` rows."""
    height, order, reasons = l_row
    created, spent, before, after, redemptions = d_row
    return LevelSetDelta(
        milestone=ms,
        height=height,
        order=tuple(BlockId(b) for b in order),
        reasons=reasons,
        created=tuple((TxId(t), i, Utxo(a, Address(ad), height)) for t, i, a, ad in created),
        spent=tuple(
            SpentOutput(TxId(t), i, Utxo(a, Address(ad), h), TxId(sp))
            for t, i, a, ad, h, sp in spent
        ),
        roots_before=tuple(
            (BlockId(r[0]), None if len(r) == 1 else RootRecord(r[1], TxId(r[2]), Address(r[3])))
            for r in before
        ),
        roots_after=tuple((BlockId(r), RootRecord(b, TxId(t), Address(a))) for r, b, t, a in after),
        redemptions=tuple((TxId(t), BlockId(r)) for t, r in redemptions),
    )


def _root_fields(rec: RootRecord) -> list[Any]:
    return [rec.balance, rec.anchor_txid, rec.anchor_address]


class ChainState:
    """In-memory mirror of the stored chain state, with the batch writers that change it."""

    def __init__(self, params: ConsensusParams, store: KVStore) -> None:
        self.params = params
        self.store = store
        self._reset()

    def _reset(self) -> None:
        self.blocks: dict[BlockId, Block] = {}
        self.meta: dict[BlockId, BlockMeta] = {}
        self.snapshots: dict[BlockId, Snapshot] = {}
        self.peer_heads: dict[BlockId, tuple[BlockId, int]] = {}
        self.tx_index: dict[TxId, list[BlockId]] = {}
        self.pending: dict[BlockId, None] = {}
        self.best: list[BlockId] = []
        self.best_height_of: dict[BlockId, int] = {}
        self.ls_height: dict[BlockId, int] = {}
        self.utxos: dict[Outpoint, Utxo] = {}
        self.spent: dict[Outpoint, tuple[TxId, int]] = {}
        self.roots: dict[BlockId, RootRecord] = {}
        self.redeemed: dict[TxId, tuple[BlockId, int]] = {}
        self.deltas: dict[BlockId, LevelSetDelta] = {}
        self.invalidated: set[BlockId] = set()
        self.final: BlockId = BlockId(b"")
        self.next_seq = 0

    # --- LedgerView (§7.3) over the best chain ---
    def get_utxo(self, outpoint: Outpoint) -> Utxo | None:
        """LedgerView: the best chain's unspent output."""
        return self.utxos.get(outpoint)

    def get_spender(self, outpoint: Outpoint) -> TxId | None:
        """LedgerView: who spent ``outpoint`` in the best chain."""
        found = self.spent.get(outpoint)
        return None if found is None else found[0]

    def get_root(self, root: BlockId) -> RootRecord | None:
        """LedgerView: the best chain's record of a peer chain."""
        return self.roots.get(root)

    def is_redeemed(self, txid: TxId) -> bool:
        """LedgerView: ``txid`` is a VALID redemption in the best chain."""
        return txid in self.redeemed

    @property
    def head(self) -> HeadRecord:
        """The current head record."""
        best = self.best[-1]
        return HeadRecord(best, len(self.best) - 1, self.snapshots[best].chainwork, self.final)

    # --- A1: accept one block ---
    def write_accept(
        self, block: Block, meta: BlockMeta, snapshot: Snapshot | None, new_peer_head: bool
    ) -> None:
        """A1: block, m, r, t, p, seq and a milestone's snapshot in one batch, then memory."""
        bid = block.id
        with self.store.write_batch() as wb:
            wb.put(S.P_BLOCK + bid, block.raw)
            wb.put(S.P_META + bid, meta_row(meta))
            if new_peer_head:
                wb.put(S.P_PEER_HEAD + meta.root, S.encode_row([bid, meta.peer_height]))
            for tx in block.txs:
                wb.put(S.P_TX_INDEX + tx.txid + bid, S.EMPTY_ROW)
            wb.put(S.P_PENDING + bid, S.EMPTY_ROW)
            wb.put(S.META_SEQ, S.encode_row([meta.seq + 1]))
            if snapshot is not None:
                wb.put(S.P_SNAPSHOT + bid, snapshot_row(snapshot))
        self.blocks[bid] = block
        self.meta[bid] = meta
        self.next_seq = meta.seq + 1
        if new_peer_head:
            self.peer_heads[meta.root] = (bid, meta.peer_height)
        for tx in block.txs:
            self.tx_index.setdefault(tx.txid, []).append(bid)
        self.pending[bid] = None
        if snapshot is not None:
            self.snapshots[bid] = snapshot

    # --- A2 + A3: apply or undo one milestone on the best chain ---
    def write_apply(self, delta: LevelSetDelta, new: bool) -> None:
        """Store (if ``new``) and apply LS(M)'s delta; M becomes the best head; Φ may advance."""
        h = delta.height
        final = self._advance_final(delta.milestone, h)
        with self.store.write_batch() as wb:
            if new:
                wb.put(S.P_LEVEL_SET + delta.milestone, level_set_row(delta))
                wb.put(S.P_DELTA + delta.milestone, delta_row(delta))
            put, delete, empty = wb.put, wb.delete, S.EMPTY_ROW
            for txid, index, utxo in delta.created:  # u and o rows, keys as in schema
                ikey = index.to_bytes(4, "big")
                put(b"u" + txid + ikey, pack([utxo.amount, utxo.address, utxo.height]))
                put(b"o" + utxo.address + txid + ikey, empty)
            for sp in delta.spent:  # u and o rows go, a k row records the spend
                ikey = sp.index.to_bytes(4, "big")
                delete(b"u" + sp.txid + ikey)
                delete(b"o" + sp.utxo.address + sp.txid + ikey)
                put(b"k" + sp.txid + ikey, pack([sp.spending_txid, h]))
            for root, rec in delta.roots_after:
                wb.put(S.P_ROOT + root, S.encode_row(_root_fields(rec)))
            for txid, root in delta.redemptions:
                wb.put(S.P_REDEEMED + txid, S.encode_row([root, h]))
            for bid in delta.order:
                wb.put(S.P_LS_HEIGHT + bid, S.encode_row([h]))
                wb.delete(S.P_PENDING + bid)
            wb.put(S.height_key(S.P_HEIGHT, h), S.encode_row([delta.milestone]))
            chainwork = self.snapshots[delta.milestone].chainwork
            wb.put(S.HEAD, head_row(HeadRecord(delta.milestone, h, chainwork, final)))
        if new:
            self.deltas[delta.milestone] = delta
        for txid, index, utxo in delta.created:
            self.utxos[(txid, index)] = utxo
        for sp in delta.spent:
            del self.utxos[(sp.txid, sp.index)]
            self.spent[(sp.txid, sp.index)] = (sp.spending_txid, h)
        for root, rec in delta.roots_after:
            self.roots[root] = rec
        for txid, root in delta.redemptions:
            self.redeemed[txid] = (root, h)
        for bid in delta.order:
            self.ls_height[bid] = h
            self.pending.pop(bid, None)
        self.best.append(delta.milestone)
        self.best_height_of[delta.milestone] = h
        self.final = final

    def write_undo(self) -> LevelSetDelta:
        """Undo the best head's level set (A3); its blocks become pending; head := parent."""
        ms = self.best[-1]
        delta = self.deltas[ms]
        h = delta.height
        parent = self.best[-2]
        with self.store.write_batch() as wb:
            for sp in reversed(delta.spent):
                wb.delete(S.outpoint_key(S.P_SPENT, sp.txid, sp.index))
                self._put_utxo(wb, sp.txid, sp.index, sp.utxo)
            for txid, index, utxo in delta.created:
                wb.delete(S.outpoint_key(S.P_UTXO, txid, index))
                wb.delete(S.address_key(utxo.address, txid, index))
            for root, before in delta.roots_before:
                if before is None:
                    wb.delete(S.P_ROOT + root)
                else:
                    wb.put(S.P_ROOT + root, S.encode_row(_root_fields(before)))
            for txid, _ in delta.redemptions:
                wb.delete(S.P_REDEEMED + txid)
            for bid in delta.order:
                wb.delete(S.P_LS_HEIGHT + bid)
                wb.put(S.P_PENDING + bid, S.EMPTY_ROW)
            wb.delete(S.height_key(S.P_HEIGHT, h))
            chainwork = self.snapshots[parent].chainwork
            wb.put(S.HEAD, head_row(HeadRecord(parent, h - 1, chainwork, self.final)))
        for sp in reversed(delta.spent):
            del self.spent[(sp.txid, sp.index)]
            self.utxos[(sp.txid, sp.index)] = sp.utxo
        for txid, index, _ in delta.created:
            self.utxos.pop((txid, index), None)
        for root, before in delta.roots_before:
            if before is None:
                self.roots.pop(root, None)
            else:
                self.roots[root] = before
        for txid, _ in delta.redemptions:
            del self.redeemed[txid]
        for bid in delta.order:
            del self.ls_height[bid]
            self.pending[bid] = None
        self.best.pop()
        del self.best_height_of[ms]
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
        if target < 0 or target <= self.best_height_of.get(self.final, -1):
            return self.final
        if target == height:
            return milestone
        return self.best[target]

    def _put_utxo(self, wb: WriteBatch, txid: bytes, index: int, utxo: Utxo) -> None:
        wb.put(
            S.outpoint_key(S.P_UTXO, txid, index),
            S.encode_row([utxo.amount, utxo.address, utxo.height]),
        )
        wb.put(S.address_key(utxo.address, txid, index), S.EMPTY_ROW)

    # --- genesis and loading ---
    def write_genesis(
        self, genesis: Block, snapshot: Snapshot, faucet: list[tuple[int, Address, int]]
    ) -> None:
        """An empty store gets genesis, its snapshot, level set and faucet UTXOs in one batch."""
        gid = genesis.id
        meta = BlockMeta(0, 0, BlockId(bytes(32)), True, 0, 0, 0)
        with self.store.write_batch() as wb:
            wb.put(S.META_SCHEMA, S.encode_row([S.SCHEMA_VERSION]))
            wb.put(S.META_NETWORK, S.encode_row([self.params.network_id.encode("ascii")]))
            wb.put(S.META_GENESIS, S.encode_row([gid]))
            wb.put(S.META_SEQ, S.encode_row([1]))
            wb.put(S.P_BLOCK + gid, genesis.raw)
            wb.put(S.P_META + gid, meta_row(meta))
            wb.put(S.P_SNAPSHOT + gid, snapshot_row(snapshot))
            wb.put(S.P_LEVEL_SET + gid, S.encode_row([0, [gid], b""]))
            wb.put(S.height_key(S.P_HEIGHT, 0), S.encode_row([gid]))
            wb.put(S.P_LS_HEIGHT + gid, S.encode_row([0]))
            for index, address, amount in faucet:
                self._put_utxo(wb, gid, index, Utxo(amount, address, 0))
            wb.put(S.HEAD, head_row(HeadRecord(gid, 0, 0, gid)))
        self.load()

    def load(self) -> None:
        """Rebuild the in-memory mirror from the store (crash recovery reads only stored rows)."""
        self._reset()
        st, p = self.store, self.params
        for key, raw in st.iter_prefix(S.P_BLOCK):
            try:
                self.blocks[BlockId(key[1:])] = decode_block(raw, p)
            except EncodingError as exc:
                raise StorageError(f"corrupted block {key[1:].hex()}: {exc}") from None
        for key, value in st.iter_prefix(S.P_META):
            self.meta[BlockId(key[1:])] = parse_meta(S.decode_row(value, key))
        for key, value in st.iter_prefix(S.P_SNAPSHOT):
            self.snapshots[BlockId(key[1:])] = parse_snapshot(S.decode_row(value, key))
        for key, value in st.iter_prefix(S.P_PEER_HEAD):
            last, m = S.decode_row(value, key)
            self.peer_heads[BlockId(key[1:])] = (BlockId(last), m)
        for key, _ in st.iter_prefix(S.P_TX_INDEX):
            self.tx_index.setdefault(TxId(key[1:33]), []).append(BlockId(key[33:]))
        pend = [BlockId(key[1:]) for key, _ in st.iter_prefix(S.P_PENDING)]
        pend.sort(key=lambda b: self.meta[b].seq)
        self.pending = dict.fromkeys(pend)
        self.best = [BlockId(S.decode_row(v, k)[0]) for k, v in st.iter_prefix(S.P_HEIGHT)]
        self.best_height_of = {b: h for h, b in enumerate(self.best)}
        for key, value in st.iter_prefix(S.P_LS_HEIGHT):
            self.ls_height[BlockId(key[1:])] = S.decode_row(value, key)[0]
        for key, value in st.iter_prefix(S.P_UTXO):
            amount, address, h = S.decode_row(value, key)
            self.utxos[(key[1:33], int.from_bytes(key[33:], "big"))] = Utxo(
                amount, Address(address), h
            )
        for key, value in st.iter_prefix(S.P_SPENT):
            spender, h = S.decode_row(value, key)
            self.spent[(key[1:33], int.from_bytes(key[33:], "big"))] = (TxId(spender), h)
        for key, value in st.iter_prefix(S.P_ROOT):
            bal, anchor, addr = S.decode_row(value, key)
            self.roots[BlockId(key[1:])] = RootRecord(bal, TxId(anchor), Address(addr))
        for key, value in st.iter_prefix(S.P_REDEEMED):
            root, h = S.decode_row(value, key)
            self.redeemed[TxId(key[1:])] = (BlockId(root), h)
        for key, value in st.iter_prefix(S.P_DELTA):
            ms = BlockId(key[1:])
            l_raw = st.get(S.P_LEVEL_SET + ms)
            if l_raw is None:
                raise StorageError(f"delta without level-set record for {ms.hex()}")
            self.deltas[ms] = parse_delta(
                ms, S.decode_row(l_raw, S.P_LEVEL_SET + ms), S.decode_row(value, key)
            )
        self.invalidated = {BlockId(k[1:]) for k, _ in st.iter_prefix(S.P_INVALIDATED)}
        head_raw = st.get(S.HEAD)
        seq_raw = st.get(S.META_SEQ)
        if head_raw is None or seq_raw is None:
            raise StorageError("store has no head record: not a dagchain database or half-written")
        best, height, _, final = S.decode_row(head_raw, S.HEAD)
        if height != len(self.best) - 1 or self.best[-1] != best:
            raise StorageError("head record does not match the stored best chain")
        if best not in self.snapshots:
            raise StorageError(f"head milestone {bytes(best).hex()} has no snapshot row")
        self.final = BlockId(final)
        self.next_seq = S.decode_row(seq_raw, S.META_SEQ)[0]


__all__ = ["BlockMeta", "ChainState", "HeadRecord"]
