"""Fee estimates (policy, no consensus rule): the fee rate to be VALID within N milestones.

What the node saw is the evidence. For each tx of its own pool that became VALID in a level set of
the best chain, :class:`FeeEstimator` records its fee rate and how many milestones it waited: the
height of that level set minus the best height when the tx entered the pool (0 is counted as 1).
Txs still in the pool that have already waited more than N milestones count as failures for N, so
a rate at which txs sit and expire is not mistaken for a rate that works. Only the last
``window`` level sets are kept, as bucket counts, so memory is bounded whatever the load.

The estimate for N (``FEE_TARGETS``: 1, 3, 10) is the lowest rate r such that, walking the rate
buckets from the highest down in groups of at least ``MIN_GROUP_TXS`` samples, every group down to
the one holding r saw at least 90 % of its txs VALID within N (Bitcoin Core's estimator walks its
buckets the same way). It is then raised to two lower bounds:

- **the floor**: the lowest rate the pool admits now (it accepts any fee, 0 included, until
  eviction sets a floor, ``Mempool.min_fee_rate``, or it is full: then a rate above its lowest);
- **the queue**: a tx is packed best fee per byte first (``Mempool.select_for_template``, §3.4),
  so if the pool holds more txs or bytes at rates above r than N milestones' blocks can carry (the
  window's mean blocks per level set, each ``block_capacity`` - 1 txs and ``max_block_bytes`` -
  512 bytes), r waits longer than N: the estimate must beat the rate at that depth. Capacity, not
  the txs that went VALID, is the yardstick: on a quiet network those measure demand.

With fewer than ``MIN_GROUP_TXS`` samples the history says nothing and the estimate is the floor
(raised by the queue). If even the highest group missed 90 %, no rate the node saw reached N (with
sortition a tx waits for a block it is assigned to, whatever it pays): the estimate is None. The
estimates never decrease as N shrinks, and a None for N makes every shorter target None.

Rates are integers in milli-units per byte (1/1000 of a unit per byte), rounded up, so a tx of
``size`` bytes paying :func:`fee_for` ``(rate, size)`` pays at least that rate.
"""

from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol, final

from dagchain.mempool import Mempool
from dagchain.params import ConsensusParams
from dagchain.template import REDEMPTION_ROOM_BYTES

__all__ = [
    "FEE_TARGETS",
    "FEE_WINDOW_MILESTONES",
    "LIKELIHOOD",
    "MILLI",
    "MIN_GROUP_TXS",
    "ConfirmedTx",
    "FeeEstimate",
    "FeeEstimator",
    "FeeSample",
    "fee_for",
    "rate_of",
]

MILLI = 1000
"""Rates are counted in 1/MILLI units per byte."""
FEE_TARGETS = (1, 3, 10)
"""Milestones within which a tx is to be VALID."""
FEE_WINDOW_MILESTONES = 100
"""Level sets of history kept (the window)."""
MIN_GROUP_TXS = 20
"""Samples a bucket group needs before its success share counts."""
LIKELIHOOD = (9, 10)
"""A group passes when at least 9/10 of its txs were VALID within N."""
_WAIT_CAP = max(FEE_TARGETS) + 1
"""Waits above the largest target are all the same failure: stored as this value."""


def _bucket_bounds() -> tuple[int, ...]:
    """Lower bounds of the rate buckets: 0, 1, 2, ... then about 25 % apart, up to 10**15."""
    bounds = [0]
    while bounds[-1] < 10**15:
        bounds.append(max(bounds[-1] + 1, bounds[-1] * 5 // 4))
    return tuple(bounds)


_BOUNDS = _bucket_bounds()


def rate_of(fee: int, size: int) -> int:
    """A fee rate in milli-units per byte, rounded down (what the tx pays at least)."""
    return fee * MILLI // max(1, size)


def fee_for(rate: int, size: int) -> int:
    """The fee that pays at least ``rate`` milli-units per byte on ``size`` bytes."""
    return -(-rate * size // MILLI)


def _bucket(rate: int) -> int:
    return bisect_right(_BOUNDS, rate) - 1


class FeeSample(Protocol):
    """What the estimator reads of a confirmed pool tx.

    A :class:`ConfirmedTx`, or the pool's own ``MempoolEntry`` (the node passes its entries).
    """

    @property
    def fee(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def arrival_ms(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ConfirmedTx:
    """A tx of the pool that became VALID: its fee, size and pool arrival time."""

    fee: int
    size: int
    arrival_ms: int


@dataclass(frozen=True, slots=True)
class FeeEstimate:
    """Estimates in milli-units per byte by target (None: no rate seen reached it)."""

    rates: tuple[tuple[int, int | None], ...]
    """(N, rate) for each of ``FEE_TARGETS``, ascending N."""
    floor: int
    """The lowest rate the pool admits now."""
    txs: int
    """Confirmed txs in the window (the samples)."""
    milestones: int
    """Level sets in the window."""

    def rate(self, target: int) -> int | None:
        """The estimate for ``target`` milestones.

        Raises:
            KeyError: not one of ``FEE_TARGETS``.
        """
        return dict(self.rates)[target]


@dataclass(frozen=True, slots=True)
class _LevelSetRecord:
    height: int
    applied_ms: int
    samples: Counter[tuple[int, int]]
    """(bucket, capped wait) -> txs."""
    blocks: int


_APPLIED_MS = attrgetter("applied_ms")


@final
class FeeEstimator:
    """Fee statistics of the last ``window`` level sets of one node (module docstring).

    Args:
        params: Network parameters (the block limits of the queue bound).
        best_height: The best height when the node starts (pool arrivals before the first
            level set map to it).
        now_ms: The time of that height.
        window: Level sets kept.
    """

    def __init__(
        self,
        params: ConsensusParams,
        best_height: int,
        now_ms: int,
        window: int = FEE_WINDOW_MILESTONES,
    ) -> None:
        if window < 1:
            raise ValueError("the fee window needs at least one milestone")
        self.window = window
        self._block_txs = max(1, params.block_capacity - 1)
        self._block_bytes = max(1, params.max_block_bytes - REDEMPTION_ROOM_BYTES)
        self._records: deque[_LevelSetRecord] = deque(maxlen=window)
        self._start = (best_height, now_ms)

    @property
    def best_height(self) -> int:
        """The height of the last level set recorded (or the start height)."""
        return self._records[-1].height if self._records else self._start[0]

    def seen_height(self, arrival_ms: int) -> int:
        """The best height when a tx arrived at ``arrival_ms``.

        That is the last level set applied at or before then (the start height, or one below the
        window's oldest, if none is kept).
        """
        records = self._records
        if not records or arrival_ms < records[0].applied_ms:
            if len(records) < self.window:
                return min(self._start[0], records[0].height - 1) if records else self._start[0]
            return records[0].height - 1
        # the last record applied at or before arrival_ms (records are in applied order)
        return records[bisect_right(records, arrival_ms, key=_APPLIED_MS) - 1].height

    def on_level_set(
        self, height: int, now_ms: int, confirmed: Iterable[FeeSample], blocks: int
    ) -> None:
        """Record a level set applied to the best chain at ``now_ms``.

        Args:
            height: Its height. Records at this height or above (undone by a reorganisation)
                are dropped first.
            now_ms: When the node applied it.
            confirmed: Its VALID txs that were in the node's pool, as the pool had them.
            blocks: Its blocks (the queue bound's capacity).
        """
        while self._records and self._records[-1].height >= height:
            self._records.pop()
        samples: Counter[tuple[int, int]] = Counter()
        for tx in confirmed:
            wait = max(1, height - self.seen_height(tx.arrival_ms))
            samples[(_bucket(rate_of(tx.fee, tx.size)), min(wait, _WAIT_CAP))] += 1
        self._records.append(_LevelSetRecord(height, now_ms, samples, blocks))

    def estimate(self, pool: Mempool) -> FeeEstimate:
        """The estimates from the window and the pool as it is now (module docstring)."""
        queue = self._pool_queue(pool)
        floor = _pool_floor(pool)
        out: dict[int, int | None] = {}
        for target in sorted(FEE_TARGETS, reverse=True):
            found = self._history_rate(target, queue)
            longer = list(out.values())  # the estimates of the longer targets
            if found is None or None in longer:
                out[target] = None
                continue
            rates = [r for r in longer if r is not None]
            out[target] = max([found, floor, self._queue_rate(target, queue), *rates])
        return FeeEstimate(
            rates=tuple(sorted(out.items())),
            floor=floor,
            txs=sum(n for r in self._records for n in r.samples.values()),
            milestones=len(self._records),
        )

    def _pool_queue(self, pool: Mempool) -> list[tuple[int, int, int]]:
        """(rate, size, milestones waited so far) of each pool tx, best rate first (§3.4)."""
        best = self.best_height
        out = []
        for txid in pool.txids_by_fee_rate():
            entry = pool.get(txid)
            if entry is not None:
                waited = best - self.seen_height(entry.arrival_ms)
                out.append((rate_of(entry.fee, entry.size), entry.size, waited))
        return out

    def _history_rate(self, target: int, queue: list[tuple[int, int, int]]) -> int | None:
        """The lowest bucket bound whose groups, from the top down, all passed.

        0 when the history is too thin to form a group; None when the highest group failed.
        """
        ok: Counter[int] = Counter()
        total: Counter[int] = Counter()
        for record in self._records:
            for (bucket, wait), n in record.samples.items():
                total[bucket] += n
                if wait <= target:
                    ok[bucket] += n
        for rate, _, waited in queue:
            if waited > target:  # already late for this target: a failure at its rate
                total[_bucket(rate)] += 1
        best: int | None = None
        group_ok = group_total = 0
        for bucket in sorted(total, reverse=True):
            group_ok += ok[bucket]
            group_total += total[bucket]
            if group_total < MIN_GROUP_TXS:
                continue
            if group_ok * LIKELIHOOD[1] < group_total * LIKELIHOOD[0]:
                return best
            best = _BOUNDS[bucket]
            group_ok = group_total = 0
        return 0 if best is None else best  # no full group: the history says nothing

    def _queue_rate(self, target: int, queue: list[tuple[int, int, int]]) -> int:
        """The rate to be among what ``target`` milestones' blocks can carry.

        0 if the window is empty or the pool is shorter than that.
        """
        if not self._records:
            return 0
        blocks = target * sum(r.blocks for r in self._records) // len(self._records)
        room_txs, room_bytes = blocks * self._block_txs, blocks * self._block_bytes
        for rate, size, _ in queue:
            room_txs -= 1
            room_bytes -= size
            if room_txs < 0 or room_bytes < 0:
                return rate + 1
        return 0


def _pool_floor(pool: Mempool) -> int:
    """The lowest rate ``pool`` admits now (eviction floor, or its lowest rate when full)."""
    floor = 0
    evicted = pool.min_fee_rate
    if evicted is not None:
        floor = rate_of(*evicted) + 1
    full = len(pool) >= pool.max_txs or pool.total_bytes >= pool.max_bytes
    lowest = pool.txids_by_fee_rate()[-1:] if full else []
    entry = pool.get(lowest[0]) if lowest else None
    if entry is not None:
        floor = max(floor, rate_of(entry.fee, entry.size) + 1)
    return floor
