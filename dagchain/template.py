"""Block templates (PROTOCOL.md §3.4, policy): pure, no I/O, reusable by node, miner, simulator.

``build_template(chain, mempool, now_ms, root=... | register=...)`` picks the milestone and
previous links, up to ``max_tip_links`` tip links (PROTOCOL.md v2), the timestamp, the target and
the mempool txs of the next block of one peer chain. It reads the chain's public views only and
steers by the core's own rule functions (``dagchain.rules`` for msh(L), D5a, D5b;
``dagchain.sortition`` for S1-S5), which the core applies again when the block arrives, so a
template can never make an invalid block valid.
"""

from dataclasses import dataclass

from dagchain import rules
from dagchain.blocks import (
    NONCE_OFFSET,
    Block,
    BlockHeader,
    compute_merkle_root,
    compute_tips_root,
    make_block,
)
from dagchain.chain import Chain
from dagchain.crypto import hash32
from dagchain.encoding import pack
from dagchain.mempool import Mempool
from dagchain.pow import encode_compact
from dagchain.sortition import (
    assignment_bound,
    compute_sortition_distance,
    in_warmup,
    is_sortition_fresh,
)
from dagchain.transactions import Transaction, TxKind, TxOut, make_transaction
from dagchain.types import Address, BlockId, TxId

__all__ = [
    "REDEMPTION_ROOM_BYTES",
    "SKIP_AFTER_MILESTONES",
    "BlockTemplate",
    "TemplateUnavailable",
    "build_template",
    "choose_tip_links",
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
    tip_links: tuple[BlockId, ...]
    """1..``max_tip_links`` tip links, ascending byte order (H5; ``tips_root`` commits to them)."""
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
    def tips_root(self) -> bytes:
        """§2.1 over the template's tip links."""
        return compute_tips_root(self.tip_links)

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
            self.tips_root,
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
        return make_block(self.header(nonce), self.tip_links, self.txs)

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
    """A §3.4 template for the next block of a peer chain.

    For the peer chain ``root``; without a root, for a new peer chain whose REGISTRATION is
    ``registration`` or names the key address ``register``.

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
    tips = choose_tip_links(chain, ms_link, previous, own_root)
    if not catch_up and peer_height > 1 and not in_warmup(peer_height, p):
        room_txs = p.block_capacity - 1
        room_bytes = p.max_block_bytes - REDEMPTION_ROOM_BYTES - len(pack(list(tips)))
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
        tip_links=tips,
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


def _milestone_link(chain: Chain, previous: bytes, now_ms: int) -> tuple[BlockId, bool]:
    """The best head, or the D5b catch-up milestone for an idle peer chain (§3.4)."""
    p = chain.params
    head = chain.best_id
    head_block = chain.get_block(head)
    if head_block is not None and rules.is_head_too_new(head_block.header.timestamp_ms, now_ms, p):
        raise TemplateUnavailable("head-in-future", "the best milestone is ahead of our clock")
    best_height = chain.best_height
    if previous == chain.genesis_id:
        return head, False
    meta = chain.get_meta(previous)
    if meta is None:  # pragma: no cover - peer-chain heads are accepted blocks
        raise RuntimeError("unknown previous link")
    if not rules.is_monotonic_milestone_link(best_height, meta.ms_link_height):
        raise TemplateUnavailable("wait-for-head", "D5a: the peer chain links a higher milestone")
    msh = chain.msh(previous)
    if rules.is_punctual(best_height, msh, p):
        return head, False
    return chain.best_chain()[rules.catch_up_height(msh, p)], True


def choose_tip_links(
    chain: Chain,
    ms_link: BlockId,
    previous: bytes,
    own_root: BlockId | None,
    *,
    oldest_first: bool = False,
) -> tuple[BlockId, ...]:
    """§3.4 (v2): up to ``max_tip_links`` tip links, ascending.

    Candidates are pending best-chain blocks of other peer chains that pass D5b against
    ``ms_link``, whose milestone link is within ``punctuality/2`` of the head, never the previous
    link. Every candidate that no accepted block links yet is taken, newest first (greatest
    arrival sequence), up to the limit; if there is none, the newest candidate. With no
    candidate at all: the head milestone; if the head is the previous link, its parent
    milestone; genesis when both are genesis (H5 allows [genesis] then).

    ``oldest_first`` reverses the arrival-order preference (experiments/ordering_lag.py).
    """
    p = chain.params
    link_height = chain.msh(ms_link)
    best_height = chain.best_height
    pending = chain.pending_blocks()
    linked: set[bytes] = set()
    for bid in pending:
        block = chain.get_block(bid)
        if block is not None:
            linked.update(block.links)
    unlinked: list[tuple[int, BlockId]] = []
    newest: tuple[int, BlockId] | None = None
    for bid in pending:
        meta = chain.get_meta(bid)
        if meta is None or bid == previous or meta.root == own_root:
            continue
        if not rules.is_punctual(link_height, chain.msh(bid), p):  # D5b
            continue
        if not rules.is_recent_tip_candidate(best_height, meta.ms_link_height, p):
            continue
        key = (-meta.seq if oldest_first else meta.seq, bid)
        if bid not in linked:
            unlinked.append(key)
        if newest is None or key > newest:
            newest = key
    if unlinked:
        unlinked.sort(reverse=True)
        return tuple(sorted(bid for _, bid in unlinked[: p.max_tip_links]))
    if newest is not None:
        return (newest[1],)
    head = chain.best_id
    if head != previous:
        return (head,)
    if head == chain.genesis_id:
        return (chain.genesis_id,)
    block = chain.get_block(head)
    return (block.header.milestone_link if block is not None else chain.genesis_id,)


def _recently_packed(chain: Chain) -> set[TxId]:
    """§3.4 skip: txids in pending blocks that would carry them VALID if ordered next.

    A tx is skipped only while it sits in a pending block whose own V4 and V5 pass at LS height
    best + 1 (not in warm-up, S6 fresh, the tx assigned by S1-S5) and whose milestone link is
    within ``punctuality/2`` of the head; after 3 milestones without confirmation it is offered
    again. The pool keeps every such tx (§7.5): nothing here removes one.
    """
    p = chain.params
    best_height = chain.best_height
    skip: set[TxId] = set()
    for bid in chain.pending_blocks():
        meta = chain.get_meta(bid)
        block = chain.get_block(bid)
        if meta is None or block is None or meta.peer_height <= 1:
            continue  # a registration block's other txs are INVALID (R3)
        if in_warmup(meta.peer_height, p):
            continue  # its txs are INVALID (warmup): they do not count as packed
        age = best_height - meta.ms_link_height  # milestones since its milestone link
        if age >= SKIP_AFTER_MILESTONES:
            continue  # offered again after 3 milestones without confirmation
        if not is_sortition_fresh(best_height + 1, meta.ms_link_height, p):
            continue  # S6 would fail at the next LS height
        if not rules.is_recent_tip_candidate(best_height, meta.ms_link_height, p):
            continue
        factor, bound = assignment_bound(chain.sortition_window(bid), chain.hash_rate_of(bid), p)
        prev = block.header.previous_link
        for index, tx in enumerate(block.txs):
            if index == 0 and tx.kind != TxKind.TRANSFER:
                continue
            if compute_sortition_distance(prev, tx.txid) * factor < bound:
                skip.add(tx.txid)
    return skip
