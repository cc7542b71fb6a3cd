"""Rewards, registration and redemption (PROTOCOL.md §9, R1-R8) on a real devnet Chain.

Devnet: base reward 10^8, reward_step 100, ms_reward_coefficient 1, reward_freshness 20; nearly
every hash is a block and ``ms`` (want_milestone) decides milestone status.
"""

import pytest

from dagchain.blocks import Block
from dagchain.errors import Reason
from dagchain.ledger import RootRecord
from dagchain.params import DEVNET
from dagchain.rewards import compute_block_reward, compute_milestone_bonus
from dagchain.types import TxId
from tests.dagchain.builders import registration_tx
from tests.dagchain.chainkit import Node, key, redemption, transfer, verdicts

COIN = 10**8
FAUCET_COINS = 10**14
ALICE_SECRET, ALICE = key(2)
BOB_SECRET, BOB = key(3)
NEXT_SECRET, NEXT_KEY = key(4)
_, PAYEE = key(5)


def record(node: Node, root: Block) -> RootRecord:
    rec = node.chain.get_root(root.id)
    assert rec is not None, "peer chain has no record"
    return rec


# ---------------------------------------------------------------- R1 schedule


@pytest.mark.parametrize(
    ("height", "reward"),
    [(0, 0), (1, COIN), (100, COIN), (101, COIN // 2), (200, COIN // 2), (201, COIN // 3)],
)
def test_r1_devnet_schedule_steps_every_reward_step_level_sets(height: int, reward: int) -> None:
    """R1: R(0) = 0, R(h) = base // (1 + (h - 1) // reward_step); devnet steps every 100."""
    assert compute_block_reward(height, DEVNET) == reward


def test_r1_each_block_is_credited_the_reward_of_its_ls_height() -> None:
    """R1/R2: the block ordered at LS height h credits R(h) to its root (steps of 2 here)."""
    params = DEVNET.replace(reward_step=2)
    node = Node(params)
    first = node.register(ALICE, ms=True)
    credits = []
    previous = first
    for _ in range(4):
        before = record(node, first).balance
        previous = node.mine(previous.id, ms=True)  # |LS| = 1: no bonus
        credits.append(record(node, first).balance - before)
    assert credits == [COIN, COIN // 2, COIN // 2, COIN // 3]


# ---------------------------------------------------------------- R2 freshness

STALE_PARAMS = DEVNET.replace(reward_freshness=2, sortition_freshness=5)
"""Reward freshness shorter than sortition freshness, so a stale block's txs still count."""


@pytest.mark.parametrize(
    ("distance", "fresh"),
    [(STALE_PARAMS.reward_freshness, True), (STALE_PARAMS.reward_freshness + 1, False)],
)
def test_r2_a_stale_block_earns_its_fees_only(distance: int, fresh: bool) -> None:
    """R2: a block ordered more than reward_freshness level sets above its milestone link forgoes
    R(h), but its txs are VALID and its fees are credited."""
    params = STALE_PARAMS
    node = Node(params)
    a_last = node.warm_peer_chain(ALICE)[-1]
    b_chain = node.warm_peer_chain(BOB)
    fee = 777
    pay = transfer(
        [(node.genesis, 0)], [(FAUCET_COINS - fee, BOB)], params, assigned_to=[b_chain[-1].id]
    )
    late = node.mine(b_chain[-1].id, txs=[pay])
    link_height = node.chain.best_height
    a_last = node.milestones(a_last, distance - 1)[-1]
    before = record(node, b_chain[0]).balance
    node.mine(a_last.id, tip=late.id, ms=True)

    assert node.chain.ls_height(late.id) == link_height + distance
    assert verdicts(node.chain, late.id) == [Reason.VALID]
    reward = compute_block_reward(node.chain.best_height, params) if fresh else 0
    assert record(node, b_chain[0]).balance - before == fee + reward


# ---------------------------------------------------------------- R3 registration


def test_r3_registration_milestone_balance_is_its_bonus_and_creates_no_utxo() -> None:
    """R3 (required): a registration block earns no R(h) and its REGISTRATION creates no UTXO;
    a registration milestone's balance is exactly its R7 bonus."""
    node = Node(DEVNET)
    plain = node.register(ALICE)
    milestone = node.register(BOB, tip=plain.id, ms=True)
    level_set = node.chain.level_set(milestone.id)
    assert level_set is not None
    assert level_set.order == (plain.id, milestone.id)

    bonus = compute_milestone_bonus(1, 2, DEVNET)
    assert bonus == COIN
    assert record(node, milestone) == RootRecord(bonus, milestone.txs[0].txid, BOB)
    assert record(node, plain) == RootRecord(0, plain.txs[0].txid, ALICE)
    assert verdicts(node.chain, plain.id) == [Reason.VALID]
    for block in (plain, milestone):
        assert node.chain.get_utxo(block.txs[0].txid, 0) is None
    assert set(node.chain.utxos()) == {(node.genesis, i) for i in range(DEVNET.faucet_outputs)}


# ---------------------------------------------------------------- R4 / R5 redemption


def funded_peer_chain() -> tuple[Node, Block, Block]:
    """A devnet node with peer chain r (key ALICE) holding 3·10^8; returns (node, root, last)."""
    node = Node(DEVNET)
    blocks = node.warm_peer_chain(ALICE)
    assert record(node, blocks[0]).balance == 3 * COIN
    return node, blocks[0], blocks[-1]


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("bad-anchor", Reason.BAD_ANCHOR),
        ("exceeds-reward", Reason.EXCEEDS_REWARD),
        ("redeem-wrong-key", Reason.REDEEM_WRONG_KEY),
    ],
)
def test_r4_invalid_redemption_changes_nothing(case: str, reason: Reason) -> None:
    """R4 (a), (c), (d): a failing redemption gets its reason; balance (but for the block's own
    credit), anchor and UTXO set are unchanged (R5), so a balance never wraps."""
    node, root, last = funded_peer_chain()
    rec = record(node, root)
    anchor, secret, claim = rec.anchor_txid, ALICE_SECRET, COIN
    if case == "bad-anchor":
        anchor = TxId(bytes(32))
    elif case == "exceeds-reward":
        # Checked before the block's own credit, which would have made the claim fit.
        claim = rec.balance + 1
    else:
        secret = BOB_SECRET
    x = redemption(anchor, secret, NEXT_KEY, claim, PAYEE, DEVNET)
    utxos = node.chain.utxos()
    block = node.mine(last.id, txs=[x], ms=True)

    assert verdicts(node.chain, block.id) == [reason]
    credit = compute_block_reward(node.chain.best_height, DEVNET)
    assert record(node, root) == RootRecord(rec.balance + credit, rec.anchor_txid, ALICE)
    assert node.chain.utxos() == utxos


def test_r5_valid_redemption_moves_anchor_and_pays_output_1() -> None:
    """R4/R5: a VALID redemption lowers the balance by the claim, moves the anchor to txid(x)
    with output[0]'s address and pays output[1] as UTXO (txid(x), 1); output[0] is no UTXO."""
    node, root, last = funded_peer_chain()
    rec = record(node, root)
    claim = rec.balance  # the whole balance fits (R4 c is ≤)
    x = redemption(rec.anchor_txid, ALICE_SECRET, NEXT_KEY, claim, PAYEE, DEVNET)
    block = node.mine(last.id, txs=[x], ms=True)

    assert verdicts(node.chain, block.id) == [Reason.VALID]
    credit = compute_block_reward(node.chain.best_height, DEVNET)
    assert record(node, root) == RootRecord(rec.balance - claim + credit, x.txid, NEXT_KEY)
    paid = node.chain.get_utxo(x.txid, 1)
    assert paid is not None
    assert (paid.amount, paid.address) == (claim, PAYEE)
    assert node.chain.get_utxo(x.txid, 0) is None


def test_r5_next_redemption_needs_the_key_the_last_one_named() -> None:
    """R5: after a VALID redemption only output[0]'s key may redeem from the new anchor."""
    node, root, last = funded_peer_chain()
    rec = record(node, root)
    x = redemption(rec.anchor_txid, ALICE_SECRET, NEXT_KEY, 0, PAYEE, DEVNET)  # no output[1]
    last = node.mine(last.id, txs=[x], ms=True)
    assert record(node, root).anchor_txid == x.txid
    assert node.chain.get_utxo(x.txid, 1) is None

    old_key = redemption(x.txid, ALICE_SECRET, ALICE, COIN, PAYEE, DEVNET)
    last = node.mine(last.id, txs=[old_key], ms=True)
    new_key = redemption(x.txid, NEXT_SECRET, NEXT_KEY, COIN, PAYEE, DEVNET)
    last = node.mine(last.id, txs=[new_key], ms=True)
    assert verdicts(node.chain, node.sent[-2].id) == [Reason.REDEEM_WRONG_KEY]
    assert verdicts(node.chain, last.id) == [Reason.VALID]
    assert record(node, root).anchor_txid == new_key.txid


# ---------------------------------------------------------------- R7 bonus


def test_r7_milestone_bonus_pays_for_the_level_set_size() -> None:
    """R7: after LS(M), balance(root(M)) += (R(h) · (|LS(M)| - 1)) // ms_reward_coefficient."""
    params = DEVNET.replace(ms_reward_coefficient=7)
    node = Node(params)
    a_root, *_, a_last = node.warm_peer_chain(ALICE)
    b_root, *_, b_last = node.warm_peer_chain(BOB)
    for _ in range(3):
        b_last = node.mine(b_last.id)
    a_before, b_before = record(node, a_root).balance, record(node, b_root).balance
    milestone = node.mine(a_last.id, tip=b_last.id, ms=True)

    level_set = node.chain.level_set(milestone.id)
    assert level_set is not None
    assert len(level_set.order) == 4
    reward = compute_block_reward(node.chain.best_height, params)
    bonus = reward * 3 // 7
    assert bonus != reward * 3 / 7  # the floor matters here
    assert record(node, a_root).balance - a_before == reward + bonus
    assert record(node, b_root).balance - b_before == 3 * reward


# ---------------------------------------------------------------- §9 example, required tests


def test_devnet_example_of_section_9() -> None:
    """§9 example: G_r at LS height 2 (balance 0), B1 at 3 (10^8), B2 at 4 redeems 5·10^7 and is
    the milestone of a 3-block level set: 3.5·10^8; a block 21 level sets late earns no R(h)."""
    node = Node(DEVNET)
    r_secret, r_key = key(7)
    a1 = node.register(ALICE, ms=True)
    g_r = node.register(r_key)
    a2 = node.mine(a1.id, tip=g_r.id, ms=True)
    assert node.chain.ls_height(g_r.id) == 2
    assert record(node, g_r) == RootRecord(0, g_r.txs[0].txid, r_key)

    b1 = node.mine(g_r.id)
    a3 = node.mine(a2.id, tip=b1.id, ms=True)
    assert node.chain.ls_height(b1.id) == 3
    assert record(node, g_r).balance == COIN

    a4 = node.mine(a3.id)
    a5 = node.mine(a4.id)
    x = redemption(g_r.txs[0].txid, r_secret, NEXT_KEY, 5 * COIN // 10, PAYEE, DEVNET)
    b2 = node.mine(b1.id, txs=[x], tip=a5.id, ms=True)
    assert node.chain.best_id == b2.id
    assert node.chain.best_height == 4
    level_set = node.chain.level_set(b2.id)
    assert level_set is not None
    assert level_set.order == (a4.id, a5.id, b2.id)
    assert verdicts(node.chain, b2.id) == [Reason.VALID]
    paid = node.chain.get_utxo(x.txid, 1)
    assert paid is not None
    assert (paid.amount, paid.address) == (5 * COIN // 10, PAYEE)
    assert record(node, g_r) == RootRecord(35 * COIN // 10, x.txid, NEXT_KEY)

    # A block of r ordered 21 level sets above its milestone link (height 4) earns no R(h). It is
    # pulled in through B4 (its child), because D5b forbids a milestone tip-linking it directly.
    b3 = node.mine(b2.id)
    a_last = node.milestones(a5, 23 - 4)[-1]
    assert node.chain.best_height == 23
    b4 = node.mine(b3.id)
    a_last = node.mine(a_last.id, ms=True)
    before = record(node, g_r).balance
    node.mine(a_last.id, tip=b4.id, ms=True)
    assert node.chain.ls_height(b3.id) == 4 + DEVNET.reward_freshness + 1
    assert node.chain.ls_height(b4.id) == 25
    assert record(node, g_r).balance - before == compute_block_reward(25, DEVNET)  # B4's only


def test_redemption_copied_into_a_sibling_block_pays_as_signed() -> None:
    """§9 required: a copy of x ordered first in a sibling B2' (same previous link) pays the payee
    and key x names; the signer's own B2 then fails bad-anchor; the victim's balance drops by the
    claim once and both blocks credit r (R6)."""
    node, root, last = funded_peer_chain()
    claim = 2 * COIN
    x = redemption(record(node, root).anchor_txid, ALICE_SECRET, NEXT_KEY, claim, PAYEE, DEVNET)
    own = node.build(last.id, txs=[x])  # the signer's block, held back
    sibling = node.mine(last.id, txs=[x], tip=root.id)  # a copy on the same previous link
    assert own.id != sibling.id
    helper = node.register(BOB)
    before = record(node, root).balance
    node.mine(helper.id, tip=sibling.id, ms=True)
    first_credit = compute_block_reward(node.chain.best_height, DEVNET)
    assert verdicts(node.chain, sibling.id) == [Reason.VALID]
    assert record(node, root) == RootRecord(before - claim + first_credit, x.txid, NEXT_KEY)

    node.submit(own)
    node.mine(node.chain.best_id, tip=own.id, ms=True)
    second_credit = compute_block_reward(node.chain.best_height, DEVNET)
    assert verdicts(node.chain, own.id) == [Reason.BAD_ANCHOR]
    assert record(node, root) == RootRecord(
        before - claim + first_credit + second_credit, x.txid, NEXT_KEY
    )
    paid = node.chain.get_utxo(x.txid, 1)
    assert paid is not None
    assert (paid.amount, paid.address) == (claim, PAYEE)
    assert [u.amount for u in node.chain.utxos().values() if u.address == PAYEE] == [claim]


def test_redemption_copied_into_another_peer_chain_is_bad_anchor() -> None:
    """R6: a copy of r's redemption in a thief's own peer chain fails R4 (a); r is untouched."""
    node, root, _ = funded_peer_chain()
    rec = record(node, root)
    x = redemption(rec.anchor_txid, ALICE_SECRET, NEXT_KEY, COIN, PAYEE, DEVNET)
    thief_last = node.warm_peer_chain(BOB)[-1]
    stolen = node.mine(thief_last.id, txs=[x], ms=True)

    assert verdicts(node.chain, stolen.id) == [Reason.BAD_ANCHOR]
    assert record(node, root) == rec
    assert node.chain.get_utxo(x.txid, 1) is None


def test_one_signed_redemption_cannot_pay_two_chains_registered_with_one_address() -> None:
    """§9 required, R4 (b): two peer chains registered with the same address share a first anchor;
    the redemption VALID in one is already-redeemed in the other, whose record is untouched."""
    node = Node(DEVNET)
    first = node.warm_peer_chain(ALICE)
    second = node.warm_peer_chain(ALICE)
    assert first[0].txs[0].txid == second[0].txs[0].txid == registration_tx(ALICE).txid
    second_rec = record(node, second[0])
    claim = COIN
    x = redemption(registration_tx(ALICE).txid, ALICE_SECRET, NEXT_KEY, claim, PAYEE, DEVNET)
    paid_block = node.mine(first[-1].id, txs=[x], ms=True)
    replayed = node.mine(second[-1].id, txs=[x], ms=True)

    assert verdicts(node.chain, paid_block.id) == [Reason.VALID]
    assert verdicts(node.chain, replayed.id) == [Reason.ALREADY_REDEEMED]
    credit = compute_block_reward(node.chain.best_height, DEVNET)
    assert record(node, second[0]) == RootRecord(
        second_rec.balance + credit, second_rec.anchor_txid, ALICE
    )
    assert record(node, first[0]).anchor_txid == x.txid
    payouts = [u.amount for u in node.chain.utxos().values() if u.address == PAYEE]
    assert payouts == [claim]
