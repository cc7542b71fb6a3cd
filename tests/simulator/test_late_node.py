"""network.late_nodes: full nodes that join late and catch up with the node's own sync session.

A late node is :class:`p2p.exchange.Exchange` (relay P11/P13, sync P5-P10) over a
:class:`p2p.service.NodeService`, the objects ``node/net/manager.py`` drives; the tests check
that it is offline until it joins, that it then catches up through milestone headers and level sets
(not through relay), ends at the observer's best, scores no honest neighbour, and that a run
stays a pure function of its seed.
"""

import ast
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from p2p import wire
from simulator.late_node import LateNode
from simulator.scenario import ScenarioError, load_scenario
from simulator.simulation import WALL_FIELDS, Simulation

ROOT = Path(__file__).resolve().parent.parent.parent
JOIN_S = 75.0
"""Past P10 (b)'s 60 s: genesis is stale, so initial sync must end by (a)."""
SETS = [
    'network.delay="fixed:0.05"',
    "network.degree=3",
    "load.tps=4",
    "miners.count=3",
    "network.late_nodes=2",
    f"network.late_join_s={JOIN_S}",
]


def _scenario(*extra: str, **fields: Any) -> Any:
    base: dict[str, Any] = {"nodes": 10, "duration_s": 90, "seed": 4}
    base.update(fields)
    return load_scenario(None, [*SETS, *extra], **base)


@pytest.fixture(scope="module")
def run() -> tuple[Simulation, dict[str, Any], dict[str, Any], Counter[tuple[int, str]]]:
    """One run with two late nodes; what they held just before joining, and every message
    sent, by (sender, type)."""
    sim = Simulation(_scenario())
    sent: Counter[tuple[int, str]] = Counter()
    sim.network.sent_by_type = sent
    before: dict[str, Any] = {}

    def probe() -> None:
        before["heights"] = [n.chain.best_height for n in sim.late_nodes]
        before["blocks"] = [len(n.chain.state.blocks) for n in sim.late_nodes]
        before["observer_height"] = sim.observer.chain.best_height
        before["received"] = sim.network.messages

    sim.engine.schedule_at(JOIN_S * 1000.0 - 1.0, probe)
    metrics = sim.run().metrics
    return sim, metrics, before, sent


def test_late_nodes_are_the_last_full_nodes_and_run_the_node_exchange() -> None:
    sim = Simulation(_scenario())
    assert [n.index for n in sim.late_nodes] == [8, 9]
    assert all(isinstance(sim.nodes[i], LateNode) for i in (8, 9))
    assert sim.offline == {8, 9}
    assert len(sim.full_nodes) == 8  # the miners and the observer are never late


def test_a_late_node_is_offline_until_it_joins(run: Any) -> None:
    _, _, before, _ = run
    assert before["observer_height"] >= 5  # the network made progress meanwhile
    assert before["heights"] == [0, 0]
    assert before["blocks"] == [1, 1]  # genesis only: nothing reached it


def test_a_late_node_catches_up_by_sync_and_ends_at_the_observers_best(run: Any) -> None:
    sim, metrics, before, sent = run
    late = metrics["late_join"]
    assert late["nodes"] == 2
    assert late["height_at_join"] >= before["observer_height"]
    assert late["caught_up"] == 2
    assert late["synced"] == 2  # P10 ended (by (a): genesis was stale)
    assert late["at_observer_best"] == 2
    assert 0 < late["catch_up_s"]["p100"] < 10
    # the old blocks came as level sets (P9), the new ones by relay (P11)
    assert late["blocks_from_sync"] > 0
    assert late["blocks_from_relay"] > 0
    assert "relay_only_nodes" not in metrics  # late nodes are full nodes
    for node in sim.late_nodes:
        assert node.chain.best_id == sim.observer.chain.best_id
        assert node.synced_blocks >= 2 * before["observer_height"]
    # the late nodes asked for headers and level sets, their neighbours answered
    late_ids = {n.index for n in sim.late_nodes}
    asked = Counter(t for (src, t), n in sent.items() if src in late_ids for _ in range(n))
    answered = Counter(t for (src, t), n in sent.items() if src not in late_ids for _ in range(n))
    assert asked[wire.GetMilestones.TYPE] >= 2
    assert asked[wire.GetLevelSet.TYPE] >= late["height_at_join"]
    assert answered[wire.Milestones.TYPE] >= 2
    assert answered[wire.LevelSet.TYPE] >= late["height_at_join"]


def test_an_honest_network_gives_a_late_node_no_reason_to_score_a_peer(run: Any) -> None:
    """Before P10 tx ``inv`` were fetched too: the pools announced on connect (P11) all missed
    their inputs at a node with no ledger yet, and past 100 a minute each cost its honest
    sender a point (66 points in a 20-node run)."""
    sim, metrics, _, _ = run
    assert metrics["late_join"]["penalty_points"] == 0
    assert metrics["blocks_rejected"] == 0
    for node in sim.late_nodes:
        assert not node.penalties
        assert not any(k.startswith("block:") for k in node.service.rejected)


def test_a_run_with_late_nodes_is_a_pure_function_of_its_seed(tmp_path: Path) -> None:
    def metrics() -> str:
        m = Simulation(_scenario(duration_s=80, nodes=8)).run().metrics
        for key in WALL_FIELDS:
            m.pop(key)
        return json.dumps(m, sort_keys=True)

    assert metrics() == metrics()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (['network.relay="push-all"'], "network.relay"),
        (['attack.kind="selfish"', "attack.share=0.2"], "attack.kind"),
        (["network.late_nodes=8"], "fewer than the 3 mining nodes"),
        (["network.late_join_s=90"], "before duration_s"),
        (["network.late_join_s=0"], "after 0"),
        (["network.late_leave_s=80"], "before network.late_join_s"),
    ],
)
def test_impossible_late_node_scenarios_are_refused(extra: list[str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        _scenario(*extra)


def test_the_late_node_drives_the_node_exchange_not_a_copy() -> None:
    """simulator/late_node.py imports the node's Exchange (relay and sync session) and defines
    no sync state machine of its own."""
    tree = ast.parse((ROOT / "simulator" / "late_node.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "p2p.exchange"
        for alias in node.names
    }
    assert "Exchange" in imported
    for path in sorted((ROOT / "simulator").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                assert "sync" not in node.name.lower(), f"{path.name} defines {node.name}"
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                assert name not in {"GetMilestones", "GetLevelSet", "LevelSet", "GetPending"}, (
                    f"{path.name}:{node.lineno} builds a {name} message"
                )


def test_a_node_that_goes_down_and_comes_back_syncs_from_its_own_chain() -> None:
    """``network.late_leave_s``: online from the start, down at 30 s (pool and peer state
    lost, chain kept), back at 75 s. Its first ``getmilestones`` after the restart names its own
    best milestone (P7), so only what it missed is downloaded."""
    scenario = _scenario("network.late_leave_s=30")
    sim = Simulation(scenario)
    held: dict[int, tuple[bytes, int, int]] = {}
    asked: list[tuple[int, wire.GetMilestones]] = []
    """The first getmilestones of each restarted node."""

    def at_leave() -> None:
        for node in sim.late_nodes:
            held[node.index] = (
                node.chain.best_id,
                node.chain.best_height,
                len(node.chain.state.blocks),
            )

    def spy(node: LateNode) -> None:
        send_to = node.send_to

        def record(key: str, msg: wire.Message) -> bool:
            if isinstance(msg, wire.GetMilestones) and node.restarts and not asked_by(node):
                asked.append((node.index, msg))
            return send_to(key, msg)

        node.send_to = record  # type: ignore[method-assign]

    def asked_by(node: LateNode) -> bool:
        return any(index == node.index for index, _ in asked)

    for node in sim.late_nodes:
        spy(node)
    sim.engine.schedule_at(30_000.0 - 1.0, at_leave)
    metrics = sim.run().metrics
    late = metrics["late_join"]
    assert late["leave_s"] == 30.0
    assert late["caught_up"] == 2
    assert late["at_observer_best"] == 2
    assert late["penalty_points"] == 0
    total = len(sim.observer.chain.state.blocks)
    for node in sim.late_nodes:
        best, height, had = held[node.index]
        assert height >= 1  # it followed the network before going down
        assert node.restarts == 1
        assert node.chain.best_id == sim.observer.chain.best_id
        # the restart's first locator starts at the best milestone it had kept (P7)
        (msg,) = [m for i, m in asked if i == node.index]
        assert msg.locator[0] == best
        # what it missed came as level sets (what it had is never downloaded again)
        assert node.synced_blocks > 0
        assert had + node.synced_blocks <= total


def test_late_nodes_among_relay_only_nodes_catch_up_from_the_full_ones() -> None:
    """With ``network.full_nodes`` the late nodes are the last full nodes; relay-only neighbours
    claim genesis, so the sync goes to a full one (and a round with a relay-only one ends at
    once)."""
    metrics = Simulation(_scenario("network.full_nodes=8", nodes=16)).run().metrics
    assert metrics["relay_only_nodes"] == 8
    late = metrics["late_join"]
    assert late["caught_up"] == late["at_observer_best"] == 2
    assert late["blocks_from_sync"] > 0
    assert late["penalty_points"] == 0
