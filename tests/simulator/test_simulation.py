"""Process state a run borrows is given back."""

import gc

from simulator.scenario import load_scenario
from simulator.simulation import GC_THRESHOLDS, Simulation


def test_a_run_restores_the_gc_thresholds_and_unfreezes() -> None:
    before = gc.get_threshold()
    assert before != GC_THRESHOLDS
    seen: list[tuple[int, int, int]] = []
    sim = Simulation(load_scenario(None, ["load.tps=2"], nodes=4, duration_s=5, seed=2))
    sim.engine.schedule(1_000.0, lambda: seen.append(gc.get_threshold()))
    sim.run()
    assert seen == [GC_THRESHOLDS]  # rarer collections while the engine runs
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    assert sim.engine.events > 0
