"""Protocol v2 sortition rules on a real Chain (PROTOCOL.md v2 §8.1 S1, S2, S7; §12 row ``c``).

- S7: only the first child of a previous link in the ordering chain's total order may carry VALID
  txs; a miner who forks its own peer chain gets INVALID(``sortition``) for every tx of the second
  child, and the first-child row ``c`` is part of the milestone delta, so a reorganisation undoes
  it and the other child becomes first when the new branch orders it first.
- S1 (v2): the warm-up applies under ``share`` weighting only; under ``uniform`` a new peer
  chain's second block carries VALID txs.
- S2 (v2): S = max(S_floor, ...) with S_floor = K · τ // b, so a chain mining its K blocks
  inside one milestone gap gets S = S_floor instead of 1.

Blocks are real PoW (SIM parameters) built by ``tests.dagchain.chainkit``.
"""

from dagchain.blocks import Block
from dagchain.chain import Chain
from dagchain.errors import Reason
from dagchain.params import DEVNET, SIM, ConsensusParams
from dagchain.pow import compute_work, decode_compact
from dagchain.sortition import in_warmup, is_tx_assigned, span_floor_ms
from dagchain.storage import schema as S
from dagchain.storage.memory import MemoryStore
from dagchain.transactions import Transaction
from dagchain.types import BlockId
from tests.dagchain.chainkit import Node, key, transfer, verdicts

ALL_ASSIGNED = SIM.replace(sortition_c_num=1, sortition_c_den=1)
"""Uniform weighting with c = 1: every tx passes S5, so only S6/S7 can make it INVALID."""


def faucet_spend(node: Node, index: int, fee: int = 1_000, to: int = 900) -> Transaction:
    _, address = key(to)
    return transfer(
        [(node.genesis, index)], [(node.params.faucet_amount - fee, address)], node.params
    )


def first_child_row(chain: Chain, previous_link: bytes) -> BlockId | None:
    """The stored §12 ``c`` row of a previous link (None if absent)."""
    store = chain.store
    assert isinstance(store, MemoryStore)
    key_bytes = S.P_FIRST_CHILD + previous_link
    raw = store.snapshot().get(key_bytes)
    if raw is None:
        return None
    (child,) = S.decode_row(raw, key_bytes)
    return BlockId(child)


def c_rows(chain: Chain) -> dict[bytes, bytes]:
    store = chain.store
    assert isinstance(store, MemoryStore)
    return {k: v for k, v in store.snapshot().items() if k[:1] == S.P_FIRST_CHILD}


# ------------------------------------------------------------------------------------ S7
def test_s7_second_child_of_a_forked_peer_chain_is_invalid_and_a_reorg_undoes_its_c_row() -> None:
    """S7 (§8.1, §12 row c, A3): peer chain X forks itself: C1 and C2 both have previous link
    P. On branch A, C1 is ordered first: its tx is VALID, C2's (otherwise valid, distinct) tx is
    INVALID(sortition), and c[P] = C1 is stored and recorded in the delta. Invalidating A (F8)
    undoes the milestones: the c row disappears. Branch B orders C2 first: c[P] = C2, C2's tx
    VALID, C1's INVALID(sortition). A heavier A (a reorganisation back) restores c[P] = C1, and a
    heavier B again makes C2 first."""
    node = Node(ALL_ASSIGNED)
    chain = node.chain
    _, addr_y = key(1)
    _, addr_x = key(2)
    _, addr_z = key(3)
    m1 = node.register(addr_y, ms=True)
    rx = node.register(addr_x)
    px = node.mine(rx.id)
    rz = node.register(addr_z)
    m0 = node.mine(m1.id, tips=sorted([px.id, rz.id]), ms=True)
    assert chain.ls_height(px.id) == chain.ls_height(rz.id) == 2
    tx1, tx2 = faucet_spend(node, 0), faucet_spend(node, 1)
    c1 = node.mine(px.id, milestone=m0.id, txs=[tx1])
    c2 = node.mine(px.id, milestone=m0.id, txs=[tx2])
    assert c1.header.previous_link == c2.header.previous_link == px.id
    assert first_child_row(chain, px.id) is None

    def assert_first(
        first: Block, second: Block, first_tx: Transaction, second_tx: Transaction
    ) -> None:
        assert verdicts(chain, first.id) == [Reason.VALID]
        assert verdicts(chain, second.id) == [Reason.SORTITION]
        assert first_child_row(chain, px.id) == first.id
        assert chain.get_utxo(first_tx.txid, 0) is not None
        assert chain.get_utxo(second_tx.txid, 0) is None

    # branch A: C1 in LS(MA), C2 in LS(MA2)
    ma = node.mine(m0.id, tips=[c1.id], ms=True)
    ma2 = node.mine(ma.id, tips=[c2.id], ms=True)
    assert chain.best_id == ma2.id
    assert_first(c1, c2, tx1, tx2)
    delta_a = chain.level_set(ma.id)
    assert delta_a is not None
    assert (px.id, c1.id) in delta_a.first_children
    delta_a2 = chain.level_set(ma2.id)
    assert delta_a2 is not None
    assert all(parent != px.id for parent, _ in delta_a2.first_children)

    # undo A: the c row of P is gone from the store, both children pending again
    chain.invalidate(ma.id)
    assert chain.best_id == m0.id
    assert first_child_row(chain, px.id) is None
    assert chain.ls_height(c1.id) is None
    assert chain.ls_height(c2.id) is None
    rows_at_m0 = c_rows(chain)
    assert S.P_FIRST_CHILD + px.id not in rows_at_m0

    # branch B: C2 first
    mb = node.mine(rz.id, milestone=m0.id, tips=[c2.id], ms=True)
    mb2 = node.mine(mb.id, milestone=mb.id, tips=[c1.id], ms=True)
    assert chain.best_id == mb2.id
    assert_first(c2, c1, tx2, tx1)

    # back to A (reconsidered and made heavier): C1 first again
    chain.reconsider(ma.id)
    ma3 = node.mine(ma2.id, milestone=ma2.id, tips=[m0.id], ms=True)
    assert chain.best_id == ma3.id
    assert_first(c1, c2, tx1, tx2)

    # and B heavier again, by a reorganisation inside on_block: C2 first
    mb3 = node.mine(mb2.id, milestone=mb2.id, tips=[m0.id], ms=True)
    mb4 = node.mine(mb3.id, milestone=mb3.id, tips=[mb.id], ms=True)
    assert chain.best_id == mb4.id
    assert_first(c2, c1, tx2, tx1)

    # a fresh chain fed the final best chain's blocks stores the same c rows (nothing left over)
    fresh = Node(ALL_ASSIGNED)
    for block in node.sent:
        if block.id not in (ma.id, ma2.id, ma3.id):
            fresh.submit(block)
    assert fresh.chain.best_id == mb4.id
    assert c_rows(fresh.chain) == c_rows(chain)


def test_s7_registration_blocks_share_genesis_and_are_not_second_children() -> None:
    """S7, R3: every registration block has previous link genesis; S7 does not apply to them
    (each starts its own peer chain), so a second registration's tx[0] is VALID and no c row
    names genesis."""
    node = Node(ALL_ASSIGNED)
    _, a = key(1)
    _, b = key(2)
    r1 = node.register(a)
    r2 = node.register(b)
    node.mine(node.register(key(3)[1], ms=True).id, tips=sorted([r1.id, r2.id]), ms=True)
    assert verdicts(node.chain, r1.id) == [Reason.VALID]
    assert verdicts(node.chain, r2.id) == [Reason.VALID]
    assert first_child_row(node.chain, node.genesis) is None


# ------------------------------------------------------------------------------------ S1 (v2)
def eligible_spend(node: Node, previous: bytes, milestone: bytes, index: int) -> Transaction:
    """A faucet spend (varying the fee) that passes S1-S5 for a block on ``previous``."""
    chain = node.chain
    window = chain.compute_window(previous, milestone)
    snap = chain.get_snapshot(milestone)
    assert snap is not None
    for fee in range(1, 5_000):
        tx = faucet_spend(node, index, fee=fee)
        if is_tx_assigned(tx.txid, previous, window, snap.hash_rate, node.params):
            return tx
    raise AssertionError("no eligible tx found")


def test_s1_uniform_new_peer_chain_second_block_carries_valid_txs() -> None:
    """S1 (v2), V4, V5: under uniform weighting (SIM default, c = 1/120) there is no warm-up: a
    new peer chain's second block (m = 2 <= K = 100) carries a VALID tx."""
    params = SIM
    assert params.sortition_weighting == "uniform"
    assert params.sortition_warmup == 100
    assert not in_warmup(2, params)
    node = Node(params)
    m1 = node.register(key(1)[1], ms=True)
    rx = node.register(key(2)[1])
    tx = eligible_spend(node, rx.id, m1.id, 0)
    second = node.mine(rx.id, milestone=m1.id, txs=[tx])
    meta = node.chain.get_meta(second.id)
    assert meta is not None
    assert meta.peer_height == 2
    node.mine(m1.id, tips=[second.id], ms=True)
    assert verdicts(node.chain, second.id) == [Reason.VALID]
    assert node.chain.get_utxo(tx.txid, 0) is not None


def test_s1_share_weighting_keeps_the_warmup_for_m_up_to_k() -> None:
    """S1 (v2), V4: under share weighting a block with m <= K carries no VALID tx (warmup), the
    first block with m = K + 1 is past it."""
    params: ConsensusParams = SIM.replace(sortition_weighting="share", sortition_warmup=3)
    assert [in_warmup(m, params) for m in (1, 2, 3, 4)] == [True, True, True, False]
    node = Node(params)
    m1 = node.register(key(1)[1], ms=True)
    previous = node.register(key(2)[1])
    carriers = []
    for m in range(2, 5):
        tx = faucet_spend(node, m)
        previous = node.mine(previous.id, milestone=m1.id, txs=[tx])
        carriers.append(previous)
    node.mine(m1.id, tips=[carriers[-1].id], ms=True)
    assert verdicts(node.chain, carriers[0].id) == [Reason.WARMUP]  # m = 2
    assert verdicts(node.chain, carriers[1].id) == [Reason.WARMUP]  # m = 3 = K
    assert verdicts(node.chain, carriers[2].id) != [Reason.WARMUP]  # m = 4 = K + 1


# ------------------------------------------------------------------------------------ S2 floor
def test_s2_chain_mining_k_blocks_inside_one_milestone_gap_gets_s_floor() -> None:
    """S2 (v2): K = 4 blocks all linking one milestone M, then a fifth block on M: ts(M) -
    ts(milestone_link(b_K)) = 0, so S = S_floor = K · τ // b = 4 · 10,000 // 80 = 500 ms (not 1)
    and W = K · work(block target). A window spanning a later milestone 20 s on gets the real
    span, above the floor. Devnet (b not fixed) has S_floor = 1."""
    params = SIM.replace(sortition_warmup=4)
    floor = span_floor_ms(params)
    assert floor == 4 * params.milestone_interval_ms // params.blocks_per_ms == 500
    assert span_floor_ms(DEVNET) == 1
    node = Node(params)
    chain = node.chain
    m1 = node.register(key(1)[1], ms=True)
    block = node.register(key(2)[1])
    for _ in range(4):
        block = node.mine(block.id, milestone=m1.id)
    window = chain.sortition_window(block.id)
    assert window.peer_height == 5
    assert window.span_ms == floor
    assert window.work == 4 * compute_work(decode_compact(block.header.target), params.max_target)
    assert chain.compute_window(block.id, m1.id).span_ms == floor
    # a milestone 20 s later: the next window spans it
    m1_ts = m1.header.timestamp_ms
    m2 = node.mine(m1.id, tips=[block.id], ms=True, timestamp_ms=m1_ts + 20_000)
    later = node.mine(block.id, milestone=m2.id)
    assert chain.sortition_window(later.id).span_ms == m2.header.timestamp_ms - m1_ts > floor
