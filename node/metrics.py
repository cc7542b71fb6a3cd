"""Prometheus metrics of one node (``GET /metrics``), in a registry of its own (no globals)."""

import time
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable, Mapping
from typing import final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from node.net.peer import FrameCounts
from p2p.service import NodeEvent, NodeService

__all__ = ["CONTENT_TYPE", "NodeMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TPS_WINDOW_S = 60.0
PROPAGATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _RejectedCollector(Collector):
    """``dagchain_rejected_total{kind, reason}`` read from the service's counters at scrape."""

    def __init__(self, service: NodeService) -> None:
        self._service = service

    def collect(self):  # type: ignore[no-untyped-def]  # prometheus' own signature
        family = CounterMetricFamily(
            "dagchain_rejected", "Rejected blocks and txs by rule", labels=["kind", "reason"]
        )
        for key, count in sorted(self._service.rejected.items()):
            kind, _, reason = key.partition(":")
            family.add_metric([kind, reason], count)
        yield family


class _SentCollector(Collector):
    """``dagchain_p2p_messages_sent_total{type}`` and ``dagchain_p2p_bytes_sent_total{type}``,
    read from the peer manager's :class:`~node.net.peer.FrameCounts` at scrape."""

    def __init__(self, sent: FrameCounts) -> None:
        self._sent = sent

    def collect(self):  # type: ignore[no-untyped-def]  # prometheus' own signature
        frames = CounterMetricFamily(
            "dagchain_p2p_messages_sent",
            "P2P frames written to peers, by wire message type",
            labels=["type"],
        )
        size = CounterMetricFamily(
            "dagchain_p2p_bytes_sent",
            "Bytes of the P2P frames written to peers (message encoding), by type",
            labels=["type"],
        )
        for kind, count in sorted(self._sent.frames.items()):
            frames.add_metric([kind], count)
            size.add_metric([kind], self._sent.bytes[kind])
        yield frames
        yield size


class _InternalErrorsCollector(Collector):
    """``dagchain_internal_errors_total{where}``: exceptions a loop or the API caught, logged
    and survived (a bug to report), read at scrape from the counts of their owners."""

    def __init__(self, counts: Mapping[str, Mapping[str, int]]) -> None:
        self._counts = counts

    def collect(self):  # type: ignore[no-untyped-def]  # prometheus' own signature
        family = CounterMetricFamily(
            "dagchain_internal_errors",
            "Unexpected exceptions caught, logged with a traceback and survived, by place",
            labels=["where"],
        )
        for owner, counts in sorted(self._counts.items()):
            for place, count in sorted(counts.items()):
                family.add_metric([f"{owner}:{place}"], count)
        yield family


@final
class NodeMetrics:
    """Counters fed by NodeEvents, gauges read at scrape time."""

    def __init__(
        self,
        service: NodeService,
        peer_count: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
        p2p_sent: FrameCounts | None = None,
        p2p_errors: Mapping[str, int] | None = None,
    ) -> None:
        """``p2p_sent``: the peer manager's frame counts (None without P2P: the families
        are then listed with no samples). ``p2p_errors``: the peer manager's caught exceptions
        by step (``PeerManager.errors``)."""
        self.registry = CollectorRegistry()
        self._service = service
        self._clock = clock
        self._confirmed: deque[tuple[float, int]] = deque()
        r = self.registry
        self.blocks = Counter("dagchain_blocks_accepted", "Blocks accepted", registry=r)
        self.milestones = Counter(
            "dagchain_milestones_applied", "Milestones applied to the best chain", registry=r
        )
        self.reorgs = Counter("dagchain_reorgs", "Best-chain reorganisations", registry=r)
        self.txs = Counter("dagchain_txs_accepted", "Txs admitted to the mempool", registry=r)
        self.confirmed_txs = Counter(
            "dagchain_txs_confirmed", "VALID txs in applied level sets", registry=r
        )
        self.propagation = Histogram(
            "dagchain_block_propagation_seconds",
            "Block arrival time minus its timestamp, for blocks from peers",
            buckets=PROPAGATION_BUCKETS,
            registry=r,
        )
        chain, pool = service.chain, service.mempool
        gauges: list[tuple[str, str, Callable[[], float]]] = [
            ("dagchain_best_height", "Best milestone height", lambda: chain.best_height),
            ("dagchain_pending_blocks", "Pending blocks", lambda: len(chain.state.pending)),
            ("dagchain_stored_blocks", "Accepted blocks", lambda: chain.state.block_count),
            ("dagchain_mempool_txs", "Mempool transactions", lambda: len(pool)),
            ("dagchain_mempool_bytes", "Mempool bytes", lambda: pool.total_bytes),
            ("dagchain_orphans", "Blocks in the orphan pool", lambda: len(chain.orphans)),
            ("dagchain_peers", "Connected peers", lambda: peer_count()),
            ("dagchain_tps", "Confirmed txs per second over the last 60 s", self.tps),
        ]
        for name, text, fn in gauges:
            Gauge(name, text, registry=r).set_function(fn)
        r.register(_RejectedCollector(service))
        r.register(_SentCollector(p2p_sent if p2p_sent is not None else FrameCounts()))
        self.api_errors: Tally[str] = Tally()
        """Requests the API's middleware answered with 500 (an unexpected exception), by route."""
        errors = {"api": self.api_errors, "p2p": p2p_errors if p2p_errors is not None else {}}
        r.register(_InternalErrorsCollector(errors))
        service.subscribe(self.on_event)

    def on_event(self, event: NodeEvent) -> None:
        """Count one service event."""
        if event.kind == "block":
            self.blocks.inc()
            if event.data.get("peer") not in ("local", "api"):
                self.propagation.observe(max(0, int(event.data.get("delay_ms", 0))) / 1000)
        elif event.kind == "milestone":
            self.milestones.inc()
            valid = int(event.data.get("valid_txs", 0))
            self.confirmed_txs.inc(valid)
            now = self._clock()
            self._confirmed.append((now, valid))
            self._trim(now)  # bounded even when nobody reads /metrics
        elif event.kind == "reorg":
            self.reorgs.inc()
        elif event.kind == "tx":
            self.txs.inc()

    def tps(self) -> float:
        """VALID txs confirmed per second over the last 60 s."""
        self._trim(self._clock())
        return sum(n for _, n in self._confirmed) / TPS_WINDOW_S

    def _trim(self, now: float) -> None:
        """Forget the milestones older than the TPS window."""
        while self._confirmed and now - self._confirmed[0][0] > TPS_WINDOW_S:
            self._confirmed.popleft()

    def render(self) -> bytes:
        """The Prometheus text format."""
        return generate_latest(self.registry)
