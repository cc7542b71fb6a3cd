"""``engine.share_results`` and the elided block ``inv``: cost only, never a result (issue 23).

With ``engine.share_results = true`` the full nodes of a run share the core's deterministic
results (dagchain.caches.SharedResults, the signature and level-set caches); with ``false`` every
node computes its own. ``Simulation(elide_known_invs=False)`` hands every block message that
would do nothing where it lands (an ``inv`` of a held block, a held ``block`` closing no fetch)
to the relay. Either way a run must produce byte-identical ``metrics.json`` (wall fields
aside, and ``events`` for the elision, which removes events), ``blocks.csv``, and the same rows
in every full node's store and the same mempool order, on the shapes where sharing could go
wrong: relay-only nodes and the node relay (scenario d's shape), reorganisations (a selfish
miner, a double spend), nodes that join late and sync, and 1,000 full nodes.
"""

import hashlib
from typing import Any

import pytest

from dagchain.blocks import Block, decode_block
from dagchain.template import build_template
from simulator.late_node import LateNode
from simulator.scenario import load_scenario
from simulator.sim_node import SimNode
from simulator.simulation import WALL_FIELDS, Simulation
from simulator.store import SimStore

D_SHAPE = [
    'protocol="nakamoto"',
    'network.delay="regions2019"',
    "network.full_nodes=12",
    "miners.count=6",
    "chain.milestone_interval_s=1",
    "chain.block_rate=1",
    "chain.sortition_k=2",
    "load.tps=40",
]
ZERO_DELAY_TWO_MINERS = [
    'network.delay="fixed:0"',
    "network.processing_ms=0",
    "miners.count=2",
    "chain.block_rate=1",
    "chain.milestone_interval_s=1",
    "chain.retarget=false",
]


def _digest(sim: Simulation) -> list[str]:
    """Per full node (late ones too): a hash of every store row and of the mempool's order."""
    out = []
    nodes: list[SimNode | LateNode] = [*sim.full_nodes, *sim.late_nodes]
    for node in nodes:
        store = node.chain.store
        assert isinstance(store, SimStore)
        h = hashlib.sha256()
        for key, value in sorted(store.snapshot().items()):
            h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
        for txid in node.mempool.txids_by_fee_rate():
            h.update(txid)
        # the in-memory UTXO set (shared between nodes on the same best milestone when on)
        for (spent_txid, index), entry in sorted(node.chain.state.utxos.items()):
            h.update(b"%s%d,%d,%s,%d;" % (spent_txid, index, entry[0], entry[1], entry[2]))
        out.append(h.hexdigest())
    return out


def _outputs(sim: Simulation, *ignore: str) -> dict[str, Any]:
    result = sim.run()
    skip = (*WALL_FIELDS, *ignore)
    return {
        "metrics": {k: v for k, v in result.metrics.items() if k not in skip},
        "blocks": result.blocks,
        "nodes": _digest(sim),
    }


def _same_either_way(sets: list[str], **fields: Any) -> tuple[Simulation, dict[str, Any]]:
    """Run the scenario with sharing on and off; both must give the same outputs."""
    on = Simulation(load_scenario(None, [*sets, "engine.share_results=true"], **fields))
    off = Simulation(load_scenario(None, [*sets, "engine.share_results=false"], **fields))
    first, second = _outputs(on), _outputs(off)
    assert first["blocks"], "the run mined nothing"
    assert first == second
    assert off.caches.shared is None
    assert off.caches.signatures is None
    return on, first["metrics"]


def test_d_shape_with_relay_only_nodes_is_identical() -> None:
    sim, _ = _same_either_way(D_SHAPE, nodes=80, duration_s=12, seed=3)
    shared = sim.caches.shared
    assert shared is not None
    # the memos were used: most verdicts and every milestone's rows came from another node
    assert shared.hits["tx"] > shared.lookups["tx"] / 2
    assert shared.hits["block"] > shared.lookups["block"] / 2
    assert shared.hits["rows"] > shared.lookups["rows"] / 2
    assert shared.hits["utxos"] > shared.lookups["utxos"] / 2


SELFISH_RUN: tuple[list[str], dict[str, int]] = (
    [
        *ZERO_DELAY_TWO_MINERS,
        'attack.kind="selfish"',
        'attack.model="network"',
        "attack.share=0.35",
        "load.tps=2",
    ],
    {"nodes": 5, "duration_s": 400, "seed": 11},
)
"""A selfish miner's releases reorganising the honest nodes (settings, run fields)."""


def test_selfish_miner_reorganisations_are_identical() -> None:
    _, metrics = _same_either_way(SELFISH_RUN[0], **SELFISH_RUN[1])
    assert metrics["stale_milestone_rate"] > 0  # the attacker's releases reorganised nodes


def test_double_spend_run_is_identical() -> None:
    _same_either_way(
        [
            *ZERO_DELAY_TWO_MINERS,
            'attack.kind="double_spend"',
            'attack.model="network"',
            "attack.share=0.3",
            "attack.confirmations=2",
            "attack.trials=30",
            "load.tps=2",
        ],
        nodes=5,
        duration_s=100_000,
        seed=5,
    )


def test_late_nodes_syncing_is_identical() -> None:
    _same_either_way(
        [
            'network.delay="fixed:0.05"',
            "network.degree=3",
            "load.tps=4",
            "miners.count=3",
            "network.late_nodes=2",
            "network.late_join_s=75",
        ],
        nodes=10,
        duration_s=90,
        seed=4,
    )


def test_a_prefunded_genesis_is_identical() -> None:
    """``load.prefunded_outputs``: the shared genesis rows and UTXO set (one copy for the run)
    against every node writing and reading its own."""
    _same_either_way(
        [*ZERO_DELAY_TWO_MINERS, "load.tps=30", "load.prefunded_outputs=3000"],
        nodes=8,
        duration_s=20,
        seed=6,
    )


@pytest.mark.slow
def test_a_thousand_full_nodes_are_identical() -> None:
    _same_either_way(["load.tps=20", 'network.delay="regions2019"'], nodes=1000, duration_s=2.5)


ELIDED_SHAPES = {
    "d": (D_SHAPE, {"nodes": 80, "duration_s": 12, "seed": 7}),
    # sdag at 8 blocks/s with relay-only nodes: blocks come before their links (orphans ask
    # their sender, P13), and getdata queue behind two outstanding (P11's backlog)
    "orphans": (
        [
            'network.delay="regions2019"',
            "network.full_nodes=15",
            "chain.block_rate=8",
            "load.tps=10",
            'network.tx_relay="flow"',
        ],
        {"nodes": 60, "duration_s": 15, "seed": 4},
    ),
    "selfish": (
        [
            'network.delay="uniform:0.02:0.2"',
            "miners.count=4",
            "chain.block_rate=1",
            "chain.milestone_interval_s=1",
            'attack.kind="selfish"',
            'attack.model="network"',
            "attack.share=0.35",
            "load.tps=2",
        ],
        {"nodes": 12, "duration_s": 300, "seed": 11},
    ),
}


@pytest.mark.parametrize("shape", sorted(ELIDED_SHAPES))
def test_eliding_no_op_block_messages_changes_only_the_event_count(shape: str) -> None:
    """``send_frames`` makes no event of a block message that will do nothing where it lands
    (an ``inv`` of a held block, a held ``block`` not awaited), at send or, once its receiver
    accepts the block, by dropping it: every output but the event count stays."""
    sets, fields = ELIDED_SHAPES[shape]
    scenario = load_scenario(None, sets, **fields)
    elided, delivered = Simulation(scenario), Simulation(scenario, elide_known_invs=False)
    first, second = _outputs(elided, "events"), _outputs(delivered, "events")
    assert first == second
    assert elided.engine.events < delivered.engine.events


def invalid_block(sim: Simulation) -> Block:
    """A block on node 0's template whose id misses the target (H4): every node rejects it."""
    miner = sim.full_nodes[0]
    template = build_template(
        miner.chain, miner.mempool, miner.now(), root=miner.root, registration=None
    )
    assert template is not None
    nonce = 0
    while True:
        block = decode_block(template.solve(nonce).raw, sim.params)
        if int.from_bytes(block.id, "little") > template.target:
            return block
        nonce += 1


def test_an_invalid_block_is_rejected_by_every_node_with_sharing_on() -> None:
    """A consensus bug must still show: no node takes a block another node's verdict did not
    pass, so every node runs the rule that rejects it."""
    sim = Simulation(load_scenario(None, ["load.tps=5"], nodes=6, duration_s=10, seed=2))
    sim.run()
    shared = sim.caches.shared
    assert shared is not None
    block = invalid_block(sim)
    for node in sim.full_nodes:
        rejected = node.rejected_blocks
        node.on_deliver_block(block.id, block.raw, node.index)
        assert node.rejected_blocks == rejected + 1
        assert node.chain.is_known_invalid(block.id)
        assert not node.chain.has_block(block.id)
    assert not shared.block_passed(block.id)
