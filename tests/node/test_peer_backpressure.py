"""A peer that asks and does not read: the node's send queue to it stays bounded in bytes
(docs/protocol.md decision 44), over a real WebSocket on 127.0.0.1.

The server side is the daemon's own ``node.net.peer.Peer``; each frame it reads is answered with
a 256 KB ``block`` (the largest block, ``max_block_bytes``), so a peer that sends requests and
never reads would, without a bound, make the node hold an answer for every request it sent.
"""

import asyncio
import os
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from dagchain.params import DEVNET
from node.net import peer as peer_mod
from node.net.peer import Peer
from p2p import wire

pytestmark = pytest.mark.integration

ANSWER_BYTES = DEVNET.max_block_bytes
REQUESTS = 400  # 400 x 256 KB = 100 MB of answers: far above the kernel's socket buffers
TIMEOUT_S = 30.0


def _hello(node: bytes) -> wire.Hello:
    return wire.Hello(
        proto=wire.PROTOCOL_VERSION,
        network=DEVNET.network_id,
        genesis=bytes(32),
        node=node,
        best=bytes(32),
        height=0,
        work=bytes(32),
        port=0,
        agent="test",
        time=0,
    )


class Amplifier:
    """The server: a ``Peer`` answering every ping with a ``max_block_bytes`` block."""

    def __init__(self) -> None:
        self.peer: Peer | None = None
        self.read = 0
        """Pings read from the client so far."""
        self.most_queued = 0
        """The most bytes that waited for the client's socket after any read."""
        self.done = asyncio.Event()

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=wire.MAX_FRAME + 1, compress=False)
        await ws.prepare(request)
        peer = Peer(ws, "inbound", "127.0.0.1", 0, "inb-test", wire.MAX_FRAME)
        self.peer = peer
        peer.start_writer()

        def on_frame(data: bytes | str) -> None:
            assert isinstance(data, bytes)
            msg = wire.decode_frame(data)
            if isinstance(msg, wire.Hello):
                peer.handshake.on_receive(msg)
                peer.send(_hello(os.urandom(32)))
                return
            self.read += 1
            peer.send(wire.BlockMsg(bytes(ANSWER_BYTES)))
            self.most_queued = max(self.most_queued, peer.queued_bytes)

        try:
            await peer.read(on_frame)
        finally:
            await peer.stop()
            self.done.set()
        return ws


@pytest.fixture
async def amplifier() -> AsyncIterator[tuple[Amplifier, aiohttp.ClientWebSocketResponse]]:
    amp = Amplifier()
    app = web.Application()
    app.router.add_get(wire.PROTOCOL_PATH, amp.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    session = aiohttp.ClientSession()
    try:
        ws = await session.ws_connect(server.make_url(wire.PROTOCOL_PATH), max_msg_size=0)
        await ws.send_bytes(wire.encode_message(_hello(os.urandom(32))))
        msg = await asyncio.wait_for(ws.receive(), TIMEOUT_S)
        assert isinstance(wire.decode_frame(bytes(msg.data)), wire.Hello)
        yield amp, ws
        await ws.close()
    finally:
        await session.close()
        await server.close()


async def _settle(amp: Amplifier) -> int:
    """Wait until the server has read nothing new for half a second; the pings read."""
    last = -1
    while amp.read != last:
        last = amp.read
        await asyncio.sleep(0.5)
    return last


async def test_a_peer_that_does_not_read_is_no_longer_read_and_gets_every_answer_once_it_does(
    amplifier: tuple[Amplifier, aiohttp.ClientWebSocketResponse],
) -> None:
    amp, ws = amplifier
    for nonce in range(REQUESTS):
        await ws.send_bytes(wire.encode_message(wire.Ping(nonce)))
    read = await _settle(amp)
    soft = peer_mod.SEND_QUEUE_SOFT_BYTES
    # Reading stops once the answers waiting for the client pass the soft bound: what is held
    # is the bound plus the one answer that crossed it, not an answer per request sent.
    assert read < REQUESTS
    assert amp.most_queued <= soft + ANSWER_BYTES + wire.MAX_FRAME
    assert amp.peer is not None
    assert not amp.peer.closed
    # The client reads again: every request is read and answered, none lost, and the node's
    # queue drains.
    answers = 0
    async with asyncio.timeout(TIMEOUT_S):
        while answers < REQUESTS:
            msg = await ws.receive()
            assert msg.type == aiohttp.WSMsgType.BINARY, msg
            if isinstance(wire.decode_frame(bytes(msg.data)), wire.BlockMsg):
                answers += 1
    assert amp.read == REQUESTS
    assert amp.peer.queued_bytes == 0


async def test_closing_a_peer_whose_reading_is_paused_ends_its_reader(
    amplifier: tuple[Amplifier, aiohttp.ClientWebSocketResponse],
) -> None:
    amp, ws = amplifier
    for nonce in range(REQUESTS):
        await ws.send_bytes(wire.encode_message(wire.Ping(nonce)))
    await _settle(amp)
    assert amp.peer is not None
    assert amp.peer.queued_bytes > peer_mod.SEND_QUEUE_SOFT_BYTES
    amp.peer.close_soon(wire.CLOSE_PROTOCOL_ERROR)  # as a ban or a timeout would
    await asyncio.wait_for(amp.done.wait(), TIMEOUT_S)


async def test_a_close_the_peer_cannot_read_still_ends_the_reader(
    amplifier: tuple[Amplifier, aiohttp.ClientWebSocketResponse],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A close decided while reading goes on (below the bound: here the bound is lifted) whose
    frame cannot reach a peer that does not read, and which the peer never answers: the reader
    ends once the close has had its 2 s, instead of waiting for a frame that never comes (the
    connection, its queue and its slot were held until the peer went away)."""
    amp, ws = amplifier
    monkeypatch.setattr(peer_mod, "SEND_QUEUE_SOFT_BYTES", 2**40)
    for nonce in range(REQUESTS):
        await ws.send_bytes(wire.encode_message(wire.Ping(nonce)))
    await _settle(amp)
    assert amp.peer is not None
    assert amp.peer.read_pauses == 0
    assert amp.peer.queued_bytes > 0  # the client's buffers are full: the close frame waits
    amp.peer.close_soon(wire.CLOSE_MISBEHAVING)  # as a ban would
    await asyncio.wait_for(amp.done.wait(), 10)
