"""Ledger evaluation of one level set in total order (PROTOCOL.md §4.3, §7.3, §7.4, §9).

``evaluate_level_set`` is pure: it reads the ledger L(parent) through a :class:`LedgerView`, applies
every transaction of LS(M) in total order (first spend wins, V1-V8; rewards R2-R7) and returns a
:class:`LevelSetDelta` that holds enough to apply and to undo the level set (A2). A losing
transaction never raises: it gets an INVALID reason and its block stays.
"""

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from dagchain.blocks import Block
from dagchain.crypto import address_from_pubkey as _address_of
from dagchain.errors import Reason
from dagchain.params import ConsensusParams
from dagchain.rewards import compute_block_reward, compute_milestone_bonus, is_reward_fresh
from dagchain.sortition import (
    SORTITION_TAG,
    SortitionWindow,
    assignment_bound,
    in_warmup,
    is_sortition_fresh,
)
from dagchain.transactions import Transaction, TxKind
from dagchain.types import Address, BlockId, TxId

Outpoint = tuple[bytes, int]
UtxoEntry = tuple[int, Address, int]
"""(amount, address, LS height): how the UTXO set and level-set deltas hold an unspent output.

A plain tuple of ints and bytes, which the garbage collector stops scanning after one pass: the
UTXO set is the largest long-lived structure of a node (docs/benchmarks.md "Core").
``Utxo(*entry)`` is the record the Chain's queries return.
"""


@dataclass(frozen=True, slots=True)
class Utxo:
    """An unspent output: amount, address and the LS height of the tx that created it.

    The record the queries return; the UTXO set itself holds ``UtxoEntry`` tuples.
    """

    amount: int
    address: Address
    height: int


@dataclass(frozen=True, slots=True)
class RootRecord:
    """Per peer chain (keyed by its root): unredeemed balance and the anchor of §9."""

    balance: int
    anchor_txid: TxId
    anchor_address: Address


@dataclass(frozen=True, slots=True)
class BlockContext:
    """What the ledger needs to know about an accepted block besides its body."""

    root: BlockId
    peer_height: int
    milestone_link_height: int
    window: SortitionWindow
    hash_rate: int
    """hash_rate of the block's milestone link snapshot (S3)."""


class LedgerView(Protocol):
    """Read access to a ledger L(P) (the best chain's, §7.3)."""

    def get_utxo(self, outpoint: Outpoint) -> UtxoEntry | None:
        """The unspent output at ``outpoint``."""

    def get_spender(self, outpoint: Outpoint) -> TxId | None:
        """The txid that spent ``outpoint`` in this chain, if it was spent."""

    def get_root(self, root: BlockId) -> RootRecord | None:
        """The reward record of a peer chain."""

    def is_redeemed(self, txid: TxId) -> bool:
        """True if ``txid`` is a VALID redemption in this chain (R4 b)."""

    def get_first_child(self, previous_link: BlockId) -> BlockId | None:
        """S7: the first block in this chain's total order with this previous link."""


@dataclass(frozen=True, slots=True)
class LevelSetDelta:
    """Evaluated LS(M): order, verdicts and the ledger changes (§4.3, §12 l and d)."""

    milestone: BlockId
    height: int
    order: tuple[BlockId, ...]
    reasons: bytes
    """One reason code (§7.4) per transaction, in total order."""
    created: MappingProxyType[Outpoint, UtxoEntry]
    """Outputs created, in creation order (a read-only view)."""
    spent: MappingProxyType[Outpoint, UtxoEntry]
    """Outputs consumed, in spend order, with the UTXO undo restores (a read-only view)."""
    spenders: MappingProxyType[Outpoint, TxId]
    """The txid that spent each outpoint of ``spent``: the same keys in the same order."""
    roots_before: tuple[tuple[BlockId, RootRecord | None], ...]
    roots_after: tuple[tuple[BlockId, RootRecord], ...]
    redemptions: tuple[tuple[TxId, BlockId], ...]
    first_children: tuple[tuple[BlockId, BlockId], ...] = ()
    """S7 (§12 ``c``): (previous link, its first child in total order) this level set records."""


class _Overlay:
    """The ledger L(P) plus the changes made so far inside this level set (V1)."""

    def __init__(self, view: LedgerView) -> None:
        self.view = view
        self.view_utxo = view.get_utxo
        self.created: dict[Outpoint, UtxoEntry] = {}
        self.spent: dict[Outpoint, TxId] = {}
        """Outpoint -> spending txid, in spend order (V1: visible at once)."""
        self.spent_utxos: dict[Outpoint, UtxoEntry] = {}
        """Outpoint -> the UTXO it was, the same keys in the same order as ``spent``."""
        self.roots: dict[BlockId, RootRecord] = {}
        self.roots_before: dict[BlockId, RootRecord | None] = {}
        self.redeemed: dict[TxId, BlockId] = {}
        self.first_children: dict[BlockId, BlockId] = {}

    def claim_first_child(self, previous_link: BlockId, child: BlockId) -> bool:
        """S7: record ``child`` as the first child of ``previous_link``; False if one was first."""
        if previous_link in self.first_children or self.view.get_first_child(previous_link):
            return False
        self.first_children[previous_link] = child
        return True

    def was_spent(self, op: Outpoint) -> bool:
        return op in self.spent or self.view.get_spender(op) is not None

    def root(self, root: BlockId) -> RootRecord | None:
        found = self.roots.get(root)
        return found if found is not None else self.view.get_root(root)

    def set_root(self, root: BlockId, record: RootRecord) -> None:
        if root not in self.roots_before:
            self.roots_before[root] = self.view.get_root(root)
        self.roots[root] = record

    def credit(self, root: BlockId, amount: int) -> None:
        if amount:
            rec = self.root(root)
            if rec is not None:
                self.set_root(
                    root, RootRecord(rec.balance + amount, rec.anchor_txid, rec.anchor_address)
                )

    def is_redeemed(self, txid: TxId) -> bool:
        return txid in self.redeemed or self.view.is_redeemed(txid)


def evaluate_level_set(
    milestone: BlockId,
    height: int,
    order: Sequence[BlockId],
    get_block: Callable[[BlockId], Block],
    get_context: Callable[[BlockId], BlockContext],
    view: LedgerView,
    params: ConsensusParams,
    genesis_id: BlockId,
) -> LevelSetDelta:
    """Apply LS(M) in total order to L(parent) (§7.4 steps 1-5) and return the delta.

    ``order`` is LS(M) in L2 order, ``height`` = height(M). Pure: ``view`` is only read.
    """
    overlay = _Overlay(view)
    reasons = bytearray()
    reward = compute_block_reward(height, params)
    for block_id in order:
        block = get_block(block_id)
        if block_id == genesis_id:
            continue  # genesis: no transactions, no root
        ctx = get_context(block_id)
        _apply_block(block, ctx, height, reward, overlay, reasons, params)
    if milestone != genesis_id:
        overlay.credit(
            get_context(milestone).root, compute_milestone_bonus(height, len(order), params)
        )
    return _make_delta(milestone, height, order, bytes(reasons), overlay)


def _apply_block(
    block: Block,
    ctx: BlockContext,
    height: int,
    reward: int,
    overlay: _Overlay,
    reasons: bytearray,
    params: ConsensusParams,
) -> None:
    txs = block.txs
    root = ctx.root
    if ctx.peer_height == 1:
        # Step 1 / R3: a registration block starts its peer chain; other txs are warm-up.
        reg = txs[0]
        overlay.set_root(root, RootRecord(0, reg.txid, reg.outputs[0].address))
        reasons.append(Reason.VALID)
        reasons.extend(bytes([Reason.WARMUP]) * (len(txs) - 1))
        return
    start = 0
    if txs and txs[0].kind == TxKind.REDEMPTION:
        reasons.append(_apply_redemption(txs[0], root, height, overlay))
        start = 1
    fees = 0
    rest = txs[start:]
    # S7 (v2): only the first child of a previous link in total order may carry VALID txs.
    first_child = overlay.claim_first_child(block.header.previous_link, block.id)
    if in_warmup(ctx.peer_height, params):  # V4 / S1 (share weighting only)
        reasons.extend(bytes([Reason.WARMUP]) * len(rest))
        rest = ()
    elif not is_sortition_fresh(height, ctx.milestone_link_height, params) or not first_child:
        reasons.extend(bytes([Reason.SORTITION]) * len(rest))  # V5 / S6, S7
        rest = ()
    factor, bound = assignment_bound(ctx.window, ctx.hash_rate, params)
    # S4: the hash state over tag and previous link is computed once and copied per tx.
    base = hashlib.blake2b(SORTITION_TAG + block.header.previous_link, digest_size=32)
    append = reasons.append
    from_bytes = int.from_bytes
    for tx in rest:
        if factor:
            h = base.copy()
            h.update(tx.txid)
            if from_bytes(h.digest(), "little") * factor >= bound:  # V5 / S5
                append(_SORTITION)
                continue
        elif bound <= 0:
            append(_SORTITION)
            continue
        verdict, fee = _apply_transfer(tx, height, overlay)
        append(verdict)
        fees += fee
    if is_reward_fresh(height, ctx.milestone_link_height, params):
        fees += reward
    overlay.credit(root, fees)


def _apply_transfer(tx: Transaction, height: int, overlay: _Overlay) -> tuple[int, int]:
    """V6-V8 for one TRANSFER; on VALID spend and create at once (V1). Returns (reason, fee).

    V2: the first spend in total order wins; a later spend of the same outpoint (including a
    repeat of an already VALID tx) finds it spent and is INVALID ``double-spend``. The rules are
    checked in their order over all inputs: V6 for every input, then V7, then V8.
    """
    spent, created, view_utxo = overlay.spent, overlay.created, overlay.view_utxo
    found = []
    for inp in tx.inputs:  # V6
        op = (inp.txid, inp.out_index)
        utxo = None if op in spent else (created.get(op) or view_utxo(op))
        if utxo is None:
            return (_DOUBLE_SPEND if overlay.was_spent(op) else _MISSING_INPUT), 0
        found.append((op, inp.pubkey, utxo))
    total_in = 0
    for _, pubkey, utxo in found:  # V7: address = H(key) (E8)
        h = _BLAKE2B_256.copy()
        h.update(pubkey)
        if h.digest() != utxo[1]:
            return _WRONG_KEY, 0
        total_in += utxo[0]
    outputs = tx.outputs
    total_out = 0
    for out in outputs:
        total_out += out.amount
    if total_in < total_out:  # V8
        return _OVERSPEND, 0
    txid = tx.txid
    spent_utxos = overlay.spent_utxos
    for op, _, utxo in found:
        spent[op] = txid
        spent_utxos[op] = utxo
    for index, out in enumerate(outputs):
        created[(txid, index)] = (out.amount, out.address, height)
    return _VALID, total_in - total_out


_BLAKE2B_256 = hashlib.blake2b(digest_size=32)
"""An empty H state (E2), copied per hash: cheaper than a fresh ``blake2b(digest_size=32)``."""
_VALID = int(Reason.VALID)
_MISSING_INPUT = int(Reason.MISSING_INPUT)
_DOUBLE_SPEND = int(Reason.DOUBLE_SPEND)
_WRONG_KEY = int(Reason.WRONG_KEY)
_OVERSPEND = int(Reason.OVERSPEND)
_SORTITION = int(Reason.SORTITION)


def _apply_redemption(tx: Transaction, root: BlockId, height: int, overlay: _Overlay) -> int:
    """R4 (a)-(d) against the record before the block's own credit, then R5.

    R6: accounts are per root, so a copied redemption only ever pays what its signer chose.
    """
    rec = overlay.root(root)
    inp = tx.inputs[0]
    if rec is None or inp.txid != rec.anchor_txid:
        return Reason.BAD_ANCHOR
    if overlay.is_redeemed(tx.txid):
        return Reason.ALREADY_REDEEMED
    claim = tx.outputs[1].amount if len(tx.outputs) > 1 else 0
    if claim > rec.balance:
        return Reason.EXCEEDS_REWARD
    if _address_of(inp.pubkey) != rec.anchor_address:
        return Reason.REDEEM_WRONG_KEY
    overlay.set_root(root, RootRecord(rec.balance - claim, tx.txid, tx.outputs[0].address))
    overlay.redeemed[tx.txid] = root
    if claim:
        overlay.created[(tx.txid, 1)] = (claim, tx.outputs[1].address, height)
    return Reason.VALID


def genesis_delta(genesis_id: BlockId) -> LevelSetDelta:
    """LS(genesis) = [genesis] (L1): height 0, no transactions, no ledger change."""
    return LevelSetDelta(
        genesis_id, 0, (genesis_id,), b"", _NO_UTXOS, _NO_UTXOS, _NO_SPENDERS, (), (), ()
    )


_NO_UTXOS: MappingProxyType[Outpoint, UtxoEntry] = MappingProxyType({})
_NO_SPENDERS: MappingProxyType[Outpoint, TxId] = MappingProxyType({})


def _make_delta(
    milestone: BlockId, height: int, order: Sequence[BlockId], reasons: bytes, ov: _Overlay
) -> LevelSetDelta:
    return LevelSetDelta(
        milestone=milestone,
        height=height,
        order=tuple(order),
        reasons=reasons,
        created=MappingProxyType(ov.created),  # the overlay is dropped: views, not copies
        spent=MappingProxyType(ov.spent_utxos),
        spenders=MappingProxyType(ov.spent),
        roots_before=tuple(ov.roots_before.items()),
        roots_after=tuple((r, ov.roots[r]) for r in ov.roots_before),
        redemptions=tuple(ov.redeemed.items()),
        first_children=tuple(ov.first_children.items()),
    )


__all__ = [
    "BlockContext",
    "LedgerView",
    "LevelSetDelta",
    "Outpoint",
    "RootRecord",
    "Utxo",
    "UtxoEntry",
    "evaluate_level_set",
    "genesis_delta",
]
