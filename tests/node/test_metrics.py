"""NodeMetrics: the confirmed-TPS gauge keeps only its window, whether or not /metrics is read."""

from dagchain.mempool import Mempool
from dagchain.params import DEVNET
from node.metrics import TPS_WINDOW_S, NodeMetrics
from p2p.service import NodeEvent, NodeService
from tests.dagchain.chainkit import Node


def test_tps_window_stays_bounded_without_scrapes() -> None:
    # issue 26: the samples behind dagchain_tps were trimmed only when /metrics was read, so a
    # node nobody scraped kept one sample per milestone for ever
    node = Node(DEVNET)
    now = [0.0]
    metrics = NodeMetrics(
        NodeService(DEVNET, node.chain, Mempool(DEVNET), lambda: node.now_ms),
        lambda: 0,
        clock=lambda: now[0],
    )
    for _ in range(3_000):  # 50 minutes of one milestone a second with 4 VALID txs each
        now[0] += 1.0
        metrics.on_event(NodeEvent("milestone", data={"valid_txs": 4}))
    assert len(metrics._confirmed) <= TPS_WINDOW_S + 1  # the state under test is private
    assert metrics.tps() == 4 * 61 / TPS_WINDOW_S  # the last 60 s, both ends included
