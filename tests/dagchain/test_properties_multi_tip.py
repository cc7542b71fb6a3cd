"""Chain properties over DAGs with random tip lists of 1..8 (PROTOCOL.md v2 H5, H7, L1-L3, F2,
F4, §4.4, S7, verdict table).

The multi-tip counterpart of ``test_properties.py``: every block names 1..``max_tip_links`` tips
drawn from recent blocks of other peer chains (ascending, committed by ``tips_root``), some miners
fork their own peer chain (S7 second children, §12 ``c`` rows), milestones fork. Real but cheap
proof of work on DEVNET with a harder genesis target (``0x20040000``: a block costs ~16 hashes, a
milestone ~64, and a changed nonce fails H4 with probability 15/16). Every tx is signed so that S5
assigns it to the block built for it (devnet's c is 1/16 since v2.1: ``spend`` varies the
signature's aux randomness), so txs are INVALID only by S7, conflicts or missing inputs.

Properties: (a) any delivery order gives the same best chain, level sets, verdicts, ledger and
stored ledger rows (``c`` included); (b) a block refused for its tip list (H5 with a matching
``tips_root``, H7 with a body that does not match it, H4) leaves the store byte-identical and the
real block is accepted afterwards; (c) a reorganisation to a heavier side branch and back leaves
the same ledger and stored rows as a chain that only saw the main branch.
"""

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dagchain.blocks import Block, compute_tips_root, make_block
from dagchain.chain import BlockStatus, Chain
from dagchain.errors import InvalidBlock, MalformedBlock, Reason, RejectedBlock
from dagchain.genesis import FAUCET_SECRET
from dagchain.params import DEVNET
from dagchain.storage.memory import MemoryStore
from dagchain.transactions import Transaction
from dagchain.types import NULL_ID, BlockId
from tests.dagchain.builders import address_of_secret, build_block, grind, secret_of
from tests.dagchain.chainkit import Ledger, ledger_of, store_rows, transfer, verdicts

PARAMS = DEVNET.replace(genesis_ms_target_bits=0x20040000)
NOW = PARAMS.genesis_timestamp_ms + 10**9
MAX_TIPS = PARAMS.max_tip_links
WALLET = [secret_of(300 + i) for i in range(6)]
OWNER = {address_of_secret(s): s for s in [*WALLET, FAUCET_SECRET]}
LEDGER_PREFIXES = b"uokaqxhc"
"""Stored ledger rows (§12): UTXOs, address index, spent index, roots, redemptions, LS heights,
best-chain heights and S7 first children."""


def new_chain() -> Chain:
    return Chain(PARAMS, MemoryStore())


def deliver(chain: Chain, blocks: Sequence[Block]) -> None:
    for block in blocks:
        chain.on_block(block.raw, NOW)


def spend(
    op: tuple[bytes, int], amount: int, secret: bytes, to: bytes, previous: bytes
) -> Transaction:
    """A one-input, one-output TRANSFER assigned (S5) to a block whose previous link is
    ``previous``."""
    return transfer([op], [(amount, to)], PARAMS, secret, assigned_to=[previous])


@dataclass
class Miner:
    secret: bytes
    blocks: list[BlockId] = field(default_factory=list)

    @property
    def address(self) -> bytes:
        return address_of_secret(self.secret)


class DagBuilder:
    """Random multi-tip blocks of several peer chains submitted to one chain as they are built."""

    def __init__(self, rng: random.Random, miners: Sequence[Miner]) -> None:
        self.rng = rng
        self.chain = new_chain()
        self.miners = list(miners)
        self.blocks: list[Block] = []
        self.faucet: list[tuple[bytes, int]] = [
            (self.chain.genesis_id, i) for i in rng.sample(range(64), 20)
        ]
        self.used: list[tuple[bytes, int]] = []

    def random_tips(self, miner: Miner, pool: Sequence[BlockId] | None = None) -> list[BlockId]:
        if pool is None:
            pool = [b for m in self.miners if m is not miner for b in m.blocks[-5:]]
        if not pool:
            return []
        k = self.rng.randint(1, MAX_TIPS)
        return sorted(self.rng.sample(list(dict.fromkeys(pool)), min(k, len(set(pool)))))

    def random_txs(self, previous: bytes) -> list[Transaction]:
        """0-2 txs for a block whose previous link is ``previous``."""
        rng = self.rng
        txs: list[Transaction] = []
        for _ in range(rng.randrange(3)):
            to = address_of_secret(rng.choice(WALLET))
            if self.used and rng.random() < 0.25:  # a conflicting spend of a used faucet output
                amount = 10**6 + rng.randrange(10**6)
                txs.append(spend(rng.choice(self.used), amount, FAUCET_SECRET, to, previous))
            elif self.faucet and rng.random() < 0.6:
                op = self.faucet.pop()
                self.used.append(op)
                txs.append(spend(op, PARAMS.faucet_amount - 100, FAUCET_SECRET, to, previous))
            else:
                owned = [
                    (op, u)
                    for op, u in sorted(self.chain.utxos().items())
                    if u.address in OWNER and u.address != address_of_secret(FAUCET_SECRET)
                ]
                if owned:
                    op, u = rng.choice(owned)
                    txs.append(spend(op, u.amount - 1, OWNER[u.address], to, previous))
        unique = {t.txid: t for t in txs}
        return list(unique.values())

    def mine(
        self,
        miner: Miner,
        *,
        ms: BlockId | None = None,
        want: bool | None = None,
        tips: Sequence[BlockId] | None = None,
        previous: BlockId | None = None,
        txs: Sequence[Transaction] | None = None,
    ) -> Block:
        chain = self.chain
        if previous is None:
            previous = miner.blocks[-1] if miner.blocks else chain.genesis_id
        register = miner.address if previous == chain.genesis_id else None
        if tips is None:
            tips = self.random_tips(miner)
        tips = [t for t in tips if t != previous] or None
        if txs is None:
            txs = [] if register is not None else self.random_txs(previous)
        block = build_block(
            chain,
            previous=previous,
            tips=tips,
            milestone=ms,
            txs=txs,
            register=register,
            want_milestone=want,
        )
        out = chain.on_block(block.raw, NOW)
        assert out.status is BlockStatus.ACCEPTED, out
        miner.blocks.append(block.id)
        self.blocks.append(block)
        return block

    def fork_milestone(self, miner: Miner) -> BlockId:
        """Usually the best head, sometimes another milestone of the top two heights (D5a ok)."""
        chain = self.chain
        state = chain.state
        ms = chain.best_id
        last = miner.blocks[-1] if miner.blocks else None
        floor = 0 if last is None else state.meta[last].ms_link_height
        if self.rng.random() < 0.3:
            choices = sorted(
                m
                for m, s in state.snapshots.items()
                if s.height >= max(floor, chain.best_height - 1)
            )
            ms = self.rng.choice(choices)
        return ms


@dataclass(frozen=True)
class Dag:
    blocks: tuple[Block, ...]
    reference: Ledger


def build_dag(seed: int, size: int, n_miners: int) -> Dag:
    rng = random.Random(seed)
    b = DagBuilder(rng, [Miner(secret_of(40 + i)) for i in range(n_miners)])
    for miner in b.miners:
        b.mine(miner, want=False)
    while len(b.blocks) < size:
        miner = rng.choice(b.miners)
        previous = None
        if len(miner.blocks) >= 2 and rng.random() < 0.1:  # fork the own peer chain (S7)
            previous = miner.blocks[-2]
            if previous == b.chain.genesis_id:
                previous = None
        ms = b.fork_milestone(miner)
        if previous is not None:
            meta = b.chain.get_meta(previous)
            assert meta is not None
            ms = b.chain.best_id  # best head is at least as high as every link (D5a)
        b.mine(miner, ms=ms, previous=previous)
    while True:  # a unique heaviest milestone (F2 ties depend on arrival on purpose)
        top = max(s.chainwork for s in b.chain.state.snapshots.values())
        if sum(s.chainwork == top for s in b.chain.state.snapshots.values()) == 1:
            break
        b.mine(rng.choice(b.miners), want=True)
    ids = [blk.id for blk in b.blocks]
    return Dag(tuple(b.blocks), ledger_of(b.chain, ids, LEDGER_PREFIXES))


DAG_SHAPES = [(seed, 16 + 4 * (seed % 5), 3 + seed % 4) for seed in range(8)]


@cache
def dag_pool() -> tuple[Dag, ...]:
    return tuple(build_dag(*shape) for shape in DAG_SHAPES)


def test_the_dag_pool_has_multi_tip_blocks_s7_forks_and_conflicts() -> None:
    """H5, S7, V2: the pool is not vacuous: blocks with 2..8 tips, second children whose txs are
    INVALID(sortition) by S7, double spends, milestone forks and pending blocks."""
    dags = dag_pool()
    tip_counts = {len(blk.tip_links) for d in dags for blk in d.blocks}
    assert {1, 2, 8} <= tip_counts
    reasons = {r for d in dags for _, rs in d.reference.level_sets for r in rs}
    assert {Reason.VALID, Reason.SORTITION, Reason.DOUBLE_SPEND} <= reasons
    assert any(k[:1] == b"c" for d in dags for k in d.reference.rows)
    assert any(d.reference.pending for d in dags)
    forked = 0
    for dag in dags:
        chain = new_chain()
        deliver(chain, dag.blocks)
        forked += len(chain.state.snapshots) > len(chain.best_chain())
    assert forked >= 2


# ------------------------------------------------------------------ (a) delivery order
@pytest.mark.property
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_v2_total_order_and_ledger_ignore_delivery_order(data: st.DataObject) -> None:
    """L1-L3, F2, F4, S7 (v2): a shuffled delivery of a multi-tip DAG (orphans waiting on any of
    their tips) ends with the same best chain, level sets, verdicts, UTXOs, roots, pending set
    and stored ledger rows, the S7 ``c`` rows included."""
    dags = dag_pool()
    dag = dags[data.draw(st.integers(0, len(dags) - 1), label="dag")]
    order = data.draw(st.permutations(range(len(dag.blocks))), label="order")
    chain = new_chain()
    deliver(chain, [dag.blocks[i] for i in order])
    ids = [blk.id for blk in dag.blocks]
    assert [b for b in ids if not chain.has_block(b)] == []
    assert len(chain.orphans) == 0
    assert ledger_of(chain, ids, LEDGER_PREFIXES) == dag.reference


# ------------------------------------------------------------------ (b) refusals change nothing
Mutation = Callable[[Chain, Block, random.Random], tuple[bytes, type[InvalidBlock], str] | None]


def _regrind(chain: Chain, block: Block, tips: Sequence[bytes]) -> bytes:
    """The block over another tip list with a matching tips_root and fresh real PoW."""
    snap = chain.get_snapshot(block.header.milestone_link)
    assert snap is not None
    header = replace(block.header, tips_root=compute_tips_root(tips), nonce=block.header.nonce + 1)
    header = grind(header, snap.blk_target, None, snap.ms_target)
    return make_block(header, tips, block.txs).raw


def _random_ids(rng: random.Random, n: int) -> list[bytes]:
    return sorted(rng.randbytes(32) for _ in range(n))


def mut_descending(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    if len(b.tip_links) < 2:
        return None
    return _regrind(c, b, b.tip_links[::-1]), RejectedBlock, "H5"


def mut_repeated(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    i = r.randrange(len(b.tip_links))
    tips = sorted([*b.tip_links, b.tip_links[i]])
    return _regrind(c, b, tips), RejectedBlock, "H5"


def mut_tip_is_previous(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    prev = b.header.previous_link
    tips = sorted({*b.tip_links, prev})
    if tips == [c.genesis_id] == [prev]:
        return None
    if len(tips) > MAX_TIPS:
        tips = sorted([prev, *[t for t in b.tip_links if t != prev][: MAX_TIPS - 1]])
    return _regrind(c, b, tips), RejectedBlock, "H5"


def mut_null_tip(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    return _regrind(c, b, [NULL_ID, *b.tip_links[: MAX_TIPS - 1]]), RejectedBlock, "H5"


def mut_nine_tips(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    return _regrind(c, b, _random_ids(r, MAX_TIPS + 1)), RejectedBlock, "H5"


def mut_no_tips(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    return _regrind(c, b, []), RejectedBlock, "H5"


def mut_body_tips_genesis(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    if list(b.tip_links) == [c.genesis_id]:
        return None
    return make_block(b.header, [c.genesis_id], b.txs).raw, MalformedBlock, "H7"


def mut_body_tips_root(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    return make_block(b.header, [b.header.tips_root], b.txs).raw, MalformedBlock, "H7"


def mut_body_tips_shuffled(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    if len(b.tip_links) < 2:
        return None
    tips = list(b.tip_links)
    while tips == list(b.tip_links):
        r.shuffle(tips)
    return make_block(b.header, tips, b.txs).raw, MalformedBlock, "H7"


def mut_body_tip_dropped(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    if len(b.tip_links) < 2:
        return None
    tips = list(b.tip_links)
    del tips[r.randrange(len(tips))]
    return make_block(b.header, tips, b.txs).raw, MalformedBlock, "H7"


def mut_bad_nonce(
    c: Chain, b: Block, r: random.Random
) -> tuple[bytes, type[InvalidBlock], str] | None:
    snap = c.get_snapshot(b.header.milestone_link)
    assert snap is not None
    nonce = b.header.nonce + 1
    while True:
        candidate = make_block(replace(b.header, nonce=nonce), b.tip_links, b.txs)
        if int.from_bytes(candidate.id, "little") > snap.blk_target:
            return candidate.raw, RejectedBlock, "H4"
        nonce += 1


MUTATIONS: list[Mutation] = [
    mut_descending,
    mut_repeated,
    mut_tip_is_previous,
    mut_null_tip,
    mut_nine_tips,
    mut_no_tips,
    mut_body_tips_genesis,
    mut_body_tips_root,
    mut_body_tips_shuffled,
    mut_body_tip_dropped,
    mut_bad_nonce,
]


@pytest.mark.property
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_v2_refused_tip_list_leaves_state_byte_identical(data: st.DataObject) -> None:
    """H5, H7, H4, verdict table (v2): a block refused for its tip list (H5 REJECT although its
    tips_root matches: descending, repeated, the previous link, a null tip, 9 or 0 tips) or for
    a body that does not match tips_root (H7 MALFORMED: [genesis], [tips_root], shuffled or
    dropped tips) changes no stored byte, best head, pending set or ledger; only a REJECT is
    cached, and the real block is accepted afterwards."""
    dags = dag_pool()
    dag = dags[data.draw(st.integers(0, len(dags) - 1), label="dag")]
    k = data.draw(st.integers(1, len(dag.blocks) - 1), label="prefix")
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="rng"))
    chain = new_chain()
    deliver(chain, dag.blocks[:k])
    block = dag.blocks[k]
    applicable = [m for m in MUTATIONS if m(chain, block, random.Random(0)) is not None]
    mutation = data.draw(st.sampled_from(applicable), label="mutation")
    event(mutation.__name__)
    mutated = mutation(chain, block, rng)
    assert mutated is not None
    raw, verdict, rule = mutated
    before = store_rows(chain)
    state = (chain.best_id, chain.pending_blocks(), chain.utxos(), chain.roots())
    with pytest.raises(InvalidBlock) as info:
        chain.on_block(raw, NOW)
    assert type(info.value) is verdict
    assert info.value.rule == rule
    assert store_rows(chain) == before
    assert (chain.best_id, chain.pending_blocks(), chain.utxos(), chain.roots()) == state
    assert len(chain.orphans) == 0
    assert chain.is_known_invalid(block.id) is False
    assert chain.on_block(block.raw, NOW).status is BlockStatus.ACCEPTED


# ------------------------------------------------------------------ (c) reorganisation and back
@dataclass
class ForkRun:
    chain: Chain
    main: list[Block]
    side: list[Block]
    side_led: bool


def build_fork(seed: int, prefix_ms: int, a1: int, lead: int, overtake: int, fill: int) -> ForkRun:
    """Prefix, main branch A1, a heavier side branch B from the fork point (reorg), then A2 until
    A leads again (reorg back). Tips are random lists of 1..8: main blocks name main and prefix
    blocks, side blocks only prefix blocks, so B stays pending at the end. The side miner forks
    its own peer chain (two children, S7) and double-spends an outpoint A1 spends."""
    rng = random.Random(seed)
    m1, m2, side = Miner(secret_of(61)), Miner(secret_of(62)), Miner(secret_of(63))
    b = DagBuilder(rng, [m1, m2, side])
    main: list[Block] = []

    def main_block(miner: Miner, want: bool, ms: BlockId) -> Block:
        pool = [x for m in (m1, m2) if m is not miner for x in m.blocks[-4:]] + prefix[-4:]
        block = b.mine(miner, ms=ms, want=want, tips=b.random_tips(miner, pool) or None)
        main.append(block)
        return block

    prefix: list[BlockId] = []
    main.extend(b.mine(miner, want=False, txs=[]) for miner in (m1, m2, side))
    for _ in range(prefix_ms):
        main.extend(
            b.mine(rng.choice((m1, m2, side)), want=False, ms=b.chain.best_id)
            for _ in range(fill + 1)
        )
        main.append(b.mine(rng.choice((m1, m2)), want=True, ms=b.chain.best_id))
    prefix = [blk.id for blk in main]
    fork_point = b.chain.best_id
    contested = b.faucet.pop()
    main.append(
        b.mine(
            m1,
            want=False,
            ms=fork_point,
            txs=[
                spend(
                    contested, 5 * 10**6, FAUCET_SECRET, address_of_secret(WALLET[0]), m1.blocks[-1]
                )
            ],
        )
    )
    a_head = fork_point
    for _ in range(a1):
        for _ in range(fill):
            main_block(rng.choice((m1, m2)), False, a_head)
        a_head = main_block(rng.choice((m1, m2)), True, a_head).id
    # B: the side miner from the fork point; its first two blocks are siblings (S7)
    side_blocks: list[Block] = []
    fork_parent = side.blocks[-1]
    b_head = fork_point
    double = spend(contested, 7 * 10**6, FAUCET_SECRET, address_of_secret(WALLET[1]), fork_parent)
    for i in range(a1 + lead):
        for j in range(fill + 2):
            previous = fork_parent if (i, j) in ((0, 0), (0, 1)) else None
            on = previous if previous is not None else side.blocks[-1]
            txs = [double] if (i, j) == (0, 0) else b.random_txs(on)
            tips = b.random_tips(side, prefix[-8:])
            if (i, j) == (0, 1):  # the second sibling links the first: both are ordered
                tips = sorted({*tips[: MAX_TIPS - 1], side_blocks[0].id})
            block = b.mine(
                side, ms=b_head, want=j == fill + 1, tips=tips or None, previous=previous, txs=txs
            )
            side_blocks.append(block)
        b_head = side_blocks[-1].id
    side_led = b.chain.best_id == b_head and verdicts(b.chain, side_blocks[0].id) == [Reason.VALID]
    first, second = side_blocks[0], side_blocks[1]
    assert first.header.previous_link == second.header.previous_link == fork_parent
    assert all(r == Reason.SORTITION for r in verdicts(b.chain, second.id))  # S7
    height_a = b.chain.get_snapshot(a_head)
    height_b = b.chain.get_snapshot(b_head)
    assert height_a is not None
    assert height_b is not None
    for _ in range(height_b.height - height_a.height + overtake):
        for _ in range(fill):
            main_block(rng.choice((m1, m2)), False, a_head)
        a_head = main_block(rng.choice((m1, m2)), True, a_head).id
    return ForkRun(b.chain, main, side_blocks, side_led)


@pytest.mark.property
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    prefix_ms=st.integers(1, 2),
    a1=st.integers(0, 2),
    lead=st.integers(1, 2),
    overtake=st.integers(1, 2),
    fill=st.integers(0, 2),
)
def test_v2_reorg_to_heavier_fork_and_back_restores_the_ledger(
    seed: int, prefix_ms: int, a1: int, lead: int, overtake: int, fill: int
) -> None:
    """§4.4, A3, S7 (v2): with random tip lists of 1..8, switching to a heavier side branch (whose
    miner forked its own chain and double-spent) and back gives the same level sets, ledger and
    stored ledger rows, S7 ``c`` rows included, as a chain that only ever saw the main branch;
    the side branch stays pending."""
    run = build_fork(seed, prefix_ms, a1, lead, overtake, fill)
    assert run.side_led, "the side branch must have been best, its double spend VALID"
    fresh = new_chain()
    deliver(fresh, run.main)
    assert run.chain.best_id == fresh.best_id
    ids = [blk.id for blk in run.main]
    expected = ledger_of(fresh, ids, LEDGER_PREFIXES)
    got = ledger_of(run.chain, ids, LEDGER_PREFIXES)
    assert got == replace(expected, pending=expected.pending | {blk.id for blk in run.side})
    assert all(run.chain.ls_height(blk.id) is None for blk in run.side)
