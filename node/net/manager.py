"""PeerManager: dialing and accepting peers, the handshake, scores, bans and dispatch (§11).

The protocol decisions live in sans-I/O objects: :class:`p2p.relay.Relay` (P11/P13) and
:class:`p2p.syncsession.SyncSession` (P5, P7-P10), driven by :class:`p2p.exchange.Exchange`;
:class:`p2p.addrgossip.AddrGossip` (P12); :class:`p2p.dialer.Dialer`; the checks of
:mod:`p2p.wire` and :mod:`p2p.gossip`. This shell moves frames and owns the clocks. Every
handler runs on the event loop's thread, so the chain (:class:`NodeService`) sees one caller.
"""

import asyncio
import functools
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp
from aiohttp import web

from node.net.addrbook import FILE_NAME, AddrBook
from node.net.peer import Direction, FrameCounts, Peer, WebSocket
from node.net.verifypool import VerifyPool
from p2p import gossip, scores, wire
from p2p.addrgossip import AddrGossip
from p2p.connection import Deliver, HelloReceived, Misbehaved
from p2p.dialer import Addr, Dialer
from p2p.dispatch import REQUESTS
from p2p.exchange import MAINTENANCE_MS, ORPHAN_SWEEP_MS, Exchange
from p2p.relay import Relay, Send
from p2p.service import NodeService
from p2p.settings import P2PSettings
from p2p.syncsession import SyncSession

log = logging.getLogger(__name__)

AGENT = "dagchain-node/0.1"
DIAL_INTERVAL_S = 1.0
ADDRBOOK_SAVE_S = 900.0
MAX_INBOUND_PER_IP = 4
MAINTENANCE_S = MAINTENANCE_MS / 1000
ORPHAN_SWEEP_S = ORPHAN_SWEEP_MS / 1000


def _is_loopback(host: str) -> bool:
    return host in ("::1", "localhost") or host.startswith("127.")


class PeerManager:
    """All peer connections of one node.

    Args:
        settings: The P2P settings (``NodeConfig.p2p_settings``).
        service: The chain owner.
        node_id: 32 random bytes per process start (P4).
        on_ready: Called once, when initial sync ends (P10).
    """

    def __init__(
        self,
        settings: P2PSettings,
        service: NodeService,
        node_id: bytes,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.settings = s = settings
        self.service = service
        self.params = service.params
        self.node_id = node_id
        self.on_ready = on_ready
        self.local = wire.LocalInfo(self.params.network_id, service.chain.genesis_id, node_id)
        self.rng = random.Random(os.urandom(16))
        self.addrbook = AddrBook(s.datadir / FILE_NAME if s.datadir is not None else None)
        self.peers: dict[str, Peer] = {}
        self.bans = scores.BanList()
        self.dialer = Dialer(s)
        self.verifier = VerifyPool(service.params, s.verify_workers)
        self.exchange = Exchange(
            service,
            self,
            self.dialer.tried_all,
            random.Random(os.urandom(16)),
            self.verifier,
            s.stale_relay_filter,
            on_ready,
            connection=self,
        )
        self.relay: Relay = self.exchange.relay
        self.sync: SyncSession = self.exchange.sync
        self.addr = AddrGossip(self.addrbook, self.rng, s.discovery)
        self.banned_total = 0
        self.sent = FrameCounts()
        """Frames written to every peer, by type (``GET /metrics``)."""
        self.errors: Counter[str] = Counter()
        """Exceptions caught in the loops and tasks (each also logged), by where."""
        self._seq = 0
        self._session: aiohttp.ClientSession | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._dials: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self._own_run: asyncio.Task[None] | None = None
        self._last_save = time.monotonic()
        self._last_orphan_sweep = time.monotonic()
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self, run: bool = True) -> None:
        """Load the address book and subscribe to service events; with ``run``, start
        :meth:`run` as a task of its own (the daemon runs it in its TaskGroup instead)."""
        self.addrbook.load()
        self.service.subscribe(self.exchange.on_event)
        self._session = aiohttp.ClientSession()
        self._check_synced()
        if run:
            self._own_run = asyncio.create_task(self.run(self._stop), name="p2p")

    async def run(self, stop: asyncio.Event) -> None:
        """Dial and run the timers until ``stop``; every dial task is in this TaskGroup."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            loops = [
                tg.create_task(self._loop(self._dial_some, DIAL_INTERVAL_S), name="p2p-dial"),
                tg.create_task(self._loop(self._maintain, MAINTENANCE_S), name="p2p-timers"),
            ]
            await stop.wait()
            self._stopping = self.exchange.stopping = True
            for task in loops:
                task.cancel()
            await self._close_peers()
            for task in list(self._dials):
                task.cancel()  # a connect still under way; connections ended above
        self._tg = None

    async def stop(self) -> None:
        """Close every connection (close frame), save the address book."""
        self._stopping = self.exchange.stopping = True
        self.service.unsubscribe(self.exchange.on_event)
        self._stop.set()
        if self._own_run is not None:
            await self._own_run
        await self._close_peers()
        if self._session is not None:
            await self._session.close()
        await self.verifier.close()
        self.addrbook.save()

    async def _close_peers(self) -> None:
        await asyncio.gather(*(p.stop() for p in list(self.peers.values())), return_exceptions=True)

    async def _loop(self, step: Callable[[], None], interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                step()
            except Exception:
                # Reason: a bug in one timer step (dialing, the exchange's 250 ms timers) must not
                # stop the node's networking; it is logged with its traceback and counted in
                # PeerManager.errors, and the next tick runs as usual.
                self.errors[step.__name__] += 1
                log.exception(
                    "p2p %s failed (%d so far)", step.__name__, self.errors[step.__name__]
                )

    # ------------------------------------------------------------------ queries
    @property
    def synced(self) -> bool:
        """Initial sync ended (P10)."""
        return self.sync.synced

    @property
    def connected_count(self) -> int:
        """Peers with a completed handshake."""
        return sum(1 for p in self.peers.values() if p.ready)

    def peers_info(self) -> list[dict[str, Any]]:
        """``GET /v1/peers``."""
        now = self._now_ms()
        return [p.info(now, self.exchange.best_height(p.key)) for p in self.ready_peers()]

    def ready_peers(self) -> list[Peer]:
        """Peers with a completed handshake, in connection order."""
        return [p for p in self.peers.values() if p.ready]

    # ------------------------------------------------------------------ connections
    async def handle_inbound(self, request: web.Request) -> web.StreamResponse:
        """aiohttp handler for ``GET /dagchain/p2p/v1`` on the P2P listener."""
        host = request.remote or "?"
        inbound = [p for p in self.peers.values() if p.direction == "inbound"]
        if self._stopping or len(inbound) >= self.settings.max_inbound:
            raise web.HTTPServiceUnavailable(text="too many inbound peers")
        if not _is_loopback(host):
            if sum(1 for p in inbound if p.host == host) >= MAX_INBOUND_PER_IP:
                raise web.HTTPServiceUnavailable(text="too many connections from this address")
            if self.bans.is_banned("ip:" + host, self._now_ms()):
                raise web.HTTPForbidden(text="banned")
        # P1: aiohttp refuses a frame equal to max_msg_size, hence + 1; no compression, so
        # the limit is on the bytes sent
        ws = web.WebSocketResponse(
            max_msg_size=self.settings.max_frame + 1, compress=False, autoping=True
        )
        await ws.prepare(request)
        peername = request.transport.get_extra_info("peername") if request.transport else None
        await self._run(ws, "inbound", host, int(peername[1]) if peername else 0)
        return ws

    def ready_keys(self) -> list[str]:
        """Keys of the ready peers (:class:`p2p.exchange.Links`)."""
        return [p.key for p in self.ready_peers()]

    def send_to(self, key: str, msg: wire.Message) -> bool:
        """Queue ``msg`` for peer ``key`` (:class:`p2p.exchange.Links`)."""
        peer = self.peers.get(key)
        return peer is not None and peer.send(msg)

    def after_sent(self, key: str, callback: Callable[[], None]) -> None:
        """Run ``callback`` once peer ``key`` has written what is queued for it
        (:class:`p2p.exchange.Links`; the getdata cap of §11.7)."""
        peer = self.peers.get(key)
        if peer is None:
            callback()
        else:
            peer.call_when_sent(callback)

    def close_key(self, key: str, code: int = 1001) -> None:
        """Close peer ``key`` without a score (1001, going away: decision 40's slow syncer)."""
        peer = self.peers.get(key)
        if peer is not None:
            peer.close_soon(code)

    def penalise_key(self, key: str, points: int, reason: str) -> None:
        """:meth:`_penalise` by key (:class:`p2p.exchange.Links`)."""
        peer = self.peers.get(key)
        if peer is not None:
            self._penalise(peer, points, reason)

    def _dial_some(self) -> None:
        outbound = sum(1 for p in self.peers.values() if p.direction == "outbound")
        learnt = [(e.host, e.port) for e in self.addrbook.candidates()]
        for addr in self.dialer.next_dials(learnt, outbound, self._connected_to, time.monotonic()):
            if self._tg is None:
                self.dialer.done(addr)
                continue
            task = self._tg.create_task(self._dial(addr), name=f"p2p-dial-{addr[0]}:{addr[1]}")
            self._dials.add(task)
            task.add_done_callback(self._dials.discard)

    def _connected_to(self, addr: Addr) -> bool:
        key = self.dialer.dialed_to.get(addr)
        if key is not None and key in self.peers:
            return True
        return any(
            p.host == addr[0] and p.listen_port == addr[1] and p.ready for p in self.peers.values()
        )

    async def _dial(self, addr: Addr) -> None:
        host, port = addr
        url = f"http://{host}:{port}{wire.PROTOCOL_PATH}"
        try:
            if self._session is None:
                return
            try:
                ws = await self._session.ws_connect(
                    url,
                    max_msg_size=self.settings.max_frame + 1,  # P1, as for the listener
                    compress=0,
                    timeout=aiohttp.ClientWSTimeout(ws_close=5.0),
                    autoping=True,
                )
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                backoff = self.dialer.failed(addr, time.monotonic())
                self.addrbook.mark_failed(*addr)
                log.debug("dial %s:%d failed (%s); retry in %.1f s", host, port, exc, backoff)
                self._check_synced()
                return
            await self._run(ws, "outbound", host, port, addr)
        except Exception:  # a bug must not end the TaskGroup: log, count, go on
            self.errors["dial"] += 1
            log.exception("p2p dial %s:%d failed (%d so far)", host, port, self.errors["dial"])
        finally:
            self.dialer.done(addr)

    async def _run(
        self,
        ws: WebSocket,
        direction: Direction,
        host: str,
        port: int,
        dialed: Addr | None = None,
    ) -> None:
        self._seq += 1
        key = f"{direction[:3]}-{self._seq}-{host}:{port}"
        peer = Peer(ws, direction, host, port, key, self.settings.max_frame, self.sent)
        peer.on_drained = self._serve_deferred
        self.peers[key] = peer
        if dialed is not None:
            self.dialer.connected(dialed, key)
        peer.start_writer()
        try:
            if direction == "outbound":
                peer.send(self._hello())
            if await peer.read(functools.partial(self._on_frame, peer)):
                self._penalise(peer, 100, "frame over max_frame (P1)", wire.CLOSE_TOO_BIG)
        finally:
            if peer.close_code is None:
                peer.close_code = ws.close_code
            await peer.stop()
            self.peers.pop(key, None)
            self._on_disconnect(peer, dialed)

    # ------------------------------------------------------------------ dispatch, scores, bans
    def _on_frame(self, peer: Peer, data: bytes | str) -> None:
        """A frame from ``peer``: its Connection says what it is (p2p/connection.py)."""
        now, key = self._now_ms(), peer.key
        # §11.7: replies to our own outstanding requests are not charged to the token bucket
        event = peer.conn.receive_frame(
            data, now, self.relay.pending_items(key), self.sync.requests(key)
        )
        if isinstance(event, Deliver):
            if peer.closed:
                return
            if isinstance(event.msg, REQUESTS) and (peer.deferred or peer.behind):
                # decision 44: our answers to this peer wait for its socket; answer it once
                # they drain, in order, and read on (its answers to us, its relay)
                peer.deferred.append(event.msg)
                return
            self.exchange.receive(key, event.msg, now)
        elif isinstance(event, HelloReceived):
            self._on_hello(peer, event.hello)
        elif isinstance(event, Misbehaved):
            self._penalise(peer, event.score, event.reason, event.close)

    def _serve_deferred(self, peer: Peer) -> None:
        """Answer ``peer``'s deferred requests in order while its queue stays under the bound
        (decision 44; the peer schedules this once its queue drains to the bound)."""
        while peer.deferred and not peer.behind and not peer.closed:
            self.exchange.receive(peer.key, peer.deferred.popleft(), self._now_ms())

    def _penalise(self, peer: Peer, points: int, reason: str, close: int | None = None) -> None:
        """Add misbehaviour points; ban at the threshold (close 4006); close if asked."""
        now = self._now_ms()
        log.info("peer %s: %s (+%d)", peer.key, reason, points)
        verdict = peer.conn.penalise(points, close, now)
        if verdict.banned:
            key = scores.ban_key(peer.host, peer.node_id)
            ban_ms = self.settings.ban_duration_ms
            self.bans.ban(key, now, ban_ms)
            self.banned_total += 1
            log.warning("peer %s banned (%s) for %d s", peer.key, key, ban_ms // 1000)
            # whatever close is already on its way is overridden (§11.7)
            peer.close_soon(verdict.close or wire.CLOSE_MISBEHAVING, override=True)
        elif verdict.close is not None:
            peer.close_soon(verdict.close)

    def _hello(self) -> wire.Hello:
        best, height, work = self.service.best()
        return wire.Hello(
            proto=wire.PROTOCOL_VERSION,
            network=self.params.network_id,
            genesis=self.service.chain.genesis_id,
            node=self.node_id,
            best=best,
            height=height,
            work=work.to_bytes(32, "little"),
            port=self.settings.listen_port,
            agent=AGENT,
            time=self._now_ms(),
        )

    def _on_hello(self, peer: Peer, hello: wire.Hello) -> None:
        now = self._now_ms()
        code = wire.check_hello(
            hello,
            self.local,
            is_connected=lambda n: any(
                p.node_id == n and p.ready and p is not peer for p in self.peers.values()
            ),
            is_banned=lambda n: self.bans.is_banned(scores.ban_key(peer.host, n), now),
        )
        if code is not None:
            log.info("peer %s: hello refused (close %d)", peer.key, code)
            peer.close_soon(code)
            return
        peer.hello = hello
        if peer.direction == "inbound":
            peer.send(self._hello())
        log.info(
            "peer %s ready (node %s, height %d)", peer.key, hello.node.hex()[:12], hello.height
        )
        outbound = peer.direction == "outbound"
        if outbound:
            self.dialer.tried.add((peer.host, peer.port))
        self._send(self.addr.on_ready(peer.key, peer.host, peer.port, outbound, hello.port, now))
        self.exchange.peer_ready(peer.key, hello, now)

    def _on_disconnect(self, peer: Peer, dialed: Addr | None) -> None:
        now = self._now_ms()
        if dialed is not None:
            self.dialer.closed(dialed, peer.close_code, time.monotonic())
        self.addr.remove_peer(peer.key)
        self.exchange.peer_gone(peer.key, now)

    # ------------------------------------------------------------------ connection messages
    # p2p.dispatch routes ping, pong, getaddr and addr here; the rest goes to the exchange.
    def on_ping(self, key: str, msg: wire.Ping, now: int) -> None:
        """Keepalive: answer with the same nonce."""
        peer = self.peers.get(key)
        if peer is not None:
            peer.send(wire.Pong(msg.nonce))

    def on_pong(self, key: str, msg: wire.Pong, now: int) -> None:
        """Keepalive: the answer to our last ping."""
        peer = self.peers.get(key)
        if peer is not None and msg.nonce == peer.ping_nonce:
            peer.ping_nonce = None
            peer.last_pong = time.monotonic()

    def on_getaddr(self, key: str, msg: wire.GetAddr, now: int) -> None:
        """P12: addresses we know."""
        self._send(self.addr.on_getaddr(key))

    def on_addr(self, key: str, msg: wire.Addr, now: int) -> None:
        """P12: addresses from a peer (unsolicited ones of more than 10 entries cost +1)."""
        others = [p.key for p in self.ready_peers() if p.key != key]
        verdict = self.addr.on_addr(key, msg, others, now)
        if verdict.score:
            self.penalise_key(key, verdict.score, "unsolicited addr of more than 10 entries")
        self._send(verdict.sends)

    def _send(self, sends: Iterable[Send]) -> None:
        self.exchange.send(sends)

    def _check_synced(self) -> None:
        self.exchange.check_synced()

    def _maintain(self) -> None:
        now = self._now_ms()
        sweep = time.monotonic() - self._last_orphan_sweep > ORPHAN_SWEEP_S
        if sweep:
            self._last_orphan_sweep = time.monotonic()
        for key, kind in self.exchange.tick(now, sweep):
            peer = self.peers.get(key)
            if peer is not None and peer.ready:
                self._on_timeout(peer, kind)
        for peer in self.ready_peers():
            peer.keepalive(self.rng.getrandbits(63) + 1)
        self._check_synced()
        if time.monotonic() - self._last_save > ADDRBOOK_SAVE_S:
            self._last_save = time.monotonic()
            self.addrbook.save()

    def _on_timeout(self, peer: Peer, kind: str) -> None:
        """A request of ``kind`` to ``peer`` went unanswered for 30 s (P6)."""
        peer.timeouts += 1
        log.info("peer %s: %s request timed out (%d)", peer.key, kind, peer.timeouts)
        self.exchange.on_timeout(peer.key)
        if peer.timeouts >= gossip.MAX_TIMEOUTS:
            peer.close_soon(1000)

    def _now_ms(self) -> int:
        return int(self.service.clock())


__all__ = ["PeerManager"]
