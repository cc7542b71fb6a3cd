"""``miners.warm_start``: every peer chain is registered before the clock runs.

A REGISTRATION block carries no payment (PROTOCOL.md R3), so a run with many miners first spends
about N·ln N blocks on registrations; nakamoto's capacity column at 10,000 nodes measured that
warm-up (docs/experiments.md). With the warm start the registrations are mined at t = 0, relayed
like any block, and left out of the block metrics.
"""

import pytest

from simulator.scenario import ScenarioError, load_scenario
from simulator.simulation import Simulation

SHAPE = [
    'protocol="nakamoto"',
    'network.delay="fixed:0.05"',
    "network.degree=4",
    "miners.count=12",
    "chain.milestone_interval_s=2",
    "load.tps=20",
]


def _run(warm: bool) -> Simulation:
    scenario = load_scenario(
        None, [*SHAPE, f"miners.warm_start={str(warm).lower()}"], nodes=12, duration_s=40, seed=3
    )
    sim = Simulation(scenario)
    sim.run()
    return sim


def _registrations(sim: Simulation) -> int:
    """Recorded (mined in the run) blocks that are their miner's registration block."""
    roots = {n.root for n in sim.full_nodes if n.root is not None}
    return sum(1 for bid in sim.recorder.blocks if bid in roots)


def test_without_it_the_first_blocks_are_registrations() -> None:
    sim = _run(False)
    assert _registrations(sim) >= 6


def test_with_it_every_miner_is_registered_and_no_mined_block_is_a_registration() -> None:
    sim = _run(True)
    assert _registrations(sim) == 0
    assert all(sim.nodes[i].root is not None for i in sim.miners)
    # the registrations reached every node through the relay and sit in the best chain's past
    observer = sim.observer.chain
    for i in sim.miners:
        root = sim.nodes[i].root
        assert root is not None
        assert observer.get_meta(root) is not None
    # every recorded block could carry payments, and the run confirmed some
    for bid in sim.recorder.blocks:
        block = observer.get_block(bid)
        assert block is None or block.header.previous_link != observer.genesis_id
    assert sim.recorder.tx_confirmed_ms


def test_it_cannot_be_combined_with_an_attack() -> None:
    with pytest.raises(ScenarioError, match="warm_start"):
        load_scenario(
            None,
            [*SHAPE, "miners.warm_start=true", 'attack.kind="selfish"', "attack.share=0.3"],
            nodes=12,
        )
