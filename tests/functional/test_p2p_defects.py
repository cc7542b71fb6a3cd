"""Peer-to-peer defects found by a hostile peer written from PROTOCOL.md (P1, P9, §11.7).

- §11.7: reaching ``ban_threshold`` closes with 4006, also for an orphan flood beyond the
  per-peer limit (P13), never with 1000.
- P3 (v2.1): a first frame other than ``hello``, or a second ``hello``, is +100, which reaches
  ``ban_threshold``: close 4006 (not P3's 1002), and the peer is banned.
- P9 "An unbacked claim (v2)": a peer claiming 2^200 work and answering every
  ``getmilestones`` with no headers gets at most 2 in 10 s; initial sync ends; mining goes on.
- P1: a frame of exactly ``max_frame`` (4 MiB) is accepted, one byte more closes 1009, on an
  inbound and on an outbound connection.
- ``GET /v1/peers`` ``best_milestone_height`` follows what the peer relays and is sent.
"""

import logging
import re
import time
from pathlib import Path

import msgpack
import pytest

from dagchain.blocks import Block
from dagchain.genesis import genesis_block
from dagchain.params import DEVNET
from p2p import wire
from tests.functional.framework import BlockFactory, FakePeer, TestNetwork, wait_until
from tests.functional.hostile import HostileServer
from tests.functional.test_wallet import Miner

log = logging.getLogger(__name__)

pytestmark = pytest.mark.integration

FLOOD_ROUNDS = 3


def orphan_chain(count: int, key: int) -> list[Block]:
    """``count`` blocks of one peer chain whose first block (the only link to what a node
    holds) is left out: each one is an orphan to a node that is sent only these."""
    factory = BlockFactory(miners=1, first_key=key)
    blocks = factory.mine(count + 1)
    return blocks[1:]


def _hello(node_id: bytes) -> wire.Hello:
    genesis = genesis_block(DEVNET).id
    return wire.Hello(
        proto=1,
        network=DEVNET.network_id,
        genesis=genesis,
        node=node_id,
        best=genesis,
        height=0,
        work=bytes(32),
        port=0,
        agent="fakepeer",
        time=int(time.time() * 1000),
    )


@pytest.mark.parametrize("case", ["first frame not hello", "second hello"])
def test_p3_violation_reaches_the_ban_threshold_and_closes_4006_not_1002(
    network: TestNetwork, case: str
) -> None:
    """P3 / §11.7 (PROTOCOL.md v2.1): +100 for a first frame other than ``hello`` or a second
    ``hello`` reaches ``ban_threshold`` (100), so the close is 4006 (banned), not 1002; a peer
    that sent a hello is refused 4005 when it comes back with the same node id."""
    (node,) = network.start(1)
    peer = FakePeer(node)
    try:
        if case == "first frame not hello":
            peer.connect(hello=False)
            peer.send(wire.Ping(1))
        else:
            peer.connect()
            assert not peer.is_closed(), f"closed with {peer.close_code} after one hello"
            peer.send(_hello(peer.node_id))
        peer.closed.wait(10)
        assert peer.is_closed(), f"the node kept a peer after a {case}"
        assert peer.close_code == wire.CLOSE_MISBEHAVING, f"closed with {peer.close_code}"
    finally:
        peer.close()
    if case == "second hello":
        again = FakePeer(node, node_id=peer.node_id)
        try:
            again.connect()
            again.closed.wait(10)
            assert again.close_code == wire.CLOSE_BANNED
        finally:
            again.close()


def test_an_orphan_flood_beyond_the_per_peer_limit_is_banned_with_4006(
    network: TestNetwork,
) -> None:
    (node,) = network.start(1)
    limit = DEVNET.orphan_peer_max_blocks
    for round_ in range(FLOOD_ROUNDS):
        # +5 per orphan beyond the per-peer limit (§11.7): 20 more reach the ban threshold;
        # new blocks each round (the pool still holds the last round's)
        blocks = orphan_chain(limit + 30, 300 + round_)
        flood = [wire.encode_message(wire.BlockMsg(b.raw)) for b in blocks]
        log.info(
            "Round %d: %d orphans from one peer (per-peer limit %d)", round_, len(flood), limit
        )
        peer = FakePeer(node)
        try:
            peer.connect()
            peer.send_many(flood)
            peer.closed.wait(30)
            assert peer.is_closed(), "the node kept the flooding peer"
            assert peer.close_code == wire.CLOSE_MISBEHAVING, f"closed with {peer.close_code}"
        finally:
            peer.close()
        again = FakePeer(node, node_id=peer.node_id)
        try:
            again.connect()
            again.closed.wait(10)
            assert again.close_code == wire.CLOSE_BANNED
        finally:
            again.close()


def test_a_peer_claiming_2_200_work_without_headers_gets_at_most_2_getmilestones_in_10_s(
    network: TestNetwork, tmp_path: Path
) -> None:
    """The required test of P9's unbacked claim, against a node that dials the hostile peer."""
    hostile = HostileServer(work=2**200)
    hostile.start()
    try:
        node = network.add_node(start=False)
        node.peers = [hostile.address]
        node.start()
        assert hostile.connected.wait(15), "the node did not dial the hostile peer"
        started = time.monotonic()
        miner = Miner(node, tmp_path / "miner" / "data", rate=4)
        try:
            log.info("Initial sync must end although the peer still claims 2^200")
            node.wait(lambda n: n.status().synced, 10, "to end initial sync")
            height = node.best()[1]
            log.info("The node keeps mining")
            node.wait(lambda n: n.best()[1] >= height + 3, 30, "to mine 3 more milestones")
            wait_until(lambda: time.monotonic() - started >= 10, 15, "10 s after the hello")
        finally:
            miner.stop()
        in_10_s = [
            t
            for t, m in list(hostile.received)
            if isinstance(m, wire.GetMilestones) and t - started <= 10
        ]
        log.info(
            "getmilestones in 10 s: %d, getpending in all: %d",
            len(in_10_s),
            hostile.count(wire.GetPending),
        )
        assert len(in_10_s) <= 2
        assert hostile.count(wire.GetPending) <= 2
        assert not hostile.closed.is_set(), "no score: the claim alone is not misbehaviour"
        (row,) = node.peer_rows()
        assert row.score == 0
    finally:
        hostile.stop()


def padded_frame(size: int) -> bytes:
    """A frame of exactly ``size`` bytes: a message of a type nobody knows (ignored, P2)."""
    base = len(msgpack.packb(["x-pad", {"pad": b""}], use_bin_type=True))
    pad = size - base - 5  # a bin 32 header is 5 bytes; the empty pad had a 2-byte bin 8 one
    frame: bytes = msgpack.packb(["x-pad", {"pad": b"\x00" * (pad + 2)}], use_bin_type=True)
    assert len(frame) == size
    return frame


def test_a_frame_of_exactly_4_mib_is_accepted_and_one_byte_more_closes_1009(
    network: TestNetwork,
) -> None:
    hostile = HostileServer(work=0, height=0)
    hostile.start()
    try:
        node = network.add_node(start=False)
        node.peers = [hostile.address]
        node.start()
        assert hostile.connected.wait(15), "the node did not dial the hostile peer"
        log.info("Inbound: 4 MiB exactly is accepted (ignored: unknown type), +1 closes 1009")
        peer = FakePeer(node)
        try:
            peer.connect()
            peer.send_raw(padded_frame(wire.MAX_FRAME))
            peer.barrier(20)
            assert not peer.is_closed()
            scores = {r.node_id: r.score for r in node.peer_rows()}
            assert scores[peer.node_id.hex()] == 0
            peer.send_raw(padded_frame(wire.MAX_FRAME + 1))
            assert peer.closed.wait(20), "the node kept the connection"
            # the node refuses the frame from its header and closes 1009; the peer sees 1006
            # instead when the node's socket goes while the peer is still writing the 4 MiB
            # (the race of the outbound case below, seen once in CI), so the node's log says
            # which peer it refused and why
            assert peer.close_code in (wire.CLOSE_TOO_BIG, 1006), peer.close_code
            node.wait(
                lambda n: (
                    re.search(r"peer inb-\S+: frame over max_frame \(P1\)", n.log_tail(200))
                    is not None
                ),
                10,
                "to log the inbound refusal",
            )
        finally:
            peer.close()
        log.info("Outbound (the node dialed): the same limits")
        hostile.send_raw(padded_frame(wire.MAX_FRAME))
        nonce_before = hostile.count(wire.Pong)
        hostile.send_raw(wire.encode_message(wire.Ping(77)))
        wait_until(lambda: hostile.count(wire.Pong) > nonce_before, 20, "the node's pong")
        assert not hostile.closed.is_set()
        hostile.send_raw(padded_frame(wire.MAX_FRAME + 1))
        assert hostile.closed.wait(20), "the node kept the connection"
        # the node (the client) refuses the frame from its header and sends 1009; the server
        # sees 1006 instead when the socket goes while it is still writing the 4 MiB
        assert hostile.close_code in (wire.CLOSE_TOO_BIG, 1006), hostile.close_code
        node.wait(
            lambda n: (
                re.search(r"peer out-\S+: frame over max_frame \(P1\)", n.log_tail(200)) is not None
            ),
            10,
            "to log the outbound refusal",
        )
    finally:
        hostile.stop()


def test_peers_best_milestone_height_follows_what_the_peer_relays_and_is_sent(
    network: TestNetwork,
) -> None:
    nodes = network.start(3, topology="line")
    network.wait_connected(nodes)
    factory = BlockFactory(miners=2)
    blocks = factory.mine_milestones(6)
    for block in blocks:
        nodes[0].submit_block(block)
    height = factory.chain.best_height
    network.wait_same_best(nodes, factory.chain.best_id.hex(), timeout=30)
    for node in nodes:
        node.wait(
            lambda n: all(r.best_milestone_height == height for r in n.peer_rows()),
            15,
            f"to show every peer at height {height}",
        )
