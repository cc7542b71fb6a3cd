"""The simulated load wallet and ``load.prefunded_outputs`` (docs/protocol.md decision 43).

The wallet spends only confirmed outputs. From PROTOCOL.md §10's 64 faucet UTXOs it must first
fan them out and wait for the fan-out to confirm, and at a high rate it runs out of free outputs
and skips arrivals (``txs_starved``), so two protocols that confirm at different speeds are
offered different loads. A prefunded genesis removes that: with ``tps * duration_s`` outputs the
wallet offers every arrival.
"""

import pytest

from dagchain.genesis import FAUCET_ADDRESS
from simulator.load import FAN_OUT
from simulator.scenario import ScenarioError, load_scenario
from simulator.simulation import Simulation
from simulator.store import SimStore

TPS = 100
DURATION_S = 12
SHAPE = [
    'network.delay="fixed:0.05"',
    "network.degree=4",
    "miners.count=4",
    "chain.milestone_interval_s=2",
    "chain.block_rate=2",
    f"load.tps={TPS}",
]


def _run(prefunded: int) -> tuple[Simulation, list[int]]:
    scenario = load_scenario(
        None,
        [*SHAPE, f"load.prefunded_outputs={prefunded}"],
        nodes=8,
        duration_s=DURATION_S,
        seed=5,
    )
    sim = Simulation(scenario)
    widths: list[int] = []
    sink = sim.load.sink

    class Counting:
        def on_offered(self, tx, now_ms):  # type: ignore[no-untyped-def]
            widths.append(len(tx.outputs))
            sink.on_offered(tx, now_ms)

    sim.load.sink = Counting()
    sim.run()
    return sim, widths


def test_the_default_wallet_fans_out_and_starves_at_this_rate() -> None:
    sim, widths = _run(0)
    assert sim.params.faucet_outputs == 64
    assert widths.count(FAN_OUT) == 64  # the 64 faucet outputs, each fanned out once
    assert sim.load.starved > 0


def test_a_prefunded_wallet_is_not_starved() -> None:
    prefunded = TPS * DURATION_S * 2
    sim, widths = _run(prefunded)
    assert sim.params.faucet_outputs == prefunded
    # every arrival offered, none skipped, and no fan-out: every tx pays load.tx_bytes' outputs
    assert sim.load.starved == 0
    assert sim.load.offered > TPS * DURATION_S * 0.8
    assert set(widths) == {sim.load.outputs}
    # the observer's genesis holds the prefunded faucet UTXOs, and the run confirmed payments
    chain = sim.observer.chain
    last = chain.get_utxo(chain.genesis_id, prefunded - 1) or chain.get_utxo(chain.genesis_id, 0)
    assert last is not None
    assert last.address == FAUCET_ADDRESS
    assert chain.get_utxo(chain.genesis_id, prefunded) is None
    unspent = sum(chain.get_utxo(chain.genesis_id, i) is not None for i in range(prefunded))
    assert prefunded - sim.load.offered <= unspent < prefunded
    assert len(sim.recorder.tx_confirmed_ms) > 0
    assert sim.full_nodes[0].chain.genesis_id == chain.genesis_id


def test_the_full_nodes_share_one_genesis_ledger() -> None:
    """Memory a user relies on at scale: N prefunded outputs are held once per run, not once per
    full node (a peak of 12.4 GB for 262,144 outputs at 100 full nodes before they were shared)."""
    prefunded = 20_000
    scenario = load_scenario(
        None, [*SHAPE, f"load.prefunded_outputs={prefunded}"], nodes=8, duration_s=1, seed=5
    )
    sim = Simulation(scenario)
    assert len({id(node.chain.state.utxos) for node in sim.full_nodes}) == 1
    assert len(sim.full_nodes[0].chain.state.utxos) == prefunded
    for node in sim.full_nodes:
        store = node.chain.store
        assert isinstance(store, SimStore)
        assert len(store._data) < 100  # its own rows; the faucet's are in the shared base
        assert len(store.snapshot()) > 2 * prefunded  # ... and read as its own
    sim.run()
    assert len(sim.recorder.tx_confirmed_ms) > 0


def test_the_key_is_checked() -> None:
    with pytest.raises(ScenarioError, match="prefunded_outputs"):
        load_scenario(None, ["load.prefunded_outputs=-1"])
    with pytest.raises(ScenarioError, match="prefunded_outputs"):
        load_scenario(None, ['load.prefunded_outputs="many"'])
