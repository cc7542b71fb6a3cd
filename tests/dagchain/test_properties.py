"""Chain-level properties over real blocks (PROTOCOL.md L1-L3, F2, F4, §4.4, §7.4, verdict table).

Proof of work is real but cheap: the module runs on DEVNET with a harder genesis target
(``0x20040000``: ms_target 2^250, blk_target 2^252), so a block takes about 16 hashes, a milestone
about 64, and a mutated nonce fails H4 with probability 15/16 (on plain DEVNET almost every hash
is a block, so a "bad PoW" block could not be built cheaply). DEVNET never retargets, so every
milestone adds the same work and chainwork is proportional to height. The module keeps ``share``
weighting (as v1's devnet, with devnet's c, 1/16 since v2.1; ``eligible_transfer`` varies the fee
until S5 passes): S1's warm-up exists only under ``share`` (v2 §8.1), and the pool must still
produce WARMUP verdicts next to VALID, double spends and missing inputs.

Each DAG of the pool is built once per module; Hypothesis draws delivery permutations, prefixes,
mutations and fork shapes over them, so an example costs a few dozen ``on_block`` calls.
"""

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from dagchain.blocks import Block, BlockHeader, compute_merkle_root, compute_tips_root, make_block
from dagchain.chain import BlockStatus, Chain
from dagchain.errors import InvalidBlock, MalformedBlock, Reason, RejectedBlock
from dagchain.genesis import FAUCET_SECRET
from dagchain.params import DEVNET
from dagchain.pow import encode_compact
from dagchain.sortition import is_tx_assigned
from dagchain.storage.memory import MemoryStore
from dagchain.transactions import (
    REDEMPTION_INDEX,
    Transaction,
    TxIn,
    TxKind,
    TxOut,
    make_transaction,
    sign_transaction,
)
from dagchain.types import NULL_ID, Address, BlockId, TxId
from tests.dagchain.builders import (
    address_of_secret,
    build_block,
    grind,
    registration_tx,
    secret_of,
)
from tests.dagchain.chainkit import Ledger, ledger_of

PARAMS = DEVNET.replace(genesis_ms_target_bits=0x20040000, sortition_weighting="share")
NOW = PARAMS.genesis_timestamp_ms + 10**9
"""Far after every block timestamp (H11 never interferes)."""
K = PARAMS.sortition_warmup

WALLET = [secret_of(100 + i) for i in range(6)]
WALLET_ADDR = address_of_secret(WALLET[2])
SECRET_OF = {address_of_secret(s): s for s in [*WALLET, FAUCET_SECRET]}


# ------------------------------------------------------------------ building blocks


def new_chain() -> Chain:
    return Chain(PARAMS, MemoryStore())


def store_of(chain: Chain) -> MemoryStore:
    assert isinstance(chain.store, MemoryStore)
    return chain.store


def deliver(chain: Chain, blocks: Sequence[Block]) -> None:
    for block in blocks:
        chain.on_block(block.raw, NOW)


def transfer(
    outpoint: tuple[bytes, int], amount: int, to: bytes, secret: bytes, change: int = 0
) -> Transaction:
    outs = [TxOut(amount, Address(to))]
    if change:
        outs.append(TxOut(change, Address(address_of_secret(secret))))
    return sign_transaction(
        TxKind.TRANSFER, [(TxId(outpoint[0]), outpoint[1])], outs, [secret], PARAMS
    )


def eligible(chain: Chain, tx: Transaction, previous: BlockId, ms: BlockId) -> bool:
    """S1-S5 for a block on ``previous`` linking ``ms`` (what an honest template checks)."""
    window = chain.compute_window(previous, ms)
    snap = chain.get_snapshot(ms)
    assert snap is not None
    return is_tx_assigned(tx.txid, previous, window, snap.hash_rate, PARAMS)


def eligible_transfer(
    chain: Chain,
    previous: BlockId,
    ms: BlockId,
    outpoint: tuple[bytes, int],
    value: int,
    to: bytes,
    secret: bytes,
) -> Transaction | None:
    """A transfer of ``outpoint`` that passes sortition for this block (varying the fee)."""
    for fee in range(1, 40):
        tx = transfer(outpoint, value - fee, to, secret)
        if eligible(chain, tx, previous, ms):
            return tx
    return None


def redemption(anchor: bytes, secret: bytes, claim: int, payee: bytes) -> Transaction:
    outs = [TxOut(0, Address(address_of_secret(secret))), TxOut(claim, Address(payee))]
    return sign_transaction(
        TxKind.REDEMPTION, [(TxId(anchor), REDEMPTION_INDEX)], outs, [secret], PARAMS
    )


@dataclass
class Miner:
    secret: bytes
    last: BlockId | None = None
    root: BlockId | None = None
    blocks: list[BlockId] = field(default_factory=list)

    @property
    def address(self) -> bytes:
        return address_of_secret(self.secret)


def mine(
    chain: Chain,
    miner: Miner,
    *,
    tip: BlockId | None,
    ms: BlockId | None = None,
    txs: Sequence[Transaction] = (),
    want_milestone: bool | None = None,
) -> Block:
    """Build the miner's next block, submit it to ``chain`` and record it."""
    previous = miner.last if miner.last is not None else chain.genesis_id
    register = miner.address if miner.last is None else None
    if tip == previous and previous != chain.genesis_id:
        tip = None
    block = build_block(
        chain,
        previous=previous,
        tip=tip,
        milestone=ms,
        txs=[] if register is not None else txs,
        register=register,
        want_milestone=want_milestone,
    )
    outcome = chain.on_block(block.raw, NOW)
    assert outcome.status is BlockStatus.ACCEPTED
    miner.last = block.id
    if miner.root is None:
        miner.root = block.id
    miner.blocks.append(block.id)
    return block


# ------------------------------------------------------------------ comparable chain state


@dataclass(frozen=True)
class Dag:
    blocks: tuple[Block, ...]
    """In construction order: a delivery order in which every block arrives after its links."""
    reference: Ledger


def build_dag(seed: int, size: int, n_miners: int) -> Dag:
    """A random DAG of ``size`` blocks on ``n_miners`` peer chains, with txs and milestone forks.

    Milestone links: usually the best milestone, sometimes another milestone of the top two
    heights (forks, reorganisations while building). Transactions: faucet spends, spends of
    confirmed outputs, deliberate double spends, and redemptions (some of which lose).
    The build ends with no equal-chainwork tie for the best milestone: there, "first seen wins"
    (F2) makes the best chain depend on arrival order on purpose, so the property excludes it.
    """
    rng = random.Random(seed)
    chain = new_chain()
    miners = [Miner(secret_of(10 + i)) for i in range(n_miners)]
    blocks: list[Block] = []
    used: list[tuple[bytes, int]] = []
    unconfirmed: list[tuple[bytes, int, bytes]] = []
    faucet: list[tuple[bytes, int]] = [(chain.genesis_id, i) for i in rng.sample(range(64), 12)]

    def one_block(miner: Miner, want: bool | None) -> None:
        state = chain.state
        others = [b for m in miners if m is not miner for b in m.blocks[-4:]]
        tip = rng.choice(others) if others else None
        best_h = chain.best_height
        ms = chain.best_id
        prev_link_h = 0 if miner.last is None else state.meta[miner.last].ms_link_height
        if rng.random() < 0.3:
            forks = [
                m for m, s in state.snapshots.items() if s.height >= max(prev_link_h, best_h - 1)
            ]
            ms = rng.choice(sorted(forks))
        previous = miner.last if miner.last is not None else chain.genesis_id
        txs: list[Transaction] = []
        meta = state.meta.get(previous)
        if miner.last is not None and meta is not None and meta.peer_height + 1 <= K:
            if faucet and rng.random() < 0.3:  # INVALID(warmup): the op stays unspent
                op = faucet[-1]
                txs.append(transfer(op, PARAMS.faucet_amount - 1, WALLET_ADDR, FAUCET_SECRET))
        elif miner.last is not None and meta is not None:
            root = chain.get_root(miner.root or b"")
            if root is not None and root.balance > 1 and rng.random() < 0.3:
                payee = address_of_secret(rng.choice(WALLET))
                txs.append(redemption(root.anchor_txid, miner.secret, root.balance // 2, payee))
            for _ in range(rng.randrange(3)):
                spendable = [
                    (op, u)
                    for op, u in sorted(chain.utxos().items())
                    if u.address in SECRET_OF and op not in used
                ]
                if used and rng.random() < 0.2:  # deliberate double spend of a used outpoint
                    op = rng.choice(used)
                    value = 10**6
                elif spendable and rng.random() < 0.5:
                    op, u = rng.choice(spendable)
                    value = u.amount
                elif faucet:
                    op = faucet.pop()
                    value = PARAMS.faucet_amount
                else:
                    continue
                secret = SECRET_OF.get(
                    chain.utxos()[op].address if op in chain.utxos() else b"", FAUCET_SECRET
                )
                to = address_of_secret(rng.choice(WALLET))
                if rng.random() < 0.1:  # not checked against sortition: may be INVALID
                    tx: Transaction | None = transfer(op, value - 1, to, secret)
                else:
                    tx = eligible_transfer(chain, previous, ms, op, value, to, secret)
                if tx is None or any(t.txid == tx.txid for t in txs):
                    continue
                txs.append(tx)
                used.append(op)
                unconfirmed.append((tx.txid, value - 40, to))
            if unconfirmed and rng.random() < 0.3:  # spends an output that may not be ordered yet
                txid, value, owner = unconfirmed.pop(rng.randrange(len(unconfirmed)))
                to = address_of_secret(rng.choice(WALLET))
                child = eligible_transfer(
                    chain, previous, ms, (txid, 0), value, to, SECRET_OF[owner]
                )
                if child is not None and all(t.txid != child.txid for t in txs):
                    txs.append(child)
                    used.append((txid, 0))
        blocks.append(mine(chain, miner, tip=tip, ms=ms, txs=txs, want_milestone=want))

    for miner in miners:
        one_block(miner, False)
    for _ in range(size - n_miners):
        one_block(rng.choice(miners), None)
    while True:
        top = max(s.chainwork for s in chain.state.snapshots.values())
        if sum(s.chainwork == top for s in chain.state.snapshots.values()) == 1:
            break
        one_block(rng.choice(miners), True)
    ids = [b.id for b in blocks]
    return Dag(tuple(blocks), ledger_of(chain, ids))


DAG_SHAPES = [(seed, 18 + 4 * (seed % 6), 2 + seed % 3) for seed in range(10)]


@cache
def dag_pool() -> tuple[Dag, ...]:
    return tuple(build_dag(*shape) for shape in DAG_SHAPES)


def test_dag_pool_exercises_forks_orphans_and_conflicts() -> None:
    """The pool is not vacuous: milestone forks, pending blocks and every interesting verdict."""
    dags = dag_pool()
    reasons = {r for d in dags for _, rs in d.reference.level_sets for r in rs}
    assert {Reason.VALID, Reason.WARMUP, Reason.DOUBLE_SPEND, Reason.MISSING_INPUT} <= reasons
    assert any(d.reference.pending for d in dags)
    forked = 0
    for dag in dags:
        chain = new_chain()
        deliver(chain, dag.blocks)
        forked += len(chain.state.snapshots) > len(chain.best_chain())
    assert forked >= 3


# ------------------------------------------------------------------ (a) delivery order


@pytest.mark.property
@given(data=st.data())
def test_total_order_and_ledger_ignore_delivery_order(data: st.DataObject) -> None:
    """L1-L3, F2, F4: a shuffled delivery of the same blocks (orphans resolving as parents
    arrive) ends with the same best chain, level sets, verdicts, UTXOs, roots and pending set.

    The pool's DAGs have a unique heaviest milestone: under an equal-chainwork tie F2 keeps the
    first seen, so the outcome legitimately depends on arrival there.
    """
    dags = dag_pool()
    dag = dags[data.draw(st.integers(0, len(dags) - 1), label="dag")]
    order = data.draw(st.permutations(range(len(dag.blocks))), label="order")
    chain = new_chain()
    deliver(chain, [dag.blocks[i] for i in order])
    ids = [b.id for b in dag.blocks]
    assert [b for b in ids if not chain.has_block(b)] == []
    assert len(chain.orphans) == 0
    assert ledger_of(chain, ids) == dag.reference


# ------------------------------------------------------------------ (b) rejection changes nothing


Mutation = Callable[[Chain, Block], tuple[bytes, frozenset[str]] | None]
"""Returns the mutated bytes and the rule ids that may reject them, or None if not applicable."""


def _regrind(
    chain: Chain,
    block: Block,
    header: BlockHeader,
    txs: Sequence[Transaction],
    tips: Sequence[bytes] | None = None,
) -> bytes:
    """``header`` with both roots recomputed over ``txs`` and ``tips`` (default: ``block``'s tip
    links, §2.1) and real PoW again."""
    tip_links = block.tip_links if tips is None else tips
    snap = chain.get_snapshot(header.milestone_link) or chain.best_snapshot
    header = _with(
        header,
        tips_root=compute_tips_root(tip_links),
        merkle_root=compute_merkle_root(txs),
        nonce=header.nonce + 1,
    )
    return make_block(grind(header, snap.blk_target, None, snap.ms_target), tip_links, txs).raw


def _with(header: BlockHeader, **changes: Any) -> BlockHeader:
    return dataclasses.replace(header, **changes)


def mut_bad_nonce(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    snap = chain.get_snapshot(block.header.milestone_link)
    assert snap is not None
    nonce = block.header.nonce + 1
    while True:
        candidate = make_block(_with(block.header, nonce=nonce), block.tip_links, block.txs)
        if int.from_bytes(candidate.id, "little") > snap.blk_target:
            return candidate.raw, frozenset({"H4"})
        nonce += 1


def mut_wrong_target(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    snap = chain.get_snapshot(block.header.milestone_link)
    assert snap is not None
    header = _with(block.header, target=encode_compact(snap.blk_target // 2))
    return _regrind(chain, block, header, block.txs), frozenset({"D4"})


def mut_version(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    return _regrind(chain, block, _with(block.header, version=2), block.txs), frozenset({"H2"})


def mut_null_link(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    """H5 (v2): a null id in the tip list (committed by ``tips_root``, so H7 passes)."""
    raw = _regrind(chain, block, block.header, block.txs, tips=[NULL_ID])
    return raw, frozenset({"H5"})


def mut_tip_is_previous(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    prev = block.header.previous_link
    if prev == chain.genesis_id:
        return None
    return _regrind(chain, block, block.header, block.txs, tips=[prev]), frozenset({"H5"})


def mut_milestone_link_not_milestone(
    chain: Chain, block: Block
) -> tuple[bytes, frozenset[str]] | None:
    plain = sorted(b for b in chain.state.meta if chain.get_snapshot(b) is None)
    if not plain:
        return None
    header = _with(block.header, milestone_link=plain[0])
    return _regrind(chain, block, header, block.txs), frozenset({"D3"})


def mut_older_milestone(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    """Link genesis although the previous block links a higher milestone (D5a)."""
    prev = chain.get_meta(block.header.previous_link)
    if block.header.previous_link == chain.genesis_id or prev is None or prev.ms_link_height == 0:
        return None
    header = _with(block.header, milestone_link=chain.genesis_id)
    return _regrind(chain, block, header, block.txs), frozenset({"D5a"})


def mut_timestamp_before_previous(
    chain: Chain, block: Block
) -> tuple[bytes, frozenset[str]] | None:
    prev = chain.get_block(block.header.previous_link)
    if block.header.previous_link == chain.genesis_id or prev is None:
        return None
    header = _with(block.header, timestamp_ms=prev.header.timestamp_ms - 1)
    return _regrind(chain, block, header, block.txs), frozenset({"D6"})


def mut_bad_signature(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    signed = [i for i, tx in enumerate(block.txs) if tx.inputs]
    if not signed:
        return None
    index = signed[0]
    tx = block.txs[index]
    inp = tx.inputs[0]
    sig = bytes([inp.signature[0] ^ 1]) + inp.signature[1:]
    bad = make_transaction(
        tx.kind, [TxIn(inp.txid, inp.out_index, inp.pubkey, sig), *tx.inputs[1:]], tx.outputs
    )
    txs = [*block.txs[:index], bad, *block.txs[index + 1 :]]
    return _regrind(chain, block, block.header, txs), frozenset({"H9"})


def mut_misplaced_registration(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    txs = [*block.txs, registration_tx(address_of_secret(secret_of(999)))]
    return _regrind(chain, block, block.header, txs), frozenset({"H10"})


def mut_duplicate_tx(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    if not block.txs:
        return None
    return _regrind(chain, block, block.header, [*block.txs, block.txs[-1]]), frozenset({"H8"})


def mut_body_not_committed(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    """Same header, another body: MALFORMED, and the id must stay acceptable (H7)."""
    txs = [*block.txs, registration_tx(address_of_secret(secret_of(998)))]
    return make_block(block.header, block.tip_links, txs).raw, frozenset({"H7"})


def mut_truncated(chain: Chain, block: Block) -> tuple[bytes, frozenset[str]] | None:
    return block.raw[:-1], frozenset({"H1"})


MUTATIONS: list[Mutation] = [
    mut_bad_nonce,
    mut_wrong_target,
    mut_version,
    mut_null_link,
    mut_tip_is_previous,
    mut_milestone_link_not_milestone,
    mut_older_milestone,
    mut_timestamp_before_previous,
    mut_bad_signature,
    mut_misplaced_registration,
    mut_duplicate_tx,
    mut_body_not_committed,
    mut_truncated,
]


@pytest.mark.property
@given(data=st.data())
def test_rejected_block_leaves_state_byte_identical(data: st.DataObject) -> None:
    """Verdict table (REJECT, MALFORMED): a failing ``on_block`` changes no stored byte, no
    best head, pending set or ledger, and the valid block is still accepted afterwards (H7: a
    MALFORMED copy does not poison its id)."""
    dags = dag_pool()
    dag = dags[data.draw(st.integers(0, len(dags) - 1), label="dag")]
    k = data.draw(st.integers(1, len(dag.blocks) - 1), label="prefix")
    chain = new_chain()
    deliver(chain, dag.blocks[:k])
    block = dag.blocks[k]
    applicable = [m for m in MUTATIONS if m(chain, block) is not None]
    mutation = data.draw(st.sampled_from(applicable), label="mutation")
    event(mutation.__name__)
    mutated = mutation(chain, block)
    assert mutated is not None
    raw, rules = mutated
    before = store_of(chain).snapshot()
    head, pending, utxos, roots = (
        chain.best_id,
        chain.pending_blocks(),
        chain.utxos(),
        chain.roots(),
    )
    with pytest.raises(InvalidBlock) as info:
        chain.on_block(raw, NOW)
    assert info.value.rule in rules
    assert isinstance(info.value, MalformedBlock if rules <= {"H1", "H7"} else RejectedBlock)
    assert store_of(chain).snapshot() == before
    assert (chain.best_id, chain.pending_blocks()) == (head, pending)
    assert (chain.utxos(), chain.roots()) == (utxos, roots)
    assert len(chain.orphans) == 0
    assert chain.on_block(block.raw, NOW).status is BlockStatus.ACCEPTED


# ------------------------------------------------------------------ (c) reorganisation and back


@dataclass
class ForkRun:
    chain: Chain
    main: list[Block]
    side: list[Block]
    side_head: BlockId
    main_head: BlockId
    side_spend: Transaction
    side_spend_led: bool
    """The side branch's double spend was VALID while the side branch was best."""


def build_fork(seed: int, prefix_ms: int, a1: int, lead: int, overtake: int, fill: int) -> ForkRun:
    """Main branch A and a side branch B forked at the last prefix milestone F.

    Delivered in this order to one chain: prefix, A1 (``a1`` milestones), B (``a1 + lead``
    milestones, a reorganisation to B; its tips link only prefix blocks), A2 (milestones until A
    exceeds B by ``overtake``, a reorganisation back). No main block links a side block, so B's
    blocks stay pending at the end. B double-spends an outpoint A1 spends and redeems the side
    miner's reward.
    """
    rng = random.Random(seed)
    chain = new_chain()
    m1, m2, side = Miner(secret_of(21)), Miner(secret_of(22)), Miner(secret_of(23))
    main: list[Block] = []
    side_blocks: list[Block] = []
    faucet = iter((chain.genesis_id, i) for i in range(64))

    def main_tip(miner: Miner) -> BlockId | None:
        other = m2 if miner is m1 else m1
        pool = other.blocks[-3:] + side.blocks[: len(side.blocks) - len(side_blocks)][-2:]
        return rng.choice(pool) if pool else None

    def main_txs(miner: Miner, ms: BlockId) -> list[Transaction]:
        assert miner.last is not None
        txs = []
        for _ in range(rng.randrange(3)):
            to = address_of_secret(rng.choice(WALLET))
            op = next(faucet)
            tx = eligible_transfer(
                chain, miner.last, ms, op, PARAMS.faucet_amount, to, FAUCET_SECRET
            )
            if tx is not None:
                txs.append(tx)
        return txs

    def main_block(miner: Miner, want: bool, ms: BlockId, with_txs: bool = True) -> Block:
        txs = main_txs(miner, ms) if with_txs and miner.last is not None else []
        block = mine(chain, miner, tip=main_tip(miner), ms=ms, txs=txs, want_milestone=want)
        main.append(block)
        return block

    # Prefix: three registrations, warm-up blocks, then prefix_ms milestones.
    for miner in (m1, m2, side):
        main_block(miner, False, chain.best_id)
    for _ in range(K):
        for miner in (m1, m2, side):
            main_block(miner, False, chain.best_id, with_txs=False)
    for _ in range(prefix_ms):
        for _ in range(fill):
            main_block(rng.choice((m1, m2, side)), False, chain.best_id)
        main_block(rng.choice((m1, m2)), True, chain.best_id)
    fork_point = chain.best_id
    prefix_ids = [b.id for b in main]
    # A1: the main branch grows, spending a faucet output the side branch will spend too.
    contested = next(faucet)
    contested_tx: Transaction | None = None
    while contested_tx is None:
        assert m1.last is not None
        contested_tx = eligible_transfer(
            chain,
            m1.last,
            chain.best_id,
            contested,
            PARAMS.faucet_amount,
            address_of_secret(WALLET[0]),
            FAUCET_SECRET,
        )
        if contested_tx is None:
            main_block(m1, False, chain.best_id, with_txs=False)
    block = mine(
        chain, m1, tip=main_tip(m1), ms=chain.best_id, txs=[contested_tx], want_milestone=False
    )
    main.append(block)
    a_head = chain.best_id
    for _ in range(a1):
        for _ in range(fill):
            main_block(rng.choice((m1, m2)), False, a_head)
        a_head = main_block(rng.choice((m1, m2)), True, a_head).id
    # B: the side miner alone, from the fork point, a1 + lead milestones.
    b_head = fork_point
    side_spend: Transaction | None = None
    for i in range(a1 + lead):
        for j in range(fill + 1):
            assert side.last is not None
            txs: list[Transaction] = []
            if side_spend is None:
                side_spend = eligible_transfer(
                    chain,
                    side.last,
                    b_head,
                    contested,
                    PARAMS.faucet_amount,
                    address_of_secret(WALLET[1]),
                    FAUCET_SECRET,
                )
                if side_spend is not None:
                    txs.append(side_spend)
            record = chain.get_root(side.root or b"")
            if i == 0 and j == 0 and record is not None and record.balance > 0:
                txs.insert(
                    0, redemption(record.anchor_txid, side.secret, record.balance, WALLET_ADDR)
                )
            tip = rng.choice(prefix_ids[-6:])
            block = mine(chain, side, tip=tip, ms=b_head, txs=txs, want_milestone=j == fill)
            side_blocks.append(block)
        b_head = side_blocks[-1].id
    assert side_spend is not None, "no eligible side spend: choose another seed"
    side_head = chain.best_id
    side_spend_led = (side_spend.txid, 0) in chain.utxos()
    # A2: the main branch overtakes.
    height_a = chain.get_snapshot(a_head)
    height_b = chain.get_snapshot(b_head)
    assert height_a is not None
    assert height_b is not None
    for _ in range(height_b.height - height_a.height + overtake):
        for _ in range(fill):
            main_block(rng.choice((m1, m2)), False, a_head)
        a_head = main_block(rng.choice((m1, m2)), True, a_head).id
    return ForkRun(chain, main, side_blocks, side_head, chain.best_id, side_spend, side_spend_led)


def ledger_rows(chain: Chain) -> dict[bytes, bytes]:
    """Stored ledger rows (§12): UTXOs, address index, spent index, roots, redemptions,
    LS heights and best-chain heights."""
    return {k: v for k, v in store_of(chain).snapshot().items() if k[:1] in b"uokaqxh"}


@pytest.mark.property
@given(
    seed=st.integers(0, 2**32 - 1),
    prefix_ms=st.integers(1, 2),
    a1=st.integers(0, 2),
    lead=st.integers(1, 2),
    overtake=st.integers(1, 2),
    fill=st.integers(0, 2),
)
def test_reorg_to_heavier_fork_and_back_restores_the_ledger(
    seed: int, prefix_ms: int, a1: int, lead: int, overtake: int, fill: int
) -> None:
    """§4.4: switching to a heavier side branch and back (undo + stored deltas reapplied) gives
    the same ledger, level sets and stored ledger rows as a chain that only ever saw the main
    branch. The side branch is never linked by a main block, so it stays pending."""
    run = build_fork(seed, prefix_ms, a1, lead, overtake, fill)
    chain = run.chain
    fresh = new_chain()
    deliver(fresh, run.main)
    assert run.side_head == run.side[-1].id, "the side branch must have led"
    assert run.side_spend_led
    assert chain.best_id == fresh.best_id == run.main_head
    main_ids = [b.id for b in run.main]
    expected = ledger_of(fresh, main_ids)
    got = ledger_of(chain, main_ids)
    assert got == Ledger(
        expected.best_chain,
        expected.level_sets,
        expected.ls_heights,
        expected.utxos,
        expected.roots,
        expected.pending | {b.id for b in run.side},
    )
    assert ledger_rows(chain) == ledger_rows(fresh)
    assert (run.side_spend.txid, 0) not in chain.utxos()
