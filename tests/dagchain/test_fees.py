"""Fee estimates (dagchain/fees.py) from hand-made histories of level sets and pools."""

from hypothesis import given
from hypothesis import strategies as st

from dagchain.fees import (
    _BOUNDS,
    FEE_WINDOW_MILESTONES,
    MIN_GROUP_TXS,
    ConfirmedTx,
    FeeEstimator,
    _bucket,
    fee_for,
    rate_of,
)
from dagchain.mempool import Mempool
from dagchain.params import SIM
from tests.dagchain.test_mempool import transfer

MS = 1_000
"""Level set h is applied at h * MS; a tx arriving in (h * MS, (h + 1) * MS) is seen at h."""
SIZE = 200
"""Bytes of every made-up confirmed tx."""
LEAD = 12
"""Empty level sets before a made-up history: room for its txs' waits."""


def bound(rate: int) -> int:
    """The lower bound of the bucket that holds ``rate`` (what the estimator answers)."""
    return _BOUNDS[_bucket(rate)]


def confirmed(rate: int, wait: int, height: int, count: int) -> list[ConfirmedTx]:
    """``count`` txs paying ``rate`` milli-units per byte, seen ``wait`` milestones before."""
    fee = rate * SIZE // 1000
    return [ConfirmedTx(fee, SIZE, (height - wait) * MS + 1) for _ in range(count)]


def history(level_sets: list[list[tuple[int, int, int]]], lead: int = LEAD) -> FeeEstimator:
    """An estimator fed ``lead`` empty level sets from height 1, then ``level_sets`` (each a list
    of (rate, wait, count)); the lead lets the txs of the first ones have waited that long."""
    est = FeeEstimator(SIM, best_height=0, now_ms=0)
    for offset, groups in enumerate([[] for _ in range(lead)] + level_sets):
        height = 1 + offset
        txs = [tx for rate, wait, n in groups for tx in confirmed(rate, wait, height, n)]
        est.on_level_set(height, height * MS, txs, blocks=1)
    return est


def test_empty_history_and_pool_give_the_floor_zero() -> None:
    """A new node knows nothing: any fee the pool admits is the answer, and it says so."""
    estimate = FeeEstimator(SIM, best_height=5, now_ms=0).estimate(Mempool(SIM))
    assert estimate.rates == ((1, 0), (3, 0), (10, 0))
    assert (estimate.floor, estimate.txs, estimate.milestones) == (0, 0, 0)


def test_few_samples_fall_back_to_the_floor() -> None:
    """Fewer than MIN_GROUP_TXS samples: even slow ones do not make up an estimate."""
    est = history([[(9_000, 12, MIN_GROUP_TXS - 1)]])
    estimate = est.estimate(Mempool(SIM))
    assert estimate.rates == ((1, 0), (3, 0), (10, 0))
    assert estimate.txs == MIN_GROUP_TXS - 1


def test_uncongested_history_answers_the_lowest_rate_seen() -> None:
    """Every rate was VALID within one milestone: the lowest rate seen suffices for all N."""
    est = history([[(8_000, 1, 10), (2_000, 1, 10), (700, 1, 10)] for _ in range(3)])
    estimate = est.estimate(Mempool(SIM))
    assert estimate.rates == ((1, bound(700)), (3, bound(700)), (10, bound(700)))
    assert (estimate.txs, estimate.milestones) == (90, LEAD + 3)


def test_congestion_separates_the_targets() -> None:
    """High rates went in 1 milestone, middle ones in 3, low ones in 8: one rate per target."""
    est = history([[(50_000, 1, 30), (5_000, 3, 30), (1_000, 8, 30)] for _ in range(4)])
    estimate = est.estimate(Mempool(SIM))
    assert estimate.rates == ((1, bound(50_000)), (3, bound(5_000)), (10, bound(1_000)))


def test_ninety_percent_not_a_majority() -> None:
    """A rate at which 85 % made it within 3 milestones is not enough for 3."""
    est = history([[(5_000, 3, 85), (5_000, 5, 15), (20_000, 1, 40)]])
    assert est.estimate(Mempool(SIM)).rate(3) == bound(20_000)


def test_no_rate_reaching_the_target_is_none() -> None:
    """Nothing the node saw was VALID within 1 milestone: no estimate for 1, not a guess."""
    est = history([[(50_000, 2, 40), (1_000, 2, 40)]])
    estimate = est.estimate(Mempool(SIM))
    assert estimate.rate(1) is None
    assert estimate.rate(3) == bound(1_000)


@given(
    groups=st.lists(
        st.tuples(st.integers(0, 60_000), st.integers(1, 14), st.integers(1, 30)), max_size=8
    ),
    late=st.integers(0, 40),
)
def test_estimates_do_not_fall_as_the_target_shrinks(
    groups: list[tuple[int, int, int]], late: int
) -> None:
    """Paying for 1 milestone never costs less than for 3 or 10; no answer for 3, none for 1."""
    est = history([groups, *[[] for _ in range(12)]])
    pool = Mempool(SIM)
    for n in range(late):  # some waited 13 milestones, some 3
        tx = transfer(n)
        pool.add(tx, fee_for(n * 1_000, len(tx.raw)), (LEAD + 12 + 10 * (n % 2)) * MS + 5)
    estimate = est.estimate(pool)
    rates = [r for _, r in estimate.rates]
    known = [r for r in rates if r is not None]
    assert known == sorted(known, reverse=True)
    assert rates[: len(rates) - len(known)] == [None] * (len(rates) - len(known))


def test_pool_txs_already_late_count_as_failures() -> None:
    """Low-rate txs that sat in the pool past 10 milestones: 10 needs more than they pay."""
    est = history([[(900, 1, 3), (5_000, 1, 30)] for _ in range(15)])
    pool = Mempool(SIM)
    for n in range(40):  # arrived at height 1, best is now LEAD + 15: waited more than 10
        tx = transfer(n)
        pool.add(tx, fee_for(900, len(tx.raw)), 1 * MS + 5)
    estimate = est.estimate(pool)
    assert estimate.rate(10) == bound(5_000)
    assert est.estimate(Mempool(SIM)).rate(10) == bound(900)


def test_queue_ahead_raises_the_estimate() -> None:
    """More txs waiting above the history's rate than N milestones' blocks can carry."""
    est = history([[(1_000, 1, 25)]])  # one block per level set: 127 txs per milestone
    per_milestone = SIM.block_capacity - 1
    pool = Mempool(SIM)
    for n in range(400):  # fresh arrivals (not late), rates 10,000 + n
        tx = transfer(n)
        pool.add(tx, fee_for(10_000 + n, len(tx.raw)), (LEAD + 1) * MS + 5)
    estimate = est.estimate(pool)
    for target in (1, 3):
        rate = estimate.rate(target)
        assert rate is not None
        assert rate > 10_000
        ahead = sum(1 for t in pool.txids_by_fee_rate() if pool_rate(pool, t) >= rate)
        assert per_milestone * target - 10 < ahead <= per_milestone * target  # ties in rate_of
    assert estimate.rate(10) == bound(1_000), "1,270 txs fit in 10 milestones: no queue"


def pool_rate(pool: Mempool, txid: bytes) -> int:
    entry = pool.get(txid)
    assert entry is not None
    return rate_of(entry.fee, entry.size)


def test_eviction_floor_is_the_least_estimate() -> None:
    """After an eviction the pool refuses rates at or below the evicted one: so must we."""
    est = history([[(100, 1, 30)]])
    pool = Mempool(SIM, max_txs=2)
    a, b, c = transfer(0), transfer(1), transfer(2)
    pool.add(a, 1_000, 1 * MS + 5)
    pool.add(b, 5_000, 1 * MS + 5)
    pool.add(c, 5_000, 1 * MS + 6)  # evicts a
    estimate = est.estimate(pool)
    assert estimate.floor > rate_of(1_000, len(a.raw))
    assert all(r is not None and r >= estimate.floor for _, r in estimate.rates)


def test_window_keeps_only_the_last_milestones() -> None:
    """Bounded memory: old level sets leave; their slow txs no longer count."""
    old = [[(1_000, 12, 30)]]
    recent = [[(1_000, 1, 1)] for _ in range(FEE_WINDOW_MILESTONES)]
    estimate = history(old + recent).estimate(Mempool(SIM))
    assert estimate.milestones == FEE_WINDOW_MILESTONES
    assert estimate.txs == FEE_WINDOW_MILESTONES
    assert estimate.rate(10) == bound(1_000)


def test_reorg_replaces_the_undone_level_sets() -> None:
    """A level set applied again at a height drops the records from that height up."""
    est = history([[(1_000, 1, 30)], [(1_000, 1, 30)], [(1_000, 1, 30)]], lead=0)
    est.on_level_set(2, 10 * MS, [], blocks=1)
    estimate = est.estimate(Mempool(SIM))
    assert (estimate.milestones, estimate.txs) == (2, 30)
    assert est.best_height == 2


def test_seen_height_maps_arrival_times_to_the_best_height_then() -> None:
    est = FeeEstimator(SIM, best_height=10, now_ms=10 * MS)
    for height in (11, 12, 13):
        est.on_level_set(height, height * MS, [], blocks=1)
    assert est.seen_height(12 * MS + 500) == 12
    assert est.seen_height(13 * MS) == 13
    assert est.seen_height(5 * MS) == 10  # before the first level set: the start height


@given(
    gaps=st.lists(st.integers(0, 3), min_size=1, max_size=30),
    arrivals=st.lists(st.integers(0, 100), min_size=1, max_size=20),
)
def test_seen_height_is_the_last_level_set_applied_by_then(
    gaps: list[int], arrivals: list[int]
) -> None:
    """Level sets applied at non-decreasing times, several at the same instant: a tx arriving
    at t was seen at the height of the last one applied at or before t."""
    est = FeeEstimator(SIM, best_height=0, now_ms=0)
    applied, now = [], 1
    for height, gap in enumerate(gaps, start=1):
        now += gap
        est.on_level_set(height, now, [], blocks=1)
        applied.append((now, height))
    for t in arrivals:
        before = [height for at, height in applied if at <= t]
        if before:
            assert est.seen_height(t) == before[-1]


@given(rate=st.integers(0, 10**9), size=st.integers(1, 16_384))
def test_fee_for_pays_at_least_the_rate(rate: int, size: int) -> None:
    fee = fee_for(rate, size)
    assert rate_of(fee, size) >= rate
    assert fee * 1000 < rate * size + 1000
