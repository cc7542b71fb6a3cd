"""SimNode.holds_block answers what ``Chain.has_block`` would, without the store (issue 23).

``send_frames`` asks it of a block ``inv``'s receiver to elide the event of an ``inv`` that would
do nothing there, so a wrong answer changes a run. Each test swaps in a checker that asks the
chain too, at every call, over runs with orphans, reorganisations and a rejected block.
"""

import pytest

from simulator.scenario import load_scenario
from simulator.sim_node import SimNode
from simulator.simulation import Simulation
from tests.simulator.test_attack_network import ZERO_DELAY_TWO_MINERS
from tests.simulator.test_share_results import invalid_block


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> dict[bool, int]:
    plain = SimNode.holds_block

    def holds_block(self: SimNode, block_id: bytes) -> bool:
        answer = plain(self, block_id)
        assert answer == self.chain.has_block(block_id), (self.index, block_id.hex())
        counts[answer] = counts.get(answer, 0) + 1
        return answer

    counts: dict[bool, int] = {}
    monkeypatch.setattr(SimNode, "holds_block", holds_block)
    return counts


def test_holds_block_is_has_block_with_orphans_and_relay_only_nodes(
    checked: dict[bool, int],
) -> None:
    sim = Simulation(
        load_scenario(
            None,
            [
                'network.delay="regions2019"',
                "network.full_nodes=15",
                "chain.block_rate=8",
                "load.tps=10",
            ],
            nodes=60,
            duration_s=15,
            seed=4,
        )
    )
    sim.run()
    assert sum(node.orphaned for node in sim.full_nodes) > 0  # blocks came before their links
    assert checked.get(True, 0) > 1_000
    assert checked.get(False, 0) > 1_000


def test_holds_block_is_has_block_through_reorganisations(checked: dict[bool, int]) -> None:
    sim = Simulation(
        load_scenario(
            None,
            [
                *ZERO_DELAY_TWO_MINERS,
                'attack.kind="selfish"',
                'attack.model="network"',
                "attack.share=0.35",
                "load.tps=2",
            ],
            nodes=5,
            duration_s=400,
            seed=11,
        )
    )
    result = sim.run()
    assert result.metrics["stale_milestone_rate"] > 0
    assert checked.get(True, 0) > 100


def test_a_rejected_block_is_not_held(checked: dict[bool, int]) -> None:
    sim = Simulation(load_scenario(None, ["load.tps=5"], nodes=6, duration_s=10, seed=2))
    sim.run()
    block = invalid_block(sim)
    for node in sim.full_nodes:
        node.on_deliver_block(block.id, block.raw, node.index)
        assert sim.known_blocks.knows(node.index, block.id)  # delivered, so known here
        assert not node.holds_block(block.id)  # the checker asks the chain too
