"""Simulated nodes store what a plain Chain stores.

Their shared level-set memo (dagchain.caches.LevelSetCache) and their SimStore change no row.
"""

from dagchain.chain import Chain
from dagchain.storage.memory import MemoryStore
from simulator.scenario import load_scenario
from simulator.simulation import Simulation
from simulator.store import SimStore


def test_nodes_store_what_a_memory_store_chain_without_the_memo_stores() -> None:
    # Fast milestones and slow links: nodes see different orders, forks and reorgs, so a node
    # applies evaluations made by another node on another branch history.
    scenario = load_scenario(
        None,
        [
            "load.tps=6",
            "miners.count=5",
            'network.delay="uniform:0.2:1.5"',
            "chain.milestone_interval_s=2",
            "chain.punctuality=20",
        ],
        nodes=8,
        duration_s=40,
        seed=4,
    )
    sim = Simulation(scenario)
    result = sim.run()
    memo = sim.caches.level_sets
    assert memo is not None
    assert memo.hits > 0  # most evaluations came from the memo
    assert result.metrics["stale_milestone_rate"] > 0  # there were competing milestones
    now = int(sim.now_ms)
    for node in sim.full_nodes:
        chain = node.chain
        accepted = sorted((meta.seq, bid) for bid, meta in chain.state.meta.items() if meta.seq > 0)
        fresh = Chain(sim.params, MemoryStore())
        for _, bid in accepted:
            block = chain.get_block(bid)
            assert block is not None
            fresh.on_block(block.raw, now)
        assert fresh.best_id == chain.best_id
        store = chain.store
        assert isinstance(store, SimStore)
        assert isinstance(fresh.store, MemoryStore)
        assert store.snapshot() == fresh.store.snapshot()
