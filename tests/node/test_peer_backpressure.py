"""A peer whose answers wait for its socket (docs/protocol.md decision 44), over real
WebSockets on 127.0.0.1.

With the daemon's own ``PeerManager``: while more than ``SEND_QUEUE_SOFT_BYTES`` of our frames
wait for a peer, its requests are deferred and answered in order once they drain, and its other
messages are still read and handled, so two nodes answering each other never wait for each
other; beyond ``MAX_DEFERRED_REQUESTS`` deferred requests nothing more is read from it until
then. The queue's bytes are set by hand (as if a large answer were waiting), the rest is real.

With the daemon's ``Peer`` alone: a close the peer neither reads nor answers still ends the
read (each frame read is answered with a 256 KB block, so a client that does not read fills
the sockets' buffers).
"""

import asyncio
import dataclasses
import itertools
import os
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from dagchain.params import DEVNET
from node.net import peer as peer_mod
from node.net.manager import PeerManager
from node.net.peer import Peer
from p2p import wire
from tests.node.test_p2p_manager import Client, connect, net, payments
from tests.p2p.test_connection import HELLO

__all__ = ["net"]  # the fixture, imported

pytestmark = pytest.mark.integration

ANSWER_BYTES = DEVNET.max_block_bytes
REQUESTS = 400  # 400 x 256 KB = 100 MB of answers: far above the kernel's socket buffers
TIMEOUT_S = 30.0


def _hello(node: bytes) -> wire.Hello:
    return dataclasses.replace(HELLO, node=node)


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


async def _behind(
    net: tuple[PeerManager, TestServer, aiohttp.ClientSession],
) -> tuple[PeerManager, Client, Peer]:
    """A client connected to the manager, and the manager's peer for it, whose queue is set as
    if a large answer waited for its socket."""
    manager, server, session = net
    client = await connect(manager, server, session)
    await client.barrier()
    (peer,) = manager.ready_peers()
    peer.queued_bytes += peer_mod.SEND_QUEUE_SOFT_BYTES + 1
    peer._queued(0)
    assert peer.behind
    return manager, client, peer


async def _flood(client: Client, peer: Peer, count: int) -> None:
    """``count`` pings, more than the manager defers: wait until it stops reading the peer."""
    for nonce in range(count):
        await client.send(wire.Ping(nonce))
    await _until(lambda: peer.read_pauses > 0)


def _drain(peer: Peer) -> None:
    """The large answer is written: the queue drains below the bound."""
    peer._queued(-(peer_mod.SEND_QUEUE_SOFT_BYTES + 1))
    assert not peer.behind


async def _until(condition: Callable[[], bool]) -> None:
    """Wait (at most TIMEOUT_S) until ``condition()`` holds."""
    async with asyncio.timeout(TIMEOUT_S):
        for _ in itertools.count():
            if condition():
                return
            await asyncio.sleep(0.01)


async def _pongs(client: Client, count: int) -> list[int]:
    nonces: list[int] = []
    async with asyncio.timeout(TIMEOUT_S):
        while len(nonces) < count:
            msg = await client.ws.receive()
            assert msg.type == aiohttp.WSMsgType.BINARY, msg
            decoded = wire.decode_frame(bytes(msg.data))
            if isinstance(decoded, wire.Pong):
                nonces.append(decoded.nonce)
    return nonces


async def test_requests_wait_while_answers_do_and_the_rest_is_handled(
    net: tuple[PeerManager, TestServer, aiohttp.ClientSession],
) -> None:
    manager, client, peer = await _behind(net)
    for nonce in (11, 12, 13):
        await client.send(wire.Ping(nonce))
    (tx,) = payments(1)
    await client.send(wire.TxMsg(tx.raw))  # not a request: handled now
    await _until(lambda: tx.txid in manager.service.mempool)
    assert [m.nonce for m in peer.deferred if isinstance(m, wire.Ping)] == [11, 12, 13]
    with pytest.raises(TimeoutError):  # no answer while our answers wait
        await asyncio.wait_for(_pongs(client, 1), 0.3)
    _drain(peer)
    assert await _pongs(client, 3) == [11, 12, 13]  # answered in order once they drain
    assert not peer.deferred
    await client.barrier()  # and requests are answered at once again


async def test_beyond_the_deferred_limit_the_peer_is_not_read_until_its_answers_drain(
    net: tuple[PeerManager, TestServer, aiohttp.ClientSession],
) -> None:
    _, client, peer = await _behind(net)
    total = peer_mod.MAX_DEFERRED_REQUESTS + 50
    await _flood(client, peer, total)
    await asyncio.sleep(0.2)
    assert len(peer.deferred) == peer_mod.MAX_DEFERRED_REQUESTS  # the rest is not read
    _drain(peer)
    assert await _pongs(client, total) == list(range(total))  # none lost, in order
    assert not peer.deferred


async def test_a_peer_not_read_is_still_closed_by_a_ban(
    net: tuple[PeerManager, TestServer, aiohttp.ClientSession],
) -> None:
    manager, client, peer = await _behind(net)
    await _flood(client, peer, peer_mod.MAX_DEFERRED_REQUESTS + 10)
    manager._penalise(peer, 100, "test: ban")
    await _until(lambda: not manager.peers)
