"""fan_out (set difference, then the few peers in order) equals the plain walk over every link."""

import math
import random

from simulator.knowledge import Knowledge
from simulator.network import Network


def _walk_every_link(
    net: Network,
    src: int,
    size: int,
    now_ms: float,
    exclude: int,
    known: set[int],
    pending: dict[int, float],
) -> list[tuple[int, float]]:
    """The per-link reference: same skips, arithmetic and uplink booking, link by link."""
    out = []
    for link in net.neighbours[src]:
        peer = link.peer
        if peer == exclude or peer in known:
            continue
        earlier = pending.get(peer)
        if earlier is not None and earlier <= now_ms + link.latency_ms + net.processing_ms:
            continue
        at = net.arrival_ms(src, link, size, now_ms)
        if earlier is not None and earlier <= at:
            continue
        pending[peer] = at
        out.append((peer, at))
    return out


def test_fan_out_equals_the_walk_over_every_link_in_link_order() -> None:
    rng = random.Random(3)
    for delay, bandwidth in (("regions2019", 0.0), ("uniform:0.01:0.3", 2.0), ("fixed:0.05", 0.0)):
        fast = Network(300, 8, delay, bandwidth, 2.0, random.Random(9))
        slow = Network(300, 8, delay, bandwidth, 2.0, random.Random(9))
        now = 0.0
        for _ in range(400):
            src = rng.randrange(300)
            peers = [link.peer for link in slow.neighbours[src]]
            known = {p for p in peers if rng.random() < 0.6}
            knowledge = Knowledge(300)
            for p in known:
                knowledge.learn(p, b"k")
            exclude = rng.choice([*peers, -1, src])
            pending = {
                p: now + rng.choice((0.0, 50.0, 500.0, 1e9)) for p in peers if rng.random() < 0.3
            }
            size = rng.choice((250, 1_500, 60_000))
            want_pending = dict(pending)
            want = _walk_every_link(slow, src, size, now, exclude, known, want_pending)
            before = dict(pending)
            dropped: set[int] = set()
            bits = knowledge.holders.get(b"k")
            sends = fast.fan_out(src, size, now, exclude, bits, pending, b"k", b"r", dropped)
            assert [(args[0], at) for at, args in sends] == want
            assert pending == want_pending
            # Exactly the copies in flight that a new one overtakes are dropped.
            assert dropped == {id(before[p]) for p, _ in want if p in before}
            assert len({id(at) for at, _ in sends}) == len(sends)  # fresh time objects
            now += rng.uniform(0, 30)
        assert (fast.messages, fast.bytes_sent) == (slow.messages, slow.bytes_sent)
        assert fast.messages > 0
        assert all(not math.isnan(t) for t in fast._upload_free)
        assert fast._upload_free == slow._upload_free
