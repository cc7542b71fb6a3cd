"""A real PeerManager over a 127.0.0.1 socket: tx announcements on connect and their periodic
re-announcement (P11, docs/p2p.md), and the close code of a ban (§11.7)."""

import asyncio
import itertools
import os
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from dagchain.mempool import Mempool
from dagchain.params import DEVNET
from dagchain.transactions import Transaction
from node.net.manager import PeerManager
from p2p import gossip, scores, wire
from p2p.service import NodeService
from p2p.settings import P2PSettings
from tests.dagchain.chainkit import Node, key, transfer

pytestmark = pytest.mark.integration

TIMEOUT_S = 5.0


class Client:
    """One WebSocket speaking to the manager's listener."""

    def __init__(self, manager: PeerManager, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.manager = manager
        self.ws = ws
        self.received: list[wire.Message] = []
        self._nonce = 0

    async def send(self, msg: wire.Message) -> None:
        await self.ws.send_bytes(wire.encode_message(msg))

    async def expect(self, kind: type[Any], pred: Any = lambda m: True) -> Any:
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                msg = await self.ws.receive()
                assert msg.type == aiohttp.WSMsgType.BINARY, f"connection ended: {msg}"
                decoded = wire.decode_frame(bytes(msg.data))
                self.received.append(decoded)
                if isinstance(decoded, kind) and pred(decoded):
                    return decoded

    async def barrier(self) -> None:
        self._nonce += 1
        nonce = self._nonce
        await self.send(wire.Ping(nonce))
        await self.expect(wire.Pong, lambda m: m.nonce == nonce)

    def announced(self) -> list[bytes]:
        return [
            item
            for m in self.received
            if isinstance(m, wire.Inv)
            for kind, item in m.items
            if kind == wire.InvKind.TX
        ]


def payments(count: int) -> list[Transaction]:
    genesis = Node(DEVNET).genesis
    return [transfer([(genesis, i)], [(10**9, key(5)[1])], DEVNET) for i in range(count)]


@pytest.fixture
async def net() -> AsyncIterator[tuple[PeerManager, TestServer, aiohttp.ClientSession]]:
    kit = Node(DEVNET)
    service = NodeService(DEVNET, kit.chain, Mempool(DEVNET), lambda: kit.now_ms)
    manager = PeerManager(
        P2PSettings.for_network("devnet", discovery=False), service, os.urandom(32)
    )
    app = web.Application()
    app.router.add_get(wire.PROTOCOL_PATH, manager.handle_inbound)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    await manager.start()
    session = aiohttp.ClientSession()
    try:
        yield manager, server, session
    finally:
        await session.close()
        await manager.stop()
        await server.close()


async def connect(
    manager: PeerManager, server: TestServer, session: aiohttp.ClientSession
) -> Client:
    ws = await session.ws_connect(server.make_url(wire.PROTOCOL_PATH))
    client = Client(manager, ws)
    genesis = manager.service.chain.genesis_id
    await client.send(
        wire.Hello(
            proto=wire.PROTOCOL_VERSION,
            network=DEVNET.network_id,
            genesis=genesis,
            node=os.urandom(32),
            best=genesis,
            height=0,
            work=bytes(32),
            port=0,
            agent="test",
            time=manager.service.clock(),
        )
    )
    await client.expect(wire.Hello)
    return client


def test_mempool_inv_batches_hold_at_most_1000_and_skip_what_the_peer_has() -> None:
    txids = [i.to_bytes(32, "big") for i in range(2600)]
    known = gossip.KnownInventory()
    for t in txids[:100]:
        known.add(t)
    batches = gossip.mempool_inv_batches(txids, known)
    assert [len(b) for b in batches] == [1000, 1000, 500]
    assert batches[0][0] == txids[100]
    announced = gossip.AnnouncedTxs()
    announced.add(txids[100], 1_000)
    announced.add(txids[101], 50_000)
    again = gossip.mempool_inv_batches(txids, known, announced, 60_000, 30_000, 1000)
    assert [len(b) for b in again] == [1000]
    assert txids[100] in again[0]  # announced 59 s ago: again
    assert txids[101] not in again[0]  # announced 10 s ago: not yet


def test_the_reannounce_timer_fires_every_30_to_60_s() -> None:
    timer = gossip.ReannounceTimer(random.Random(1))
    assert not timer.due(0)
    fired = [t for t in range(0, 600_000, 1000) if timer.due(t)]
    gaps = [b - a for a, b in itertools.pairwise(fired)]
    assert fired[0] >= 30_000
    assert all(30_000 <= g <= 61_000 for g in gaps), gaps


async def test_a_new_peer_gets_the_pool_announced_and_what_it_never_fetched_again(
    net: tuple[PeerManager, TestServer, aiohttp.ClientSession],
) -> None:
    manager, server, session = net
    txs = payments(5)
    for tx in txs:
        manager.service.submit_tx(tx.raw)
    client = await connect(manager, server, session)
    await client.expect(wire.Inv)
    await client.barrier()
    assert sorted(client.announced()) == sorted(tx.txid for tx in txs)
    # the peer fetches one and announces another: those two it has, the other three not
    await client.send(wire.GetData(((int(wire.InvKind.TX), txs[0].txid),)))
    await client.expect(wire.TxMsg)
    await client.send(wire.Inv(((int(wire.InvKind.TX), txs[1].txid),)))
    await client.barrier()
    client.received.clear()
    manager.relay.reannounce_timer = gossip.ReannounceTimer(random.Random(2), 0, 0)
    manager.relay.reannounce_timer.due(0)  # start its clock
    for state in manager.relay.peers.values():  # as if announced a round ago
        assert state.announced is not None
        for tx in txs:
            state.announced.add(tx.txid, manager.service.clock() - gossip.TX_REANNOUNCE_MIN_MS)
    await client.expect(wire.Inv)
    await client.barrier()
    assert sorted(set(client.announced())) == sorted(tx.txid for tx in txs[2:])


async def test_reaching_the_ban_threshold_closes_4006_even_with_another_close_on_its_way(
    net: tuple[PeerManager, TestServer, aiohttp.ClientSession],
) -> None:
    manager, server, session = net
    client = await connect(manager, server, session)
    await client.barrier()
    (peer,) = manager.ready_peers()
    # in one tick: a third request timeout closes (1000), then the peer reaches the threshold
    peer.timeouts = gossip.MAX_TIMEOUTS - 1
    manager._on_timeout(peer, "milestones")
    manager._penalise(peer, scores.BAN_THRESHOLD, "test: ban")
    msg = await asyncio.wait_for(client.ws.receive(), TIMEOUT_S)
    while msg.type == aiohttp.WSMsgType.BINARY:
        msg = await asyncio.wait_for(client.ws.receive(), TIMEOUT_S)
    assert client.ws.close_code == wire.CLOSE_MISBEHAVING


async def test_a_ban_on_an_event_naming_another_close_code_still_closes_4006(
    net: tuple[PeerManager, TestServer, aiohttp.ClientSession],
) -> None:
    manager, server, session = net
    client = await connect(manager, server, session)
    await client.barrier()
    (peer,) = manager.ready_peers()
    manager._penalise(peer, 100, "test: second hello", wire.CLOSE_PROTOCOL_ERROR)
    msg = await asyncio.wait_for(client.ws.receive(), TIMEOUT_S)
    while msg.type == aiohttp.WSMsgType.BINARY:
        msg = await asyncio.wait_for(client.ws.receive(), TIMEOUT_S)
    assert client.ws.close_code == wire.CLOSE_MISBEHAVING
