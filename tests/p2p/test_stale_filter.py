"""P14 stale relay filter (PROTOCOL.md §11.6) on a real PeerManager over a 127.0.0.1 socket.

The node's chain is a chainkit devnet chain of 25 milestones (punctuality 20); a WebSocket client
in the test speaks the wire protocol to the PeerManager's listener. A block whose milestone link
is 20 or more below the best height is dropped when relayed (pushed, or fetched after an
``inv``): no penalty, not remembered, counted as ``block:P14``. Fetched for an orphan or during
sync it is processed like any block.
"""

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from dagchain.blocks import Block
from dagchain.mempool import Mempool
from dagchain.params import DEVNET
from dagchain.rules import is_stale_relay
from node.net.manager import PeerManager
from p2p import wire
from p2p.service import NodeService
from p2p.settings import P2PSettings
from tests.dagchain.builders import address_of_secret, secret_of
from tests.dagchain.chainkit import Node

pytestmark = pytest.mark.integration

BEST_HEIGHT = 25
PUNCTUALITY = DEVNET.punctuality
TIMEOUT_S = 5.0


class Harness:
    """One PeerManager listening on 127.0.0.1 and one client WebSocket speaking to it.

    ``kit`` is the node's own chain (never touched by the test); ``builder`` a replica that
    builds the test's blocks.
    """

    def __init__(
        self, kit: Node, builder: Node, manager: PeerManager, ws: aiohttp.ClientWebSocketResponse
    ) -> None:
        self.kit = kit
        self.builder = builder
        self.manager = manager
        self.ws = ws
        self.received: list[wire.Message] = []
        self._nonce = 0

    @property
    def service(self) -> NodeService:
        return self.manager.service

    def peer_score(self) -> int:
        (peer,) = self.manager.ready_peers()
        return peer.score.value(self.kit.now_ms)

    async def send(self, msg: wire.Message) -> None:
        await self.ws.send_bytes(wire.encode_message(msg))

    async def expect(self, kind: type[Any], pred: Any = lambda m: True) -> Any:
        """The next message of ``kind`` matching ``pred`` (others are kept in ``received``)."""
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                msg = await self.ws.receive()
                assert msg.type == aiohttp.WSMsgType.BINARY, f"connection ended: {msg}"
                decoded = wire.decode_frame(bytes(msg.data))
                self.received.append(decoded)
                if isinstance(decoded, kind) and pred(decoded):
                    return decoded

    async def barrier(self) -> None:
        """Ping/pong: every message sent before has been handled (one reader, in order)."""
        self._nonce += 1
        nonce = self._nonce
        await self.send(wire.Ping(nonce))
        await self.expect(wire.Pong, lambda m: m.nonce == nonce)

    async def answer_getdata(self, block: Block) -> None:
        await self.expect(wire.GetData, lambda m: any(i == block.id for _, i in m.items))
        await self.send(wire.BlockMsg(block.raw))

    def getdata_for(self, block: Block) -> int:
        return sum(
            1
            for m in self.received
            if isinstance(m, wire.GetData) and any(i == block.id for _, i in m.items)
        )


def registration(h: Harness, link_height: int, key: int) -> Block:
    """A valid registration block (previous link genesis) whose milestone link is the
    best-chain milestone at ``link_height`` (built on the replica, not sent)."""
    b = h.builder
    return b.mine(
        b.genesis,
        milestone=b.chain.best_chain()[link_height],
        register=address_of_secret(secret_of(key)),
    )


@pytest.fixture(scope="module")
def chain_blocks() -> list[Block]:
    kit = Node(DEVNET)
    first = kit.register(address_of_secret(secret_of(7)), ms=True)
    kit.milestones(first, BEST_HEIGHT - 1)
    assert kit.chain.best_height == BEST_HEIGHT
    return kit.sent


async def start(
    blocks: list[Block], *, peer_work: int = 0, **config: Any
) -> AsyncIterator[Harness]:
    kit, builder = Node(DEVNET), Node(DEVNET)
    for block in blocks:
        kit.submit(block)
        builder.submit(block)
    service = NodeService(DEVNET, kit.chain, Mempool(DEVNET), lambda: kit.now_ms)
    settings = P2PSettings.for_network("devnet", discovery=False, **config)
    manager = PeerManager(settings, service, os.urandom(32))
    app = web.Application()
    app.router.add_get(wire.PROTOCOL_PATH, manager.handle_inbound)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    await manager.start()
    session = aiohttp.ClientSession()
    try:
        ws = await session.ws_connect(server.make_url(wire.PROTOCOL_PATH))
        h = Harness(kit, builder, manager, ws)
        genesis = kit.genesis
        await h.send(
            wire.Hello(
                proto=wire.PROTOCOL_VERSION,
                network=DEVNET.network_id,
                genesis=genesis,
                node=os.urandom(32),
                best=genesis,
                height=0,
                work=peer_work.to_bytes(32, "little"),
                port=0,
                agent="test",
                time=kit.now_ms,
            )
        )
        await h.expect(wire.Hello)
        await h.barrier()
        assert manager.synced
        yield h
        await ws.close()
    finally:
        await session.close()
        await manager.stop()
        await server.close()


@pytest.fixture
async def h(chain_blocks: list[Block]) -> AsyncIterator[Harness]:
    async for harness in start(chain_blocks):
        yield harness


def test_the_stale_test_is_punctuality_or_more_below_the_best_height() -> None:
    assert is_stale_relay(5, 25, DEVNET)
    assert is_stale_relay(0, 25, DEVNET)
    assert not is_stale_relay(6, 25, DEVNET)
    assert not is_stale_relay(25, 25, DEVNET)


async def test_a_pushed_stale_block_is_dropped_unpenalised_and_a_later_orphan_fetch_works(
    h: Harness,
) -> None:
    stale = registration(h, 0, key=40)
    await h.send(wire.BlockMsg(stale.raw))
    await h.barrier()
    assert not h.service.has_block(stale.id), "a relayed stale block was processed"
    assert h.service.rejected["block:P14"] == 1
    assert h.peer_score() == 0
    assert not h.service.chain.is_known_invalid(stale.id)
    # not remembered: a child whose milestone link is recent enough is held as an orphan, the
    # node fetches the stale parent for it, and that fetch is processed
    child = h.builder.build(stale.id, milestone=h.builder.chain.best_chain()[PUNCTUALITY - 1])
    await h.send(wire.BlockMsg(child.raw))
    await h.answer_getdata(stale)
    await h.barrier()
    assert h.service.has_block(stale.id), "the block fetched for an orphan was dropped"
    assert h.service.has_block(child.id)
    assert h.service.rejected["block:P14"] == 1
    assert h.peer_score() == 0
    assert h.manager.ready_peers(), "the peer was disconnected"


async def test_a_stale_block_fetched_after_an_inv_is_dropped_and_fetched_again_next_time(
    h: Harness,
) -> None:
    stale = registration(h, 3, key=41)
    for round_ in (1, 2):
        await h.send(wire.Inv(((int(wire.InvKind.BLOCK), stale.id),)))
        await h.answer_getdata(stale)
        await h.barrier()
        assert h.getdata_for(stale) == round_
        assert not h.service.has_block(stale.id)
        assert h.service.rejected["block:P14"] == round_
    assert h.peer_score() == 0


@pytest.mark.parametrize(
    ("below", "dropped"), [(PUNCTUALITY - 1, False), (PUNCTUALITY, True)], ids=["19", "20"]
)
async def test_the_boundary_is_punctuality_below_the_best_height(
    h: Harness, below: int, dropped: bool
) -> None:
    block = registration(h, BEST_HEIGHT - below, key=42)
    await h.send(wire.BlockMsg(block.raw))
    await h.barrier()
    assert h.service.has_block(block.id) is not dropped
    assert h.service.rejected["block:P14"] == int(dropped)
    assert h.peer_score() == 0


async def test_a_stale_block_fetched_during_sync_is_processed(chain_blocks: list[Block]) -> None:
    # The peer advertises more work: the node syncs with it (P9). An empty milestones reply
    # ends the header rounds; the pending reply lists the stale block, which the node fetches
    # and must process, or a node catching up would never get its peers' pending blocks.
    async for h in start(chain_blocks, peer_work=2**200):
        stale = registration(h, 0, key=43)
        if not any(isinstance(m, wire.GetMilestones) for m in h.received):
            await h.expect(wire.GetMilestones)
        await h.send(wire.Milestones(()))
        await h.expect(wire.GetPending)
        await h.send(wire.Pending((stale.id,)))
        await h.answer_getdata(stale)
        await h.barrier()
        assert h.service.has_block(stale.id), "P14 dropped a block fetched during sync"
        assert h.service.rejected["block:P14"] == 0


async def test_the_filter_can_be_switched_off(chain_blocks: list[Block]) -> None:
    async for h in start(chain_blocks, stale_relay_filter=False):
        stale = registration(h, 0, key=44)
        await h.send(wire.BlockMsg(stale.raw))
        await h.barrier()
        assert h.service.has_block(stale.id)
        assert h.service.rejected["block:P14"] == 0
