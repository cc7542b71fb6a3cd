"""The event engine and the named random streams (STYLE.md rule 8: same inputs, same run)."""

import pytest

from simulator.engine import PythonEngine
from simulator.rng import RngStreams, derive_seed


def test_events_run_in_time_order_and_ties_in_scheduling_order(Engine: type[PythonEngine]) -> None:
    engine = Engine()
    seen: list[str] = []
    engine.schedule(5.0, seen.append, "late")
    engine.schedule(1.0, seen.append, "first-at-1")
    engine.schedule(1.0, seen.append, "second-at-1")
    engine.run()
    assert seen == ["first-at-1", "second-at-1", "late"]
    assert engine.now_ms == 5.0
    assert engine.events == 3


def test_run_until_stops_before_later_events_and_cancel_skips(Engine: type[PythonEngine]) -> None:
    engine = Engine()
    seen: list[int] = []
    engine.schedule(1.0, seen.append, 1)
    dropped = engine.schedule(2.0, seen.append, 2)
    engine.schedule(10.0, seen.append, 10)
    engine.cancel(dropped)
    engine.run(until_ms=5.0)
    assert seen == [1]
    assert engine.now_ms == 5.0
    engine.run()
    assert seen == [1, 10]


def test_scheduling_into_the_past_is_an_error(Engine: type[PythonEngine]) -> None:
    engine = Engine()
    engine.schedule(3.0, lambda: None)
    engine.run()
    with pytest.raises(ValueError, match="past"):
        engine.schedule(-1.0, lambda: None)


def test_named_streams_are_independent_and_reproducible() -> None:
    a, b = RngStreams(7), RngStreams(7)
    first = [a.stream("mining").random() for _ in range(3)]
    b.stream("txs").random()  # drawing from another stream must not shift this one
    assert [b.stream("mining").random() for _ in range(3)] == first
    assert RngStreams(8).stream("mining").random() != first[0]
    assert derive_seed(7, "mining") != derive_seed(7, "txs")


def test_schedule_each_keeps_list_order_for_ties_and_refuses_the_past(
    Engine: type[PythonEngine],
) -> None:
    engine = Engine()
    seen: list[str] = []
    engine.schedule(2.0, seen.append, "before")
    engine.schedule_each(seen.append, [(2.0, ("a",)), (1.0, ("b",)), (2.0, ("c",))])
    engine.run()
    assert seen == ["b", "before", "a", "c"]
    assert engine.events == 4
    with pytest.raises(ValueError, match="now is"):
        engine.schedule_each(seen.append, [(1.0, ("late",))])


def test_events_are_counted_when_a_callback_raises(Engine: type[PythonEngine]) -> None:
    engine = Engine()

    def boom() -> None:
        raise ZeroDivisionError

    engine.schedule(1.0, lambda: None)
    engine.schedule(2.0, boom)
    with pytest.raises(ZeroDivisionError):
        engine.run()
    assert engine.events == 1
    assert engine.now_ms == 2.0
