"""network.relay = "node": the simulator's nodes run p2p/relay.py, and only it (issue 16).

Message counts follow PROTOCOL.md P11: a node gets a block's full bytes from a few peers (the
relay_push = 3 pushes of each neighbour that had it first) and ``inv`` otherwise; a tx's bytes
once, after a ``getdata``; tx announcements leave each link at most once per 250 ms. Runs are
deterministic, and the simulator holds no relay planner of its own.
"""

import ast
import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from dagchain.crypto import hash32
from p2p import wire
from p2p.dispatch import HANDLERS
from p2p.relay import RelaySettings
from simulator.scenario import load_scenario
from simulator.sim_node import RelayPort, frame_size
from simulator.simulation import WALL_FIELDS, Simulation

ROOT = Path(__file__).resolve().parent.parent.parent
SETS = [
    'network.delay="fixed:0.05"',
    "network.degree=4",
    "load.tps=20",
    "miners.count=4",
]


def _scenario(relay: str = "node", **fields: Any) -> Any:
    base = {"nodes": 16, "duration_s": 12, "seed": 3}
    base.update(fields)
    return load_scenario(None, [*SETS, f'network.relay="{relay}"'], **base)


Record = tuple[float, int, int, wire.Message]
"""(arrival ms, receiver, sender, message)"""


@pytest.fixture(scope="module")
def recorded() -> tuple[Simulation, list[Record]]:
    """A 16-node run (4 of them relay-only) with every relay message recorded on arrival."""
    log: list[Record] = []
    original = RelayPort.on_frames

    def spy(self: RelayPort, src: int, msgs: tuple[wire.Message, ...]) -> None:
        now = self.engine.now_ms
        log.extend((now, self.owner.index, src, m) for m in msgs)
        original(self, src, msgs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RelayPort, "on_frames", spy)
        sim = Simulation(_scenario())
        sim.run()
    return sim, log


def test_blocks_arrive_in_full_from_few_peers_and_by_inv_otherwise(
    recorded: tuple[Simulation, list[Record]],
) -> None:
    sim, log = recorded
    copies: Counter[tuple[int, bytes]] = Counter()
    invs: Counter[tuple[int, bytes]] = Counter()
    for _, dst, _, msg in log:
        if isinstance(msg, wire.BlockMsg):
            block_id = wire.block_frame_id(msg.data)
            assert block_id is not None
            copies[dst, block_id] += 1
        elif isinstance(msg, wire.Inv):
            for kind, item in msg.items:
                if kind == wire.InvKind.BLOCK:
                    invs[dst, item] += 1
    assert copies, "no block was relayed"
    # Each neighbour that has the block before hearing we do pushes it to relay_push of the
    # peers it does not know to have it; the rest of the neighbours only send an inv.
    push = RelaySettings().relay_push
    degree = {i: len(links) for i, links in enumerate(sim.network.neighbours)}
    assert all(n <= degree[dst] for (dst, _), n in copies.items())
    assert sum(copies.values()) / len(copies) <= push + 1
    assert len(invs) > len(copies) / 2  # the other neighbours announce it by inv


def test_a_tx_arrives_once_per_node_after_a_getdata(
    recorded: tuple[Simulation, list[Record]],
) -> None:
    _, log = recorded
    asked: set[tuple[int, int, bytes]] = set()  # (asker, asked, txid)
    copies: Counter[tuple[int, bytes]] = Counter()
    for _, dst, src, msg in log:
        if isinstance(msg, wire.GetData):
            asked.update((src, dst, item) for kind, item in msg.items if kind == wire.InvKind.TX)
        elif isinstance(msg, wire.TxMsg):
            txid = hash32(msg.data)
            assert (dst, src, txid) in asked  # never pushed unsolicited
            copies[dst, txid] += 1
    assert copies, "no tx was relayed"
    assert sum(copies.values()) / len(copies) < 1.05


def test_tx_announcements_are_batched_every_250_ms_per_link(
    recorded: tuple[Simulation, list[Record]],
) -> None:
    _, log = recorded
    times: defaultdict[tuple[int, int], list[float]] = defaultdict(list)
    items = 0
    for at, dst, src, msg in log:
        if isinstance(msg, wire.Inv) and any(k == wire.InvKind.TX for k, _ in msg.items):
            times[src, dst].append(at)  # fixed latency, no bandwidth limit: gaps as sent
            items += len(msg.items)
    gaps = [b - a for t in times.values() for a, b in itertools.pairwise(t)]
    assert gaps
    assert min(gaps) >= 250 - 1e-6
    assert items > sum(len(t) for t in times.values())  # several txs per inv


def test_link_bytes_are_the_real_frame_sizes() -> None:
    msgs = [
        wire.Inv(tuple((1, bytes([n]) * 32) for n in range(20))),
        wire.GetData(((2, bytes(32)),)),
        wire.NotFound(tuple((2, bytes([n]) * 32) for n in range(200))),
        wire.TxMsg(bytes(250)),
        wire.BlockMsg(bytes(70_000)),
        # the closed form's edges: array headers of 1/3 bytes, bin headers of 2/3/5 bytes,
        # WebSocket headers of 2/4/10 bytes
        *(wire.Inv(tuple((1, bytes(32)) for _ in range(n))) for n in (0, 1, 2, 15, 16, 1000)),
        *(wire.GetData(tuple((2, bytes(32)) for _ in range(n))) for n in (0, 3, 15, 16, 500)),
        *(wire.TxMsg(bytes(n)) for n in (0, 1, 100, 255, 256, 65_535, 65_536)),
        *(wire.BlockMsg(bytes(n)) for n in (0, 110, 120, 255, 256, 65_520, 65_536, 262_144)),
        wire.Ping(7),  # any other message is encoded
    ]
    for msg in msgs:
        frame = len(wire.encode_message(msg))
        header = 2 if frame < 126 else 4 if frame < 65_536 else 10
        assert frame_size(msg) == frame + header


def _metrics_bytes(scenario: Any, tmp: Path) -> bytes:
    from simulator.output import write_outputs

    result = Simulation(scenario).run()
    for name in WALL_FIELDS:
        result.metrics.pop(name, None)
    write_outputs(tmp, scenario, result)
    return (tmp / "metrics.json").read_bytes()


def test_same_seed_gives_byte_identical_metrics(tmp_path: Path) -> None:
    scenario = _scenario(nodes=14, duration_s=8, seed=5)
    first = _metrics_bytes(scenario, tmp_path / "a")
    second = _metrics_bytes(scenario, tmp_path / "b")
    assert first == second
    metrics = json.loads(first)
    assert metrics["messages"] > 0
    assert metrics["blocks_rejected"] == 0


def test_push_all_is_still_available_and_differs() -> None:
    node = Simulation(_scenario(nodes=12, duration_s=6)).run().metrics
    push = Simulation(_scenario("push-all", nodes=12, duration_s=6)).run().metrics
    assert node["messages"] != push["messages"]
    assert push["throughput_tps"] > 0
    assert node["throughput_tps"] > 0


# ---------------------------------------------------------------------------- one relay policy
RELAY_NAMES = ("plan_block_relay", "plan_tx_announcements", "TxAnnouncer", "BlockFetcher")
PLANNER_WORDS = ("announce", "getdata", "known_inv", "plan_relay", "plan_block", "plan_tx")
PUSH_ALL = {"fan_out", "send_block", "send_tx", "_send"}
"""The push-all comparison model (``network.relay = "push-all"``) and the hub's entry points."""
HANDLER_NAMES = {name for _, name in HANDLERS.values()}
"""Handlers named by p2p/dispatch.py's table (``on_getdata`` receives, it plans nothing)."""
RELAY_MESSAGES = {"Inv", "GetData", "NotFound"}
MODELS = {"txflow.py"}
"""Cheaper models of the relay, allowed beside it only as an opt-in and with a test comparing the
two (the tx flow, ``network.tx_relay = "flow"``: tests/simulator/test_txflow_validation.py)."""


def _simulator_modules() -> list[Path]:
    return sorted(p for p in (ROOT / "simulator").glob("*.py") if p.name not in MODELS)


def test_every_relay_model_is_opt_in_and_compared() -> None:
    """The models exempt from the check below are each licensed by a comparison test."""
    for name in MODELS:
        assert (ROOT / "simulator" / name).exists()
        assert (ROOT / "tests" / "simulator" / f"test_{Path(name).stem}_validation.py").exists()


def test_the_simulator_imports_the_node_relay() -> None:
    tree = ast.parse((ROOT / "simulator" / "sim_node.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "p2p.relay"
        for alias in node.names
    }
    assert "Relay" in imported


@pytest.mark.parametrize("path", _simulator_modules(), ids=lambda p: p.name)
def test_the_simulator_defines_no_relay_policy_of_its_own(path: Path) -> None:
    """No push/inv planner, announcer or getdata scheduler, and no inv/getdata/notfound built
    here: those are p2p/relay.py's (with p2p/gossip.py's pieces)."""
    tree = ast.parse(path.read_text())
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = node.name.lower()
            if node.name in RELAY_NAMES or (
                node.name not in PUSH_ALL | HANDLER_NAMES and any(w in name for w in PLANNER_WORDS)
            ):
                found.append(f"{path.name}:{node.lineno} defines {node.name}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in RELAY_MESSAGES:
                found.append(f"{path.name}:{node.lineno} builds a {name} message")
    assert not found, "\n".join(found)
