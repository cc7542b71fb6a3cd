"""S2's window on a real Chain equals the walk §8.1 defines, whatever the DAG's history.

PROTOCOL.md §8.1 S2: b_1 = prev, ..., b_K; W = Σ work(b_j.target); S = max(S_floor, ts(M) -
ts(milestone_link(b_K))); W = S = 0 while m ≤ K. The Chain computes them once per block at
acceptance without walking K links (§8.1: "a K-th-ancestor pointer or a per-root ring buffer
avoids a K-step walk"); these tests hold it to the walk, done here through the public API:

- on random DAGs with several peer chains, peer chains forked by their own miner, milestone-chain
  reorganisations, crash-recovery reopens and a one-milestone memory window, under ``uniform``
  and ``share`` weighting, with retargeting on so the block targets (and works) differ;
- for every accepted block (the stored §12 ``m`` row) and for every prospective block a template
  asks about (``Chain.compute_window``);
- on a second chain fed the same blocks in a shuffled order (orphans released in another order);
- and for the cost: accepting the next block of a peer chain whose K previous blocks left the
  memory window reads no more stored blocks than its own link rules do.
"""

import random

import pytest

import dagchain.state
from dagchain.blocks import Block
from dagchain.chain import BlockStatus, Chain, WindowRing
from dagchain.params import DEVNET, ConsensusParams
from dagchain.pow import compute_work, decode_compact
from dagchain.sortition import SortitionWindow, compute_window_span
from dagchain.storage import schema as S
from dagchain.storage.memory import MemoryStore
from dagchain.types import BlockId
from tests.dagchain.chainkit import Node, key


def retargeting(weighting: str) -> ConsensusParams:
    """DEVNET (K = 4) with retargeting every 2 milestones and a harder genesis target.

    ms_target 2^250 and blk_target 2^252 at genesis, so proof of work stays cheap while G4 moves
    the targets with the milestone timestamps the scenario draws: the blocks of one window do
    not all have the same work, and S2's floor (K·τ // b = 1,000 ms) binds only sometimes.
    """
    return DEVNET.replace(
        genesis_ms_target_bits=0x20040000,
        retarget=True,
        retarget_window=2,
        sortition_weighting=weighting,
    )


WEIGHTINGS = ["uniform", "share"]


def walked_window(chain: Chain, previous_link: bytes, milestone_link: bytes) -> SortitionWindow:
    """S2 by its definition: walk b_1..b_K through ``Chain.get_block`` (the slow way)."""
    p = chain.params
    k = p.sortition_warmup
    if previous_link == chain.genesis_id:
        peer_height = 1
    else:
        meta = chain.get_meta(previous_link)
        assert meta is not None
        peer_height = meta.peer_height + 1
    if peer_height <= k:
        return SortitionWindow(peer_height, 0, 0)
    work = 0
    cursor = previous_link
    kth_milestone_link = b""
    for _ in range(k):
        block = chain.get_block(cursor)
        assert block is not None
        work += compute_work(decode_compact(block.header.target), p.max_target)
        kth_milestone_link = block.header.milestone_link
        cursor = block.header.previous_link
    ms_block = chain.get_block(milestone_link)
    kth_ms_block = chain.get_block(kth_milestone_link)
    assert ms_block is not None
    assert kth_ms_block is not None
    span = compute_window_span(ms_block.header.timestamp_ms, kth_ms_block.header.timestamp_ms, p)
    return SortitionWindow(peer_height, work, span)


def assert_stored_window_is_walked(chain: Chain, block: Block) -> None:
    h = block.header
    assert chain.sortition_window(block.id) == walked_window(
        chain, h.previous_link, h.milestone_link
    ), block.id.hex()


class DagGrower:
    """Grows a random DAG on ``node``, checking S2 before (template) and after each block."""

    def __init__(self, node: Node, rng: random.Random, memory_window: int | None) -> None:
        self.node = node
        self.rng = rng
        self.memory_window = memory_window
        self.chains: list[list[Block]] = []
        self.forks = 0
        self.reorgs = 0

    @property
    def chain(self) -> Chain:
        return self.node.chain

    def height(self, milestone: bytes) -> int:
        snap = self.chain.get_snapshot(milestone)
        assert snap is not None
        return snap.height

    def timestamp(self, previous: bytes, milestone: bytes) -> int:
        """After both links, 0.2-1.5 τ after the milestone link, so G4 retargets both ways.

        Measured from the milestone link alone, so that blocks between two milestones do not
        stretch the milestone gaps: with longer gaps the targets drift up to ``max_target``,
        where every block is a milestone and a non-milestone block cannot be ground.
        """
        prev_block = self.chain.get_block(previous)
        ms_block = self.chain.get_block(milestone)
        assert prev_block is not None
        assert ms_block is not None
        tau = self.node.params.milestone_interval_ms
        gap = self.rng.randint(tau // 5, 3 * tau // 2)
        return max(prev_block.header.timestamp_ms, ms_block.header.timestamp_ms + gap)

    def add(self, previous: bytes, *, milestone: bytes | None = None, ms: bool) -> Block:
        chain = self.chain
        ms_link = BlockId(milestone if milestone is not None else chain.best_id)
        if previous != chain.genesis_id:
            assert chain.compute_window(previous, ms_link) == walked_window(
                chain, previous, ms_link
            )
        block = self.node.mine(
            previous,
            milestone=ms_link,
            ms=ms,
            timestamp_ms=self.timestamp(previous, ms_link),
        )
        assert_stored_window_is_walked(self.chain, block)
        return block

    def register(self, n: int) -> None:
        _, address = key(100 + n)
        block = self.node.register(address, ms=not self.chains)
        assert_stored_window_is_walked(self.chain, block)
        self.chains.append([block])

    def linkable(self, blocks: list[Block], milestone: bytes) -> list[Block]:
        """Blocks that may be a previous link under ``milestone`` (D5a, D5b)."""
        height = self.height(milestone)
        punctuality = self.node.params.punctuality
        return [b for b in blocks if height - punctuality < self.chain.msh(b.id) <= height]

    def extend(self, fork: bool) -> None:
        """Extend a random peer chain from its newest linkable block, or from an older one."""
        best = self.chain.best_id
        index = self.rng.randrange(len(self.chains))
        candidates = self.linkable(self.chains[index], best)
        if not candidates:
            return
        previous = candidates[-1]
        if fork and len(candidates) > 1:
            previous = self.rng.choice(candidates[-4:-1])
            self.forks += 1
        block = self.add(previous.id, ms=self.rng.random() < 0.4)
        self.chains[index].append(block)

    def reorganise(self) -> None:
        """Three milestones on the milestone two below the head: the best chain switches."""
        chain = self.chain
        best = chain.best_chain()
        if len(best) < 4:
            return
        base = best[-3]
        index = self.rng.randrange(len(self.chains))
        candidates = self.linkable(self.chains[index], base)
        if not candidates:
            return
        previous, milestone = candidates[-1].id, base
        for _ in range(3):
            block = self.add(previous, milestone=milestone, ms=True)
            self.chains[index].append(block)
            previous = milestone = block.id
        assert chain.best_id == previous
        self.reorgs += 1

    def reopen(self) -> None:
        """§12 crash recovery: a new Chain on the same store (nothing kept in memory)."""
        node = self.node
        node.chain = Chain(node.params, node.store, memory_window=self.memory_window)

    def grow(self, steps: int, reopen_every: int) -> None:
        for n in range(3):
            self.register(n)
        for step in range(1, steps + 1):
            roll = self.rng.random()
            if roll < 0.05:
                self.register(len(self.chains))
            elif roll < 0.20:
                self.extend(fork=True)
            elif roll < 0.30:
                self.reorganise()
            else:
                self.extend(fork=False)
            if step % reopen_every == 0:
                self.reopen()


def grown(
    weighting: str, seed: int, memory_window: int | None, steps: int = 80
) -> tuple[DagGrower, list[Block]]:
    params = retargeting(weighting)
    node = Node(params)
    node.chain = Chain(params, node.store, memory_window=memory_window)
    grower = DagGrower(node, random.Random(seed), memory_window)
    grower.grow(steps, reopen_every=25)
    return grower, node.sent


@pytest.mark.parametrize("memory_window", [None, 1])
@pytest.mark.parametrize("weighting", WEIGHTINGS)
@pytest.mark.parametrize("seed", [1, 2])
def test_window_of_every_block_is_the_walk_through_forks_reorgs_and_reopens(
    weighting: str, seed: int, memory_window: int | None
) -> None:
    """S2 (§8.1), the §12 ``m`` row: on a DAG with several peer chains, self-forked peer chains,
    milestone reorganisations and reopens, every stored W and S (and every template's) is the
    walk's. The scenario really has differing block works, forks and reorganisations."""
    grower, blocks = grown(weighting, seed, memory_window)
    assert grower.forks >= 3
    assert grower.reorgs >= 2
    assert len({b.header.target for b in blocks}) > 1
    windows = [grower.chain.sortition_window(b.id) for b in blocks]
    assert sum(1 for w in windows if w.work > 0) > len(blocks) // 2
    for block in blocks:
        assert_stored_window_is_walked(grower.chain, block)


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_window_does_not_depend_on_arrival_order(weighting: str) -> None:
    """S2's values are chain- and order-independent (§8.1): a chain fed the same blocks shuffled
    (most arrive as orphans and are released in another order) stores the same W and S."""
    grower, blocks = grown(weighting, seed=3, memory_window=None, steps=60)
    shuffled = blocks[:]
    random.Random(4).shuffle(shuffled)
    fresh = Node(grower.node.params)
    for block in shuffled:
        outcome = fresh.chain.on_block(block.raw, fresh.now_ms)
        assert outcome.status in (BlockStatus.ACCEPTED, BlockStatus.ORPHAN)
    for block in blocks:
        assert fresh.chain.sortition_window(block.id) == grower.chain.sortition_window(block.id)
        assert_stored_window_is_walked(fresh.chain, block)


class BlockReadCounter(MemoryStore):
    """A MemoryStore that counts reads of stored blocks (``b`` rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.block_reads = 0

    def get(self, key: bytes) -> bytes | None:
        if key[:1] == S.P_BLOCK:
            self.block_reads += 1
        return super().get(key)


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_next_block_of_a_slow_peer_chain_reads_no_window_from_the_store(
    weighting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost of S2 (§8.1: computed once per block, no K-step walk): peer chain X mines one
    block every 3 milestones, so with a one-milestone memory window and no block cache its K
    previous blocks are only in the store. Accepting X's next block reads at most one stored
    block (its previous link's timestamp for D6), and a template's window reads none; a K-step
    walk reads K blocks and the K-th one's milestone link."""
    monkeypatch.setattr(dagchain.state, "CACHE_BLOCKS", 1)
    params = retargeting(weighting)
    store = BlockReadCounter()
    node = Node(params, store)
    node.chain = Chain(params, store, memory_window=1)
    k = params.sortition_warmup
    y = [node.register(key(1)[1], ms=True)]
    x = [node.register(key(2)[1])]
    reads = []
    tau = params.milestone_interval_ms
    for _ in range(k + 4):
        for _ in range(3):  # one τ apart, so G4 keeps the targets (and proof of work) as they are
            y.append(node.mine(y[-1].id, ms=True, timestamp_ms=y[-1].header.timestamp_ms + tau))
        template = x[-1].id
        before = store.block_reads
        assert node.chain.compute_window(template, node.chain.best_id).peer_height == len(x) + 1
        template_reads = store.block_reads - before
        block = node.build(x[-1].id)
        before = store.block_reads
        node.submit(block)
        reads.append((len(x) + 1, template_reads, store.block_reads - before))
        x.append(block)
        assert_stored_window_is_walked(node.chain, block)
    steady = [(t, a) for m, t, a in reads if m > k + 1]
    assert steady, reads
    assert all(t == 0 and a <= 1 for t, a in steady), reads


def test_window_ring_is_the_last_k_blocks_whatever_their_work() -> None:
    """The circular buffer behind S2 (``WindowRing``) against a plain list: W is the sum of the
    last K works and the oldest timestamp is the K-th block's, also once a work needs more than
    64 bits (the ring's machine-integer array then gives way to a list)."""
    rng = random.Random(5)
    k = 7
    plain: list[tuple[int, int]] = [(3, 10), (5, 11)]
    ring = WindowRing(plain)
    for n in range(60):
        work = 2**70 + n if n in (20, 41) else rng.randrange(1, 2**20)
        entry = (work, 1_000 + n)
        ring.push(entry, k)
        plain = [*plain, entry][-k:]
        assert ring.work == sum(w for w, _ in plain)
        assert ring.oldest_ms_ts == plain[0][1]
