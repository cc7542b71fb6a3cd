"""Live against simulated (issue 16): the same 10-node ring on loopback and in dagchain-sim.

Run: ``python bench/ring_compare.py [--ring 10] [--blocks 30] [--txs 128] [--tolerance 0.2]
[--topology ring|random] [--degree 2]``.

``--topology random`` takes the simulator's random graph instead of the ring (``network.topology
= "random"``: a random tree plus ``--degree`` links per node, drawn from ``--seed``) and wires the
live daemons the same way (node i dials its neighbours j < i): with more than ``relay_push`` = 3
neighbours a node announces blocks by ``inv`` on its other links and peers fetch them by
``getdata``, which a ring never needs. Hop distances are then BFS distances from node 0.

1. Live: bench/network.py's ring of real devnet daemons (node i dials node i - 1); ``--blocks``
   blocks of ``--txs`` signed txs submitted to node 0, one every 0.25 s. Per node and block: the
   arrival delay (the node's ``block`` event ``delay_ms``), with the node's hop distance from
   node 0; per node: the P2P frames it wrote during the run, from ``/metrics``
   (``dagchain_p2p_messages_sent_total{type}``, after minus before).
2. Calibration, from the distance-1 nodes only: the origin's offset is the median of node 0's
   own delay (the HTTP submit and node 0's acceptance), the per-hop delay h the median delay
   of the distance-1 nodes minus that offset.
3. Simulated: the same ring in-process (``network.topology = "ring"``, ``network.relay =
   "node"``, so every node runs p2p/relay.py), fixed link delays with link latency +
   ``processing_ms`` = h, one miner (node 0) at 4 blocks/s (the live 0.25 s spacing), no tx
   load (the live run submits no loose txs either). A simulated arrival is the acceptance time
   minus the mining time, plus the origin's offset.
4. A side-by-side table: per node p50/p90 of the arrival delay and messages per block, then the
   pooled rows (every arrival at nodes 1..n-1, as bench/network.py's "per-node"; the delay until
   the last node has the block, its "all nodes"; messages per block per node, block-relay types
   and all types), each with sim/live and PASS/FAIL against ``--tolerance``.

Every wait is bounded (node start 30 s, arrivals 60 s, the counters' settling 5 s) and the
simulation runs a bounded simulated time.
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.network import percentile, propagate, start_ring
from simulator.scenario import load_scenario
from simulator.simulation import Simulation
from tests.functional.framework import NodeProcess, TestNetwork, wait_until

SENT = "dagchain_p2p_messages_sent_total"
BLOCK_TYPES = ("block", "inv", "getdata", "notfound")
"""The block relay's messages (P11/P13); with no loose txs, no tx inv or tx is expected."""
SPACING_S = 0.25
SETTLE_S = 5.0


@dataclass(frozen=True, slots=True)
class Side:
    """One run's measurements: delays (ms) by node, messages by node and type, blocks."""

    delays: dict[int, list[float]]
    """Node -> its arrival delays (ms), one per block."""
    worst: list[float]
    """Per block: the delay until the last node (of 1..n-1) had it."""
    sent: dict[int, Counter[str]]
    blocks: int


Graph = list[list[int]]
"""Node -> its neighbours."""


def ring_graph(ring: int) -> Graph:
    """Node i linked to i - 1 and i + 1 (mod ``ring``)."""
    return [sorted({(i - 1) % ring, (i + 1) % ring} - {i}) for i in range(ring)]


def sim_graph(ring: int, degree: int, seed: int) -> Graph:
    """The simulator's random graph for these nodes and seed (``network.topology = "random"``;
    the links do not depend on the delay model's latencies)."""
    scenario = load_scenario(
        None,
        ['network.delay="fixed:0.01"', f"network.degree={degree}", "load.tps=0"],
        nodes=ring,
        duration_s=1.0,
        seed=seed,
    )
    return [
        sorted(link.peer for link in links) for links in Simulation(scenario).network.neighbours
    ]


def distances(graph: Graph) -> list[int]:
    """Hop distance of every node from node 0 (BFS)."""
    dist = [-1] * len(graph)
    dist[0] = 0
    frontier = [0]
    while frontier:
        nxt = []
        for a in frontier:
            for b in graph[a]:
                if dist[b] < 0:
                    dist[b] = dist[a] + 1
                    nxt.append(b)
        frontier = nxt
    return dist


def _has_peers(count: int) -> Callable[[NodeProcess], bool]:
    return lambda node: node.peer_count() >= count


def start_graph(net: TestNetwork, graph: Graph) -> list[NodeProcess]:
    """One devnet daemon per node of ``graph``, node i dialing its neighbours j < i, each with
    every neighbour connected."""
    nodes = [net.add_node(start=False) for _ in graph]
    for i, node in enumerate(nodes):
        node.peers = [nodes[j].p2p_address for j in graph[i] if j < i]
    for node in nodes:
        node.start(wait=False)
    for node in nodes:
        wait_until(node.is_up, 30, f"{node.name} up")
    for node, peers in zip(nodes, graph, strict=True):
        node.wait(_has_peers(len(peers)), 30, f"to have its {len(peers)} neighbours")
    return nodes


# ---------------------------------------------------------------------------- live
def scrape_sent(node: NodeProcess) -> Counter[str]:
    """``dagchain_p2p_messages_sent_total`` of one node, by type."""
    out: Counter[str] = Counter()
    prefix = SENT + '{type="'
    for line in node.api.text("/metrics").splitlines():
        if line.startswith(prefix):
            key, _, value = line.rpartition(" ")
            out[key[len(prefix) : -2]] = int(float(value))
    return out


def settled_counts(nodes: list[NodeProcess]) -> list[Counter[str]]:
    """Every node's counts, once two scrapes 0.5 s apart agree (at most ``SETTLE_S``)."""
    deadline = time.monotonic() + SETTLE_S
    last = [scrape_sent(n) for n in nodes]
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = [scrape_sent(n) for n in nodes]
        if now == last:
            break
        last = now
    return last


def run_live(
    net: TestNetwork, graph: Graph | None, ring: int, blocks: int, txs: int
) -> tuple[Side, list[float]]:
    """The live ring (``graph`` None: bench/network.py's) or graph; returns its Side and node
    0's own delays (ms)."""
    nodes = start_ring(net, ring) if graph is None else start_graph(net, graph)
    try:
        before = settled_counts(nodes)
        sink = asyncio.run(propagate(nodes, blocks, txs, SPACING_S))
        after = settled_counts(nodes)
    finally:
        for node in nodes:
            node.stop()
    hashes = sorted({h for (_, h) in sink})
    complete = [h for h in hashes if all((i, h) in sink for i in range(ring))]
    delays = {i: [float(sink[(i, h)]) for h in complete] for i in range(ring)}
    worst = [max(float(sink[(i, h)]) for i in range(1, ring)) for h in complete]
    sent = {i: after[i] - before[i] for i in range(ring)}
    side = Side({i: delays[i] for i in range(1, ring)}, worst, sent, len(complete))
    if len(complete) < blocks:
        print(f"warning: {blocks - len(complete)} of {blocks} blocks did not reach every node")
    return side, delays[0]


def calibrate(live: Side, origin: list[float], dist: list[int]) -> tuple[float, float]:
    """(per-hop delay h, origin offset), both ms: the offset is node 0's median delay, h the
    distance-1 nodes' median delay minus it (so the sim's distance-1 median is the live one)."""
    first = [d for i in range(1, len(dist)) if dist[i] == 1 for d in live.delays[i]]
    offset = statistics.median(origin)
    return statistics.median(first) - offset, offset


# ---------------------------------------------------------------------------- simulated
def run_sim(
    ring: int,
    blocks: int,
    hop_ms: float,
    offset_ms: float,
    seed: int,
    topology: str = "ring",
    degree: int = 2,
) -> Side:
    """The same ring (or random graph) in dagchain-sim with fixed per-hop delay ``hop_ms``."""
    processing = min(2.0, max(0.0, hop_ms))
    link_s = max(0.0, hop_ms - processing) / 1000.0
    rate = 1.0 / SPACING_S
    scenario = load_scenario(
        None,
        [
            f'network.topology="{topology}"',
            f"network.degree={degree}",
            'network.relay="node"',
            f'network.delay="fixed:{link_s:.6f}"',
            f"network.processing_ms={processing}",
            "network.bandwidth_mbps=0",
            "miners.count=1",
            f"chain.block_rate={rate}",
            "load.tps=0",
        ],
        nodes=ring,
        duration_s=blocks * SPACING_S,
        seed=seed,
    )
    sim = Simulation(scenario)
    graph = [sorted(link.peer for link in links) for links in sim.network.neighbours]
    if topology == "random" and graph != sim_graph(ring, degree, seed):  # pragma: no cover
        raise RuntimeError("the simulated graph is not the one the live nodes were wired as")
    arrivals: dict[tuple[bytes, int], float] = {}
    sent_by: Counter[tuple[int, str]] = Counter()
    sim.recorder.arrivals = arrivals
    sim.network.sent_by_type = sent_by
    sim.run()
    mined = {b: r.sent_ms for b, r in sim.recorder.blocks.items() if r.miner == 0}
    complete = [b for b in mined if all((b, i) in arrivals for i in range(ring))]
    delays = {
        i: [arrivals[(b, i)] - mined[b] + offset_ms for b in complete] for i in range(1, ring)
    }
    worst = [max(delays[i][k] for i in range(1, ring)) for k in range(len(complete))]
    sent: dict[int, Counter[str]] = {i: Counter() for i in range(ring)}
    for (node, kind), count in sent_by.items():
        sent[node][kind] += count
    return Side(delays, worst, sent, len(complete))


# ---------------------------------------------------------------------------- report
def _q(values: list[float], q: float) -> float:
    return percentile([round(v) for v in values], q)


def per_block(side: Side, nodes: range, types: tuple[str, ...] | None) -> float:
    """Messages sent per block per node over ``nodes`` (``types`` None: every type)."""
    total = sum(
        sum(c for k, c in side.sent[i].items() if types is None or k in types) for i in nodes
    )
    return total / max(1, side.blocks) / len(nodes)


def verdict(live: float, sim: float, tolerance: float) -> tuple[str, str, bool]:
    if live == 0:
        ok = sim == 0
        return ("-" if ok else "inf"), ("PASS" if ok else "FAIL"), ok
    ratio = sim / live
    ok = abs(ratio - 1) <= tolerance
    return f"{ratio:.2f}", "PASS" if ok else "FAIL", ok


def report(live: Side, sim: Side, dist: list[int], tolerance: float) -> bool:
    """Print the table; True if every pooled row passes."""
    print(
        "| node | hops | live p50 | sim p50 | sim/live | live p90 | sim p90 | sim/live | "
        "live msgs/block | sim msgs/block | sim/live |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ring = len(dist)
    for i in range(ring):
        cells = [str(i), str(dist[i])]
        for q in (0.5, 0.9):
            if i == 0:
                cells += ["-", "-", "-"]
                continue
            a, b = _q(live.delays[i], q), _q(sim.delays[i], q)
            ratio, mark, _ = verdict(a, b, tolerance)
            cells += [f"{a:.0f}", f"{b:.0f}", f"{ratio} {mark}"]
        a, b = (
            per_block(live, range(i, i + 1), BLOCK_TYPES),
            per_block(sim, range(i, i + 1), BLOCK_TYPES),
        )
        ratio, mark, _ = verdict(a, b, tolerance)
        cells += [f"{a:.2f}", f"{b:.2f}", f"{ratio} {mark}"]
        print("| " + " | ".join(cells) + " |")
    pooled_live = [d for i in range(1, ring) for d in live.delays[i]]
    pooled_sim = [d for i in range(1, ring) for d in sim.delays[i]]
    everyone = range(ring)
    rows = [
        ("per-node arrival p50 (ms)", _q(pooled_live, 0.5), _q(pooled_sim, 0.5)),
        ("per-node arrival p90 (ms)", _q(pooled_live, 0.9), _q(pooled_sim, 0.9)),
        ("all nodes p50 (ms)", _q(live.worst, 0.5), _q(sim.worst, 0.5)),
        ("all nodes p90 (ms)", _q(live.worst, 0.9), _q(sim.worst, 0.9)),
        (
            "msgs per block per node (block, inv, getdata, notfound)",
            per_block(live, everyone, BLOCK_TYPES),
            per_block(sim, everyone, BLOCK_TYPES),
        ),
        (
            "msgs per block per node (all types)",
            per_block(live, everyone, None),
            per_block(sim, everyone, None),
        ),
    ]
    print()
    print(f"| measure | live | sim | sim/live | within {tolerance:.0%} |")
    print("|---|---|---|---|---|")
    passed = True
    for name, a, b in rows:
        ratio, mark, ok = verdict(a, b, tolerance)
        passed = passed and ok
        fmt = ".0f" if name.endswith("(ms)") else ".2f"
        print(f"| {name} | {a:{fmt}} | {b:{fmt}} | {ratio} | {mark} |")
    live_types = sum((live.sent[i] for i in everyone), Counter())
    sim_types = sum((sim.sent[i] for i in everyone), Counter())
    print()
    print(f"live frames by type ({live.blocks} blocks): {dict(sorted(live_types.items()))}")
    print(f"sim messages by type ({sim.blocks} blocks): {dict(sorted(sim_types.items()))}")
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ring", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--txs", type=int, default=128)
    parser.add_argument("--tolerance", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--topology", choices=("ring", "random"), default="ring")
    parser.add_argument("--degree", type=int, default=2, help="random: links drawn per node")
    args = parser.parse_args()
    graph = sim_graph(args.ring, args.degree, args.seed) if args.topology == "random" else None
    dist = distances(graph if graph is not None else ring_graph(args.ring))
    if graph is not None:
        print(f"graph (seed {args.seed}, degree {args.degree}): {dict(enumerate(graph))}")
    with tempfile.TemporaryDirectory(prefix="dagchain-ring-") as tmp:
        net = TestNetwork(Path(tmp))
        try:
            live, origin = run_live(net, graph, args.ring, args.blocks, args.txs)
        finally:
            net.cleanup()
    hop_ms, offset_ms = calibrate(live, origin, dist)
    first = [d for i in range(1, args.ring) if dist[i] == 1 for d in live.delays[i]]
    print(
        f"calibration (distance-1 nodes): per-hop {hop_ms:.1f} ms; origin offset (node 0's own "
        f"delay, median) {offset_ms:.1f} ms; live {live.blocks} blocks; distance-1 delay p10 "
        f"{_q(first, 0.1):.0f} / p50 {_q(first, 0.5):.0f} / p90 {_q(first, 0.9):.0f} ms, node 0 "
        f"p10 {_q(origin, 0.1):.0f} / p90 {_q(origin, 0.9):.0f} ms (the sim's delays are fixed)"
    )
    sim = run_sim(args.ring, args.blocks, hop_ms, offset_ms, args.seed, args.topology, args.degree)
    ok = report(live, sim, dist, args.tolerance)
    print(f"verdict: {'PASS' if ok else 'FAIL'} (every pooled row within {args.tolerance:.0%})")


if __name__ == "__main__":
    main()
