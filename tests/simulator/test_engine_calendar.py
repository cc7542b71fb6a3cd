"""The calendar queue runs events in exactly the (time, seq) order of one heap."""

import itertools
import random

import pytest

from simulator.engine import BUCKET_MS, ENGINE_BUILT, PythonEngine


def test_random_nested_schedules_run_in_time_then_scheduling_order(
    Engine: type[PythonEngine],
) -> None:
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


def test_an_event_scheduled_before_an_opened_bucket_still_runs_first(
    Engine: type[PythonEngine],
) -> None:
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


def test_peek_time_inside_a_callback_does_not_skip_a_bucket(Engine: type[PythonEngine]) -> None:
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


def _trace(cls: type[PythonEngine], seed: int) -> list[tuple[float, int, str]]:
    """A random workload: nested schedules at the same instant, in the open bucket, in later
    buckets, past the compiled engine's 16 s ring (and hours ahead), cancels, drops and revives,
    peeks inside callbacks, runs in steps; what ran, when, in order."""
    rng = random.Random(seed)
    engine = cls()
    ran: list[tuple[float, int, str]] = []
    handles: list[int] = []
    times: list[float] = []
    counter = [0]

    def fire(ident: int) -> None:
        ran.append((engine.now_ms, ident, "fire"))
        if rng.random() < 0.1:
            engine.peek_time()
        for _ in range(rng.choice((0, 1, 2, 2))):
            if counter[0] >= 4_000:
                return
            counter[0] += 1
            delay = rng.choice(
                (
                    0.0,
                    0.25,
                    BUCKET_MS,
                    rng.uniform(0, 5),
                    float(rng.randrange(40)),
                    rng.uniform(15_000, 17_000),
                    rng.uniform(0, 3_600_000),
                )
            )
            at = engine.now_ms + delay  # a fresh float: it names the event for dropping
            handles.append(engine.schedule_at(at, fire, counter[0]))
            times.append(at)
        roll = rng.random()
        if roll < 0.05 and handles:
            engine.cancel(rng.choice(handles))
        elif roll < 0.15 and times:
            engine.dropped.add(id(rng.choice(times)))
        elif roll < 0.17:
            engine.revive(lambda event: event[3][0] % 2 == 0)

    for _ in range(40):
        counter[0] += 1
        at = float(rng.randrange(10))
        handles.append(engine.schedule_at(at, fire, counter[0]))
        times.append(at)
    step = 0.0
    while engine.peek_time() is not None:
        step += rng.uniform(0, 20_000)
        engine.run(until_ms=step)
        ran.append((engine.now_ms, len(engine), "step"))
    ran.append((engine.now_ms, engine.events, "end"))
    return ran


@pytest.mark.skipif(not ENGINE_BUILT, reason="simulator._engine was not built")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_compiled_engine_runs_what_the_python_engine_runs(seed: int) -> None:
    from simulator._engine import Engine as CEngine

    want = _trace(PythonEngine, seed)
    assert len(want) > 1_000
    assert _trace(CEngine, seed) == want  # type: ignore[arg-type]


@pytest.mark.skipif(not ENGINE_BUILT, reason="simulator._engine was not built")
def test_a_simulation_is_the_same_on_either_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every output, the event count included, on scenario d's shape with the tx flow."""
    from simulator import simulation
    from simulator._engine import Engine as CEngine
    from simulator.scenario import load_scenario
    from tests.simulator.test_share_results import D_SHAPE, _outputs

    scenario = load_scenario(
        None, [*D_SHAPE, 'network.tx_relay="flow"'], nodes=60, duration_s=10, seed=3
    )
    outputs = []
    for cls in (PythonEngine, CEngine):
        monkeypatch.setattr(simulation, "Engine", cls)
        sim = simulation.Simulation(scenario)
        assert type(sim.engine) is cls
        outputs.append(_outputs(sim))
    assert outputs[0] == outputs[1]
    assert outputs[1]["metrics"]["events"] > 10_000


@pytest.mark.skipif(not ENGINE_BUILT, reason="simulator._engine was not built")
@pytest.mark.parametrize(
    ("delay", "bandwidth"), [("regions2019", 0), ("fixed:0.05", 0), ("uniform:0.01:0.3", 25)]
)
def test_the_compiled_transmit_is_the_python_transmit(delay: str, bandwidth: float) -> None:
    """``Network.transmit`` compiled: the same arrival to the bit, the same uplink queue and
    counts, over random sends (busy and idle uplinks, batches, big and small frames)."""
    from simulator.network import Network

    nets = [
        Network(200, 8, delay, bandwidth, 0.5, random.Random(4), kernel=kernel)
        for kernel in ("python", "c")
    ]
    assert nets[0]._uplinks is None  # the Python transmit
    assert nets[1]._uplinks is not None  # the compiled one
    rng = random.Random(9)
    now = 0.0
    for _ in range(20_000):
        now += rng.choice((0.0, rng.uniform(0, 2), rng.uniform(0, 200)))
        src = rng.randrange(200)
        dst = rng.choice(nets[0].neighbours[src]).peer
        size, count = (
            rng.choice((rng.randrange(40, 300), rng.randrange(1_000, 600_000))),
            1 + rng.randrange(3),
        )
        arrivals = [net.transmit(src, dst, size, count, now) for net in nets]
        assert arrivals[0] == arrivals[1]
        assert type(arrivals[1]) is float
    assert nets[0].upload_free == nets[1].upload_free
    assert (nets[0].messages, nets[0].bytes_sent) == (nets[1].messages, nets[1].bytes_sent)
    nets[1].messages += 5  # the tx flow adds its own counts
    assert nets[1].messages == nets[0].messages + 5
