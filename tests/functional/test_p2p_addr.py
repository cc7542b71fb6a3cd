"""P12 address gossip on real nodes (PROTOCOL.md §11.5; docs/p2p.md).

Node A dials B. Node C is told only about A: it asks A for addresses (``getaddr``), learns B's
from the ``addr`` answer and dials B by itself. A node started with ``--no-discovery`` neither
asks for nor hands out addresses and dials only its ``--peer`` entries, even when a peer sends
it an address.
"""

import logging
import time

import pytest

from p2p import wire
from tests.functional.framework import FakePeer, NodeProcess, TestNetwork, wait_until

log = logging.getLogger(__name__)

pytestmark = pytest.mark.integration

LEARN_TIMEOUT_S = 10.0
NO_DIAL_WINDOW_S = 3.0
"""Longer than the dial loop's 1 s tick plus a getaddr round trip (C needs about 1-2 s)."""


def outbound(node: NodeProcess) -> set[str]:
    """Addresses ``node`` dialed and is connected to."""
    return {r.address for r in node.peer_rows() if r.direction == "outbound"}


def addr_rows(peer: FakePeer) -> set[tuple[str, int]]:
    return {(h, p) for m in peer.received if isinstance(m, wire.Addr) for h, p, _ in m.addrs}


def test_a_node_learns_a_peer_of_its_peer_and_no_discovery_turns_gossip_off(
    network: TestNetwork,
) -> None:
    b = network.add_node()
    a = network.add_node([b], discovery=True)
    network.wait_connected([a, b])

    log.info("C knows only A; it learns B's address by getaddr/addr and dials B")
    c = network.add_node([a], discovery=True)
    started = time.monotonic()
    c.wait(lambda n: b.p2p_address in outbound(n), LEARN_TIMEOUT_S, "to dial B on its own")
    log.info("C connected to B %.1f s after it answered the API", time.monotonic() - started)
    assert outbound(c) >= {a.p2p_address, b.p2p_address}

    log.info("A (discovery on) asks a new peer for addresses and answers getaddr with B's")
    probe = FakePeer(a)
    try:
        probe.connect()
        probe.wait_for(lambda m: isinstance(m, wire.GetAddr), 5, "A's getaddr")
        probe.send(wire.GetAddr())
        probe.wait_for(lambda m: isinstance(m, wire.Addr), 5, "A's addr answer")
        assert ("127.0.0.1", b.p2p_port) in addr_rows(probe)
    finally:
        probe.close()

    log.info("D has --no-discovery: no getaddr, no addr, no dial beyond its --peer entries")
    d = network.add_node([a])
    network.wait_connected([d])
    probe = FakePeer(d)
    try:
        probe.connect()
        probe.send(wire.GetAddr())
        probe.barrier()
        # an unsolicited addr of one entry is within P12's limits: accepted, and ignored
        probe.send(wire.Addr((("127.0.0.1", b.p2p_port, int(time.time())),)))
        probe.barrier()
        with pytest.raises(AssertionError):
            wait_until(lambda: outbound(d) != {a.p2p_address}, NO_DIAL_WINDOW_S, "D to dial")
        assert outbound(d) == {a.p2p_address}
        assert not any(isinstance(m, wire.GetAddr | wire.Addr) for m in probe.received)
        assert not probe.is_closed()
    finally:
        probe.close()
