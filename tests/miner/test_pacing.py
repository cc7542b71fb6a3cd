"""The ``--rate`` limiter: a token bucket that does not lose the time a block takes (issue 25)."""

import itertools
import random

from miner.pacing import Pacer, default_burst


def _AT_SLOT() -> float:
    """Every block starts at its slot (no random start within the period)."""
    return 0.0


def _starts(pacer: Pacer, work_s: list[float], now: float = 0.0) -> list[float]:
    """When each block starts (its template is asked for), one per entry of ``work_s``."""
    starts = []
    for work in work_s:
        now += pacer.delay(now)
        starts.append(now)
        now += work
        pacer.on_accepted(now)
    return starts


def _run(pacer: Pacer, work_s: list[float]) -> float:
    """Mine one accepted block per entry of ``work_s`` (its template-to-answer time), waiting
    as the pacer says; the clock time when the last one is accepted."""
    now = 0.0
    for work in work_s:
        now += pacer.delay(now)
        now += work
        pacer.on_accepted(now)
    return now


def test_the_time_a_block_takes_counts_against_its_period() -> None:
    """Issue 25 item 4: the old limiter waited a full period after each accepted block, so at
    --rate 32 a block taking 7 ms gave 1 / (31.25 + 7) ms = 26 blocks/s."""
    pacer = Pacer(32.0, burst=1, spread=_AT_SLOT)
    end = _run(pacer, [0.007] * 321)
    assert round(320 / (end - 0.007), 3) == 32.0  # 320 periods from the first start


def test_a_slow_block_is_made_up_by_the_next_ones_within_the_burst() -> None:
    pacer = Pacer(10.0, burst=5, spread=_AT_SLOT)
    end = _run(pacer, [0.01] * 10 + [0.35] + [0.01] * 10)  # one block 0.25 s past its period
    assert abs(end - (20 * 0.1 + 0.01)) < 1e-9  # back on the schedule of 10 blocks/s


def test_the_rate_is_an_upper_bound_even_after_a_long_stall() -> None:
    pacer = Pacer(10.0, burst=3, spread=_AT_SLOT)
    _run(pacer, [0.001])
    stall = 5.0  # e.g. the node was unreachable
    starts = []
    now = pacer.next_at or 0.0
    now += stall
    for _ in range(20):
        now += pacer.delay(now)
        starts.append(now)
        now += 0.001
        pacer.on_accepted(now)
    quick = [b - a for a, b in itertools.pairwise(starts) if b - a < 0.05]
    assert len(quick) == 3  # the late block, 3 more (the burst) at once, then one per 0.1 s
    assert abs((starts[-1] - starts[4]) - 15 * 0.1) < 0.002


def test_no_rate_means_no_wait() -> None:
    pacer = Pacer(0.0)
    pacer.on_accepted(1.0)
    assert pacer.delay(1.0) == 0.0


def test_the_default_burst_is_half_a_second_of_blocks() -> None:
    assert [default_burst(r) for r in (0.5, 4, 32, 48)] == [1, 2, 16, 24]


def test_miners_started_together_do_not_keep_fixed_phases() -> None:
    """Three miners at --rate 4 on three devnet nodes (test_miners_knit_tip_links): with every
    block at its slot on a fixed grid their phases froze at startup for the whole run, and when
    their blocks were further apart than a block takes to reach the other nodes each template saw
    only the block just before it unlinked: one tip link, never two. Each block now starts at a
    random point of its period, so the miners' relative phases change from block to block."""
    period = 0.25
    starts = [
        _starts(Pacer(4.0, burst=default_burst(4.0)), [0.01] * 80, now=t0)  # as Miner.run does
        for t0 in (0.0, 0.104, 0.120)  # phases seen frozen in a failing run
    ]
    for a, b in itertools.combinations(starts, 2):
        gaps = [(y - x) % period for x, y in zip(a, b, strict=True)]
        assert max(gaps) - min(gaps) > period / 2
        assert any(g < period / 10 or g > period * 0.9 for g in gaps)  # sometimes close together


def test_a_random_start_within_the_period_keeps_the_rate_and_its_bound() -> None:
    rng = random.Random(25)
    pacer = Pacer(32.0, burst=default_burst(32.0), spread=rng.random)
    starts = _starts(pacer, [0.007] * 321)
    period = 1 / 32
    assert all(s >= k * period for k, s in enumerate(starts))  # never before its slot
    assert abs(320 / starts[-1] - 32.0) < 0.1


def test_a_block_late_anyway_waits_no_longer_for_its_random_start() -> None:
    pacer = Pacer(10.0, burst=5, spread=lambda: 0.9)
    starts = _starts(pacer, [0.01] * 3 + [0.5] + [0.01] * 4)
    assert starts[4] == starts[3] + 0.5  # behind its slot: starts at once


def test_the_first_block_starts_at_once() -> None:
    """A registration, and the node's first answer (a refused token is one line, test_cli)."""
    assert Pacer(4.0, burst=2, spread=lambda: 0.9).delay(100.0) == 0.0
