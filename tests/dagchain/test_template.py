"""Block templates (PROTOCOL.md §3.4) on a real devnet Chain: every template, once solved with real
PoW, is a block the chain accepts."""

import pytest

from dagchain.blocks import Block, compute_tips_root
from dagchain.chain import BlockStatus
from dagchain.mempool import Mempool
from dagchain.params import DEVNET
from dagchain.template import (
    BlockTemplate,
    TemplateUnavailable,
    build_template,
    choose_tip_links,
    try_build_template,
)
from dagchain.transactions import TxKind
from tests.dagchain.builders import grind
from tests.dagchain.chainkit import Node, is_assigned, key, transfer

FAUCET_COINS = 10**14
_, ALICE = key(2)
_, BOB = key(3)


def solve(template: BlockTemplate, want_milestone: bool | None = None) -> Block:
    header = grind(template.header(), template.target, want_milestone, template.ms_target)
    return template.solve(header.nonce)


def mine(node: Node, pool: Mempool, template: BlockTemplate, ms: bool | None = None) -> Block:
    block = solve(template, ms)
    outcome = node.chain.on_block(block.raw, node.now_ms)
    assert outcome.status is BlockStatus.ACCEPTED
    return block


def test_registration_template_links_the_head_and_carries_the_registration() -> None:
    node, pool = Node(DEVNET), Mempool(DEVNET)
    t = try_build_template(node.chain, pool, node.now_ms, register=ALICE)
    assert t.needs_registration
    assert t.previous_link == node.genesis
    assert t.milestone_link == node.chain.best_id
    assert t.tip_links == (node.genesis,)
    assert t.tips_root == compute_tips_root([node.genesis])
    assert t.peer_height == 1
    assert t.root is None
    assert [tx.kind for tx in t.txs] == [TxKind.REGISTRATION]
    assert t.timestamp_ms == node.now_ms
    assert len(t.prefix) == 142
    block = mine(node, pool, t)
    assert node.chain.peer_chain_head(block.id) == (block.id, 1)


def test_root_template_extends_the_peer_chain_and_tips_a_fresh_block_of_another() -> None:
    node, pool = Node(DEVNET), Mempool(DEVNET)
    alice = mine(node, pool, try_build_template(node.chain, pool, node.now_ms, register=ALICE))
    bob = mine(node, pool, try_build_template(node.chain, pool, node.now_ms, register=BOB), False)
    t = try_build_template(node.chain, pool, node.now_ms, root=alice.id)
    assert (t.previous_link, t.peer_height, t.root) == (alice.id, 2, alice.id)
    assert t.tip_links == (bob.id,), "the unlinked pending block of another peer chain"
    assert t.tips_root == compute_tips_root([bob.id])
    assert not t.needs_registration
    assert t.txs == ()
    mine(node, pool, t)
    with pytest.raises(KeyError):
        try_build_template(node.chain, pool, node.now_ms, root=bytes(32))
    with pytest.raises(ValueError, match="root"):
        try_build_template(node.chain, pool, node.now_ms)


def test_warm_peer_chain_template_takes_mempool_txs_that_then_confirm() -> None:
    """The template takes the pool txs S5 assigns to its previous link (devnet c = 1/16, v2.1)
    and leaves the others for a later block."""
    node, pool = Node(DEVNET), Mempool(DEVNET)
    warm = node.warm_peer_chain(ALICE)
    tx = transfer([(node.genesis, 0)], [(FAUCET_COINS - 5, BOB)], DEVNET, assigned_to=[warm[-1].id])
    unassigned = next(
        other
        for i in range(1, DEVNET.faucet_outputs)
        if not is_assigned(
            (other := transfer([(node.genesis, i)], [(FAUCET_COINS - 5, BOB)], DEVNET)).txid,
            warm[-1].id,
            DEVNET,
        )
    )
    for pool_tx in (tx, unassigned):
        pool.add(pool_tx, node.chain.check_transaction(pool_tx), node.now_ms)
    t = try_build_template(node.chain, pool, node.now_ms, root=warm[0].id)
    assert t.txs == (tx,)
    assert t.redeemable == node.chain.redeemable(warm[0].id) > 0
    assert t.anchor is not None
    block = mine(node, pool, t, ms=True)
    assert node.chain.ls_height(block.id) == node.chain.best_height
    assert node.chain.get_utxo(tx.txid, 0) is not None


def test_idle_peer_chain_gets_a_catch_up_milestone_link_without_txs() -> None:
    """§3.4: D5b fails against the head after `punctuality` idle milestones, so the template
    links the milestone at msh(previous) + punctuality - 1 and carries no mempool txs."""
    node, pool = Node(DEVNET), Mempool(DEVNET)
    idle = node.register(ALICE)
    busy = node.register(BOB, ms=True)
    for _ in range(DEVNET.punctuality + 2):
        busy = node.mine(busy.id, ms=True)
    t = try_build_template(node.chain, pool, node.now_ms, root=idle.id)
    assert t.catch_up
    assert t.milestone_link == node.chain.best_chain()[DEVNET.punctuality - 1]
    assert t.txs == ()
    mine(node, pool, t)


def test_head_from_the_future_gives_no_template_for_now() -> None:
    node, pool = Node(DEVNET), Mempool(DEVNET)
    reg = node.register(ALICE)
    ahead = DEVNET.max_future_drift_ms // 2 + 1
    node.mine(reg.id, ms=True, timestamp_ms=node.now_ms + ahead)
    with pytest.raises(TemplateUnavailable) as err:
        try_build_template(node.chain, pool, node.now_ms, root=reg.id)
    assert err.value.code == "head-in-future"
    assert build_template(node.chain, pool, node.now_ms, root=reg.id) is None
    assert build_template(node.chain, pool, node.now_ms + ahead, root=reg.id) is not None


@pytest.mark.parametrize("max_tip_links", [1, DEVNET.max_tip_links])
def test_tip_links_take_every_unlinked_block_newest_first_or_oldest_when_asked(
    max_tip_links: int,
) -> None:
    """§3.4 (v2): every unlinked pending block of another peer chain is a tip link, newest
    arrival first up to ``max_tip_links``, sorted ascending; ``oldest_first`` (the ordering-lag
    experiment's variant) prefers the oldest. With a limit of one that is v1's tie-break."""
    params = DEVNET.replace(max_tip_links=max_tip_links)
    node, pool = Node(params), Mempool(params)
    alice = mine(node, pool, try_build_template(node.chain, pool, node.now_ms, register=ALICE))
    _, carol = key(4)
    # both templates are built before either block exists, so neither links the other
    for_bob = try_build_template(node.chain, pool, node.now_ms, register=BOB)
    for_carol = try_build_template(node.chain, pool, node.now_ms, register=carol)
    bob = mine(node, pool, for_bob, False)
    newer = mine(node, pool, for_carol, False)
    ms_link = node.chain.best_id
    newest = choose_tip_links(node.chain, ms_link, alice.id, alice.id)
    oldest = choose_tip_links(node.chain, ms_link, alice.id, alice.id, oldest_first=True)
    if max_tip_links == 1:
        assert (newest, oldest) == ((newer.id,), (bob.id,))
    else:
        assert newest == oldest == tuple(sorted((bob.id, newer.id)))
    t = try_build_template(node.chain, pool, node.now_ms, root=alice.id)
    assert t.tip_links == newest
    assert t.tips_root == compute_tips_root(newest)
    block = mine(node, pool, t)
    assert block.tip_links == newest
