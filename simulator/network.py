"""The network model: a topology (random, or a ring), link latencies and per-node bandwidth.

Per-hop delay = upload queueing at the sender + size / link rate + link latency + processing.
The link rate is min(sender's upload, receiver's download); a node's uplink sends one message at a
time (FIFO), so a node relaying a large block to many peers delays its later sends. With
unlimited bandwidth (0) the transfer term and the queue vanish.

Delay models (``network.delay``): ``fixed:S`` (every link S seconds), ``uniform:LO:HI`` (each
link's latency drawn once, uniformly, in seconds) and ``regions2019`` (six regions with the 2019
Bitcoin latency and bandwidth tables used by SimBlock; docs: shared/data/regions.md). Each link's
latency there is the table mean times a lognormal jitter of mean 1 (sigma 0.2), bounded, as the
data notes advise for small intra-region means.

``Network.transmit`` (the node relay's every send) runs compiled when simulator._engine is built
and the engine is the compiled one (``simulator.engine.ENGINE_KERNEL``): ``_engine.Uplinks``, the
same double operations in the same order on this object's own lists.
"""

import itertools
import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import final

from simulator.engine import ENGINE_BUILT, ENGINE_KERNEL
from simulator.knowledge import node_ids

if ENGINE_BUILT:
    from simulator._engine import Uplinks

REGIONS = ("NA", "EU", "SA", "AP", "JP", "AU")
REGION_LATENCY_MS = (
    (32, 124, 184, 198, 151, 189),
    (124, 11, 227, 237, 252, 294),
    (184, 227, 88, 325, 301, 322),
    (198, 237, 325, 85, 58, 198),
    (151, 252, 301, 58, 12, 126),
    (189, 294, 322, 198, 126, 16),
)
REGION_DOWNLOAD_MBPS = (52.0, 40.0, 18.0, 22.8, 22.8, 29.9)
REGION_UPLOAD_MBPS = (19.2, 20.7, 5.8, 15.7, 10.2, 11.3)
REGION_SHARE = (0.3316, 0.4998, 0.0090, 0.1177, 0.0224, 0.0195)
JITTER_SIGMA = 0.2
"""Lognormal sigma of a link's latency around its region-pair mean."""
JITTER_BOUND = 3.0
"""A link's latency stays within [mean / 3, 3 * mean]."""
BITS_PER_MS_PER_MBPS = 1000.0


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a connection: the peer and the one-way latency."""

    peer: int
    latency_ms: float


@final
class Network:
    """Topology plus delay model. ``neighbours[i]`` lists node i's links."""

    def __init__(
        self,
        nodes: int,
        degree: int,
        delay: str,
        bandwidth_mbps: float,
        processing_ms: float,
        rng: random.Random,
        topology: str = "random",
        kernel: str = ENGINE_KERNEL,
    ) -> None:
        """``kernel``: ``"c"`` runs :meth:`transmit` compiled (simulator/_engine.c, the same
        arithmetic), ``"python"`` as written here (default: the engine's choice)."""
        self.nodes = nodes
        self.processing_ms = processing_ms
        self.region = [0] * nodes
        self.upload = [math.inf] * nodes  # bits per ms
        self.download = [math.inf] * nodes
        self._delay = delay
        if delay == "regions2019":
            self.region = rng.choices(range(len(REGIONS)), weights=REGION_SHARE, k=nodes)
            if bandwidth_mbps <= 0:
                # One float object per region, shared by its nodes (fewer cache misses in fan_out).
                up = [mbps * BITS_PER_MS_PER_MBPS for mbps in REGION_UPLOAD_MBPS]
                down = [mbps * BITS_PER_MS_PER_MBPS for mbps in REGION_DOWNLOAD_MBPS]
                self.upload = [up[r] for r in self.region]
                self.download = [down[r] for r in self.region]
        if bandwidth_mbps > 0:
            rate = bandwidth_mbps * BITS_PER_MS_PER_MBPS
            self.upload = [rate] * nodes
            self.download = [rate] * nodes
        self._upload_free = [0.0] * nodes
        self.neighbours: list[list[Link]] = [[] for _ in range(nodes)]
        self._build(degree, rng, topology)
        self._bytes_sent = 0
        self._messages = 0
        self._uplinks = (
            Uplinks(self._latency, self.upload, self.download, self._upload_free, processing_ms)
            if kernel == "c"
            else None
        )
        """``transmit`` compiled (simulator/_engine.c; it keeps its own counts), or None."""
        if self._uplinks is not None:
            self.transmit = self._uplinks.transmit  # type: ignore[method-assign]
        self.sent_by_type: Counter[tuple[int, str]] | None = None
        """Set to a Counter to count the relay's messages by (sender, wire type)
        (``network.relay = "node"``; bench/ring_compare.py); off in runs."""

    def _build(self, degree: int, rng: random.Random, topology: str) -> None:
        """``random``: a random tree (so the graph is connected) plus ``degree`` outbound links
        per node; ``ring``: node i linked to its two neighbours i +- 1 (mod n), ``degree``
        unused. Latencies are drawn per edge in ascending edge order either way."""
        edges = (
            _ring_edges(self.nodes)
            if topology == "ring"
            else _random_edges(self.nodes, degree, rng)
        )
        n = self.nodes
        ids = node_ids(n)
        for a, b in sorted(edges):
            latency = self._draw_latency(a, b, rng)
            self.neighbours[a].append(Link(ids[b], latency))
            self.neighbours[b].append(Link(ids[a], latency))
        # ``sorted(edges)`` gives every node its links in ascending peer order, so "link order"
        # (the order of the uplink queue) is "peer order": fan_out sorts the few peers it sends
        # to instead of walking every link.
        for links in self.neighbours:
            if any(a.peer >= b.peer for a, b in itertools.pairwise(links)):  # pragma: no cover
                raise RuntimeError("links are not in ascending peer order")
        self._peers: list[frozenset[int]] = [
            frozenset(link.peer for link in links) for links in self.neighbours
        ]
        self._latency: list[dict[int, float]] = [
            {link.peer: link.latency_ms for link in links} for links in self.neighbours
        ]

    @property
    def messages(self) -> int:
        """Messages sent so far (frames: a batch sent together counts each message)."""
        uplinks = self._uplinks
        return self._messages + (0 if uplinks is None else uplinks.messages)

    @messages.setter
    def messages(self, value: int) -> None:
        uplinks = self._uplinks
        self._messages = value - (0 if uplinks is None else uplinks.messages)

    def uplink_backlog_ms(self, node: int, now_ms: float) -> float:
        """How long a message ``node`` queues now would wait for its uplink (0 when idle)."""
        return max(0.0, self._upload_free[node] - now_ms)

    @property
    def bytes_sent(self) -> int:
        """Bytes of those messages."""
        uplinks = self._uplinks
        return self._bytes_sent + (0 if uplinks is None else uplinks.bytes_sent)

    @bytes_sent.setter
    def bytes_sent(self, value: int) -> None:
        uplinks = self._uplinks
        self._bytes_sent = value - (0 if uplinks is None else uplinks.bytes_sent)

    def charge(self, messages: int, bytes_sent: int) -> None:
        """Count ``messages`` sent elsewhere (the tx flow's), of ``bytes_sent`` bytes in all."""
        self._messages += messages
        self._bytes_sent += bytes_sent

    @property
    def upload_free(self) -> list[float]:
        """``upload_free[v]``: when v's uplink has sent all it was given (the FIFO the block
        messages and the tx flow, simulator/txflow.py, share)."""
        return self._upload_free

    @property
    def latency_ms(self) -> list[dict[int, float]]:
        """``latency_ms[a][b]``: the one-way latency of the link a-b (ms)."""
        return self._latency

    def _draw_latency(self, a: int, b: int, rng: random.Random) -> float:
        kind, _, rest = self._delay.partition(":")
        if kind == "fixed":
            return float(rest) * 1000.0
        if kind == "uniform":
            lo, hi = (float(x) * 1000.0 for x in rest.split(":"))
            return rng.uniform(lo, hi)
        mean = float(REGION_LATENCY_MS[self.region[a]][self.region[b]])
        jitter = math.exp(rng.gauss(-(JITTER_SIGMA**2) / 2, JITTER_SIGMA))
        return mean * min(JITTER_BOUND, max(1 / JITTER_BOUND, jitter))

    def arrival_ms(self, src: int, link: Link, size: int, now_ms: float) -> float:
        """When a ``size``-byte message sent now from ``src`` over ``link`` is processed.

        Books the sender's uplink for the transfer time (FIFO upload queue).
        """
        self._messages += 1
        self._bytes_sent += size
        rate = min(self.upload[src], self.download[link.peer])
        if rate == math.inf:
            return now_ms + link.latency_ms + self.processing_ms
        start = max(now_ms, self._upload_free[src])
        done = start + size * 8 / rate
        self._upload_free[src] = done
        return done + link.latency_ms + self.processing_ms

    def transmit(self, src: int, dst: int, size: int, count: int, now_ms: float) -> float:
        """When ``count`` messages of ``size`` bytes in all, sent together now from ``src`` to
        neighbour ``dst``, are processed there (``network.relay = "node"``).

        The uplink sends them back to back (FIFO with everything else ``src`` sends), so they
        land together once the last byte is in; otherwise as :meth:`arrival_ms`.
        """
        self._messages += count
        self._bytes_sent += size
        latency = self._latency[src][dst]
        up, down = self.upload[src], self.download[dst]
        rate = up if up < down else down
        if rate == math.inf:
            return now_ms + latency + self.processing_ms
        start = self._upload_free[src]
        if start < now_ms:
            start = now_ms
        done = start + size * 8 / rate
        self._upload_free[src] = done
        return done + latency + self.processing_ms

    def fan_out(
        self,
        src: int,
        size: int,
        now_ms: float,
        exclude: int,
        known: bytearray | None,
        pending: dict[int, float],
        key: bytes,
        raw: bytes,
        dropped: set[int],
    ) -> list[tuple[float, tuple[int, bytes, bytes, int]]]:
        """Push one ``size``-byte item from ``src`` to its neighbours.

        Returns ``(arrival, (peer, key, raw, src))`` per send, ready for
        :meth:`simulator.engine.Engine.schedule_each`; each is also entered in ``pending``.

        Skipped, in link order: ``exclude``, peers in ``known`` (a
        :class:`simulator.knowledge.Knowledge` bitmap), and peers whose copy in flight
        (``pending``: peer -> arrival) lands no later than ours could even without queueing (no
        getdata to us, so no bytes). A peer whose copy in flight lands no later than our
        computed arrival is still charged the transfer (the send was started) but not
        scheduled. Same arithmetic, order and accounting as :meth:`arrival_ms` per link.

        A copy in flight that ours overtakes loses the race: by the time it lands the peer knows
        the item from ours, so it would change nothing there. Its event is dropped
        (``id`` of its arrival time, the float in ``pending``, goes to ``dropped``: the engine's
        :attr:`simulator.engine.Engine.dropped`); the uplink time it booked stays booked.
        Every returned arrival is a fresh float, as dropping requires.
        """
        peers = self._peers[src]
        todo = peers if known is None else [p for p in peers if not known[p >> 3] >> (p & 7) & 1]
        if not todo:
            return []
        out: list[tuple[float, tuple[int, bytes, bytes, int]]] = []
        processing = self.processing_ms
        up = self.upload[src]
        free = self._upload_free
        latency_to = self._latency[src]
        download = self.download
        get_pending = pending.get
        drop = dropped.add
        sent = 0
        for peer in sorted(todo) if len(todo) > 1 else todo:
            if peer == exclude:
                continue
            latency = latency_to[peer]
            earlier = get_pending(peer)
            if earlier is not None and earlier <= now_ms + latency + processing:
                continue  # most peers not known yet have a copy in flight that lands sooner
            sent += 1
            down = download[peer]
            rate = up if up < down else down
            if rate == math.inf:
                at = now_ms + latency + processing
            else:
                start = free[src]
                if start < now_ms:
                    start = now_ms
                done = start + size * 8 / rate
                free[src] = done
                at = done + latency + processing
            if earlier is not None:
                if earlier <= at:
                    continue
                drop(id(earlier))
            pending[peer] = at
            out.append((at, (peer, key, raw, src)))
        if sent:
            self._messages += sent
            self._bytes_sent += size * sent
        return out


def _random_edges(n: int, degree: int, rng: random.Random) -> set[tuple[int, int]]:
    edges: set[tuple[int, int]] = set()
    order = list(range(n))
    rng.shuffle(order)
    for i in range(1, n):
        a, b = order[i], order[rng.randrange(i)]
        edges.add((min(a, b), max(a, b)))
    if degree >= n - 1:
        return {(a, b) for a in range(n) for b in range(a + 1, n)}
    for a in range(n):
        for b in rng.sample(range(n - 1), degree):
            b = b if b < a else b + 1
            edges.add((min(a, b), max(a, b)))
    return edges


def _ring_edges(n: int) -> set[tuple[int, int]]:
    """Node i and i + 1 (mod n): n links for n >= 3, one for two nodes, none for one."""
    return {(min(i, (i + 1) % n), max(i, (i + 1) % n)) for i in range(n) if (i + 1) % n != i}


__all__ = ["REGIONS", "Link", "Network"]
