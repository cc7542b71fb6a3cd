"""Scenario 5, hostile peer: bad frames and blocks get a peer banned; honest work goes on."""

import dataclasses
import hashlib
import logging
from collections.abc import Callable

import msgpack
import pytest

from dagchain.blocks import NONCE_OFFSET, Block, make_block
from p2p import wire
from tests.dagchain.builders import address_of_secret, build_block, secret_of
from tests.functional.framework import BlockFactory, FakePeer, NodeProcess, TestNetwork

log = logging.getLogger(__name__)

pytestmark = pytest.mark.integration


def bad_pow_block(factory: BlockFactory) -> Block:
    """A block whose id exceeds the devnet block target (1 hash in 65,536 does)."""
    good = build_block(
        factory.chain, previous=factory.chain.genesis_id, register=address_of_secret(secret_of(9))
    )
    limit = factory.chain.best_snapshot.blk_target
    prefix = good.header.encode()[:NONCE_OFFSET]
    nonce = 0
    while True:
        h = hashlib.blake2b(prefix + nonce.to_bytes(8, "little"), digest_size=32).digest()
        if int.from_bytes(h, "little") > limit:
            break
        nonce += 1
    header = dataclasses.replace(good.header, nonce=nonce)
    return make_block(header, good.tip_links, good.txs)


def attack(
    node: NodeProcess, what: str, act: Callable[[FakePeer], None], *close_codes: int
) -> FakePeer:
    """Connect a fake peer, run ``act``, and require the node to close and ban it."""
    log.info("Hostile peer: %s", what)
    peer = FakePeer(node)
    try:
        peer.connect()
        act(peer)
        peer.closed.wait(15)
        assert peer.is_closed(), f"{what}: the node kept the connection"
        assert peer.close_code in close_codes, f"{what}: closed with {peer.close_code}"
        again = FakePeer(node, node_id=peer.node_id)
        try:
            again.connect()
            again.closed.wait(10)
            assert again.close_code == wire.CLOSE_BANNED, f"{what}: not banned ({again.close_code})"
        finally:
            again.close()
    finally:
        peer.close()
    return peer


def test_hostile_peers_are_banned_while_honest_sync_goes_on(network: TestNetwork) -> None:
    honest, target = network.start(2)
    network.wait_connected([honest, target])
    factory = BlockFactory(miners=2)
    for block in factory.mine(20):
        honest.submit_block(block)

    def malformed(peer: FakePeer) -> None:
        for _ in range(3):
            peer.send_raw(b"\xc1\xc1")
            peer.send_text("not binary")
            peer.send_raw(msgpack.packb(["ping", {"nonce": "x"}]))

    def oversized(peer: FakePeer) -> None:
        peer.send_raw(wire.encode_message(wire.BlockMsg(b"\x00" * (wire.MAX_FRAME + 10))))

    def bad_pow(peer: FakePeer) -> None:
        peer.send(wire.BlockMsg(bad_pow_block(factory).raw))

    def unsolicited(peer: FakePeer) -> None:
        for _ in range(12):
            peer.send(wire.Milestones(()))
            peer.send(wire.Pending(()))

    def inv_flood(peer: FakePeer) -> None:
        item = ((1, b"\x07" * 32),)
        frame = wire.encode_message(wire.Inv(item))
        peer.send_many([frame] * 6_000)

    banned = wire.CLOSE_MISBEHAVING
    attack(target, "malformed and text frames", malformed, banned)
    # 1009, or 1006 when the socket is reset while the 4 MiB frame is still being written
    attack(target, "a frame over max_frame", oversized, wire.CLOSE_TOO_BIG, 1006)
    attack(target, "a block with bad proof of work", bad_pow, banned)
    attack(target, "unsolicited milestones and pending", unsolicited, banned)
    # the ban closes the socket while the flood is still being written: 4006 or a reset (1006);
    # the reconnect refused with 4005 proves the ban either way
    attack(target, "an inv flood beyond the token bucket", inv_flood, banned, 1006)

    log.info("The honest peer keeps relaying; the target keeps syncing and answering the API")
    for block in factory.mine(20):
        honest.submit_block(block)
    network.wait_same_best([target], factory.chain.best_id.hex(), timeout=30)
    target.wait(lambda n: n.status().blocks == len(factory.blocks) + 1, 30, "to hold all")
    assert target.peer_count() == 1
