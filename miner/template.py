"""Block templates (PROTOCOL.md §3.4, policy): pure, no I/O, reusable by node, miner, simulator.

``build_template(chain, mempool, now_ms, root=... | register=...)`` picks the three links, the
timestamp, the target and the mempool txs of the next block of one peer chain. It reads the
chain's public views only; the consensus rules it steers by (D5a, D5b, D6, S1-S5) are applied by
the core when the block arrives, so a template can never make an invalid block valid.
"""

from dataclasses import dataclass

from dagchain.blocks import NONCE_OFFSET, Block, BlockHeader, compute_merkle_root, make_block
from dagchain.chain import Chain
from dagchain.crypto import hash32
from dagchain.mempool import Mempool
from dagchain.pow import encode_compact
from dagchain.transactions import Transaction, TxKind, TxOut, make_transaction
from dagchain.types import Address, BlockId, TxId

__all__ = [
    "REDEMPTION_ROOM_BYTES",
    "SKIP_AFTER_MILESTONES",
    "BlockTemplate",
    "TemplateUnavailable",
    "build_template",
    "registration_tx",
    "try_build_template",
]

REDEMPTION_ROOM_BYTES = 512
"""§3.4: other txs leave ``max_block_bytes`` - 512 bytes, room for the miner's REDEMPTION."""
SKIP_AFTER_MILESTONES = 3
"""§3.4: a tx in a recent pending block is skipped, and re-admitted after 3 milestones."""


class TemplateUnavailable(Exception):
    """No template now (e.g. the head is from the future, or D5a needs a higher head)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class BlockTemplate:
    """Everything a miner needs for the next block of one peer chain, but the nonce."""

    version: int
    milestone_link: BlockId
    previous_link: BlockId
    tip_link: BlockId
    timestamp_ms: int
    target: int
    """The block target, expanded: a solution needs LE(id) <= target (H4)."""
    target_bits: int
    """The header's compact ``target`` field (D4: the milestone link's block target)."""
    ms_target: int
    """The milestone target, expanded: a solution at or below it is a milestone (§3.1)."""
    txs: tuple[Transaction, ...]
    """The REGISTRATION at tx[0] for a new peer chain, then mempool txs (best fee rate first)."""
    peer_height: int
    """m of the block to be mined."""
    root: BlockId | None
    """None for a registration block: its own id becomes the root."""
    anchor: TxId | None
    anchor_address: Address | None
    redeemable: int
    needs_registration: bool
    catch_up: bool
    """The milestone link is not the head (D5b catch-up block, no mempool txs)."""

    @property
    def merkle_root(self) -> bytes:
        """§2.4 over the template's txs (recompute after adding a REDEMPTION at tx[0])."""
        return compute_merkle_root(self.txs)

    def header(self, nonce: int = 0, merkle_root: bytes | None = None) -> BlockHeader:
        """The block header with ``nonce`` (and the merkle root of the txs actually mined)."""
        return BlockHeader(
            self.version,
            self.milestone_link,
            self.previous_link,
            self.tip_link,
            self.merkle_root if merkle_root is None else merkle_root,
            self.timestamp_ms,
            self.target_bits,
            nonce,
        )

    @property
    def prefix(self) -> bytes:
        """The 142 header bytes before the nonce (what ``miner.search.search_nonce`` hashes)."""
        return self.header().encode()[:NONCE_OFFSET]

    def solve(self, nonce: int) -> Block:
        """The block of this template with ``nonce`` (its txs as templated)."""
        return make_block(self.header(nonce), self.txs)

    @property
    def template_id(self) -> bytes:
        """An id of this template: the hash of its header with nonce 0."""
        return hash32(self.header().encode())


def registration_tx(key_address: bytes) -> Transaction:
    """A REGISTRATION naming the miner's redemption-key address (§7.1)."""
    return make_transaction(TxKind.REGISTRATION, (), (TxOut(0, Address(key_address)),))


def build_template(
    chain: Chain,
    mempool: Mempool,
    now_ms: int,
    *,
    root: bytes | None = None,
    register: bytes | None = None,
    registration: Transaction | None = None,
) -> BlockTemplate | None:
    """Like :func:`try_build_template`, but None when no template can be made right now."""
    try:
        return try_build_template(
            chain, mempool, now_ms, root=root, register=register, registration=registration
        )
    except TemplateUnavailable:
        return None


def try_build_template(
    chain: Chain,
    mempool: Mempool,
    now_ms: int,
    *,
    root: bytes | None = None,
    register: bytes | None = None,
    registration: Transaction | None = None,
) -> BlockTemplate:
    """A §3.4 template for the peer chain ``root``; without a root, for a new peer chain whose
    REGISTRATION is ``registration`` or names the key address ``register``.

    Raises:
        KeyError: ``root`` names no peer chain this node knows.
        ValueError: no root and no registration.
        TemplateUnavailable: the head is too far in the future for now, or D5a needs a higher
            head (after a reorganisation to fewer milestones); retry shortly.
    """
    if root is None and registration is None:
        if register is None:
            raise ValueError("give a root, or a registration for a new peer chain")
        registration = registration_tx(register)
    p = chain.params
    genesis = chain.genesis_id
    if root is not None:
        found = chain.peer_chain_head(root)
        if found is None:
            raise KeyError("unknown peer chain root")
        previous, last_height = found
        peer_height = last_height + 1
        body: list[Transaction] = []
    else:
        previous, peer_height = genesis, 1
        body = [registration] if registration is not None else []
    ms_link, catch_up = _milestone_link(chain, previous, now_ms)
    snap = chain.get_snapshot(ms_link)
    ms_block = chain.get_block(ms_link)
    prev_block = chain.get_block(previous)
    if snap is None or ms_block is None or prev_block is None:  # pragma: no cover - invariants
        raise RuntimeError("template links name unknown blocks")
    timestamp = max(now_ms, prev_block.header.timestamp_ms, ms_block.header.timestamp_ms)
    own_root = BlockId(root) if root is not None else None
    tip = _tip_link(chain, ms_link, previous, own_root)
    if not catch_up and peer_height > p.sortition_warmup:
        room_txs = p.block_capacity - 1
        room_bytes = p.max_block_bytes - REDEMPTION_ROOM_BYTES
        skip = _recently_packed(chain)
        body += mempool.select_for_template(
            previous,
            chain.compute_window(previous, ms_link),
            snap.hash_rate,
            room_txs,
            room_bytes,
            skip.__contains__,
        )
    record = chain.get_root(own_root) if own_root is not None else None
    return BlockTemplate(
        version=p.block_version,
        milestone_link=ms_link,
        previous_link=BlockId(previous),
        tip_link=tip,
        timestamp_ms=timestamp,
        target=snap.blk_target,
        target_bits=encode_compact(snap.blk_target),
        ms_target=snap.ms_target,
        txs=tuple(body),
        peer_height=peer_height,
        root=own_root,
        anchor=record.anchor_txid if record is not None else None,
        anchor_address=record.anchor_address if record is not None else None,
        redeemable=record.balance if record is not None else 0,
        needs_registration=root is None,
        catch_up=catch_up,
    )


def _msh(chain: Chain, block_id: bytes) -> int:
    """msh(L): height(L) for a milestone block (genesis 0), else its milestone link's height."""
    meta = chain.get_meta(block_id)
    if meta is None:  # pragma: no cover - links of accepted blocks are accepted
        raise RuntimeError("unknown block")
    if meta.is_milestone:
        snap = chain.get_snapshot(block_id)
        return snap.height if snap is not None else 0
    return meta.ms_link_height


def _milestone_link(chain: Chain, previous: bytes, now_ms: int) -> tuple[BlockId, bool]:
    """The best head, or the D5b catch-up milestone for an idle peer chain (§3.4)."""
    p = chain.params
    head = chain.best_id
    head_block = chain.get_block(head)
    if head_block is not None and head_block.header.timestamp_ms > now_ms + (
        p.max_future_drift_ms // 2
    ):
        raise TemplateUnavailable("head-in-future", "the best milestone is ahead of our clock")
    best_height = chain.best_height
    if previous == chain.genesis_id:
        return head, False
    meta = chain.get_meta(previous)
    if meta is None:  # pragma: no cover - peer-chain heads are accepted blocks
        raise RuntimeError("unknown previous link")
    if meta.ms_link_height > best_height:
        raise TemplateUnavailable("wait-for-head", "D5a: the peer chain links a higher milestone")
    msh = _msh(chain, previous)
    if best_height - msh < p.punctuality:
        return head, False
    catch_up_height = msh + p.punctuality - 1
    return chain.state.best[catch_up_height], True


def _tip_link(
    chain: Chain,
    ms_link: BlockId,
    previous: bytes,
    own_root: BlockId | None,
    *,
    oldest_first: bool = False,
) -> BlockId:
    """A pending best-chain block of another peer chain (§3.4), else a milestone.

    Among unlinked candidates §3.4 prefers the newest (greatest arrival sequence);
    ``oldest_first`` reverses that tie-break (the experiment experiments/ordering_lag.py).
    """
    p = chain.params
    snap = chain.get_snapshot(ms_link)
    link_height = snap.height if snap is not None else 0
    best_height = chain.best_height
    pending = chain.pending_blocks()
    linked: set[bytes] = set()
    for bid in pending:
        block = chain.get_block(bid)
        if block is not None:
            linked.update(block.header.links)
    best: tuple[bool, int, BlockId] | None = None
    for bid in pending:
        meta = chain.get_meta(bid)
        if meta is None or bid == previous or meta.root == own_root:
            continue
        if link_height - _msh(chain, bid) >= p.punctuality:  # D5b
            continue
        if best_height - meta.ms_link_height > p.punctuality // 2:
            continue
        key = (bid not in linked, -meta.seq if oldest_first else meta.seq, bid)
        if best is None or key > best:
            best = key
    if best is not None:
        return best[2]
    if ms_link != previous:
        return ms_link
    if ms_link == chain.genesis_id:
        return chain.genesis_id
    block = chain.get_block(ms_link)
    return block.header.milestone_link if block is not None else chain.genesis_id


def _recently_packed(chain: Chain) -> set[TxId]:
    """Txids in pending blocks linking a milestone less than 3 milestones old (§3.4 skip)."""
    best_height = chain.best_height
    skip: set[TxId] = set()
    for bid in chain.pending_blocks():
        meta = chain.get_meta(bid)
        block = chain.get_block(bid)
        if meta is None or block is None:
            continue
        if meta.peer_height <= chain.params.sortition_warmup:
            continue  # its txs are INVALID (warmup): they do not count as packed
        if best_height - meta.ms_link_height < SKIP_AFTER_MILESTONES:
            skip.update(tx.txid for tx in block.txs)
    return skip
