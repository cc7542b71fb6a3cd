"""SimNode.holds_block answers what ``Chain.has_block`` would, without the store (issue 23).

``send_frames`` asks it of a block ``inv``'s receiver to elide the event of an ``inv`` that would
do nothing there, so a wrong answer changes a run. Each test swaps in a checker that asks the
chain too, at every call, over runs with orphans, reorganisations and a rejected block. The port's
``on_block_frame`` asks it of every block message's receiver, and hands on only those that would
do something there.
"""

import pytest

from p2p import wire
from p2p.relay import BLOCK
from simulator.scenario import load_scenario
from simulator.sim_node import RelayPort, SimNode, peer_key
from simulator.simulation import Simulation
from tests.simulator.test_share_results import SELFISH_RUN, invalid_block


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
    sim = Simulation(load_scenario(None, SELFISH_RUN[0], **SELFISH_RUN[1]))
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


def test_a_block_message_that_would_do_nothing_is_not_handled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RelayPort.on_block_frame`` hands a block message to the relay unless the block is
    accepted here and the message is an ``inv``, or a ``block`` that closes no fetch: one we
    asked ``src`` for (P11) or are fetching is always handled."""
    sim = Simulation(load_scenario(None, ["load.tps=0"], nodes=4, duration_s=20, seed=1))
    sim.run()
    node = sim.full_nodes[0]
    port = node.port
    held = node.chain.best_id
    assert node.holds_block(held)
    raw = node.chain.get_block(held)
    assert raw is not None
    src = sim.network.neighbours[0][0].peer
    handled: list[type] = []

    def on_frames(self: RelayPort, sender: int, msgs: tuple[wire.Message, ...]) -> None:
        handled.extend(type(m) for m in msgs)

    monkeypatch.setattr(RelayPort, "on_frames", on_frames)
    inv, block = wire.Inv(((BLOCK, bytes(held)),)), wire.BlockMsg(raw.raw)
    port.on_block_frame(src, inv, held, False)
    port.on_block_frame(src, block, held, True)
    assert handled == []
    unknown = bytes(range(32))
    port.on_block_frame(src, wire.Inv(((BLOCK, unknown),)), unknown, False)
    assert handled == [wire.Inv]
    peer = port.relay.peers[peer_key(src)]
    peer.pending.add(held)  # asked of src: its block answers the getdata
    port.on_block_frame(src, block, held, True)
    assert handled == [wire.Inv, wire.BlockMsg]
    peer.pending.clear()
    assert port.relay.fetcher.on_announce(held, peer_key(src), 0)  # a fetch running
    port.on_block_frame(src, block, held, True)
    assert handled == [wire.Inv, wire.BlockMsg, wire.BlockMsg]
