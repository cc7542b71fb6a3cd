"""The mempool policy (PROTOCOL.md §7.5) and block-template selection (§3.4, sortition §8.1)."""

import sys
from collections.abc import Sequence
from fractions import Fraction
from math import gcd

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dagchain.blocks import BlockHeader, compute_tips_root, make_block
from dagchain.crypto import hash32
from dagchain.genesis import FAUCET_ADDRESS, FAUCET_SECRET, genesis_block
from dagchain.mempool import (
    Mempool,
    MempoolConflict,
    MempoolDuplicate,
    MempoolEntry,
    MempoolFull,
    Outpoint,
    SharedSpenders,
)
from dagchain.params import DEVNET, SIM, ConsensusParams, genesis_blk_target
from dagchain.pow import compute_work
from dagchain.sortition import SortitionWindow, is_tx_assigned
from dagchain.transactions import (
    Transaction,
    TxIn,
    TxKind,
    TxOut,
    make_transaction,
    sign_transaction,
)
from dagchain.types import Address, BlockId, TxId

NOW = 1_767_312_000_000
PAYEE = Address(hash32(b"payee"))
OPEN_PARAMS = DEVNET.replace(sortition_enabled=False)
"""Every tx eligible past warm-up (the simulator's ``chain.sortition = false``)."""
OPEN_WINDOW = SortitionWindow(peer_height=DEVNET.sortition_warmup + 1, work=0, span_ms=0)
PREV = BlockId(hash32(b"previous link"))
SIM_GENESIS = genesis_block(SIM)


def coin(n: int) -> Outpoint:
    """A distinct made-up outpoint per n (the ledger checks are the caller's, not the pool's)."""
    return (hash32(n.to_bytes(4, "little")), 0)


def transfer(n: int, outputs: int = 1, spends: Sequence[Outpoint] = ()) -> Transaction:
    """An unsigned TRANSFER spending ``spends`` (default ``coin(n)``); each output adds 38 bytes."""
    inputs = [TxIn(TxId(t), i, bytes(32), bytes(64)) for t, i in (spends or [coin(n)])]
    return make_transaction(
        TxKind.TRANSFER, inputs, [TxOut(1_000 + n + j, PAYEE) for j in range(outputs)]
    )


def faucet_spend(index: int, amount: int, params: ConsensusParams = SIM) -> Transaction:
    """A real signed TRANSFER of genesis faucet output ``index`` (§10 Genesis)."""
    return sign_transaction(
        TxKind.TRANSFER,
        [(TxId(SIM_GENESIS.id), index)],
        [TxOut(amount, FAUCET_ADDRESS)],
        [FAUCET_SECRET],
        params,
    )


def snapshot(pool: Mempool) -> tuple[list[TxId], int, list[MempoolEntry | None]]:
    order = pool.txids_by_fee_rate()
    return order, pool.total_bytes, [pool.get(t) for t in order]


def rate(entry: MempoolEntry) -> Fraction:
    return Fraction(entry.fee, entry.size)


def open_template(pool: Mempool, max_txs: int = 1_000, max_bytes: int = 10**9) -> list[TxId]:
    txs = pool.select_for_template(PREV, OPEN_WINDOW, 0, max_txs, max_bytes)
    return [tx.txid for tx in txs]


# ---------------------------------------------------------------- fee-rate order


def test_order_is_fee_per_byte_then_arrival() -> None:
    """§3.4 "best fee per byte first": a big tx with a larger fee can rank below a small one."""
    small, big, tie, cheap = transfer(0), transfer(1, outputs=6), transfer(2), transfer(3)
    pool = Mempool(SIM)
    pool.add(cheap, 0, NOW)
    pool.add(big, 6 * len(big.raw), NOW)  # 6 per byte, the largest fee
    pool.add(small, 10 * len(small.raw), NOW)  # 10 per byte
    pool.add(tie, 6 * len(tie.raw), NOW)  # 6 per byte, like big but later
    assert pool.txids_by_fee_rate() == [small.txid, big.txid, tie.txid, cheap.txid]
    assert pool.txids_by_fee_rate(limit=2) == [small.txid, big.txid]


def test_fee_rates_are_compared_exactly_not_as_floats() -> None:
    """Rates 10^17 + 1/179 and 10^17 + 1/217 are equal as floats; the smaller size must win."""
    a, b = transfer(0), transfer(1, outputs=2)
    assert len(a.raw) < len(b.raw)
    fee_a, fee_b = 10**17 * len(a.raw) + 1, 10**17 * len(b.raw) + 1
    assert fee_a / len(a.raw) == fee_b / len(b.raw)  # floats cannot tell them apart
    pool = Mempool(SIM)
    pool.add(b, fee_b, NOW)
    pool.add(a, fee_a, NOW)
    assert pool.txids_by_fee_rate() == [a.txid, b.txid]


def closest_fees(s1: int, s2: int, sign: int, m: int) -> tuple[int, int]:
    """Fees with ``f1/s1 - f2/s2 == sign * gcd(s1, s2) / (s1 * s2)``: the closest distinct rates."""
    g = gcd(s1, s2)
    a, b = s1 // g, s2 // g
    f1 = (sign * pow(b, -1, a)) % a + m * a if a > 1 else m
    return f1, (f1 * b - sign) // a


@pytest.mark.property
@given(
    max_bytes=st.integers(1, 2**27),
    offsets=st.tuples(st.integers(0, 2**27), st.integers(0, 2**27)),
    sign=st.sampled_from([-1, 0, 1]),
    m=st.integers(1, 2**20),
)
def test_rate_key_orders_exactly_like_fractions(
    max_bytes: int, offsets: tuple[int, int], sign: int, m: int
) -> None:
    """The integer key ``fee * M // size`` never merges or swaps two rates (module docstring).

    The two rates are equal or as close as two distinct rates of these sizes can be, and the
    sizes lean towards ``max_bytes``: that is where a rounded key would go wrong.
    """
    s1, s2 = (max(1, max_bytes - o) for o in offsets)
    f1, f2 = closest_fees(s1, s2, sign, m)
    pool = Mempool(SIM, max_bytes=max_bytes)
    k1, k2 = pool._rate_key(f1, s1), pool._rate_key(f2, s2)
    exact = Fraction(f1, s1) - Fraction(f2, s2)
    assert (exact > 0) - (exact < 0) == sign
    assert (k1 > k2) - (k1 < k2) == (exact > 0) - (exact < 0)


# ---------------------------------------------------------------- bounds and eviction


def test_default_bounds_come_from_params() -> None:
    pool = Mempool(DEVNET)
    assert (pool.max_txs, pool.max_bytes, pool.expiry_ms) == (5_000, 8 * 1024 * 1024, 600_000)


def test_full_pool_evicts_lowest_rate_newest_first() -> None:
    """§7.5 bound ``mempool_max_txs``: the newer of two equal lowest rates goes first."""
    old_low, new_low, high, incoming = transfer(0), transfer(1), transfer(2), transfer(3)
    pool = Mempool(SIM, max_txs=3)
    pool.add(old_low, 179, NOW)
    pool.add(new_low, 179, NOW + 1)
    pool.add(high, 179 * 5, NOW + 2)
    assert pool.add(incoming, 179 * 3, NOW + 3) == [new_low.txid]
    assert pool.txids_by_fee_rate() == [high.txid, incoming.txid, old_low.txid]


def test_byte_cap_evicts_only_as_much_as_needed() -> None:
    """§7.5 bound ``mempool_max_bytes``: one 179-byte victim frees enough for a 179-byte tx."""
    txs = [transfer(n) for n in range(4)]
    pool = Mempool(SIM, max_bytes=3 * 179 + 100)
    for n, tx in enumerate(txs[:3]):
        pool.add(tx, (n + 1) * 179, NOW)
    assert pool.add(txs[3], 10 * 179, NOW) == [txs[0].txid]
    assert pool.total_bytes == 3 * 179
    assert len(pool) == 3


def test_big_tx_evicts_several_small_ones() -> None:
    small = [transfer(n) for n in range(3)]
    big = transfer(9, outputs=4)  # 293 bytes: two 179-byte victims are needed
    pool = Mempool(SIM, max_bytes=3 * 179)
    for n, tx in enumerate(small):
        pool.add(tx, (n + 1) * 179, NOW)
    assert pool.add(big, 100 * len(big.raw), NOW) == [small[0].txid, small[1].txid]
    assert pool.total_bytes == 179 + len(big.raw)


def test_full_pool_refuses_equal_fee_rate_and_changes_nothing() -> None:
    """Not strictly higher than the lowest rate: MempoolFull, and the pool is untouched."""
    pool = Mempool(SIM, max_txs=2)
    pool.add(transfer(0), 2 * 179, NOW)
    pool.add(transfer(1), 5 * 179, NOW)
    before = snapshot(pool)
    with pytest.raises(MempoolFull) as refused:
        pool.add(transfer(2), 2 * 179, NOW)
    assert refused.value.code == "full"
    assert refused.value.txid == transfer(2).txid
    assert snapshot(pool) == before


def test_refused_when_room_needs_evicting_a_better_tx() -> None:
    """Making room may not evict a tx of an equal or higher rate, even if a cheaper one exists."""
    cheap, better, big = transfer(0), transfer(1, outputs=3), transfer(2, outputs=6)
    pool = Mempool(SIM, max_bytes=len(cheap.raw) + len(better.raw))
    pool.add(cheap, 0, NOW)
    pool.add(better, 9 * len(better.raw), NOW)
    before = snapshot(pool)
    with pytest.raises(MempoolFull):
        pool.add(big, 5 * len(big.raw), NOW)  # would need both cheap and better to go
    assert snapshot(pool) == before


def test_tx_larger_than_the_byte_cap_is_refused() -> None:
    pool = Mempool(SIM, max_bytes=200)
    big = transfer(0, outputs=2)  # 217 bytes
    with pytest.raises(MempoolFull):
        pool.add(big, 10**9, NOW)
    assert len(pool) == 0
    assert pool.total_bytes == 0


def test_eviction_floor_keeps_cheaper_txs_out_of_freed_room_until_half_empty() -> None:
    """Room left by a large victim is not refilled below the evicted rate; draining lifts it."""
    big_cheap, mid, top, low = transfer(0, outputs=6), transfer(1), transfer(2), transfer(3)
    pool = Mempool(SIM, max_bytes=len(big_cheap.raw) + len(mid.raw))
    pool.add(big_cheap, 2 * len(big_cheap.raw), NOW)
    pool.add(mid, 7 * len(mid.raw), NOW)
    assert pool.add(top, 9 * len(top.raw), NOW) == [big_cheap.txid]
    floor = pool.min_fee_rate  # a local, so mypy does not narrow the property for good
    assert floor == (2 * len(big_cheap.raw), len(big_cheap.raw))
    with pytest.raises(MempoolFull):
        pool.add(low, 2 * len(low.raw), NOW)  # fits by bytes, but not above the evicted rate
    pool.add(low, 2 * len(low.raw) + 1, NOW)
    assert pool.remove(mid.txid)
    assert pool.remove(top.txid)
    assert pool.min_fee_rate is None
    pool.add(transfer(4), 0, NOW)


@pytest.mark.property
@given(
    max_txs=st.integers(1, 10),
    max_bytes=st.integers(150, 800),
    specs=st.lists(
        st.tuples(st.integers(1, 6), st.booleans(), st.integers(0, 8)), min_size=1, max_size=40
    ),
)
# A 369-byte victim leaves 221 free bytes: a cheaper 179-byte tx must not slip in (the floor).
@example(max_txs=10, max_bytes=400, specs=[(6, True, 1), (1, True, 2), (1, True, 0)])
def test_caps_hold_and_only_the_lowest_rates_leave(
    max_txs: int, max_bytes: int, specs: list[tuple[int, bool, int]]
) -> None:
    """§7.5 bounds after any sequence of adds.

    The caps hold; every evicted tx, and every tx refused for its rate, has a fee rate ≤ every
    kept tx's. A tx refused for lack of room among txs of an equal or higher rate (a knapsack
    case: a 5-per-byte tx that only fits by also evicting a 9-per-byte one) may beat a small
    kept tx; for it the test checks that the better txs and it do not fit together.
    """
    pool = Mempool(SIM, max_txs=max_txs, max_bytes=max_bytes)
    evicted: list[Fraction] = []
    refused: list[Fraction] = []
    for n, (outputs, per_byte, value) in enumerate(specs):
        tx = transfer(n, outputs=outputs)
        fee = value * len(tx.raw) if per_byte else value * 37
        new_rate = Fraction(fee, len(tx.raw))
        entries = {t: e for t in pool.txids_by_fee_rate() if (e := pool.get(t)) is not None}
        before = snapshot(pool)
        try:
            victims = pool.add(tx, fee, NOW + n)
        except MempoolFull:
            assert snapshot(pool) == before
            better = [e for e in entries.values() if rate(e) >= new_rate]
            no_room = (
                sum(e.size for e in better) + len(tx.raw) > max_bytes or len(better) >= max_txs
            )
            assert no_room or (evicted and new_rate <= max(evicted))
            if not no_room:
                refused.append(new_rate)
            continue
        assert all(rate(entries[v]) < new_rate for v in victims)
        evicted.extend(rate(entries[v]) for v in victims)
        if victims:  # putting the last victim back would break a cap: no needless eviction
            last = entries[victims[-1]]
            assert pool.total_bytes + last.size > max_bytes or len(pool) + 1 > max_txs
    kept = [e for t in pool.txids_by_fee_rate() if (e := pool.get(t)) is not None]
    assert pool.total_bytes == sum(e.size for e in kept) <= max_bytes
    assert len(pool) == len(kept) <= max_txs
    if kept and (evicted or refused):
        assert max(evicted + refused) <= min(rate(e) for e in kept)
    assert kept == sorted(kept, key=lambda e: (-rate(e), e.seq))


# ---------------------------------------------------------------- conflicts and duplicates


def test_conflicting_tx_is_refused_first_seen_wins() -> None:
    """§7.5: an outpoint spent by a pool tx stays with it, even against a higher fee."""
    first = faucet_spend(0, 10**14 - 1_000)
    rival = faucet_spend(0, 10**14 - 900_000)  # same faucet outpoint, far higher fee
    pool = Mempool(SIM)
    pool.add(first, 1_000, NOW)
    before = snapshot(pool)
    with pytest.raises(MempoolConflict) as refused:
        pool.add(rival, 900_000, NOW + 1)
    assert refused.value.code == "conflict"
    assert refused.value.conflicting_txid == first.txid
    assert snapshot(pool) == before
    assert rival.txid not in pool
    outpoint = (SIM_GENESIS.id, 0)
    assert pool.spender_of(outpoint) == first.txid
    assert pool.conflicts_with([(SIM_GENESIS.id, 5), outpoint]) == first.txid
    assert pool.conflicts_with([(SIM_GENESIS.id, 5)]) is None


def test_duplicate_is_refused_and_the_entry_kept() -> None:
    tx = faucet_spend(1, 10**14 - 500)
    pool = Mempool(SIM)
    pool.add(tx, 500, NOW)
    entry = pool.get(tx.txid)
    with pytest.raises(MempoolDuplicate) as refused:
        pool.add(tx, 10**6, NOW + 5)
    assert refused.value.code == "duplicate"
    assert pool.get(tx.txid) == entry
    assert len(pool) == 1


def test_entry_records_fee_size_arrival_and_sequence() -> None:
    a, b = transfer(0), transfer(1, outputs=2)
    pool = Mempool(SIM)
    pool.add(a, 7, NOW)
    pool.add(b, 9, NOW + 3)
    entry = pool.get(b.txid)
    assert entry is not None
    assert (entry.tx, entry.fee, entry.size, entry.arrival_ms) == (b, 9, len(b.raw), NOW + 3)
    assert entry.seq == 1
    assert entry == MempoolEntry(b, 9, len(b.raw), NOW + 3, entry.order)
    assert pool.total_bytes == len(a.raw) + len(b.raw)
    assert a.txid in pool
    assert pool.get(transfer(2).txid) is None


def test_remove_frees_the_outpoints() -> None:
    first, second = faucet_spend(2, 10**14 - 10), faucet_spend(2, 10**14 - 20)
    pool = Mempool(SIM)
    pool.add(first, 10, NOW)
    assert pool.remove(first.txid)
    assert not pool.remove(first.txid)
    assert pool.spender_of((SIM_GENESIS.id, 2)) is None
    assert (len(pool), pool.total_bytes) == (0, 0)
    pool.add(second, 20, NOW)
    assert pool.spender_of((SIM_GENESIS.id, 2)) == second.txid


def test_remove_confirmed_also_evicts_conflicting_pool_txs() -> None:
    """§7.5 "evict a tx once it or a conflict is VALID"."""
    mine = transfer(0, spends=[coin(1)])
    loser = transfer(1, spends=[coin(2), coin(3)])
    bystander = transfer(2, spends=[coin(4)])
    elsewhere = transfer(3, spends=[coin(3)])  # VALID in a block, never in this pool
    pool = Mempool(SIM)
    for tx in (mine, loser, bystander):
        pool.add(tx, 100, NOW)
    assert pool.remove_confirmed([mine, elsewhere]) == [mine.txid, loser.txid]
    assert pool.txids_by_fee_rate() == [bystander.txid]
    assert pool.spender_of(coin(2)) is None
    assert pool.total_bytes == len(bystander.raw)
    assert pool.remove_confirmed([mine]) == []


# ---------------------------------------------------------------- expiry


def test_expire_drops_only_txs_older_than_expiry() -> None:
    """§7.5 bound ``mempool_expiry``: age > expiry goes, age == expiry stays."""
    old, edge, young = transfer(0), transfer(1), transfer(2)
    pool = Mempool(SIM, expiry_ms=1_000)
    pool.add(young, 1, NOW + 500)
    pool.add(old, 1, NOW)
    pool.add(edge, 1, NOW + 1)
    assert pool.expire(NOW + 1_001) == [old.txid]
    assert pool.expire(NOW + 1_001) == []
    assert pool.txids_by_fee_rate() == [young.txid, edge.txid]
    assert pool.expire(NOW + 10_000) == [edge.txid, young.txid]
    assert len(pool) == 0


def test_readded_tx_expires_by_its_new_arrival() -> None:
    tx = transfer(0)
    pool = Mempool(SIM, expiry_ms=1_000)
    pool.add(tx, 1, NOW)
    pool.remove(tx.txid)
    pool.add(tx, 1, NOW + 800)
    assert pool.expire(NOW + 1_500) == []
    assert pool.expire(NOW + 1_801) == [tx.txid]


def test_many_removals_keep_expiry_working() -> None:
    pool = Mempool(SIM, expiry_ms=10)
    for n in range(300):
        pool.add(transfer(n), n, NOW + n)
        if n % 3:
            pool.remove(transfer(n).txid)
    assert pool.expire(NOW + 299 + 11) == [transfer(n).txid for n in range(0, 300, 3)]


# ---------------------------------------------------------------- templates (§3.4)


def filled_pool(
    count: int, params: ConsensusParams = OPEN_PARAMS
) -> tuple[Mempool, list[Transaction]]:
    """``count`` 179-byte txs; tx n pays n + 1 per byte, so the best is the last added."""
    pool = Mempool(params)
    txs = [transfer(n) for n in range(count)]
    for n, tx in enumerate(txs):
        pool.add(tx, (n + 1) * len(tx.raw), NOW)
    return pool, txs


def test_template_takes_best_fee_rate_first_up_to_max_txs() -> None:
    pool, txs = filled_pool(10)
    assert open_template(pool, max_txs=3) == [txs[9].txid, txs[8].txid, txs[7].txid]
    assert open_template(pool, max_txs=0) == []


def test_template_respects_max_bytes_and_fills_with_smaller_txs() -> None:
    """A tx too big for the bytes left is passed over; a smaller, cheaper one still fits."""
    pool = Mempool(OPEN_PARAMS)
    best, big, small = transfer(0), transfer(1, outputs=6), transfer(2)
    pool.add(best, 10 * len(best.raw), NOW)
    pool.add(big, 9 * len(big.raw), NOW)
    pool.add(small, 1 * len(small.raw), NOW)
    budget = len(best.raw) + len(small.raw) + 10
    chosen = pool.select_for_template(PREV, OPEN_WINDOW, 0, 127, budget)
    assert [tx.txid for tx in chosen] == [best.txid, small.txid]
    assert sum(len(tx.raw) for tx in chosen) <= budget
    assert open_template(pool, max_bytes=len(best.raw) - 1) == []


def test_template_passes_over_skipped_txs() -> None:
    """§3.4: skip a tx while it sits in a pending block."""
    pool, txs = filled_pool(6)
    pending = {txs[5].txid, txs[3].txid}
    chosen = pool.select_for_template(PREV, OPEN_WINDOW, 0, 3, 10**9, pending.__contains__)
    assert [tx.txid for tx in chosen] == [txs[4].txid, txs[2].txid, txs[1].txid]


def test_template_breaks_rate_ties_by_arrival() -> None:
    pool = Mempool(OPEN_PARAMS)
    txs = [transfer(n) for n in range(5)]
    for tx in reversed(txs):
        pool.add(tx, 2 * len(tx.raw), NOW)
    assert open_template(pool) == [tx.txid for tx in reversed(txs)]


def test_template_is_deterministic_and_leaves_the_pool_alone() -> None:
    one, txs = filled_pool(50)
    two = Mempool(OPEN_PARAMS)
    for n, tx in enumerate(txs):
        two.add(tx, (n + 1) * len(tx.raw), NOW + 7)
    before = snapshot(one)
    assert open_template(one, max_txs=20) == open_template(two, max_txs=20)
    assert snapshot(one) == before


def test_warmup_chain_gets_no_txs_under_share() -> None:
    """§8.1 S1 (v2: ``share`` only): a peer chain at height ≤ K carries no txs (here every tx
    passes S5: Hr = 0)."""
    k = DEVNET.sortition_warmup
    share = DEVNET.replace(sortition_weighting="share")
    for params in (share, share.replace(sortition_enabled=False)):
        pool, _ = filled_pool(20, params)
        warm = SortitionWindow(peer_height=k, work=0, span_ms=0)
        ready = SortitionWindow(peer_height=k + 1, work=0, span_ms=0)
        assert pool.select_for_template(PREV, warm, 0, 127, 10**9) == []
        assert len(pool.select_for_template(PREV, ready, 0, 127, 10**9)) == 20


def test_no_warmup_under_uniform() -> None:
    """§8.1 S1 (v2): under ``uniform`` weighting a new peer chain's second block already carries
    what S5 assigns to it: on devnet (c = 1/16, v2.1) the txs with d · 16 < 2^256, the same as a
    block past K; with S5 off, every tx."""
    assert DEVNET.sortition_weighting == "uniform"
    second = SortitionWindow(peer_height=2, work=0, span_ms=0)
    pool, txs = filled_pool(400, DEVNET)
    chosen = {tx.txid for tx in pool.select_for_template(PREV, second, 0, 1_000, 10**9)}
    assigned = {tx.txid for tx in txs if is_tx_assigned(tx.txid, PREV, OPEN_WINDOW, 0, DEVNET)}
    assert chosen == assigned
    assert 10 <= len(chosen) <= 45  # about 25 = 400 / 16
    pool, _ = filled_pool(20, OPEN_PARAMS)
    assert len(pool.select_for_template(PREV, second, 0, 127, 10**9)) == 20


def sim_block_id(nonce: int) -> BlockId:
    """A real SIM block id (a child of genesis); sortition hashes it, PoW does not matter here."""
    header = BlockHeader(
        version=1,
        milestone_link=SIM_GENESIS.id,
        previous_link=SIM_GENESIS.id,
        tips_root=compute_tips_root([SIM_GENESIS.id]),
        merkle_root=bytes(32),
        timestamp_ms=SIM.genesis_timestamp_ms + 1_000,
        target=SIM.genesis_ms_target_bits,
        nonce=nonce,
    )
    return make_block(header, [SIM_GENESIS.id], ()).id


def test_two_previous_links_select_nearly_disjoint_txs() -> None:
    """§8.1 S4/S5 and §8.3 C1: a fresh draw per previous link keeps duplicate inclusions near c·s.

    SIM (K = 100) with share weighting and c = 1/100 (not the v2 default, §8.1) at the genesis
    block target: the network mines 8 blocks/s, so Hr = 8 · work(blk_target) per second; a
    half-share chain took S = 25 s for its last K blocks, so ŝ = 1/2 and each tx is eligible with
    probability c · ŝ = 0.5 %.
    """
    share = SIM.replace(sortition_weighting="share", sortition_c_num=1, sortition_c_den=100)
    block_work = compute_work(genesis_blk_target(SIM))
    hash_rate = 8 * block_work
    window = SortitionWindow(SIM.sortition_warmup + 1, 100 * block_work, 25_000)
    pool = Mempool(share)
    txs = [transfer(n) for n in range(10_000)]
    for n, tx in enumerate(txs):
        pool.add(tx, n, NOW)
    picks = []
    for link in (sim_block_id(1), sim_block_id(2)):
        chosen = pool.select_for_template(link, window, hash_rate, 10_000, 10**9)
        eligible = {
            tx.txid for tx in txs if is_tx_assigned(tx.txid, link, window, hash_rate, share)
        }
        assert {tx.txid for tx in chosen} == eligible
        assert 25 <= len(chosen) <= 100  # about 50 = 0.5 % of 10,000
        picks.append(eligible)
    assert len(picks[0] & picks[1]) <= 5  # about 0.25 expected


# ---------------------------------------------------------------- a spender index shared by pools

_UNIVERSE = [
    transfer(n, outputs=1 + n % 2, spends=[coin(n % 5)] + ([coin((n + 2) % 5)] if n % 3 else []))
    for n in range(10)
]
"""Ten txs over five coins: most pairs conflict, some spend two coins."""


def _add_outcome(pool: Mempool, tx: Transaction, fee: int) -> object:
    try:
        return ("ok", pool.add(tx, fee, NOW + fee))
    except MempoolConflict as err:
        return ("conflict", err.conflicting_txid)
    except (MempoolDuplicate, MempoolFull) as err:
        return (err.code, err.txid)


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "remove", "confirm"]),
            st.integers(0, 2),
            st.integers(0, len(_UNIVERSE) - 1),
            st.integers(1, 50),
        ),
        max_size=60,
    )
)
def test_pools_sharing_a_spender_index_answer_as_with_their_own(
    ops: list[tuple[str, int, int, int]],
) -> None:
    """``SharedSpenders`` (the simulator's ``engine.share_results``): three pools on one index
    give every answer three pools with their own dicts give, through conflicts, evictions
    (``max_txs`` 3), removals and confirmations; the index holds exactly the pooled txs."""
    shared = SharedSpenders()
    own = [Mempool(SIM, max_txs=3) for _ in range(3)]
    mirrored = [Mempool(SIM, max_txs=3, spenders=shared) for _ in range(3)]
    for kind, p, t, fee in ops:
        tx = _UNIVERSE[t]
        results = []
        for pool in (own[p], mirrored[p]):
            if kind == "add":
                results.append(_add_outcome(pool, tx, fee))
            elif kind == "remove":
                results.append(pool.remove(tx.txid))
            else:
                results.append(pool.remove_confirmed([tx]))
        assert results[0] == results[1]
        for a, b in zip(own, mirrored, strict=True):
            assert snapshot(a) == snapshot(b)
            for n in range(5):
                assert a.spender_of(coin(n)) == b.spender_of(coin(n))
            assert a.conflicts_with(tx.outpoints) == b.conflicts_with(tx.outpoints)
    pooled = {txid for pool in mirrored for txid in pool.txids_by_fee_rate()}
    assert len(shared) == len(pooled)
    for txid in mirrored[0].txids_by_fee_rate():
        mirrored[0].remove(txid)
    mirrored[1].clear()
    assert (len(mirrored[1]), mirrored[1].total_bytes) == (0, 0)
    assert len(shared) == len(mirrored[2])
    mirrored[2].clear()
    assert len(shared) == 0
    assert all(shared.candidates(coin(n)) is None for n in range(5))


_MANY = [transfer(100 + n, outputs=1 + n % 3) for n in range(30)]
"""Thirty txs spending distinct coins, of three sizes."""


@given(
    max_txs=st.integers(2, 40),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "add", "remove", "confirm", "expire"]),
            st.integers(0, len(_MANY) - 1),
            st.integers(1, 60),
        ),
        max_size=80,
    ),
)
def test_a_pool_sorted_on_first_use_answers_as_one_kept_sorted(
    max_txs: int, ops: list[tuple[str, int, int]]
) -> None:
    """The fee order is built when first needed (a template, an eviction, a listing): a pool
    nobody read before gives every answer, eviction and template a pool read from the start
    gives, whether the first read comes from a full pool's eviction or at the end."""
    eager, lazy = Mempool(SIM, max_txs=max_txs), Mempool(SIM, max_txs=max_txs)
    assert eager.txids_by_fee_rate() == []  # read once: kept sorted from here on
    for kind, t, fee in ops:
        tx = _MANY[t]
        results = []
        for pool in (eager, lazy):
            if kind == "add":
                results.append(_add_outcome(pool, tx, fee))
            elif kind == "remove":
                results.append(pool.remove(tx.txid))
            elif kind == "confirm":
                results.append(pool.remove_confirmed([tx]))
            else:
                results.append(pool.expire(NOW + pool.expiry_ms + fee))  # arrivals before fee
        assert results[0] == results[1]
        assert (len(eager), eager.total_bytes) == (len(lazy), lazy.total_bytes)
    assert snapshot(lazy) == snapshot(eager)
    assert open_template(lazy, max_txs=7) == open_template(eager, max_txs=7)
    assert lazy.txids_by_fee_rate(3) == eager.txids_by_fee_rate(3)


@given(
    fees=st.lists(st.integers(1, 60), min_size=0, max_size=30),
    doomed=st.sets(st.integers(0, len(_MANY) - 1)),
    sorted_first=st.booleans(),
)
def test_remove_where_drops_as_removing_one_by_one_in_fee_order(
    fees: list[int], doomed: set[int], sorted_first: bool
) -> None:
    """After an undo the node drops the pool txs whose inputs left the UTXO set
    (``pool_policy.follow_reorg``): ``remove_where`` returns them best fee rate first and
    leaves the pool as removing them one by one in that order leaves it (answers, templates,
    the eviction floor), whether or not the pool was read in fee order before; the rest of
    the pool is not sorted for it."""
    plain, batch = Mempool(SIM, max_txs=12), Mempool(SIM, max_txs=12)
    if sorted_first:
        assert plain.txids_by_fee_rate() == batch.txids_by_fee_rate() == []
    for n, fee in enumerate(fees):
        assert _add_outcome(plain, _MANY[n], fee) == _add_outcome(batch, _MANY[n], fee)
    doomed_ids = {_MANY[n].txid for n in doomed}
    expected = [t for t in plain.txids_by_fee_rate() if t in doomed_ids]
    for txid in expected:
        assert plain.remove(txid)
    got = batch.remove_where(lambda tx: tx.txid in doomed_ids)
    assert [tx.txid for tx in got] == expected
    if not sorted_first and len(fees) <= 12:  # nothing read the order (no eviction either)
        assert batch._order is None
    assert snapshot(batch) == snapshot(plain)
    assert (len(batch), batch.total_bytes) == (len(plain), plain.total_bytes)
    assert batch.min_fee_rate == plain.min_fee_rate
    assert all(
        batch.spender_of(coin(100 + n)) == plain.spender_of(coin(100 + n)) for n in range(30)
    )
    assert open_template(batch, max_txs=7) == open_template(plain, max_txs=7)
    assert batch.remove_where(lambda tx: tx.txid in doomed_ids) == []


def test_clear_leaves_a_pool_like_a_new_one() -> None:
    """A restarted node's pool (§12: not durable): empty, numbering and floor reset."""
    pool = Mempool(SIM, max_txs=1)
    pool.add(transfer(0), 5, NOW)
    pool.add(transfer(1), 9, NOW)  # evicts transfer(0) and raises the floor
    floor = pool.min_fee_rate
    assert floor is not None
    pool.clear()
    assert (len(pool), pool.total_bytes, pool.min_fee_rate) == (0, 0, None)
    assert pool.spender_of(coin(1)) is None
    assert pool.expire(NOW + 10**9) == []
    pool.add(transfer(0), 5, NOW)
    entry = pool.get(transfer(0).txid)
    assert entry is not None
    assert entry.seq == 0


def test_a_pool_gives_back_its_tables_once_a_block_took_most_of_it() -> None:
    """A dict never shrinks on deletes: a pool that held 20,000 txs and keeps 100 after a
    confirmation holds tables for 100, not for 20,000 (a daemon after a burst, a simulated
    node between blocks), with the same contents."""
    txs = [transfer(n) for n in range(20_000)]
    pool = Mempool(SIM, max_txs=50_000)
    for n, tx in enumerate(txs):
        pool.add(tx, 1 + n % 7, NOW)
    big = sys.getsizeof(pool._entries)
    removed = pool.remove_confirmed(txs[100:])
    assert len(removed) == 19_900
    assert len(pool) == 100
    assert sys.getsizeof(pool._entries) < big // 50
    assert sys.getsizeof(pool._spenders) < big // 50
    assert all(pool.spender_of(coin(n)) == txs[n].txid for n in range(100))
    assert all(pool.spender_of(coin(n)) is None for n in range(100, 200))
