"""The calendar queue runs events in exactly the (time, seq) order of one heap."""

import itertools
import random

from simulator.engine import BUCKET_MS, Engine


def test_random_nested_schedules_run_in_time_then_scheduling_order() -> None:
    rng = random.Random(11)
    engine = Engine()
    ran: list[tuple[float, int]] = []
    counter = [0]

    def fire(ident: int) -> None:
        ran.append((engine.now_ms, ident))
        for _ in range(rng.choice((0, 1, 2))):
            if counter[0] >= 3_000:
                return
            counter[0] += 1
            # Same instant, the open bucket, and later buckets; ties on purpose.
            delay = rng.choice((0.0, 0.25, BUCKET_MS, rng.uniform(0, 5), float(rng.randrange(40))))
            engine.schedule(delay, fire, counter[0])

    for _ in range(50):
        counter[0] += 1
        engine.schedule(float(rng.randrange(10)), fire, counter[0])
    engine.run()
    assert len(ran) == counter[0]
    times = [t for t, _ in ran]
    assert times == sorted(times)
    # Ties: at one instant, events run in the order they were scheduled (ids grow with seq).
    for a, b in itertools.pairwise(ran):
        if a[0] == b[0]:
            assert a[1] < b[1]


def test_an_event_scheduled_before_an_opened_bucket_still_runs_first() -> None:
    engine = Engine()
    seen: list[str] = []
    engine.schedule(50.0, seen.append, "at-50")
    engine.run(until_ms=10.5)  # opens the bucket of 50 ms, runs nothing
    assert seen == []
    assert engine.now_ms == 10.5
    engine.schedule_at(12.0, seen.append, "at-12")
    engine.schedule_each(seen.append, [(11.0, ("at-11",)), (60.0, ("at-60",))])
    assert engine.peek_time() == 11.0
    assert len(engine) == 4
    engine.run()
    assert seen == ["at-11", "at-12", "at-50", "at-60"]


def test_peek_time_inside_a_callback_does_not_skip_a_bucket() -> None:
    engine = Engine()
    seen: list[float] = []

    def look() -> None:
        seen.append(engine.now_ms)
        engine.peek_time()  # opens the next bucket while run() is popping

    engine.schedule(1.0, look)
    engine.schedule(7.0, look)
    engine.schedule(30.0, look)
    engine.run()
    assert seen == [1.0, 7.0, 30.0]
    assert engine.peek_time() is None
    assert len(engine) == 0
