"""The ``--rate`` limiter: a token bucket that does not lose the time a block takes (issue 25)."""

import itertools

from miner.pacing import Pacer, default_burst


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
    pacer = Pacer(32.0, burst=1)
    end = _run(pacer, [0.007] * 321)
    assert round(320 / (end - 0.007), 3) == 32.0  # 320 periods from the first start


def test_a_slow_block_is_made_up_by_the_next_ones_within_the_burst() -> None:
    pacer = Pacer(10.0, burst=5)
    end = _run(pacer, [0.01] * 10 + [0.35] + [0.01] * 10)  # one block 0.25 s past its period
    assert abs(end - (20 * 0.1 + 0.01)) < 1e-9  # back on the schedule of 10 blocks/s


def test_the_rate_is_an_upper_bound_even_after_a_long_stall() -> None:
    pacer = Pacer(10.0, burst=3)
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
