"""Milestone chain, fork choice, reorganisation, finality and recovery (PROTOCOL.md §4, §12).

Real devnet blocks on a real Chain over a MemoryStore; "reopen" is ``Chain(params, same store)``,
the crash-recovery path of §12 (load the stored rows, then re-run F2).
"""

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dagchain.blocks import Block
from dagchain.caches import SharedResults
from dagchain.chain import Chain
from dagchain.errors import InvalidTransaction, Reason
from dagchain.params import DEVNET
from dagchain.pow import compute_work
from dagchain.rewards import compute_block_reward
from dagchain.storage.memory import MemoryStore
from dagchain.types import BlockId
from tests.dagchain.chainkit import (
    Node,
    key,
    ledger_state,
    record,
    redemption,
    replay,
    transfer,
    verdicts,
)

FAUCET_COINS = 10**14
ALICE_SECRET, ALICE = key(2)
BOB_SECRET, BOB = key(3)
CAROL_SECRET, CAROL = key(4)
_, DAVE = key(5)
FINALITY_PARAMS = DEVNET.replace(punctuality=3)
"""Φ trails the head by 3 milestones, so F6 edges are a few blocks away."""


def branch(node: Node, previous: Block, parent: Block, count: int) -> list[Block]:
    """``count`` milestones, each linking the one before, starting on milestone ``parent``."""
    out = []
    for _ in range(count):
        block = node.mine(previous.id, milestone=parent.id, ms=True)
        out.append(block)
        previous = parent = block
    return out


def reopen(node: Node) -> Chain:
    """Crash recovery (§12): a new Chain on the same store."""
    return Chain(node.params, node.store)


def ids(blocks: list[Block]) -> list[BlockId]:
    return [b.id for b in blocks]


def everything(node: Node) -> tuple[object, ...]:
    """The state recovery must reproduce, over every block the node was sent."""
    return ledger_state(node.chain, [b.id for b in node.sent])


# ---------------------------------------------------------------- F1, F2


def test_f1_chainwork_adds_the_parents_milestone_work() -> None:
    """F1: chainwork(genesis) = 0; chainwork(M) = chainwork(P) + work(P.ms_target)."""
    node = Node(DEVNET)
    first = node.register(ALICE, ms=True)
    main = [first, *node.milestones(first, 3)]
    side = node.register(BOB, milestone=main[1].id, ms=True)
    genesis = node.chain.get_snapshot(node.genesis)
    assert genesis is not None
    assert genesis.chainwork == 0
    for block in [*main, side]:
        snap = node.chain.get_snapshot(block.id)
        parent = node.chain.get_snapshot(block.header.milestone_link)
        assert snap is not None
        assert parent is not None
        assert snap.height == parent.height + 1
        assert snap.chainwork == parent.chainwork + compute_work(parent.ms_target)
    assert node.chain.best_id == main[-1].id


@pytest.mark.parametrize("first_arrival", ["x", "y"])
def test_f2_equal_chainwork_keeps_the_earlier_arrival(first_arrival: str) -> None:
    """F2 tie rule: a head of equal chainwork does not replace the best, at run time and after
    reopening (the persisted arrival sequence decides)."""
    node = Node(DEVNET)
    a1 = node.register(ALICE, ms=True)
    x = node.build(a1.id, ms=True)
    y = node.build(node.genesis, register=BOB, ms=True)
    first, second = (x, y) if first_arrival == "x" else (y, x)
    node.submit(first)
    outcome = node.submit(second)

    assert outcome.is_milestone
    assert outcome.reorgs == ()
    x_snap, y_snap = node.chain.get_snapshot(x.id), node.chain.get_snapshot(y.id)
    assert x_snap is not None
    assert y_snap is not None
    assert x_snap.chainwork == y_snap.chainwork
    assert node.chain.best_id == first.id
    assert reopen(node).best_id == first.id


def test_f2_strictly_greater_chainwork_switches_the_best_chain() -> None:
    """F2/§4.4: a heavier head replaces the best; the reorg undoes the old branch newest first
    and applies the new one oldest first."""
    node = Node(DEVNET)
    a1 = node.register(ALICE, ms=True)
    x = node.mine(a1.id, ms=True)
    y = node.register(BOB, milestone=a1.id, ms=True)
    z = node.mine(y.id, milestone=y.id)  # an ordinary block changes nothing
    assert node.chain.best_id == x.id
    w = node.build(z.id, milestone=y.id, ms=True)
    outcome = node.submit(w)

    assert node.chain.best_chain() == [node.genesis, a1.id, y.id, w.id]
    (reorg,) = outcome.reorgs
    assert (reorg.old_head, reorg.new_head) == (x.id, w.id)
    assert [d.milestone for d in reorg.undone] == [x.id]
    assert [d.milestone for d in reorg.applied] == [y.id, w.id]
    assert node.chain.pending_blocks() == [x.id]


# ---------------------------------------------------------------- F3


def test_f3_losing_milestone_and_its_blocks_join_a_later_level_set_as_ordinary_blocks() -> None:
    """F3: after its branch loses, milestone x and its child block stay accepted and pending;
    a tip link from the best chain pulls them into the next level set, where x is an ordinary
    block: its root earns R(h) for it and no milestone bonus."""
    node = Node(DEVNET)
    a1 = node.register(ALICE, ms=True)
    p = node.register(CAROL)
    x = node.mine(a1.id, tip=p.id, ms=True)
    x_child = node.mine(x.id, milestone=x.id)
    assert node.chain.level_set(x.id) is not None
    # As the milestone of LS(x) = {p, x}: its own R(2) plus the bonus R(2) · 1 (R7).
    assert record(node.chain, a1.id).balance == 2 * compute_block_reward(2, DEVNET)
    y = node.register(BOB, milestone=a1.id, ms=True)
    z = node.mine(y.id, milestone=y.id, ms=True)
    assert node.chain.best_chain() == [node.genesis, a1.id, y.id, z.id]
    assert set(node.chain.pending_blocks()) == {p.id, x.id, x_child.id}
    assert record(node.chain, a1.id).balance == 0

    w = node.mine(z.id, tip=x_child.id, ms=True)
    level_set = node.chain.level_set(w.id)
    assert level_set is not None
    assert level_set.order == (p.id, x.id, x_child.id, w.id)
    assert node.chain.ls_height(x.id) == node.chain.ls_height(x_child.id) == 4
    assert x.id not in node.chain.best_chain()
    meta = node.chain.get_meta(x.id)
    assert meta is not None
    assert meta.is_milestone
    assert node.chain.pending_blocks() == []
    assert record(node.chain, a1.id).balance == 2 * compute_block_reward(4, DEVNET)


# ---------------------------------------------------------------- §4.4 reorganisation


def two_branch_node() -> tuple[Node, list[Block], list[Block], list[Block]]:
    """Common chain a1..a4 (Alice); losing branch L (l5, l6) seen first; heavier W (w5..w7).

    Both branches spend faucet output 0 (to Bob on L, to Carol on W) and then spend that output
    again; L also redeems Alice's reward.
    """
    node = Node(DEVNET)
    common = node.warm_peer_chain(ALICE)
    a4 = common[-1]
    # Every tx is assigned (S5, devnet c = 1/16) to the block that carries it.
    to_bob = transfer([(node.genesis, 0)], [(FAUCET_COINS - 5, BOB)], DEVNET, assigned_to=[a4.id])
    l5 = node.mine(a4.id, txs=[to_bob], ms=True)
    bob_on = transfer(
        [(to_bob.txid, 0)], [(FAUCET_COINS - 9, DAVE)], DEVNET, BOB_SECRET, assigned_to=[l5.id]
    )
    anchor = record(node.chain, common[0].id).anchor_txid
    redeem = redemption(anchor, ALICE_SECRET, ALICE, 10**8, DAVE, DEVNET)  # index 0: exempt
    l6 = node.mine(l5.id, txs=[redeem, bob_on], ms=True)
    to_carol = transfer(
        [(node.genesis, 0)], [(FAUCET_COINS - 7, CAROL)], DEVNET, assigned_to=[a4.id]
    )
    w5 = node.mine(a4.id, milestone=a4.id, txs=[to_carol], tip=common[0].id, ms=True)
    carol_on = transfer(
        [(to_carol.txid, 0)],
        [(FAUCET_COINS - 100, DAVE)],
        DEVNET,
        CAROL_SECRET,
        assigned_to=[w5.id],
    )
    w6 = node.mine(w5.id, milestone=w5.id, txs=[carol_on], ms=True)
    assert node.chain.best_id == l6.id
    # A block on w7 may carry L's ``bob_on`` again (test_reorg_forgets_...).
    w7 = node.mine(w6.id, milestone=w6.id, ms=True, child_carries=[bob_on.txid])
    return node, common, [l5, l6], [w5, w6, w7]


def test_reorg_gives_the_ledger_of_a_chain_that_only_saw_the_winner() -> None:
    """§4.4: undo L, apply W: UTXOs, root records, LS heights, pending set and each level set
    equal those of a fresh chain fed the same blocks in an order that never makes L best."""
    node, common, losing, winning = two_branch_node()
    assert node.chain.best_chain() == [node.genesis, *ids(common), *ids(winning)]
    fresh = replay(DEVNET, [*common, *winning, *losing])

    assert fresh.chain.best_id == node.chain.best_id
    assert everything(fresh) == ledger_state(node.chain, [b.id for b in fresh.sent])
    for ms in node.chain.best_chain():
        assert node.chain.level_set(ms) == fresh.chain.level_set(ms)
    assert set(node.chain.pending_blocks()) == set(ids(losing))
    assert verdicts(node.chain, winning[0].id) == [Reason.VALID]
    assert verdicts(node.chain, winning[1].id) == [Reason.VALID]


def test_reorg_forgets_the_losing_branchs_spends_and_redemptions() -> None:
    """§4.4: after the undo, L's redemption is no longer recorded (R4 b) and L's spends are no
    longer in the spent index (V6 tells missing-input from double-spend by it)."""
    node, _, losing, winning = two_branch_node()
    redeem, bob_on = losing[1].txs
    with pytest.raises(InvalidTransaction) as err:
        node.chain.check_transaction(bob_on)
    assert (err.value.rule, err.value.message) == ("V6", "missing-input")

    block = node.mine(winning[-1].id, txs=[redeem, bob_on], ms=True)
    assert verdicts(node.chain, block.id) == [Reason.VALID, Reason.MISSING_INPUT]
    assert record(node.chain, node.sent[0].id).anchor_txid == redeem.txid


def test_reorg_back_reuses_stored_deltas_and_still_matches_a_fresh_chain() -> None:
    """§4.3/§4.4: when L rejoins the best chain its stored deltas are applied again (not
    re-evaluated) and the ledger equals a fresh chain that only ever had L as best."""
    node, common, losing, winning = two_branch_node()
    stored = [node.chain.level_set(b.id) for b in losing]
    more = branch(node, losing[-1], losing[-1], 2)
    assert node.chain.best_chain() == [node.genesis, *ids(common), *ids(losing), *ids(more)]
    for block, delta in zip(losing, stored, strict=True):
        assert node.chain.level_set(block.id) is delta

    fresh = replay(DEVNET, [*common, *losing, *more, *winning])
    assert everything(fresh) == ledger_state(node.chain, [b.id for b in fresh.sent])
    for ms in node.chain.best_chain():
        assert node.chain.level_set(ms) == fresh.chain.level_set(ms)


def test_recovery_reopens_to_identical_state() -> None:
    """§12: reopening on the same store gives the same best chain, Φ, UTXOs, root records, LS
    heights and pending set, writes nothing, and the reopened chain keeps accepting blocks."""
    node = Node(DEVNET)
    last = node.warm_peer_chain(ALICE)[-1]
    pay = transfer([(node.genesis, 0)], [(FAUCET_COINS - 3, BOB)], DEVNET, assigned_to=[last.id])
    last = node.mine(last.id, txs=[pay], ms=True)
    pending = node.mine(last.id)
    state = everything(node)
    rows = node.store.snapshot()

    node.chain = reopen(node)
    assert everything(node) == state
    assert node.store.snapshot() == rows
    assert node.chain.pending_blocks() == [pending.id]
    nxt = node.mine(pending.id, ms=True)
    assert node.chain.best_id == nxt.id


def test_recovery_after_a_reorg_reopens_to_identical_state() -> None:
    """§12: the same after a reorganisation (and after a second one back)."""
    node, _, losing, _ = two_branch_node()
    state = everything(node)
    node.chain = reopen(node)
    assert everything(node) == state

    branch(node, losing[-1], losing[-1], 2)
    state = everything(node)
    node.chain = reopen(node)
    assert everything(node) == state


class SimulatedCrash(Exception):
    """The process died before a batch reached the store."""


class CrashingStore(MemoryStore):
    """A MemoryStore that dies at the start of its ``crash_at``-th batch (nothing of it lands)."""

    def __init__(self) -> None:
        super().__init__()
        self.crash_at: int | None = None

    @contextmanager
    def write_batch(self) -> Iterator[object]:  # type: ignore[override]
        if self.crash_at is not None and self.batches_written == self.crash_at:
            self.crash_at = None
            raise SimulatedCrash
        with super().write_batch() as batch:
            yield batch


# A1 of w7, undo l6, undo l5, apply w5, w6, w7: a crash before any of these batches.
@pytest.mark.parametrize("batch", range(6))
def test_recovery_resumes_a_switch_interrupted_at_any_batch(batch: int) -> None:
    """§4.4/§12: each switch step is one batch; after a crash before any of them, reopening
    (re-running F2) reaches the state of a chain that only ever saw the winner."""
    reference, _, _, winning = two_branch_node()
    node = Node(DEVNET, CrashingStore())
    for block in reference.sent[:-1]:
        node.submit(block)
    store = node.store
    assert isinstance(store, CrashingStore)
    store.crash_at = store.batches_written + batch
    with pytest.raises(SimulatedCrash):
        node.chain.on_block(winning[-1].raw, node.now_ms)

    node.chain = reopen(node)
    if batch == 0:  # the block itself was never stored: it is simply sent again
        assert not node.chain.has_block(winning[-1].id)
        node.submit(winning[-1])
    assert node.chain.best_id == winning[-1].id
    assert ledger_state(node.chain, [b.id for b in reference.sent]) == everything(reference)


# ---------------------------------------------------------------- F6 finality, F7 confirmations


def test_f6_final_milestone_trails_the_head_by_punctuality() -> None:
    """F6: once the head has height H ≥ punctuality, Φ is the best-chain milestone at H - p."""
    node = Node(FINALITY_PARAMS)
    p = FINALITY_PARAMS.punctuality
    previous = node.register(ALICE, ms=True)
    for _ in range(6):
        best = node.chain.best_chain()
        height = node.chain.best_height
        assert node.chain.final_id == best[max(0, height - p)]
        previous = node.mine(previous.id, ms=True)
    assert node.chain.final_id == node.chain.best_chain()[node.chain.best_height - p]


@pytest.mark.parametrize(("fork_below_final", "becomes_best"), [(1, False), (0, True)])
def test_f6_heavier_branch_forked_below_final_is_accepted_but_never_best(
    fork_below_final: int, becomes_best: bool
) -> None:
    """F5/F6: a branch forked below Φ is accepted block by block but never becomes best, even
    when heavier, at run time and after reopening; one forked at Φ does become best."""
    node = Node(FINALITY_PARAMS)
    first = node.register(ALICE, ms=True)
    main = [first, *node.milestones(first, 5)]  # heights 1..6, Φ at 3
    final = node.chain.final_id
    assert final == main[2].id
    fork = main[2 - fork_below_final]
    start = node.register(BOB, milestone=fork.id, ms=True)
    side = [start, *branch(node, start, start, 3 + fork_below_final)]  # up to height 7

    head = node.chain.get_snapshot(side[-1].id)
    assert head is not None
    main_head = node.chain.get_snapshot(main[-1].id)
    assert main_head is not None
    assert head.chainwork > main_head.chainwork
    assert all(node.chain.has_block(b.id) for b in side)
    expected = side[-1].id if becomes_best else main[-1].id
    assert node.chain.best_id == expected
    assert reopen(node).best_id == expected
    if not becomes_best:
        assert node.chain.final_id == final


def confirmations(chain: Chain, block_id: bytes) -> int:
    """F7: best height - LS height(B) + 1, 0 while pending."""
    height = chain.ls_height(block_id)
    return 0 if height is None else chain.best_height - height + 1


def test_f7_confirmations_count_best_chain_milestones_from_the_level_set() -> None:
    """F7: a block has 0 confirmations while pending, 1 in the head's level set, one more per
    milestone, and drops back when a reorganisation undoes its level set."""
    node = Node(DEVNET)
    a1 = node.register(ALICE, ms=True)
    a2 = node.mine(a1.id, ms=True)
    block = node.register(BOB)
    assert confirmations(node.chain, block.id) == 0
    a3 = node.mine(a2.id, tip=block.id, ms=True)
    assert confirmations(node.chain, block.id) == 1
    a5 = node.milestones(a3, 2)[-1]
    assert node.chain.best_id == a5.id
    assert confirmations(node.chain, block.id) == 3

    side = node.register(CAROL, milestone=a2.id, ms=True)
    branch(node, side, side, 3)  # heights 3..6 without the block
    assert confirmations(node.chain, block.id) == 0


# ---------------------------------------------------------------- F8 operator healing


def test_f8_invalidate_switches_to_the_best_other_branch_and_reconsider_returns() -> None:
    """F8: invalidate(M) above Φ drops M and its descendants from F2; the heaviest remaining
    branch becomes best; the mark survives reopening; reconsider(M) restores the original head
    and ledger."""
    node = Node(DEVNET)
    first = node.register(ALICE, ms=True)
    main = [first, *node.milestones(first, 3)]  # heights 1..4
    light = node.register(BOB, milestone=main[1].id, ms=True)  # height 3
    heavy_start = node.register(CAROL, milestone=main[0].id, ms=True)
    heavy = [heavy_start, *branch(node, heavy_start, heavy_start, 2)]  # heights 2..4
    assert node.chain.best_id == main[-1].id  # the tie at height 4 keeps the first arrival
    original = everything(node)

    node.chain.invalidate(main[2].id)
    assert node.chain.best_chain() == [node.genesis, main[0].id, *ids(heavy)]
    assert node.chain.final_id == node.genesis
    assert {light.id, main[2].id, main[3].id} <= set(node.chain.pending_blocks())

    node.chain = reopen(node)
    assert node.chain.best_id == heavy[-1].id
    node.chain.reconsider(main[2].id)
    assert node.chain.best_id == main[-1].id
    assert everything(node) == original
    assert reopen(node).best_id == main[-1].id


def test_f8_descendants_of_an_invalidated_milestone_are_no_candidates() -> None:
    """F8/F2: a heavier head above an invalidated milestone is accepted but never best until
    reconsidered; invalidating the head itself falls back to its parent."""
    node = Node(DEVNET)
    first = node.register(ALICE, ms=True)
    main = [first, *node.milestones(first, 2)]  # heights 1..3
    node.chain.invalidate(main[-1].id)
    assert node.chain.best_id == main[1].id
    assert main[2].id in node.chain.pending_blocks()

    above = branch(node, main[-1], main[-1], 2)  # heights 4..5 on the invalidated milestone
    assert all(node.chain.has_block(b.id) for b in above)
    assert node.chain.best_id == main[1].id
    node.chain.reconsider(main[-1].id)
    assert node.chain.best_chain() == [node.genesis, *ids(main), *ids(above)]


def test_f8_invalidating_at_final_moves_final_to_its_parent() -> None:
    """F8: invalidate(M) with M at or below Φ sets Φ to parent(M), so a branch forked below the
    old Φ can become best; reconsider lets the original, heavier branch return."""
    params = FINALITY_PARAMS
    node = Node(params)
    first = node.register(ALICE, ms=True)
    main = [first, *node.milestones(first, 5)]  # heights 1..6, Φ = main[2] (height 3)
    assert node.chain.final_id == main[2].id
    b_start = node.register(BOB, milestone=main[1].id, ms=True)
    other = [b_start, *branch(node, b_start, b_start, 2)]  # heights 3..5
    c_start = node.register(CAROL, milestone=main[1].id, ms=True)
    shorter = [c_start, *branch(node, c_start, c_start, 1)]  # heights 3..4
    assert node.chain.best_id == main[-1].id

    node.chain.invalidate(main[2].id)
    assert node.chain.final_id == main[1].id
    assert node.chain.best_id == other[-1].id
    assert set(ids(shorter)) <= set(node.chain.pending_blocks())
    assert reopen(node).best_id == other[-1].id
    assert reopen(node).final_id == main[1].id

    node.chain.reconsider(main[2].id)
    assert node.chain.best_id == main[-1].id
    assert node.chain.final_id == main[2].id


def test_f8_invalidating_a_milestone_off_the_best_chain_changes_nothing_else() -> None:
    """F8: invalidating a side-branch milestone leaves the best chain and ledger as they were."""
    node = Node(DEVNET)
    first = node.register(ALICE, ms=True)
    main = [first, *node.milestones(first, 2)]
    side = node.register(BOB, milestone=main[0].id, ms=True)
    before = everything(node)
    node.chain.invalidate(side.id)
    assert everything(node) == before
    assert reopen(node).best_id == main[-1].id


def test_chains_sharing_results_share_one_utxo_set_and_a_reorg_copies_it() -> None:
    """The simulator's SharedResults (issue 23): Chains on the same best milestone read one UTXO
    set; one that reorganises gets its own copy and leaves the other's set as it was."""
    _, common, losing, winning = two_branch_node()
    shared = SharedResults()
    first, second = (Node(DEVNET, shared_results=shared) for _ in range(2))
    for node in (first, second):
        for block in [*common, *losing]:
            node.submit(block)
    assert first.chain.state.utxos is second.chain.state.utxos
    before = dict(second.chain.utxos())
    assert before == replay(DEVNET, [*common, *losing]).chain.utxos()

    for block in winning:
        first.submit(block)
    assert first.chain.best_id == winning[-1].id
    assert second.chain.utxos() == before
    assert first.chain.utxos() == replay(DEVNET, [*common, *winning]).chain.utxos()
    # the other way round: the second catches up and takes the first's set for W's head
    for block in winning:
        second.submit(block)
    assert second.chain.state.utxos is first.chain.state.utxos
