"""A real Chain on a MemoryStore with a small miner for ledger and fork-choice scenarios.

Blocks are ground with real PoW by ``tests.dagchain.builders.build_block``; every check reads the
chain's public API. Nothing here re-implements a consensus rule.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dagchain.blocks import Block
from dagchain.caches import SharedResults
from dagchain.chain import BlockOutcome, BlockStatus, Chain
from dagchain.errors import Reason
from dagchain.genesis import FAUCET_SECRET
from dagchain.ledger import RootRecord, Utxo
from dagchain.params import ConsensusParams
from dagchain.sortition import SortitionWindow, is_tx_assigned
from dagchain.storage.memory import MemoryStore
from dagchain.transactions import REDEMPTION_INDEX, Transaction, TxKind, TxOut, sign_transaction
from dagchain.types import Address, BlockId, TxId
from tests.dagchain.builders import address_of_secret, build_block, secret_of

NOW_AFTER_GENESIS_MS = 10**9
"""Submissions use a clock this far after genesis, so H11 never drops a test block."""


class Node:
    """A Chain on its own MemoryStore that records every block it accepted, in order."""

    def __init__(
        self,
        params: ConsensusParams,
        store: MemoryStore | None = None,
        shared_results: SharedResults | None = None,
    ) -> None:
        self.params = params
        self.store = store if store is not None else MemoryStore()
        self.chain = Chain(params, self.store, shared_results=shared_results)
        self.now_ms = params.genesis_timestamp_ms + NOW_AFTER_GENESIS_MS
        self.sent: list[Block] = []

    @property
    def genesis(self) -> BlockId:
        return self.chain.genesis_id

    def submit(self, block: Block) -> BlockOutcome:
        """Hand one block to the chain; it must be accepted."""
        outcome = self.chain.on_block(block.raw, self.now_ms)
        assert outcome.status is BlockStatus.ACCEPTED, outcome
        self.sent.append(block)
        return outcome

    def mine(
        self,
        previous: bytes,
        *,
        milestone: bytes | None = None,
        tip: bytes | None = None,
        tips: Sequence[bytes] | None = None,
        txs: Sequence[Transaction] = (),
        register: bytes | None = None,
        ms: bool = False,
        timestamp_ms: int | None = None,
        child_carries: Sequence[bytes] = (),
    ) -> Block:
        """Build (real PoW), submit and return a block; ``ms`` chooses milestone status.

        The milestone link defaults to the best head. The tip link defaults to the milestone link,
        or to its parent milestone when the previous link is the milestone link itself.
        ``child_carries``: txids that a block on this one must be able to carry (S5, ``uniform``
        weighting): the nonce is ground until this block's id assigns them.
        """
        block = self.build(
            previous,
            milestone=milestone,
            tip=tip,
            tips=tips,
            txs=txs,
            register=register,
            ms=ms,
            timestamp_ms=timestamp_ms,
            child_carries=child_carries,
        )
        self.submit(block)
        return block

    def build(
        self,
        previous: bytes,
        *,
        milestone: bytes | None = None,
        tip: bytes | None = None,
        tips: Sequence[bytes] | None = None,
        txs: Sequence[Transaction] = (),
        register: bytes | None = None,
        ms: bool = False,
        timestamp_ms: int | None = None,
        child_carries: Sequence[bytes] = (),
    ) -> Block:
        """Like ``mine`` without submitting (``tips``: the whole tip list, as given)."""
        chain = self.chain
        ms_link = BlockId(milestone if milestone is not None else chain.best_id)
        if tip is None and tips is None:
            if previous != ms_link:
                tip = ms_link
            else:
                parent_block = chain.get_block(ms_link)
                assert parent_block is not None
                parent = parent_block.header.milestone_link
                tip = parent if ms_link != self.genesis else self.genesis
        return build_block(
            chain,
            previous=previous,
            tip=tip,
            tips=tips,
            milestone=ms_link,
            txs=txs,
            timestamp_ms=timestamp_ms,
            register=register,
            want_milestone=ms,
            accept=(
                (lambda bid: all(is_assigned(t, bid, self.params) for t in child_carries))
                if child_carries
                else None
            ),
        )

    def register(
        self,
        key_address: bytes,
        *,
        milestone: bytes | None = None,
        tip: bytes | None = None,
        ms: bool = False,
        txs: Sequence[Transaction] = (),
    ) -> Block:
        """A registration block (previous link genesis) naming ``key_address``."""
        return self.mine(
            self.genesis, milestone=milestone, tip=tip, txs=txs, register=key_address, ms=ms
        )

    def milestones(self, previous: Block, count: int) -> list[Block]:
        """``count`` milestone blocks extending the peer chain of ``previous`` on the best head."""
        out = []
        for _ in range(count):
            previous = self.mine(previous.id, ms=True)
            out.append(previous)
        return out

    def warm_peer_chain(self, key_address: bytes) -> list[Block]:
        """A new peer chain of K milestone blocks (m = 1..K), so its next block may carry txs."""
        first = self.register(key_address, ms=True)
        return [first, *self.milestones(first, self.params.sortition_warmup - 1)]


def replay(params: ConsensusParams, blocks: Iterable[Block]) -> Node:
    """A fresh node fed ``blocks`` in the given order."""
    node = Node(params)
    for block in blocks:
        node.submit(block)
    return node


def verdicts(chain: Chain, block_id: bytes) -> list[Reason]:
    """Reason codes of a block's txs in the best-chain level set that orders it."""
    height = chain.ls_height(block_id)
    assert height is not None, "block is pending"
    delta = chain.level_set(chain.best_chain()[height])
    assert delta is not None
    offset = 0
    for bid in delta.order:
        block = chain.get_block(bid)
        assert block is not None
        count = len(block.txs)
        if bid == block_id:
            return [Reason(r) for r in delta.reasons[offset : offset + count]]
        offset += count
    raise AssertionError("block is not in its level set")


def record(chain: Chain, root: bytes) -> RootRecord:
    """The best chain's record of the peer chain with this root (it must have one)."""
    rec = chain.get_root(root)
    assert rec is not None, "peer chain has no record"
    return rec


def ledger_state(
    chain: Chain, block_ids: Iterable[bytes]
) -> tuple[
    list[BlockId],
    BlockId,
    dict[tuple[bytes, int], Utxo],
    dict[BlockId, RootRecord],
    dict[bytes, int | None],
    set[BlockId],
]:
    """Best chain, Φ, UTXOs, root records, LS heights of ``block_ids`` and the pending set."""
    return (
        chain.best_chain(),
        chain.final_id,
        chain.utxos(),
        chain.roots(),
        {bytes(b): chain.ls_height(b) for b in block_ids},
        set(chain.pending_blocks()),
    )


MAX_ASSIGNMENT_TRIES = 1 << 16
"""Signings tried for ``assigned_to`` (devnet c = 1/16: ~16 per previous link, 256 for two)."""


def is_assigned(txid: bytes, previous_link: bytes, params: ConsensusParams) -> bool:
    """S5 under ``uniform`` weighting: may a block whose previous link is ``previous_link``
    carry ``txid``? (``uniform`` uses neither the S2 window nor S3's hash rate.)"""
    assert params.sortition_weighting == "uniform", "assigned_to needs uniform weighting"
    window = SortitionWindow(peer_height=params.sortition_warmup + 1, work=0, span_ms=0)
    return is_tx_assigned(txid, previous_link, window, 0, params)


def _signed(
    kind: int,
    inputs: Sequence[tuple[TxId, int]],
    outputs: Sequence[TxOut],
    secrets: Sequence[bytes],
    params: ConsensusParams,
    assigned_to: Sequence[bytes],
) -> Transaction:
    """Sign; with ``assigned_to``, vary only the BIP340 aux randomness (so the txid, never the
    content) until S5 assigns the tx to a block on each of those previous links, as a real
    tx waits for an assigned block (devnet c = 1/16, PROTOCOL.md v2.1 §10)."""
    for attempt in range(MAX_ASSIGNMENT_TRIES):
        aux = attempt.to_bytes(32, "big")
        tx = sign_transaction(kind, inputs, outputs, secrets, params, aux)
        if all(is_assigned(tx.txid, prev, params) for prev in assigned_to):
            return tx
    raise AssertionError(f"no signing assigned in {MAX_ASSIGNMENT_TRIES} tries")


def transfer(
    inputs: Sequence[tuple[bytes, int]],
    outputs: Sequence[tuple[int, bytes]],
    params: ConsensusParams,
    secret: bytes = FAUCET_SECRET,
    *,
    assigned_to: Sequence[bytes] = (),
) -> Transaction:
    """A TRANSFER of ``inputs`` (all signed by ``secret``) to ``(amount, address)`` outputs.

    ``assigned_to``: the previous links of the blocks that will carry it (S5 must pass there);
    without it the tx is signed with zero aux randomness, as before.
    """
    return _signed(
        TxKind.TRANSFER,
        [(TxId(t), i) for t, i in inputs],
        [TxOut(a, Address(addr)) for a, addr in outputs],
        [secret] * len(inputs),
        params,
        assigned_to,
    )


def redemption(
    anchor_txid: bytes,
    secret: bytes,
    next_key: bytes,
    claim: int,
    payee: bytes,
    params: ConsensusParams,
    *,
    assigned_to: Sequence[bytes] = (),
) -> Transaction:
    """A REDEMPTION of ``claim`` to ``payee`` from the anchor, naming ``next_key`` (§9 R4).

    ``assigned_to`` as in :func:`transfer` (a redemption at index 0 needs none: S5 exempts it).
    """
    outputs = [TxOut(0, Address(next_key))]
    if claim:
        outputs.append(TxOut(claim, Address(payee)))
    return _signed(
        TxKind.REDEMPTION,
        [(TxId(anchor_txid), REDEMPTION_INDEX)],
        outputs,
        [secret],
        params,
        assigned_to,
    )


@dataclass(frozen=True)
class Ledger:
    """Everything a user can read of the best chain, except arrival-dependent bookkeeping."""

    best_chain: tuple[BlockId, ...]
    level_sets: tuple[tuple[tuple[BlockId, ...], bytes], ...]
    ls_heights: tuple[tuple[BlockId, int | None], ...]
    utxos: dict[tuple[bytes, int], Utxo]
    roots: dict[BlockId, RootRecord]
    pending: frozenset[BlockId]
    rows: dict[bytes, bytes] = field(default_factory=dict)
    """The stored rows of the prefixes asked for (none unless asked)."""


def store_rows(chain: Chain, prefixes: bytes | None = None) -> dict[bytes, bytes]:
    """The chain's MemoryStore rows, all or those whose first byte is in ``prefixes``."""
    store = chain.store
    assert isinstance(store, MemoryStore)
    snap = store.snapshot()
    if prefixes is None:
        return snap
    return {k: v for k, v in snap.items() if k[:1] in prefixes}


def ledger_of(chain: Chain, blocks: Sequence[BlockId], row_prefixes: bytes | None = None) -> Ledger:
    """The chain's :class:`Ledger`, with the LS heights of ``blocks`` and, if ``row_prefixes``
    is given, the stored rows of those prefixes."""
    sets = []
    for ms in chain.best_chain():
        delta = chain.level_set(ms)
        assert delta is not None
        sets.append((delta.order, delta.reasons))
    return Ledger(
        tuple(chain.best_chain()),
        tuple(sets),
        tuple((b, chain.ls_height(b)) for b in blocks),
        chain.utxos(),
        chain.roots(),
        frozenset(chain.pending_blocks()),
        {} if row_prefixes is None else store_rows(chain, row_prefixes),
    )


def key(n: int) -> tuple[bytes, Address]:
    """A deterministic (secret, address) pair."""
    secret = secret_of(n)
    return secret, Address(address_of_secret(secret))


__all__ = [
    "Ledger",
    "Node",
    "is_assigned",
    "key",
    "ledger_of",
    "ledger_state",
    "record",
    "redemption",
    "replay",
    "store_rows",
    "transfer",
    "verdicts",
]
