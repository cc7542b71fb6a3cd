"""``network.topology``: ``random`` (the default, unchanged) and ``ring`` (bench/ring_compare.py).

A ring is the live network benchmark's shape (bench/network.py: node i dials node i - 1), so the
simulator can be checked against real daemons on the same graph.
"""

import hashlib
import random
from collections import Counter

import pytest

from simulator.network import Network
from simulator.scenario import ScenarioError, load_scenario
from simulator.simulation import Simulation

RING = 10


def _fingerprint(net: Network) -> str:
    text = repr([[(x.peer, round(x.latency_ms, 9)) for x in links] for links in net.neighbours])
    return hashlib.sha256((text + repr(net.region)).encode()).hexdigest()[:16]


def test_the_random_topology_is_the_one_drawn_before_the_key_existed() -> None:
    # Fingerprints taken with simulator/network.py as it was before network.topology: a seed
    # draws the same links and latencies, so existing runs reproduce byte for byte.
    shapes = ((30, 4, "uniform:0.01:0.2"), (12, 20, "regions2019"), (50, 8, "fixed:0.05"))
    got = [
        _fingerprint(Network(n, degree, delay, 0.0, 2.0, random.Random(7)))
        for n, degree, delay in shapes
    ]
    assert got == ["f1c9102a811dec2e", "9275c6df7c0d4b0a", "e692dae527ecff9c"]
    assert load_scenario(None).network.topology == "random"


def test_a_ring_links_each_node_to_its_two_neighbours_only() -> None:
    net = Network(RING, 8, "fixed:0.02", 0.0, 2.0, random.Random(1), "ring")
    for i, links in enumerate(net.neighbours):
        assert [x.peer for x in links] == sorted({(i - 1) % RING, (i + 1) % RING})
        assert all(x.latency_ms == 20.0 for x in links)
    assert [
        len(x) for x in Network(2, 8, "fixed:0", 0.0, 0.0, random.Random(1), "ring").neighbours
    ] == [1, 1]


def test_a_block_mined_at_node_0_of_a_ring_arrives_one_hop_delay_per_ring_hop() -> None:
    scenario = load_scenario(
        None,
        [
            'network.topology="ring"',
            'network.delay="fixed:0.02"',
            "network.processing_ms=3",
            "miners.count=1",
            "chain.block_rate=4",
            "chain.milestone_interval_s=1",
        ],
        nodes=RING,
        duration_s=3,
        seed=2,
    )
    sim = Simulation(scenario)
    arrivals: dict[tuple[bytes, int], float] = {}
    sim.recorder.arrivals = arrivals
    sent: Counter[tuple[int, str]] = Counter()
    sim.network.sent_by_type = sent
    sim.run()
    blocks = [b for b, rec in sim.recorder.blocks.items() if rec.miner == 0]
    assert len(blocks) >= 3
    for block in blocks:
        mined = sim.recorder.blocks[block].sent_ms
        for node in range(RING):
            hops = min(node, RING - node)
            assert arrivals[(block, node)] - mined == pytest.approx(hops * 23.0)
    # every node pushes the block on to its other neighbour (relay_push = 3 > 2 peers): one
    # copy per link and direction it travels, 11 on a ring of 10 (node 5 gets one from each side
    # and passes neither back), and no inv or getdata
    kinds = {kind for _, kind in sent}
    assert kinds == {"block"}
    assert sum(sent.values()) == 11 * len(blocks)


def test_an_unknown_topology_is_named() -> None:
    with pytest.raises(ScenarioError, match=r"network\.topology"):
        load_scenario(None, ['network.topology="star"'])
