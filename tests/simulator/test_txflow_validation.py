"""The flow's licence: ``network.tx_relay = "flow"`` against ``"messages"`` across seeds.

The flow (simulator/txflow.py) is a cheaper model of the node relay's tx messages; it may stand
in for them only where it gives the same answers. On a shape of its own (regions2019, 120 nodes
of which 25 full, 10 tx/s, four seeds, both models on the same seeds) this module checks:

- per-(tx, full node) arrival delay (offer to delivery), pooled over seeds: p50 and p90 within
  5 % or 20 ms;
- confirmed tx/s and median confirmation latency: the mean over seeds within 3 standard errors
  (of the difference of the two means);
- ``inv``, ``getdata`` and ``tx`` messages per tx offered within 5 %.

The full validation the issue asks for (500 nodes, 50 full, 10 and 100 tx/s, >= 10 seeds) is
bench/txflow_validation.py; its result is in docs/benchmarks.md.
"""

import math
import statistics
from collections import Counter
from dataclasses import dataclass

import pytest

from simulator.metrics import percentile
from simulator.scenario import load_scenario
from simulator.sim_node import SimNode
from simulator.simulation import Simulation

SETS = [
    'network.delay="regions2019"',
    "network.full_nodes=25",
    "load.tps=10",
    "miners.count=5",
    "chain.milestone_interval_s=2",
    "chain.block_rate=4",
]
NODES, DURATION_S, SEEDS = 120, 20, (1, 2, 3, 4)


@dataclass(frozen=True, slots=True)
class Measured:
    """One run: the arrival delays at full nodes (ms) and the run's metrics."""

    delays: list[float]
    throughput_tps: float
    latency_p50_s: float
    txs_offered: int
    by_type: Counter[str]
    """Messages sent, by wire type (the flow's and the messages' own together)."""


def measure(tx_relay: str, seed: int, sets: list[str], nodes: int, duration_s: float) -> Measured:
    """Run one scenario and record when each tx first reaches each full node."""
    scenario = load_scenario(
        None, [*sets, f'network.tx_relay="{tx_relay}"'], nodes=nodes, duration_s=duration_s
    )
    scenario = scenario.model_copy(update={"seed": seed})
    sim = Simulation(scenario)
    sim.network.sent_by_type = Counter()
    first: dict[tuple[bytes, int], float] = {}
    original = SimNode.on_deliver_tx

    def spy(self: SimNode, txid: bytes, raw: bytes, src: int) -> None:
        first.setdefault((txid, self.index), sim.engine.now_ms)
        original(self, txid, raw, src)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SimNode, "on_deliver_tx", spy)
        metrics = sim.run().metrics
    offered = sim.recorder.tx_offered_ms
    delays = sorted(at - offered[txid] for (txid, _), at in first.items() if txid in offered)
    by_type: Counter[str] = Counter()
    for (_, kind), count in sim.network.sent_by_type.items():
        by_type[kind] += count
    if sim.txflow is not None:
        by_type.update(sim.txflow.by_type)
    return Measured(
        delays,
        metrics["throughput_tps"],
        metrics["confirmation_latency_s"]["p50"],
        len(offered),
        by_type,
    )


def within_quantile(flow: list[float], messages: list[float], q: float) -> tuple[bool, str]:
    """p_q of the flow within 5 % or 20 ms of the messages' (and the two values, to print)."""
    f, m = percentile(flow, q), percentile(messages, q)
    ok = abs(f - m) <= max(0.05 * m, 20.0)
    return ok, f"p{round(q * 100)}: flow {f:.1f} ms, messages {m:.1f} ms"


def within_3_se(flow: list[float], messages: list[float]) -> tuple[bool, str]:
    """Mean over seeds within 3 standard errors of the difference of the means."""
    se = math.sqrt(
        statistics.variance(flow) / len(flow) + statistics.variance(messages) / len(messages)
    )
    diff = statistics.fmean(flow) - statistics.fmean(messages)
    return abs(diff) <= 3 * se, f"flow {flow}, messages {messages}, diff {diff:.4f}, se {se:.4f}"


@pytest.fixture(scope="module")
def runs() -> dict[str, list[Measured]]:
    return {
        mode: [measure(mode, seed, SETS, NODES, DURATION_S) for seed in SEEDS]
        for mode in ("messages", "flow")
    }


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_arrival_quantiles_match_the_messages(runs: dict[str, list[Measured]], q: float) -> None:
    flow = sorted(d for run in runs["flow"] for d in run.delays)
    messages = sorted(d for run in runs["messages"] for d in run.delays)
    assert len(flow) > 0.8 * len(messages)
    ok, text = within_quantile(flow, messages, q)
    assert ok, text


def test_confirmed_throughput_matches_the_messages(runs: dict[str, list[Measured]]) -> None:
    ok, text = within_3_se(
        [r.throughput_tps for r in runs["flow"]], [r.throughput_tps for r in runs["messages"]]
    )
    assert ok, text


def test_confirmation_latency_matches_the_messages(runs: dict[str, list[Measured]]) -> None:
    ok, text = within_3_se(
        [r.latency_p50_s for r in runs["flow"]], [r.latency_p50_s for r in runs["messages"]]
    )
    assert ok, text


@pytest.mark.parametrize("kind", ["inv", "getdata", "tx"])
def test_messages_per_tx_match_the_messages(runs: dict[str, list[Measured]], kind: str) -> None:
    """Per tx offered, within 5 % (``inv`` and ``getdata`` include the blocks' own)."""
    per_tx = {
        mode: sum(r.by_type[kind] for r in rs) / sum(r.txs_offered for r in rs)
        for mode, rs in runs.items()
    }
    assert abs(per_tx["flow"] / per_tx["messages"] - 1) <= 0.05, per_tx
