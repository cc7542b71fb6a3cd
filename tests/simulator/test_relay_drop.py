"""Copies that lose the race are dropped in the engine, and that changes no result.

A copy of an item that a later send to the same node overtakes is never run (its event is
dropped, ``Engine.dropped``); the node would already know the item when it landed. These tests run
the same bandwidth-limited scenario with dropping on and off and require every metric and every
block row to be equal, with fewer events when dropping is on.
"""

from typing import Any

from dagchain.types import BlockId
from simulator.engine import Engine, Event
from simulator.scenario import load_scenario
from simulator.simulation import WALL_FIELDS, Simulation

SETS = [
    'network.relay="push-all"',  # the push model's own properties (issue 16 kept it)
    "miners.count=4",
    'network.delay="uniform:0.02:0.4"',
    "network.bandwidth_mbps=1",
    "network.full_nodes=12",
    "chain.milestone_interval_s=1",
    "load.tps=8",
]


def _sim(drop: bool) -> Simulation:
    scenario = load_scenario(None, SETS, nodes=30, duration_s=25, seed=4)
    return Simulation(scenario, drop_losing_copies=drop)


def _results(sim: Simulation) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    result = sim.run()
    metrics = {k: v for k, v in result.metrics.items() if k not in (*WALL_FIELDS, "events")}
    return metrics, result.blocks, result.events


def test_dropping_losing_copies_changes_no_metric() -> None:
    kept = _sim(False)
    dropping = _sim(True)
    want, want_blocks, all_events = _results(kept)
    got, blocks, events = _results(dropping)
    assert want["txs_confirmed"] > 50  # the run did something
    assert want["blocks"] > 50
    assert want["messages"] > 1000
    assert got == want  # propagation, confirmations, messages, bytes (the uplink model): all
    assert blocks == want_blocks
    assert events < 0.8 * all_events  # dropped copies are not run, nor counted
    assert not dropping.engine.dropped  # every dropped event came up and was skipped
    assert not kept.engine.dropped


def _queued(engine: Engine) -> list[Event]:
    return engine.queued()


def _forget_a_dropped_block(sim: Simulation) -> tuple[int, BlockId, bytes, int]:
    """A full node that knows a block of which a copy to it was dropped, as (node, id, raw, src)."""
    for event in _queued(sim.engine):
        node, key, raw, src = event[3]
        if (
            id(event[0]) in sim.engine.dropped
            and event[2] == sim._deliver_block
            and node < len(sim.full_nodes)
            and sim.known_blocks.knows(node, key)
        ):
            return node, BlockId(key), raw, src
    raise AssertionError("no dropped block copy in flight")


def test_a_node_that_forgets_a_block_gets_its_dropped_copies_back() -> None:
    # A node unlearns a block only when the core says "not yet valid" (never in an honest run);
    # the copies dropped because it would know the block must then run after all. Both runs get
    # the same forget at the same instant, done as SimNode.on_deliver_block does it.
    chosen: list[tuple[int, BlockId, bytes, int]] = []
    revived: list[Event] = []

    def forget(sim: Simulation) -> None:
        dropped = [e for e in _queued(sim.engine) if id(e[0]) in sim.engine.dropped]
        if not chosen:  # the dropping run (first) picks a node and block
            chosen.append(_forget_a_dropped_block(sim))
        node, key, raw, src = chosen[0]
        sim.known_blocks.forget(node, key)
        sim.retry_block(node, key, raw, src, sim.now_ms + 500.0)
        if len(chosen) == 1 and not revived:
            still = {id(e[0]) for e in _queued(sim.engine) if id(e[0]) in sim.engine.dropped}
            revived.extend(e for e in dropped if id(e[0]) not in still)

    results = []
    for drop in (True, False):
        sim = _sim(drop)
        sim.engine.schedule_at(6_000.0, forget, sim)
        results.append(_results(sim))
    assert revived  # the copies dropped for that node and block, and only those
    assert all(e[3][:2] == chosen[0][:2] for e in revived)
    assert results[0][:2] == results[1][:2]
    assert results[0][2] < results[1][2]
