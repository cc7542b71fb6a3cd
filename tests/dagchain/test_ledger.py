"""Level-set validation and the ledger (PROTOCOL.md §7.3-§7.5, §8.1 S6) on a real Chain.

Every block is real (devnet PoW, or sim PoW where sortition must bite); verdicts are read from the
stored level set of the best chain, balances and UTXOs from the chain's API.
"""

import pytest

from dagchain.blocks import Block
from dagchain.errors import InvalidTransaction, Reason
from dagchain.genesis import FAUCET_ADDRESS
from dagchain.params import DEVNET, SIM, ConsensusParams
from dagchain.rewards import compute_block_reward
from dagchain.sortition import SortitionWindow, is_tx_assigned, span_floor_ms
from dagchain.transactions import (
    TxIn,
    TxKind,
    make_transaction,
)
from tests.dagchain.builders import registration_tx
from tests.dagchain.chainkit import Node, key, redemption, transfer, verdicts

FAUCET_COINS = 10**14
"""Amount of each devnet/sim faucet output (§10 Genesis)."""
ALICE_SECRET, ALICE = key(2)
BOB_SECRET, BOB = key(3)
CAROL_SECRET, CAROL = key(4)


def warm_node(params: ConsensusParams = DEVNET) -> tuple[Node, Block]:
    """A node with one peer chain of K milestone blocks: its next block is past warm-up (V4)."""
    node = Node(params)
    return node, node.warm_peer_chain(ALICE)[-1]


# ---------------------------------------------------------------- V1 spendability


def test_v1_same_block_chaining_is_valid() -> None:
    """V1: a tx may spend an output of an earlier tx of the same block (index order)."""
    node, last = warm_node()
    pay = transfer([(node.genesis, 0)], [(FAUCET_COINS, BOB)], DEVNET, assigned_to=[last.id])
    onward = transfer(
        [(pay.txid, 0)], [(FAUCET_COINS, CAROL)], DEVNET, BOB_SECRET, assigned_to=[last.id]
    )
    block = node.mine(last.id, txs=[pay, onward], ms=True)

    assert verdicts(node.chain, block.id) == [Reason.VALID, Reason.VALID]
    assert node.chain.get_utxo(pay.txid, 0) is None
    utxo = node.chain.get_utxo(onward.txid, 0)
    assert utxo is not None
    assert (utxo.amount, utxo.address, utxo.height) == (FAUCET_COINS, CAROL, node.chain.best_height)


def test_v1_spending_a_later_tx_of_the_same_block_is_missing_input() -> None:
    """V1 "never by anything earlier": the spender placed before its parent is missing-input."""
    node, last = warm_node()
    pay = transfer([(node.genesis, 0)], [(FAUCET_COINS, BOB)], DEVNET, assigned_to=[last.id])
    onward = transfer(
        [(pay.txid, 0)], [(FAUCET_COINS, CAROL)], DEVNET, BOB_SECRET, assigned_to=[last.id]
    )
    block = node.mine(last.id, txs=[onward, pay], ms=True)

    assert verdicts(node.chain, block.id) == [Reason.MISSING_INPUT, Reason.VALID]
    assert node.chain.get_utxo(pay.txid, 0) is not None
    assert node.chain.get_utxo(onward.txid, 0) is None


def test_v1_output_is_spendable_by_a_later_block_of_the_same_level_set() -> None:
    """V1: a VALID output is spendable by later blocks of the same level set."""
    node, last = warm_node()
    pay = transfer([(node.genesis, 0)], [(FAUCET_COINS, BOB)], DEVNET, assigned_to=[last.id])
    first = node.mine(last.id, txs=[pay])
    onward = transfer(
        [(pay.txid, 0)], [(FAUCET_COINS, CAROL)], DEVNET, BOB_SECRET, assigned_to=[first.id]
    )
    second = node.mine(first.id, txs=[onward], ms=True)

    assert node.chain.ls_height(first.id) == node.chain.ls_height(second.id)
    assert verdicts(node.chain, first.id) == [Reason.VALID]
    assert verdicts(node.chain, second.id) == [Reason.VALID]


# ---------------------------------------------------------------- V2 conflicts


def test_v2_first_spend_in_total_order_wins_not_first_arrival() -> None:
    """V2: of two spends of one outpoint the first in total order (L3) wins; the later one is
    INVALID double-spend and its block stays in the level set."""
    node = Node(DEVNET)
    a_last = node.warm_peer_chain(ALICE)[-1]
    b_last = node.warm_peer_chain(BOB)[-1]
    to_bob = transfer([(node.genesis, 7)], [(FAUCET_COINS, BOB)], DEVNET, assigned_to=[a_last.id])
    to_carol = transfer(
        [(node.genesis, 7)], [(FAUCET_COINS, CAROL)], DEVNET, assigned_to=[b_last.id]
    )
    # b_blk arrives first, but M's previous link (a_blk) comes before its tip link in L2 order.
    b_blk = node.mine(b_last.id, txs=[to_carol])
    a_blk = node.mine(a_last.id, txs=[to_bob])
    m = node.mine(a_blk.id, tip=b_blk.id, ms=True)

    level_set = node.chain.level_set(m.id)
    assert level_set is not None
    assert level_set.order.index(a_blk.id) < level_set.order.index(b_blk.id)
    assert verdicts(node.chain, a_blk.id) == [Reason.VALID]
    assert verdicts(node.chain, b_blk.id) == [Reason.DOUBLE_SPEND]
    assert node.chain.ls_height(b_blk.id) == node.chain.best_height
    assert node.chain.get_utxo(to_bob.txid, 0) is not None
    assert node.chain.get_utxo(to_carol.txid, 0) is None


def test_v2_a_valid_tx_repeated_in_a_later_block_is_a_double_spend() -> None:
    """V2: a tx already VALID that appears again in a later block is a later spend."""
    node, last = warm_node()
    pay = transfer([(node.genesis, 3)], [(FAUCET_COINS - 10, BOB)], DEVNET, assigned_to=[last.id])
    # S5 (devnet c = 1/16): the repeat's block, on ``first``, must be assigned the tx too.
    first = node.mine(last.id, txs=[pay], ms=True, child_carries=[pay.txid])
    root = node.chain.get_root(node.sent[0].id)
    utxos = node.chain.utxos()
    again = node.mine(first.id, txs=[pay], ms=True)

    assert verdicts(node.chain, first.id) == [Reason.VALID]
    assert verdicts(node.chain, again.id) == [Reason.DOUBLE_SPEND]
    assert node.chain.utxos() == utxos
    assert set(node.chain.blocks_with_tx(pay.txid)) == {first.id, again.id}
    after = node.chain.get_root(node.sent[0].id)
    assert root is not None
    assert after is not None
    # The repeat earns its block reward but no second fee.
    assert after.balance - root.balance == compute_block_reward(node.chain.best_height, DEVNET)


# ---------------------------------------------------------------- V4 warm-up


SHARE_DEVNET = DEVNET.replace(sortition_weighting="share")
"""Devnet (c = 1/16) under ``share``: v2 keeps S1's warm-up for that weighting only (§8.1)."""


def test_v4_txs_of_a_peer_chain_up_to_height_k_are_warmup() -> None:
    """V4/S1 (v2: ``share`` weighting): txs of a registration block and of blocks with m <= K are
    INVALID warm-up (and spend nothing); the first block with m = K + 1 carries the same tx
    VALIDly."""
    params = SHARE_DEVNET
    node = Node(params)
    pay = transfer([(node.genesis, 0)], [(FAUCET_COINS, BOB)], params)
    block = node.register(ALICE, txs=[pay], ms=True)
    assert verdicts(node.chain, block.id) == [Reason.VALID, Reason.WARMUP]
    for m in range(2, params.sortition_warmup + 1):
        block = node.mine(block.id, txs=[pay], ms=True)
        meta = node.chain.get_meta(block.id)
        assert meta is not None
        assert meta.peer_height == m
        assert verdicts(node.chain, block.id) == [Reason.WARMUP]
        assert node.chain.get_utxo(node.genesis, 0) is not None
    block = node.mine(block.id, txs=[pay], ms=True)
    assert verdicts(node.chain, block.id) == [Reason.VALID]
    assert node.chain.get_utxo(node.genesis, 0) is None


# ---------------------------------------------------------------- V5 sortition and S6 freshness

SORTITION_PARAMS = SIM.replace(
    sortition_warmup=2, sortition_weighting="share", sortition_c_num=1, sortition_c_den=4
)
"""Sim with share weighting (v2's default is uniform, §8.1), c = 1/4 and a short warm-up so a peer
chain can carry txs at m = 3. S2's v2 floor is K · τ / b = 2 · 10,000 / 80 = 250 ms, so a chain
that mined its two blocks within 10 ms has ŝ = 1 at the genesis hash rate (8 blocks/s) and each tx
is eligible with probability c · ŝ = 1/4."""


def test_v5_sortition_verdicts_follow_the_assignment_rule() -> None:
    """V5: with a realistic c some txs are not assigned to the block's peer chain; each verdict is
    exactly S1-S5 for that block's previous link, window and milestone link's hash rate."""
    params = SORTITION_PARAMS
    node = Node(params)
    first = node.register(ALICE, ms=True)
    # A 10 ms span over the window is raised to S2's floor (v2): 250 ms.
    second = node.mine(first.id, ms=True, timestamp_ms=params.genesis_timestamp_ms + 10)
    txs = [transfer([(node.genesis, i)], [(FAUCET_COINS, BOB)], params) for i in range(24)]
    block = node.mine(second.id, txs=txs, ms=True)

    meta = node.chain.get_meta(block.id)
    link = node.chain.get_snapshot(block.header.milestone_link)
    assert meta is not None
    assert link is not None
    assert link.hash_rate > 0
    assert meta.span_ms == span_floor_ms(params) == 250
    window = SortitionWindow(meta.peer_height, meta.work, meta.span_ms)
    assigned = [
        is_tx_assigned(tx.txid, block.header.previous_link, window, link.hash_rate, params)
        for tx in txs
    ]
    expected = [Reason.VALID if ok else Reason.SORTITION for ok in assigned]
    assert verdicts(node.chain, block.id) == expected
    assert Reason.VALID in expected
    assert Reason.SORTITION in expected
    for tx, ok in zip(txs, assigned, strict=True):
        assert (node.chain.get_utxo(tx.txid, 0) is not None) == ok


FRESHNESS_PARAMS = DEVNET.replace(sortition_freshness=2)


@pytest.mark.parametrize(
    ("distance", "expected"),
    [
        (FRESHNESS_PARAMS.sortition_freshness, Reason.VALID),
        (FRESHNESS_PARAMS.sortition_freshness + 1, Reason.SORTITION),
    ],
)
def test_s6_block_ordered_too_long_after_its_milestone_link_loses_its_txs(
    distance: int, expected: Reason
) -> None:
    """S6: LS height(B) - height(milestone link) > sortition_freshness → INVALID sortition."""
    node = Node(FRESHNESS_PARAMS)
    a_last = node.warm_peer_chain(ALICE)[-1]
    b_last = node.warm_peer_chain(BOB)[-1]
    pay = transfer(
        [(node.genesis, 0)], [(FAUCET_COINS, CAROL)], FRESHNESS_PARAMS, assigned_to=[b_last.id]
    )
    late = node.mine(b_last.id, txs=[pay])
    link_height = node.chain.best_height
    a_last = node.milestones(a_last, distance - 1)[-1]
    ordering = node.mine(a_last.id, tip=late.id, ms=True)

    assert node.chain.best_id == ordering.id
    assert node.chain.ls_height(late.id) == link_height + distance
    assert verdicts(node.chain, late.id) == [expected]
    assert (node.chain.get_utxo(pay.txid, 0) is not None) == (expected == Reason.VALID)


# ---------------------------------------------------------------- V6, V7, V8 and V3 fees


def test_v6_missing_input_and_double_spend_are_told_apart() -> None:
    """V6: an outpoint this chain never had is missing-input; one it already spent is
    double-spend."""
    node, last = warm_node()
    pay = transfer([(node.genesis, 0)], [(FAUCET_COINS, BOB)], DEVNET, assigned_to=[last.id])
    last = node.mine(last.id, txs=[pay], ms=True)
    on = [last.id]
    respend = transfer([(node.genesis, 0)], [(FAUCET_COINS, CAROL)], DEVNET, assigned_to=on)
    unknown = transfer(
        [(node.genesis, DEVNET.faucet_outputs)], [(1, CAROL)], DEVNET, assigned_to=on
    )
    block = node.mine(last.id, txs=[unknown, respend], ms=True)

    assert verdicts(node.chain, block.id) == [Reason.MISSING_INPUT, Reason.DOUBLE_SPEND]


def test_v7_spend_with_a_key_that_is_not_the_outputs_address_is_wrong_key() -> None:
    """V7: H(input pubkey) must equal the spent output's address."""
    node, last = warm_node()
    theft = transfer(
        [(node.genesis, 5)], [(FAUCET_COINS, BOB)], DEVNET, BOB_SECRET, assigned_to=[last.id]
    )
    block = node.mine(last.id, txs=[theft], ms=True)

    assert verdicts(node.chain, block.id) == [Reason.WRONG_KEY]
    assert node.chain.get_utxo(node.genesis, 5) is not None


def test_v8_outputs_above_inputs_are_overspend() -> None:
    """V8: Σ inputs ≥ Σ outputs, else overspend; nothing is spent or created."""
    node, last = warm_node()
    on = [last.id]
    greedy = transfer([(node.genesis, 6)], [(FAUCET_COINS + 1, BOB)], DEVNET, assigned_to=on)
    exact = transfer([(node.genesis, 8)], [(FAUCET_COINS, BOB)], DEVNET, assigned_to=on)
    block = node.mine(last.id, txs=[greedy, exact], ms=True)

    assert verdicts(node.chain, block.id) == [Reason.OVERSPEND, Reason.VALID]
    assert node.chain.get_utxo(node.genesis, 6) is not None
    assert node.chain.get_utxo(greedy.txid, 0) is None


def test_v3_fees_of_valid_transfers_are_credited_to_the_blocks_root() -> None:
    """V3/R2: fee = Σ inputs - Σ outputs of each VALID TRANSFER, added with R(h) to the balance
    of root(B); an INVALID tx adds no fee."""
    node, last = warm_node()
    root = node.sent[0].id
    before = node.chain.get_root(root)
    assert before is not None
    fee_a, fee_b = 1_234, 5_000_000
    on = [last.id]
    txs = [
        transfer([(node.genesis, 0)], [(FAUCET_COINS - fee_a, BOB)], DEVNET, assigned_to=on),
        transfer(
            [(node.genesis, 1), (node.genesis, 2)],
            [(2 * FAUCET_COINS - fee_b, BOB)],
            DEVNET,
            assigned_to=on,
        ),
        transfer([(node.genesis, 0)], [(1, CAROL)], DEVNET, assigned_to=on),  # double-spend
    ]
    # The block is its own milestone with |LS| = 1, so no bonus mixes in (R7).
    block = node.mine(last.id, txs=txs, ms=True)

    assert verdicts(node.chain, block.id) == [Reason.VALID, Reason.VALID, Reason.DOUBLE_SPEND]
    after = node.chain.get_root(root)
    assert after is not None
    reward = compute_block_reward(node.chain.best_height, DEVNET)
    assert after.balance - before.balance == reward + fee_a + fee_b


# ---------------------------------------------------------------- §7.5 mempool admission


def test_mempool_admission_returns_the_fee_of_a_good_transfer() -> None:
    """§7.5: a TRANSFER of unspent best-chain outputs with the right key is admitted."""
    node = Node(DEVNET)
    tx = transfer([(node.genesis, 0), (node.genesis, 1)], [(FAUCET_COINS, BOB)], DEVNET)
    assert node.chain.check_transaction(tx) == FAUCET_COINS


def test_mempool_refuses_registration_and_redemption_t7() -> None:
    """T7: a REGISTRATION or REDEMPTION is never accepted into the mempool."""
    node = Node(DEVNET)
    redeem = redemption(bytes(32), ALICE_SECRET, ALICE, 1, BOB, DEVNET)
    for tx in (registration_tx(ALICE), redeem):
        with pytest.raises(InvalidTransaction) as err:
            node.chain.check_transaction(tx)
        assert err.value.rule == "T7"


def test_mempool_refuses_spent_and_missing_inputs_v6() -> None:
    """§7.5: every input must be unspent in the best chain's ledger (no unconfirmed parents)."""
    node, last = warm_node()
    pay = transfer([(node.genesis, 0)], [(FAUCET_COINS, BOB)], DEVNET, assigned_to=[last.id])
    node.mine(last.id, txs=[pay], ms=True)
    spent = transfer([(node.genesis, 0)], [(FAUCET_COINS, CAROL)], DEVNET)
    missing = transfer([(node.genesis, DEVNET.faucet_outputs)], [(1, CAROL)], DEVNET)
    unconfirmed_parent = transfer([(spent.txid, 0)], [(1, BOB)], DEVNET, secret=CAROL_SECRET)
    for tx, message in (
        (spent, "spent-input"),
        (missing, "missing-input"),
        (unconfirmed_parent, "missing-input"),
    ):
        with pytest.raises(InvalidTransaction) as err:
            node.chain.check_transaction(tx)
        assert (err.value.rule, err.value.message) == ("V6", message)


def test_mempool_refuses_wrong_key_v7_and_overspend_v8() -> None:
    """§7.5: V7 and V8 are checked against the best chain before admission."""
    node = Node(DEVNET)
    wrong_key = transfer([(node.genesis, 0)], [(1, BOB)], DEVNET, secret=BOB_SECRET)
    overspend = transfer([(node.genesis, 0)], [(FAUCET_COINS + 1, BOB)], DEVNET)
    for tx, rule in ((wrong_key, "V7"), (overspend, "V8")):
        with pytest.raises(InvalidTransaction) as err:
            node.chain.check_transaction(tx)
        assert err.value.rule == rule


def test_mempool_refuses_a_bad_signature_t6() -> None:
    """T6: a signature that does not verify over this tx's sighash is refused (checked last)."""
    node = Node(DEVNET)
    honest = transfer([(node.genesis, 0)], [(FAUCET_COINS, BOB)], DEVNET)
    other = transfer([(node.genesis, 0)], [(FAUCET_COINS, CAROL)], DEVNET)
    good = honest.inputs[0]
    forged = make_transaction(
        TxKind.TRANSFER,
        [TxIn(good.txid, good.out_index, good.pubkey, other.inputs[0].signature)],
        honest.outputs,
    )
    with pytest.raises(InvalidTransaction) as err:
        node.chain.check_transaction(forged)
    assert err.value.rule == "T6"


def test_mempool_admission_changes_no_state() -> None:
    """§7.5 is policy: checking a tx writes nothing to the chain's store."""
    node = Node(DEVNET)
    before = node.store.snapshot()
    node.chain.check_transaction(transfer([(node.genesis, 0)], [(1, FAUCET_ADDRESS)], DEVNET))
    assert node.store.snapshot() == before
