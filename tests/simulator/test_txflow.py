"""simulator/txflow.py on its own: hand-computed arrivals on small graphs with known tick phases.

Each node announces a tx at the first point of its 250 ms grid strictly after it took the tx in;
a neighbour fetches from the first announcer it hears (getdata back, tx forth). Delays per message:
size * 8 / rate + latency + processing.
"""

import math
import shutil
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import pytest

from dagchain.genesis import FAUCET_ADDRESS, FAUCET_SECRET
from dagchain.transactions import Transaction, TxKind, TxOut, sign_transaction
from dagchain.types import TxId
from simulator import txflow
from simulator.scenario import ScenarioError, load_scenario
from simulator.sim_node import SimNode
from simulator.simulation import WALL_FIELDS, Simulation
from simulator.txflow import (
    HORIZON_MS,
    PASS,
    STOP,
    Frames,
    LinkModel,
    Sizes,
    Spread,
    accept,
    advance,
    earliest_arrivals,
)

INF = math.inf


def _model(
    edges: dict[tuple[int, int], float],
    phases: Sequence[float],
    processing_ms: float = 0.0,
    upload: Sequence[float] | None = None,
) -> LinkModel:
    n = len(phases)
    neighbours: list[list[int]] = [[] for _ in range(n)]
    latency: list[dict[int, float]] = [{} for _ in range(n)]
    for (a, b), ms in sorted(edges.items()):
        neighbours[a].append(b)
        neighbours[b].append(a)
        latency[a][b] = latency[b][a] = ms
    return LinkModel(
        [sorted(p) for p in neighbours],
        latency,
        list(upload) if upload is not None else [INF] * n,
        [INF] * n,
        processing_ms,
        lambda i: phases[i],
    )


def test_line_arrivals_wait_for_each_nodes_tick() -> None:
    """0-1-2-3, 10 ms links, 2 ms processing, phases 0, 100, 50, 200: each hop is the wait for
    the node's next tick plus three message delays of 12 ms (inv, getdata, tx)."""
    model = _model({(0, 1): 10, (1, 2): 10, (2, 3): 10}, [0, 100, 50, 200], processing_ms=2)
    spread = earliest_arrivals(model, origin=0, start_ms=0.0)
    # 0 ticks at 250 (strictly after 0): 1 hears at 262, has it at 286; 1 ticks at 350: 2 has
    # it at 350 + 36; 2 ticks at 550: 3 has it at 586
    assert spread.arrival == {0: 0.0, 1: 286.0, 2: 386.0, 3: 586.0}
    assert spread.tick == {0: 250.0, 1: 350.0, 2: 550.0, 3: 700.0}
    assert (spread.invs, spread.fetches) == (3, 3)  # never back to the node it fetched from


def test_line_transfer_time_at_link_rate() -> None:
    """At 8 bits/ms (one byte per ms) a 40-byte inv, 40-byte getdata and 300-byte tx take
    40, 40 and 300 ms on the wire, on top of the 10 ms latency and 2 ms processing."""
    model = _model({(0, 1): 10}, [0, 0], processing_ms=2, upload=[8.0, 8.0])
    spread = earliest_arrivals(model, 0, 0.0, Sizes(inv=40, getdata=40, tx=300))
    assert spread.arrival == {0: 0.0, 1: 250.0 + 52 + 52 + 312}


def test_a_tx_waits_behind_what_is_queued_on_the_uplink() -> None:
    """Node 0's uplink is busy until 1,000 ms (a block it is sending): its inv, due at its
    250 ms tick, leaves at 1,000; node 1's getdata goes over its own idle uplink; the tx
    leaves 0 when the getdata lands. Each send books the sender's uplink (FIFO)."""
    model = _model({(0, 1): 10}, [0, 0], processing_ms=2, upload=[8.0, 8.0])
    model.upload_free[0] = 1000.0
    spread = earliest_arrivals(model, 0, 0.0, Sizes(inv=40, getdata=40, tx=300))
    inv_at = 1000.0 + 40 + 12
    getdata_at = inv_at + 40 + 12
    assert spread.arrival == {0: 0.0, 1: getdata_at + 300 + 12}
    assert model.upload_free == [getdata_at + 300, inv_at + 40]  # each done sending


def test_a_second_tx_queues_behind_the_first_on_one_uplink() -> None:
    """Two txs node 0 takes in together go out in one tick: the second's inv item (36 bytes)
    and its tx wait behind the first's bytes on 0's uplink, so it lands later by exactly the
    time the first tx's bytes and its own extra item take."""
    model = _model({(0, 1): 10}, [0, 0], upload=[8.0, INF])
    frames = Frames()
    sizes = Sizes(inv=40, getdata=40, tx=300)
    spreads = [Spread(sizes, frames=frames) for _ in range(2)]
    for spread in spreads:
        accept(model, spread, 0, 0.0)
    landed: dict[int, float] = {}
    for now in range(2000):  # both searches step with the clock, as TxFlow's horizon makes them
        for i, spread in enumerate(spreads):
            if i not in landed:
                stop = advance(model, spread, lambda node: STOP, until_ms=float(now))
                if stop is not None and stop[0] >= 0:
                    landed[i] = stop[2]
    # inv frame 250-290, item 290-326; 1's getdatas land at 300 and 336 (one frame, one item);
    # tx 1 leaves at 326 (the uplink busy until then) to 626, lands 636; tx 2 leaves at 626
    assert landed == {0: 636.0, 1: 936.0}


def test_the_search_pauses_at_its_horizon() -> None:
    """``until_ms``: the search stops before an entry later than that and says when it is."""
    model = _model({(0, 1): 10, (1, 2): 10}, [0, 0, 0])
    spread = Spread(Sizes(0, 0, 0))
    accept(model, spread, 0, 0.0)
    assert advance(model, spread, lambda node: PASS, until_ms=100.0) == (-1, -1, 250.0)
    assert spread.tick == {}
    assert advance(model, spread, lambda node: PASS, until_ms=265.0) == (-1, -1, 270.0)
    assert advance(model, spread, lambda node: PASS) is None
    assert spread.arrival == {0: 0.0, 1: 280.0, 2: 530.0}


def test_star_centre_relays_to_the_leaves() -> None:
    """Leaf 1 (phase 10) offers at 0; the centre (phase 20) has it at 40 and ticks at 270."""
    model = _model({(0, 1): 10, (0, 2): 30, (0, 3): 50}, [20, 10, 0, 0])
    spread = earliest_arrivals(model, origin=1, start_ms=0.0)
    assert spread.arrival == {1: 0.0, 0: 40.0, 2: 270 + 90.0, 3: 270 + 150.0}
    assert spread.source == {1: -1, 0: 1, 2: 0, 3: 0}
    assert (spread.invs, spread.fetches) == (3, 3)


def test_first_announcer_wins_even_when_slower() -> None:
    """Node 3 hears of the tx from 1 first (at 320) and fetches it there over 1's slow
    uplink (1 byte per ms), although 2's inv comes 20 ms later and 2 would deliver at 360:
    a tx has one announcer, no fallback (p2p/relay.py)."""
    model = _model(
        {(0, 1): 10, (0, 2): 10, (1, 3): 10, (2, 3): 10},
        [0, 50, 80, 0],
        upload=[INF, 8.0, INF, INF],
    )
    spread = earliest_arrivals(model, 0, 0.0, Sizes(inv=10, getdata=10, tx=1000))
    # 0 ticks at 250; 1: inv 260, getdata over its slow uplink (10 ms) 280, tx 290; 2: 280
    assert spread.arrival[1] == 290.0
    assert spread.arrival[2] == 280.0
    # 1 ticks at 300: inv lands at 3 at 300 + 10 + 10 = 320; getdata 330; tx 330 + 1000 + 10
    assert spread.source[3] == 1
    assert spread.arrival[3] == 1340.0


def test_no_inv_to_a_neighbour_whose_inv_came_first() -> None:
    """Triangle: 1 (phase 10) and 2 (phase 200) get the tx from 0 at 280; 2 ticks first (450)
    and its inv reaches 1 before 1's tick (510), so 1 announces to nobody (0 sent it the tx,
    2 is known to have it)."""
    model = _model({(0, 1): 10, (0, 2): 10, (1, 2): 10}, [0, 10, 200])
    spread = earliest_arrivals(model, 0, 0.0)
    assert spread.arrival == {0: 0.0, 1: 280.0, 2: 280.0}
    assert spread.tick == {0: 250.0, 1: 510.0, 2: 450.0}
    # 0 -> 1, 0 -> 2, 2 -> 1
    assert spread.invs == 3


def test_a_refusing_node_does_not_pass_the_tx_on() -> None:
    """A full node that refuses the tx (a conflict, a missing parent) gets it, keeps it out
    of its pool and announces it to no one, so the line behind it never hears of it."""
    model = _model({(0, 1): 10, (1, 2): 10}, [0, 0, 0])
    spread = earliest_arrivals(model, 0, 0.0, refuses=frozenset({1}))
    assert spread.arrival == {0: 0.0, 1: 280.0}


CAN_BUILD = (
    shutil.which("cc") is not None and Path(sysconfig.get_paths()["include"], "Python.h").exists()
)


@pytest.mark.skipif(not CAN_BUILD, reason="no C compiler or Python headers: fallback expected")
def test_the_compiled_search_is_built_where_a_compiler_exists() -> None:
    """With a compiler the install builds simulator._flow (a silent fallback would hide a bug);
    tests/simulator/test_txflow_kernel.py checks it against this module's Python search."""
    assert txflow.KERNEL_BUILT


# ------------------------------------------------------------------ in the simulator
SETS = [
    'network.delay="regions2019"',
    "network.full_nodes=8",
    "load.tps=10",
    "miners.count=3",
    "chain.milestone_interval_s=2",
    "chain.block_rate=4",
]


def _scenario(tx_relay: str, seed: int = 1) -> Simulation:
    sets = [*SETS, f'network.tx_relay="{tx_relay}"']
    return Simulation(load_scenario(None, sets, nodes=30, duration_s=8, seed=seed))


def test_flow_runs_deterministic_and_reaches_every_full_node() -> None:
    """Same seed, same metrics; every tx any full node holds reached every full node (none is
    refused in an honest run), and no tx search is left unfinished."""
    runs = []
    for _ in range(2):
        sim = _scenario("flow")
        result = sim.run()
        runs.append({k: v for k, v in result.metrics.items() if k not in WALL_FIELDS})
        assert sim.txflow is not None
        assert sim.txflow.spreading == 0
        offered = set(sim.recorder.tx_offered_ms)
        for txid in offered:
            assert all(sim.known_txs.knows(node, txid) for node in range(8)), txid.hex()
    assert runs[0] == runs[1]
    assert runs[0]["txs_offered"] > 40


def test_a_search_is_charged_once_and_settle_charges_the_running_ones() -> None:
    """The flow charges a search's messages to the network as it ends; ``settle`` charges the
    searches still running, so that the network's totals are whole at any moment: settling
    mid-run adds their messages so far, settling again adds nothing, and the run ends with the
    totals of a run never settled."""
    plain = _scenario("flow")
    plain.run()
    sim = _scenario("flow")
    seen: list[tuple[int, int, int]] = []

    def progress(now_ms: float) -> None:
        flow = sim.txflow
        assert flow is not None
        if not seen and now_ms > 4_000 and flow.spreading:
            before = sim.network.messages
            flow.settle()
            settled = sim.network.messages
            flow.settle()
            seen.append((before, settled, sim.network.messages))

    sim.run(progress=progress)
    assert seen, "no search was running at a progress call past 4 s"
    before, settled, again = seen[0]
    assert settled > before
    assert again == settled
    assert (sim.network.messages, sim.network.bytes_sent) == (
        plain.network.messages,
        plain.network.bytes_sent,
    )


def test_flow_costs_no_event_per_tx_at_relay_only_nodes() -> None:
    """22 of the 30 nodes relay only: the flow run has far fewer events than the messages."""
    events = {mode: _scenario(mode).run().events for mode in ("messages", "flow")}
    assert events["flow"] < 0.8 * events["messages"]


@pytest.mark.parametrize("sets", [['network.relay="push-all"'], ["network.late_nodes=1"]])
def test_flow_needs_the_node_relay_of_always_on_nodes(sets: list[str]) -> None:
    with pytest.raises(ScenarioError, match="tx_relay"):
        load_scenario(None, ['network.tx_relay="flow"', "network.late_join_s=1", *sets])


def test_flow_is_a_scenario_key_of_the_cli(tmp_path: Path) -> None:
    scenario = load_scenario(None, ['network.tx_relay="flow"'])
    assert scenario.network.tx_relay == "flow"
    assert load_scenario(None).network.tx_relay == "messages"


def test_txs_of_one_tick_share_one_inv_and_one_getdata_frame() -> None:
    """Two txs node 0 takes in at 0 and 100 ms both go out at its 250 ms tick: node 1 gets one
    ``inv`` frame with two items and answers with one ``getdata`` frame (P11 batching)."""
    model = _model({(0, 1): 10}, [0, 0])
    frames = Frames()
    spreads = [Spread(Sizes(0, 0, 0), frames=frames) for _ in range(2)]
    for spread, start in zip(spreads, (0.0, 100.0), strict=True):
        accept(model, spread, 0, start)
        assert advance(model, spread, lambda node: STOP) == (1, 0, 280.0)
    counts = [(s.invs, s.inv_frames, s.fetches, s.getdata_frames) for s in spreads]
    assert counts == [(1, 1, 1, 1), (1, 0, 1, 0)]


@pytest.mark.parametrize("tx_relay", ["messages", "flow"])
def test_a_node_that_refuses_a_tx_does_not_pass_it_on(tx_relay: str) -> None:
    """Two txs spending one faucet output enter at opposite ends of a 12-node ring: each node
    admits the one it hears of first and refuses the other (a pool conflict, §7.5), and every
    delivery of a tx comes from a node that admitted it, in both models."""
    sets = [
        'network.delay="fixed:0.05"',
        'network.topology="ring"',
        "miners.count=1",
        f'network.tx_relay="{tx_relay}"',
    ]
    sim = Simulation(load_scenario(None, sets, nodes=12, duration_s=3, seed=2))
    params, genesis = sim.params, sim.observer.chain.genesis_id
    txs = [
        sign_transaction(
            TxKind.TRANSFER,
            [(TxId(genesis), 0)],
            [TxOut(params.faucet_amount - fee, FAUCET_ADDRESS)],
            [FAUCET_SECRET],
            params,
        )
        for fee in (1_000, 2_000)
    ]

    def offer(node: SimNode, tx: Transaction) -> None:
        node.offer_tx(tx.txid, tx.raw)

    for tx, node in zip(txs, (0, 6), strict=True):
        sim.engine.schedule_at(10.0, offer, sim.full_nodes[node], tx)
    deliveries: list[tuple[bytes, int, int, bool]] = []
    original = SimNode.on_deliver_tx

    def spy(self: SimNode, txid: TxId, raw: bytes, src: int) -> None:
        original(self, txid, raw, src)
        deliveries.append((txid, self.index, src, txid in self.mempool))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SimNode, "on_deliver_tx", spy)
        sim.run()
    admitted = {(txid, node) for txid, node, _, taken in deliveries if taken}
    admitted |= {(txs[0].txid, 0), (txs[1].txid, 6)}
    assert all((txid, src) in admitted for txid, _, src, _ in deliveries)
    refused = [(txid, node) for txid, node, _, taken in deliveries if not taken]
    assert refused, "no node refused either tx"
    holders = {node for _, node in admitted}
    assert holders == set(range(12)), "every node admits one of the two"
    assert len(admitted) == 12


def test_flow_books_the_networks_uplinks_and_never_runs_ahead_of_its_horizon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a run the flow queues on the very uplinks the block messages use, and every send it
    books starts at most ``HORIZON_MS`` after the clock (so a block sent now waits only for
    bytes due within that horizon). The Python search is spied on; the kernel gives the same
    run (tests/simulator/test_txflow_kernel.py)."""
    monkeypatch.setattr(txflow, "FLOW_KERNEL", "python")
    sim = _scenario("flow")
    flow = sim.txflow
    assert flow is not None
    assert flow.kernel == "python"
    assert flow.model.upload_free is sim.network.upload_free
    original = flow.model.send
    ahead: list[float] = []

    def spy(src: int, dst: int, size: int, at_ms: float) -> float:
        ahead.append(at_ms - sim.engine.now_ms)
        return original(src, dst, size, at_ms)

    flow.model.send = spy  # type: ignore[method-assign]
    sim.run()
    assert len(ahead) > 1000
    assert min(ahead) >= 0.0
    assert max(ahead) <= HORIZON_MS + 1e-9


@pytest.mark.parametrize("kernel", ["python", "c"])
def test_a_tx_admitted_at_a_second_node_while_it_spreads_joins_its_search(
    kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same tx offered at two full nodes 1 ms apart (a wallet that submits twice, or a tx
    a reorganisation puts back while it still spreads): the second admission joins the running
    search, which then reaches every node once. It used to schedule a second search chain,
    and the finished spread's leftover resume raised KeyError."""
    if kernel == "c" and not txflow.KERNEL_BUILT:
        pytest.skip("simulator._flow is not built")
    monkeypatch.setattr(txflow, "FLOW_KERNEL", kernel)
    sets = [
        'network.delay="fixed:0.05"',
        'network.topology="ring"',
        "miners.count=1",
        'network.tx_relay="flow"',
    ]
    sim = Simulation(load_scenario(None, sets, nodes=12, duration_s=3, seed=2))
    params, genesis = sim.params, sim.observer.chain.genesis_id
    tx = sign_transaction(
        TxKind.TRANSFER,
        [(TxId(genesis), 0)],
        [TxOut(params.faucet_amount - 1_000, FAUCET_ADDRESS)],
        [FAUCET_SECRET],
        params,
    )

    def offer(node: SimNode) -> None:
        assert node.offer_tx(tx.txid, tx.raw) is None

    sim.engine.schedule_at(10.0, offer, sim.full_nodes[0])
    sim.engine.schedule_at(11.0, offer, sim.full_nodes[6])
    deliveries: list[int] = []
    original = SimNode.on_deliver_tx

    def spy(self: SimNode, txid: TxId, raw: bytes, src: int) -> None:
        deliveries.append(self.index)
        original(self, txid, raw, src)

    monkeypatch.setattr(SimNode, "on_deliver_tx", spy)
    sim.run()
    flow = sim.txflow
    assert flow is not None
    assert flow.spreading == 0
    assert sorted(deliveries) == [i for i in range(12) if i not in (0, 6)]
