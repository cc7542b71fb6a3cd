"""PeerManager: dialing and accepting peers, the handshake, relay, sync, scores and bans (§11).

The protocol decisions live in the pure modules (:mod:`node.wire`, :mod:`node.gossip`,
:mod:`node.sync`); this shell moves frames, owns timers, and calls :class:`NodeService`, the one
owner of the chain. Every handler runs on the event loop's thread, so the chain sees one caller.
"""

import asyncio
import contextlib
import ctypes
import functools
import logging
import multiprocessing
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web

from dagchain.chain import BlockStatus
from dagchain.crypto import hash32
from dagchain.errors import InvalidBlock, InvalidTransaction, NotYetValid
from dagchain.mempool import MempoolError
from dagchain.types import TxId
from node import gossip, wire
from node.addrbook import FILE_NAME, AddrBook
from node.peer import Direction, Peer, WebSocket
from node.service import NodeEvent, NodeService
from node.sync import (
    MAX_GETDATA_ITEMS,
    LevelSetJob,
    SyncError,
    SyncPlan,
    VerifiedHeader,
    is_tip_fresh,
    verify_milestone_headers,
)
from node.verify import verify_blocks

log = logging.getLogger(__name__)

AGENT = "dagchain-node/0.1"
HELLO_TIMEOUT_S = 10.0
PING_INTERVAL_S = 30.0
PONG_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = gossip.REQUEST_TIMEOUT_MS / 1000
DIAL_INTERVAL_S = 1.0
MISMATCH_NO_REDIAL_S = 3600.0
MAX_DIAL_BACKOFF_S = 30.0
ADDRBOOK_SAVE_S = 900.0
MAX_INBOUND_PER_IP = 4
MAINTENANCE_S = 0.25
ORPHAN_SWEEP_S = 1.0
UNBACKED_ROUND_INTERVAL_MS = 60_000
"""P9 (v2): after a round that did not back a peer's claim, no new round with it for 60 s."""
ORPHAN_SYNC_TRIGGER = 64
"""P13: more missing ancestors than this triggers milestone sync."""
SYNC_VERIFY_WORKERS = 2
"""Worker processes that check the signatures of downloaded level sets (0: none, issue 4)."""
DEFAULT_LIMITS: dict[str, tuple[int, int, int]] = {
    # network: (max_outbound, max_inbound, ban_duration_s)  (§10)
    "mainnet": (8, 32, 86_400),
    "testnet": (8, 32, 86_400),
    "devnet": (8, 16, 60),
}


def _is_loopback(host: str) -> bool:
    return host in ("::1", "localhost") or host.startswith("127.")


class PeerManager:
    """All peer connections of one node.

    Args:
        config: The node's ``NodeConfig`` (network, datadir, peers, limits, no_discovery...).
        service: The chain owner.
        node_id: 32 random bytes per process start (P4).
        on_ready: Called once, when initial sync ends (P10).
    """

    def __init__(
        self,
        config: Any,
        service: NodeService,
        node_id: bytes,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.service = service
        self.params = service.params
        self.node_id = node_id
        self.on_ready = on_ready
        network = str(config.network)
        outbound, inbound, ban_s = DEFAULT_LIMITS.get(network, DEFAULT_LIMITS["mainnet"])
        self.max_outbound = _or(getattr(config, "max_outbound", None), outbound)
        self.max_inbound = _or(getattr(config, "max_inbound", None), inbound)
        self.ban_duration_ms = 1000 * _or(getattr(config, "ban_duration_s", None), ban_s)
        self.max_frame = wire.MAX_FRAME
        self.tx_reannounce = gossip.ReannounceTimer(random.Random(os.urandom(16)))
        """P11 as docs/p2p.md maps it: pool txs a peer lacks are announced again every 30-60 s."""
        self.discovery = not bool(getattr(config, "no_discovery", False))
        self.stale_relay_filter = bool(getattr(config, "stale_relay_filter", True))
        """P14: drop relayed blocks with a milestone link ``punctuality`` below our best."""
        self.local = wire.LocalInfo(self.params.network_id, service.chain.genesis_id, node_id)
        self.rng = random.Random(os.urandom(16))
        datadir = _datadir(config)
        self.addrbook = AddrBook(datadir / FILE_NAME if datadir is not None else None)
        self.seeds: list[tuple[str, int]] = list(_peer_addresses(config))
        self.peers: dict[str, Peer] = {}
        self.bans = gossip.BanList()
        self.fetcher = gossip.BlockFetcher()
        self.tx_announcer = gossip.TxAnnouncer()
        self.synced = False
        self.banned_total = 0
        self._seq = 0
        self._no_redial_until: dict[tuple[str, int], float] = {}
        self._dial_failures: dict[tuple[str, int], int] = {}
        self._dialing: set[tuple[str, int]] = set()
        self._tried: set[tuple[str, int]] = set()
        self._dialed_to: dict[tuple[str, int], str] = {}
        self._sync_peer: str | None = None
        self._sync_fetches = gossip.KnownInventory(2 * wire.MAX_IDS)
        """Blocks we getdata'd from a ``pending`` reply (P9): exempt from P14."""
        self._plan = SyncPlan()
        self._sync_empty_round = False
        self._headers_exhausted = False
        self._sync_last: VerifiedHeader | None = None
        self._applying_sync = False
        self.verify_workers = SYNC_VERIFY_WORKERS
        self._verify_pool: ProcessPoolExecutor | None = None
        self._verify_broken = False
        self._verifying: dict[bytes, asyncio.Future[list[bytes]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._main: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._last_save = time.monotonic()
        self._last_orphan_sweep = time.monotonic()
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Load the address book, subscribe to service events, start dialing and timers."""
        self.addrbook.load()
        self.service.subscribe(self._on_event)
        self._session = aiohttp.ClientSession()
        self._main = [
            asyncio.create_task(self._dial_loop(), name="p2p-dial"),
            asyncio.create_task(self._maintenance_loop(), name="p2p-maintenance"),
        ]
        self._check_synced()

    async def stop(self) -> None:
        """Close every connection (close frame), save the address book."""
        self._stopping = True
        self.service.unsubscribe(self._on_event)
        for task in self._main:
            task.cancel()
        for task in self._main:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*(p.stop() for p in list(self.peers.values())), return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        self._drop_verifications()
        if self._verify_pool is not None:
            pool, self._verify_pool = self._verify_pool, None
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
        self.addrbook.save()

    # ------------------------------------------------------------------ queries
    @property
    def connected_count(self) -> int:
        """Peers with a completed handshake."""
        return sum(1 for p in self.peers.values() if p.ready)

    def peers_info(self) -> list[dict[str, Any]]:
        """``GET /v1/peers``."""
        now = self._now_ms()
        return [p.info(now) for p in self.peers.values() if p.ready]

    def ready_peers(self) -> list[Peer]:
        """Peers with a completed handshake, in connection order."""
        return [p for p in self.peers.values() if p.ready]

    # ------------------------------------------------------------------ inbound
    async def handle_inbound(self, request: web.Request) -> web.StreamResponse:
        """aiohttp handler for ``GET /dagchain/p2p/v1`` on the P2P listener."""
        host = request.remote or "?"
        inbound = [p for p in self.peers.values() if p.direction == "inbound"]
        if self._stopping or len(inbound) >= self.max_inbound:
            raise web.HTTPServiceUnavailable(text="too many inbound peers")
        if not _is_loopback(host):
            if sum(1 for p in inbound if p.host == host) >= MAX_INBOUND_PER_IP:
                raise web.HTTPServiceUnavailable(text="too many connections from this address")
            if self.bans.is_banned("ip:" + host, self._now_ms()):
                raise web.HTTPForbidden(text="banned")
        # P1: aiohttp refuses a frame equal to max_msg_size, hence + 1; no compression, so
        # the limit is on the bytes sent
        ws = web.WebSocketResponse(max_msg_size=self.max_frame + 1, compress=False, autoping=True)
        await ws.prepare(request)
        peername = request.transport.get_extra_info("peername") if request.transport else None
        port = int(peername[1]) if peername else 0
        await self._run(ws, "inbound", host, port)
        return ws

    # ------------------------------------------------------------------ outbound
    async def _dial_loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                self._dial_some()
            await asyncio.sleep(DIAL_INTERVAL_S)

    def _dial_some(self) -> None:
        outbound = sum(1 for p in self.peers.values() if p.direction == "outbound")
        outbound += len(self._dialing)
        candidates = list(self.seeds)
        if self.discovery:
            candidates += [(e.host, e.port) for e in self.addrbook.candidates()]
        now = time.monotonic()
        for addr in candidates:
            if outbound >= self.max_outbound:
                break
            if addr in self._dialing or self._connected_to(addr) or addr == self._own_address():
                continue
            if self._no_redial_until.get(addr, 0.0) > now:
                continue
            self._dialing.add(addr)
            outbound += 1
            self._spawn(self._dial(addr), f"dial-{addr[0]}:{addr[1]}")

    def _own_address(self) -> tuple[str, int] | None:
        port = getattr(self.config, "p2p_port", None)
        return ("127.0.0.1", int(port)) if port else None

    def _connected_to(self, addr: tuple[str, int]) -> bool:
        key = self._dialed_to.get(addr)
        if key is not None and key in self.peers:
            return True
        return any(
            p.host == addr[0] and p.listen_port == addr[1] and p.ready for p in self.peers.values()
        )

    async def _dial(self, addr: tuple[str, int]) -> None:
        host, port = addr
        url = f"http://{host}:{port}{wire.PROTOCOL_PATH}"
        try:
            if self._session is None:
                return
            try:
                ws = await self._session.ws_connect(
                    url,
                    max_msg_size=self.max_frame + 1,  # P1, as for the listener
                    compress=0,
                    timeout=aiohttp.ClientWSTimeout(ws_close=5.0),
                    autoping=True,
                )
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                self._on_dial_failed(addr, str(exc))
                return
            self._dial_failures.pop(addr, None)
            await self._run(ws, "outbound", host, port, addr)
        finally:
            self._dialing.discard(addr)

    def _on_dial_failed(self, addr: tuple[str, int], why: str) -> None:
        self._tried.add(addr)
        failures = self._dial_failures.get(addr, 0) + 1
        self._dial_failures[addr] = failures
        backoff = min(MAX_DIAL_BACKOFF_S, 0.5 * 2 ** min(failures, 6))
        self._no_redial_until[addr] = time.monotonic() + backoff
        self.addrbook.mark_failed(*addr)
        log.debug("dial %s:%d failed (%s); retry in %.1f s", addr[0], addr[1], why, backoff)
        self._check_synced()

    # ------------------------------------------------------------------ one connection
    async def _run(
        self,
        ws: WebSocket,
        direction: Direction,
        host: str,
        port: int,
        dialed: tuple[str, int] | None = None,
    ) -> None:
        self._seq += 1
        key = f"{direction[:3]}-{self._seq}-{host}:{port}"
        peer = Peer(ws, direction, host, port, key, self.max_frame)
        self.peers[key] = peer
        if dialed is not None:
            self._dialed_to[dialed] = key
        peer.start_writer()
        try:
            if direction == "outbound":
                peer.send(self._hello())
            await self._read_loop(peer)
        finally:
            if peer.close_code is None:
                peer.close_code = ws.close_code
            await peer.stop()
            self.peers.pop(key, None)
            self._on_disconnect(peer, dialed)

    async def _read_loop(self, peer: Peer) -> None:
        ws = peer.ws
        deadline = asyncio.get_running_loop().time() + HELLO_TIMEOUT_S
        while not peer.closed:
            timeout = None
            if not peer.ready:
                timeout = max(0.0, deadline - asyncio.get_running_loop().time())
            try:
                msg = await asyncio.wait_for(ws.receive(), timeout)
            except TimeoutError:
                log.info("peer %s: no hello within %.0f s", peer.key, HELLO_TIMEOUT_S)
                peer.close_soon(wire.CLOSE_PROTOCOL_ERROR)
                return
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                return
            if peer.is_closing():
                return  # we decided to close meanwhile (a timeout, a ban): read no further
            if msg.type == WSMsgType.ERROR:
                self._on_ws_error(peer, ws.exception())
                return
            if msg.type == WSMsgType.TEXT:
                self._on_frame(peer, str(msg.data))
            elif msg.type == WSMsgType.BINARY:
                self._on_frame(peer, bytes(msg.data))

    def _on_ws_error(self, peer: Peer, exc: BaseException | None) -> None:
        code = getattr(exc, "code", None)
        if code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG or (
            exc is not None and "too big" in str(exc).lower()
        ):
            self._penalise(peer, 100, "frame over max_frame (P1)", wire.CLOSE_TOO_BIG)
        else:
            log.debug("peer %s: websocket error %s", peer.key, exc)

    def _on_frame(self, peer: Peer, data: bytes | str) -> None:
        now = self._now_ms()
        ready = peer.handshake.ready
        try:
            msg = wire.decode_frame(data, self.max_frame)
        except wire.RemoteProtocolError as exc:
            if ready and not peer.bucket.take(now):
                self._penalise(peer, gossip.SCORE_RATE, "message beyond the token bucket")
                return
            close = exc.close_code
            if close is None and not ready:
                close = wire.CLOSE_PROTOCOL_ERROR
            self._penalise(peer, exc.score, exc.reason, close)
            return
        if ready:
            # §11.7 token bucket: replies to our own outstanding requests are not charged
            solicited = gossip.is_solicited_reply(msg, peer.pending_items, peer.requests)
            if gossip.charge_inbound(peer.bucket, solicited, now):
                self._penalise(peer, gossip.SCORE_RATE, "message beyond the token bucket")
                return
        try:
            if isinstance(msg, wire.Unknown):
                if not peer.handshake.ready:
                    raise wire.RemoteProtocolError(
                        "first frame is not hello", wire.SCORE_FATAL, wire.CLOSE_PROTOCOL_ERROR
                    )
                return
            peer.handshake.on_receive(msg)
        except wire.RemoteProtocolError as exc:
            close = exc.close_code
            if close is None and not peer.handshake.ready:
                close = wire.CLOSE_PROTOCOL_ERROR
            self._penalise(peer, exc.score, exc.reason, close)
            return
        if isinstance(msg, wire.Hello):
            self._on_hello(peer, msg)
            return
        if not peer.ready:
            return
        handler = getattr(self, "_on_" + msg.TYPE, None)
        if handler is not None:
            handler(peer, msg)

    def _penalise(self, peer: Peer, points: int, reason: str, close: int | None = None) -> None:
        """Add misbehaviour points; ban at the threshold (close 4006); close if asked."""
        now = self._now_ms()
        log.info("peer %s: %s (+%d)", peer.key, reason, points)
        if points and peer.score.add(points, now):
            key = gossip.ban_key(peer.host, peer.node_id)
            self.bans.ban(key, now, self.ban_duration_ms)
            self.banned_total += 1
            log.warning("peer %s banned (%s) for %d s", peer.key, key, self.ban_duration_ms // 1000)
            # §11.7: reaching the threshold closes 4006, whatever code the event names and
            # whatever close is already on its way, except an oversize frame (1009)
            code = wire.CLOSE_TOO_BIG if close == wire.CLOSE_TOO_BIG else wire.CLOSE_MISBEHAVING
            peer.close_soon(code, override=True)
            return
        if close is not None:
            peer.close_soon(close)

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
            port=int(getattr(self.config, "resolved_p2p_port", 0) or 0),
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
            is_banned=lambda n: self.bans.is_banned(gossip.ban_key(peer.host, n), now),
        )
        if code is not None:
            log.info("peer %s: hello refused (close %d)", peer.key, code)
            peer.close_soon(code)
            return
        peer.hello = hello
        peer.best_height = hello.height
        peer.chainwork = hello.chainwork
        if peer.direction == "inbound":
            peer.send(self._hello())
        log.info(
            "peer %s ready (node %s, height %d)", peer.key, hello.node.hex()[:12], hello.height
        )
        if peer.direction == "outbound":
            self._tried.add((peer.host, peer.port))
            self.addrbook.mark_good(peer.host, peer.port, now // 1000)
        elif hello.port and self.discovery:
            self.addrbook.add(peer.host, hello.port, now // 1000)
        if self.discovery and not peer.getaddr_sent:
            peer.getaddr_sent = True
            peer.send(wire.GetAddr())
        self._announce_mempool(peer)
        self._maybe_start_sync()
        self._check_synced()

    def _on_disconnect(self, peer: Peer, dialed: tuple[str, int] | None) -> None:
        now = self._now_ms()
        code = peer.close_code
        mismatch = code is not None and 4001 <= code <= 4005 and code != wire.CLOSE_DUPLICATE
        if dialed is not None and mismatch:
            self._no_redial_until[dialed] = time.monotonic() + MISMATCH_NO_REDIAL_S
        for item, nxt in self.fetcher.forget_peer(peer.key, now):
            other = self.peers.get(nxt)
            if other is not None:
                self._request(other, [(wire.InvKind.BLOCK, item)])
        if self._sync_peer == peer.key:
            self._reset_sync()
            self._maybe_start_sync()
        self._check_synced()

    # ------------------------------------------------------------------ message handlers
    def _on_ping(self, peer: Peer, msg: wire.Ping) -> None:
        peer.send(wire.Pong(msg.nonce))

    def _on_pong(self, peer: Peer, msg: wire.Pong) -> None:
        if msg.nonce == peer.ping_nonce:
            peer.ping_nonce = None
            peer.last_pong = time.monotonic()

    def _on_getaddr(self, peer: Peer, msg: wire.GetAddr) -> None:
        if peer.answered_getaddr or not self.discovery:
            return
        peer.answered_getaddr = True
        rows = tuple((e.host, e.port, e.seen_s) for e in self.addrbook.good(gossip.GETADDR_MAX))
        peer.send(wire.Addr(rows))

    def _on_addr(self, peer: Peer, msg: wire.Addr) -> None:
        now = self._now_ms()
        solicited = peer.getaddr_sent and not peer.got_addr
        peer.got_addr = True
        verdict = peer.addr_limiter.check(len(msg.addrs), solicited, now)
        if verdict is not None:
            if verdict:
                self._penalise(peer, verdict, "unsolicited addr of more than 10 entries")
            return
        if not self.discovery:
            return
        fresh = []
        for host, port, seen in msg.addrs:
            seen_s = min(seen, now // 1000)
            self.addrbook.add(host, port, seen_s)
            if now // 1000 - seen_s <= gossip.ADDR_RELAY_AGE_S:
                fresh.append((host, port, seen_s))
        if fresh and not solicited:
            others = [p for p in self.ready_peers() if p is not peer]
            for other in self.rng.sample(others, min(gossip.ADDR_RELAY_FANOUT, len(others))):
                other.send(wire.Addr(tuple(fresh[: gossip.ADDR_MAX_UNSOLICITED])))

    def _on_inv(self, peer: Peer, msg: wire.Inv) -> None:
        now = self._now_ms()
        want: list[tuple[int, bytes]] = []
        for kind, item in msg.items:
            peer.known.add(item)
            if kind == wire.InvKind.BLOCK:
                if self.service.has_block(item):
                    self._note_milestone(peer, item)
                    continue
                if not self.synced:
                    continue
                if self.fetcher.on_announce(item, peer.key, now):
                    want.append((kind, item))
            elif kind == wire.InvKind.TX:
                if self.service.get_tx_raw(item) is not None or item in self.fetcher:
                    continue
                if self.fetcher.on_announce(item, peer.key, now):
                    want.append((kind, item))
        if want:
            self._request(peer, want)

    def _request(self, peer: Peer, items: list[tuple[int, bytes]]) -> None:
        """getdata with at most 2 outstanding per peer; the rest waits in a backlog."""
        peer.getdata_backlog.extend(items)
        self._flush_getdata(peer)

    def _flush_getdata(self, peer: Peer) -> None:
        while peer.getdata_backlog and peer.getdata_out < gossip.MAX_OUTSTANDING_GETDATA:
            batch = peer.getdata_backlog[:MAX_GETDATA_ITEMS]
            del peer.getdata_backlog[:MAX_GETDATA_ITEMS]
            ids = {item for _, item in batch}
            peer.getdata_sets.append(ids)
            peer.getdata_out = len(peer.getdata_sets)
            peer.pending_items.update(ids)
            peer.requests["getdata"] = self._deadline()
            peer.send(wire.GetData(tuple(batch)))

    def _on_getdata(self, peer: Peer, msg: wire.GetData) -> None:
        if peer.serving_getdata >= gossip.MAX_OUTSTANDING_GETDATA:
            self._penalise(peer, gossip.SCORE_RATE, "getdata beyond 2 outstanding")
            return
        missing: list[tuple[int, bytes]] = []
        peer.serving_getdata += 1
        for kind, item in msg.items:
            raw: bytes | None = None
            if kind == wire.InvKind.BLOCK:
                raw = self.service.get_block_raw(item)
                if raw is not None:
                    peer.known.add(item)
                    peer.send(wire.BlockMsg(raw))
                    self._note_milestone(peer, item)
                    continue
            elif kind == wire.InvKind.TX:
                raw = self.service.get_tx_raw(item)
                if raw is not None:
                    peer.known.add(item)
                    peer.send(wire.TxMsg(raw))
                    continue
            missing.append((kind, item))
        if missing:
            peer.send(wire.NotFound(tuple(missing)))
        peer.call_when_sent(lambda: _done_serving(peer))

    def _on_notfound(self, peer: Peer, msg: wire.NotFound) -> None:
        now = self._now_ms()
        expected = False
        for kind, item in msg.items:
            if (
                kind == wire.InvKind.LEVEL_SET
                and self._sync_peer == peer.key
                and self._plan.is_expected_levelset(item)
            ):
                self._sync_failed(peer, "level set not found", gossip.SCORE_BAD_LEVEL_SET)
                return
            if item in peer.pending_items:
                expected = True
                peer.pending_items.discard(item)
                if self._sync_peer == peer.key and self._plan.on_not_found(item):
                    self._sync_failed(peer, "listed block not found", gossip.SCORE_BAD_LEVEL_SET)
                    return
                nxt = self.fetcher.on_not_found(item, peer.key, now)
                other = self.peers.get(nxt) if nxt is not None else None
                if other is not None:
                    self._request(other, [(kind, item)])
        if expected:
            self._getdata_answered(peer)
        else:
            self._penalise(peer, gossip.SCORE_UNSOLICITED, "unsolicited notfound")

    def _getdata_answered(self, peer: Peer) -> None:
        """An item we asked for arrived: a getdata counts as outstanding until every one of its
        items is answered (the serving side counts it until it has written them all), so we
        never have a third one in flight."""
        pending = peer.pending_items
        peer.getdata_sets = [ids for ids in peer.getdata_sets if not ids.isdisjoint(pending)]
        peer.getdata_out = len(peer.getdata_sets)
        if not pending:
            peer.requests.pop("getdata", None)
        else:
            peer.requests["getdata"] = self._deadline()
        self._flush_getdata(peer)

    def _on_block(self, peer: Peer, msg: wire.BlockMsg) -> None:
        block_id = _block_id(msg.data)
        if block_id is None:
            self._penalise(peer, gossip.SCORE_BLOCK_INVALID, "block MALFORMED (H1)")
            return
        peer.known.add(block_id)
        requested = block_id in peer.pending_items
        if requested:
            peer.pending_items.discard(block_id)
            self._getdata_answered(peer)
        if self._sync_peer == peer.key and self._plan.on_block(block_id, msg.data):
            self._pump_sync(peer)
            return
        self.fetcher.on_received(block_id)
        if not self.synced and not requested:
            return  # P10: relayed blocks are ignored until initial sync ends
        if self._drop_stale_relay(peer, block_id, msg.data):
            return
        self._submit_block(peer, msg.data)
        self._note_milestone(peer, block_id)

    def _drop_stale_relay(self, peer: Peer, block_id: bytes, raw: bytes) -> bool:
        """P14: drop a relayed block whose milestone link is ``punctuality`` below our best.

        Relayed means pushed or fetched after an ``inv``; blocks of the sync plan never get
        here, and blocks fetched from a ``pending`` reply (P9) or that an orphan waits for
        (P13) are exempt, so the filter never slows a node that is catching up. No penalty,
        nothing remembered (docs/p2p.md).
        """
        if not self.stale_relay_filter or block_id in self._sync_fetches:
            return False
        stale = self.service.drop_stale_relay(block_id, raw)
        if stale is None:
            return False
        log.debug(
            "peer %s: stale relayed block %s dropped (P14: milestone link at %d, best %d)",
            peer.key,
            block_id.hex()[:16],
            *stale,
        )
        return True

    def _submit_block(self, peer: Peer, raw: bytes) -> bool:
        try:
            outcome = self.service.submit_block(raw, peer.key)
        except (InvalidBlock, NotYetValid) as exc:
            score = gossip.score_block_error(exc)
            if score:
                self._penalise(peer, score, f"block {getattr(exc, 'rule', '?')}: {exc}")
            return False
        if outcome.status is BlockStatus.ORPHAN:
            if peer.key in outcome.evicted_orphans:
                self._penalise(
                    peer, gossip.SCORE_ORPHAN_OVER_LIMIT, "orphan beyond the per-peer limit (P13)"
                )
            want = [
                (int(wire.InvKind.BLOCK), bytes(m))
                for m in outcome.missing
                if not self.service.has_block(m) and m not in peer.pending_items
            ]
            if want:
                self._request(peer, want)
            ms_link = gossip.block_frame_milestone_link(raw)
            if ms_link in outcome.missing or len(self.service.chain.orphans) > ORPHAN_SYNC_TRIGGER:
                # P13: an unknown milestone link means we are behind: milestone sync is faster
                self._start_sync(peer)
        return True

    def _note_milestone(self, peer: Peer, block_id: bytes) -> None:
        """``GET /v1/peers`` ``best_milestone_height``: kept current from the milestones the
        peer sends or announces to us and those we send it in full, once we hold them (a
        milestone we know has a height); the heaviest one seen counts (docs/p2p.md)."""
        snap = self.service.chain.get_snapshot(block_id)
        if snap is not None and snap.chainwork > peer.chainwork:
            peer.chainwork = snap.chainwork
            peer.best_height = snap.height

    def _on_tx(self, peer: Peer, msg: wire.TxMsg) -> None:
        txid = hash32(msg.data)
        if txid in peer.pending_items:
            peer.pending_items.discard(txid)
            self._getdata_answered(peer)
        peer.known.add(txid)
        self.fetcher.on_received(txid)
        now = self._now_ms()
        if peer.missing_inputs.exhausted(now) and self.service.lacks_inputs(msg.data):
            self._penalise(peer, gossip.SCORE_RATE, "tx with missing inputs beyond 100 per minute")
            return
        try:
            self.service.submit_tx(msg.data, peer.key)
        except InvalidTransaction as exc:
            if exc.rule == "V6" and exc.message == "missing-input":
                peer.missing_inputs.record(now)
            score = gossip.score_tx_rule(exc.rule)
            if score:
                self._penalise(peer, score, f"tx {exc.rule}")
        except MempoolError:
            pass

    def _on_getmilestones(self, peer: Peer, msg: wire.GetMilestones) -> None:
        headers = self.service.milestone_headers_after(list(msg.locator), wire.MAX_HEADERS)
        peer.send(wire.Milestones(tuple(headers)))

    def _on_getlevelset(self, peer: Peer, msg: wire.GetLevelSet) -> None:
        ids = self.service.level_set_ids(msg.ms)
        if ids is None:
            peer.send(wire.NotFound(((int(wire.InvKind.LEVEL_SET), msg.ms),)))
            return
        page = tuple(ids[msg.offset : msg.offset + wire.MAX_IDS])
        peer.send(wire.LevelSet(msg.ms, msg.offset, len(ids), page))

    def _on_getpending(self, peer: Peer, msg: wire.GetPending) -> None:
        peer.send(wire.Pending(tuple(self.service.pending_ids(wire.MAX_IDS))))

    def _on_pending(self, peer: Peer, msg: wire.Pending) -> None:
        if peer.requests.pop("pending", None) is None:
            self._penalise(peer, gossip.SCORE_UNSOLICITED, "unsolicited pending")
            return
        want = [
            (int(wire.InvKind.BLOCK), i)
            for i in msg.ids
            if not self.service.has_block(i) and i not in self.fetcher
        ]
        for _, item in want:
            self._sync_fetches.add(item)
            self.fetcher.on_announce(item, peer.key, self._now_ms())
        if want:
            self._request(peer, want)

    # ------------------------------------------------------------------ sync (P5, P7-P10)
    def _maybe_start_sync(self, exclude: Peer | None = None) -> None:
        """P5: sync with the peer advertising the most work, if that is more than ours."""
        if self._sync_peer is not None:
            return
        _, _, work = self.service.best()
        now = self._now_ms()
        candidates = [
            p for p in self.ready_peers() if p is not exclude and p.unbacked_until_ms <= now
        ]
        best = max(candidates, key=lambda p: p.chainwork, default=None)
        if best is not None and best.chainwork > work:
            self._start_sync(best)

    def _start_sync(self, peer: Peer) -> None:
        if self._sync_peer is not None and self._sync_peer in self.peers:
            return
        if peer.unbacked_until_ms > self._now_ms():
            return  # P9 (v2): at most one round per 60 s with a peer whose claim was unbacked
        self._reset_sync()
        self._sync_peer = peer.key
        self._send_getmilestones(peer)

    def _reset_sync(self) -> None:
        self._sync_peer = None
        self._plan.reset()
        self._drop_verifications()
        self._headers_exhausted = False
        self._sync_last = None

    def _sync_locator(self) -> list[bytes]:
        locator = [bytes(b) for b in self.service.locator()]
        last = self._sync_last
        if last is not None and last.block_id not in locator:
            locator = [last.block_id, *locator][: wire.MAX_LOCATOR]
        return locator

    def _send_getmilestones(self, peer: Peer) -> None:
        locator = self._sync_locator()
        peer.requests["milestones"] = self._deadline()
        peer.send(wire.GetMilestones(tuple(locator)))

    def _on_milestones(self, peer: Peer, msg: wire.Milestones) -> None:
        if peer.requests.pop("milestones", None) is None or self._sync_peer != peer.key:
            self._penalise(peer, gossip.SCORE_UNSOLICITED, "unsolicited milestones")
            return
        if not msg.headers:
            self._headers_exhausted = True  # P9: the round ends with an empty reply
            self._pump_sync(peer)
            return
        last = self._sync_last
        locator = self._sync_locator()
        known: dict[bytes, Any] = {}
        if last is not None:
            known[last.block_id] = last
        chain = self.service.chain
        try:
            headers = verify_milestone_headers(
                msg.headers,
                locator,
                lambda b: known[b].snapshot if b in known else chain.get_snapshot(b),
                lambda b: known[b].header.timestamp_ms if b in known else _timestamp(chain, b),
                chain.genesis_id,
                self.params,
                self._now_ms(),
            )
        except SyncError as exc:
            if exc.pause:
                self._reset_sync()
                return
            self._sync_failed(peer, f"bad milestones: {exc.reason}", exc.score)
            return
        self._sync_last = headers[-1]
        new = [h for h in headers if not self.service.has_block(h.block_id)]
        if not new:
            # P9 (v2): a reply of headers we already have ends the round like an empty one
            self._headers_exhausted = True
        self._plan.add_headers(new)
        self._pump_sync(peer)

    def _on_levelset(self, peer: Peer, msg: wire.LevelSet) -> None:
        if self._sync_peer != peer.key or not self._plan.is_expected_levelset(msg.ms):
            self._penalise(peer, gossip.SCORE_UNSOLICITED, "unsolicited levelset")
            return
        try:
            nxt = self._plan.on_levelset(msg.ms, msg.offset, msg.total, msg.ids)
        except SyncError as exc:
            self._sync_failed(peer, exc.reason, exc.score)
            return
        if nxt is not None:
            peer.send(wire.GetLevelSet(*nxt))
        if self._plan.awaiting_levelsets():
            peer.requests["levelset"] = self._deadline()
        else:
            peer.requests.pop("levelset", None)
        self._pump_sync(peer)

    def _pump_sync(self, peer: Peer) -> None:
        """Apply complete level sets in order, fetch listed blocks, open new level sets."""
        chain = self.service.chain
        best_before = chain.best_id
        self._start_verifications(peer)
        self._apply_ready(peer)
        if chain.best_id != best_before:
            self._announce_best(exclude=peer)
        if self._sync_peer != peer.key:
            return
        wanted = self._plan.wanted_blocks(
            lambda b: chain.has_block(b), MAX_GETDATA_ITEMS * gossip.MAX_OUTSTANDING_GETDATA
        )
        if wanted:
            self._request(peer, [(int(wire.InvKind.BLOCK), b) for b in wanted])
        for ms, offset in self._plan.start_jobs():
            peer.requests["levelset"] = self._deadline()
            peer.send(wire.GetLevelSet(ms, offset))
        if self._headers_exhausted:
            if self._plan.idle:
                # P9: then getpending once; the round is over (its answer is fetched as it
                # comes, so a peer that never answers holds nothing up)
                if "pending" not in peer.requests:
                    self._sync_empty_round = True
                    peer.requests["pending"] = self._deadline()
                    peer.send(wire.GetPending())
                self._finish_sync_round(peer)
            return
        if self._plan.queued == 0 and "milestones" not in peer.requests:
            self._send_getmilestones(peer)

    def _apply_ready(self, peer: Peer) -> None:
        """P9: submit complete level sets in height order (not relayed).

        A level set whose signatures a worker is checking waits for the answer; the txids that
        passed go into the chain's signature cache first, so ``on_block`` skips T1-T6 for them.
        """
        cache = self.service.chain.signature_cache
        # The ready level sets go into one synced batch (§12 A1), and their events come after
        # it is written, still under _applying_sync (not relayed).
        self._applying_sync = True
        try:
            with self.service.sync_batch():
                for job, raws in self._plan.pop_ready(self.service.has_block, self._verified):
                    fut = self._verifying.pop(job.milestone.block_id, None)
                    if fut is not None and not fut.cancelled() and fut.exception() is None:
                        for txid in fut.result():
                            cache.add(TxId(txid))
                    try:
                        self.service.submit_level_set(raws, peer.key)
                    except NotYetValid:
                        self._reset_sync()
                        return
                    except InvalidBlock as exc:
                        self._sync_failed(peer, f"level-set block {exc.rule}", 100)
                        return
                    if not self.service.has_block(job.milestone.block_id):
                        self._sync_failed(peer, "level set left its milestone an orphan", 50)
                        return
                    self._note_milestone(peer, job.milestone.block_id)
        finally:
            self._applying_sync = False

    # ------------------------------------------------------------------ sync signature workers
    def _verified(self, job: LevelSetJob) -> bool:
        """``pop_ready``'s gate: no worker is still checking this level set."""
        fut = self._verifying.get(job.milestone.block_id)
        return fut is None or fut.done()

    def _start_verifications(self, peer: Peer) -> None:
        """Send each newly complete level set to the worker pool (one task per level set).

        Correctness never depends on the pool: a tx a worker did not pass (or a pool that
        failed) is simply not cached, and ``on_block`` checks it itself.
        """
        if self.verify_workers <= 0 or self._verify_broken or self._stopping:
            return
        loop = asyncio.get_running_loop()
        for job, raws in self._plan.complete_jobs(self.service.has_block):
            ms = job.milestone.block_id
            if ms in self._verifying or not raws:
                continue
            try:
                if self._verify_pool is None:
                    self._verify_pool = ProcessPoolExecutor(
                        self.verify_workers,
                        mp_context=multiprocessing.get_context("spawn"),
                        initializer=_verify_worker_init,
                        initargs=(os.getpid(),),
                    )
                fut = loop.run_in_executor(self._verify_pool, verify_blocks, raws, self.params)
            except Exception as exc:  # a broken or shut-down pool: verify in on_block instead
                log.warning("sync signature workers unavailable: %s", exc)
                self._verify_broken = True
                return
            self._verifying[ms] = fut
            fut.add_done_callback(functools.partial(self._on_verified, peer, ms))

    def _on_verified(self, peer: Peer, ms: bytes, fut: asyncio.Future[list[bytes]]) -> None:
        if fut.cancelled() or self._verifying.get(ms) is not fut:
            return  # sync was reset meanwhile
        exc = fut.exception()
        if exc is not None:
            log.warning("sync signature worker failed: %r", exc)
        if self._sync_peer == peer.key and not self._stopping:
            self._pump_sync(peer)

    def _drop_verifications(self) -> None:
        for fut in self._verifying.values():
            fut.cancel()
        self._verifying.clear()

    def _announce_best(self, exclude: Peer) -> None:
        """After a sync step moved the best milestone, announce it (inv only) so that peers
        that do not know our branch notice more work (interpretation of P9's 'not relayed')."""
        best = bytes(self.service.chain.best_id)
        for other in self.ready_peers():
            if other is not exclude and best not in other.known:
                other.known.add(best)
                other.send(wire.Inv(((int(wire.InvKind.BLOCK), best),)))

    def _finish_sync_round(self, peer: Peer) -> None:
        """The round with ``peer`` is over (P9): its headers are exhausted, its level sets in.

        P9 (v2), an unbacked claim: if our best chainwork is still below what the peer
        claimed, it counts from now on as claiming our chainwork (so P5 picks the next peer and
        P10 can end) until a header or block it sends raises our best, and no new round with it
        starts within 60 s. No score: an honest peer can fall behind its own hello.
        """
        if self._sync_peer != peer.key or not self._plan.idle:
            return
        self._reset_sync()
        _, _, work = self.service.best()
        if peer.chainwork > work:
            log.info(
                "peer %s: its claim of more chainwork is not backed by milestones (P9); "
                "no new sync round with it for %d s",
                peer.key,
                UNBACKED_ROUND_INTERVAL_MS // 1000,
            )
            peer.chainwork = work
            peer.unbacked_until_ms = self._now_ms() + UNBACKED_ROUND_INTERVAL_MS
        self._check_synced(force_round=True)
        self._maybe_start_sync()

    def _sync_failed(self, peer: Peer, reason: str, score: int) -> None:
        self._reset_sync()
        self._penalise(peer, score, f"sync: {reason}")
        self._maybe_start_sync(exclude=peer)

    def _check_synced(self, force_round: bool = False) -> None:
        """P10: (a) every seed tried, nobody ahead, no sync running; or (b) a fresh tip."""
        if self.synced:
            return
        best_id, _, work = self.service.best()
        ts = _timestamp(self.service.chain, best_id) or 0
        fresh = is_tip_fresh(ts, self._now_ms())
        tried_all = all(a in self._tried for a in self.seeds)
        nobody_ahead = all(p.chainwork <= work for p in self.ready_peers())
        idle = self._sync_peer is None
        if fresh or (tried_all and nobody_ahead and idle):
            self.synced = True
            log.info("initial sync done at height %d", self.service.best()[1])
            if self.on_ready is not None:
                self.on_ready()

    # ------------------------------------------------------------------ relay (P11)
    def _on_event(self, event: NodeEvent) -> None:
        if event.kind == "block" and event.block_id is not None:
            if self._applying_sync:
                return
            raw = self.service.get_block_raw(event.block_id)
            if raw is None:
                return
            # No sender exclusion by the event's peer: released orphans carry the parent's
            # sender. The known-inventory sets already hold whoever sent us this block.
            ready = self.ready_peers()
            known = {p.key: p.known for p in ready}
            plan = gossip.plan_block_relay(
                event.block_id, [p.key for p in ready], known, None, self.rng
            )
            for key in plan.push:
                self.peers[key].known.add(event.block_id)
                self.peers[key].send(wire.BlockMsg(raw))
                self._note_milestone(self.peers[key], event.block_id)
            inv = ((int(wire.InvKind.BLOCK), bytes(event.block_id)),)
            for key in plan.announce:
                self.peers[key].known.add(event.block_id)
                self.peers[key].send(wire.Inv(inv))
            self.fetcher.on_received(event.block_id)
        elif event.kind == "tx" and event.txid is not None:
            self.tx_announcer.add(event.txid, event.data.get("peer"))

    def _flush_txs(self, now: int) -> None:
        ready = self.ready_peers()
        batch = self.tx_announcer.flush(now)
        per_peer = gossip.plan_tx_announcements(
            batch, [p.key for p in ready], {p.key: p.known for p in ready}
        )
        for key, txids in per_peer.items():
            peer = self.peers[key]
            for start in range(0, len(txids), wire.MAX_INV):
                self._send_tx_inv(peer, txids[start : start + wire.MAX_INV], now)

    def _send_tx_inv(self, peer: Peer, txids: list[bytes], now: int) -> None:
        """One ``inv`` of txids (≤ 1000). Announcing does not make a tx ``known`` to the peer
        (only its answer or our ``tx`` does), so a tx it never fetched is announced again."""
        for t in txids:
            peer.announced_txs.add(t, now)
        peer.send(wire.Inv(tuple((int(wire.InvKind.TX), t) for t in txids)))

    def _announce_mempool(self, peer: Peer) -> None:
        """A new ready connection: announce our pool (by fee rate, ``inv`` batches of ≤ 1000),
        so a tx accepted before the link existed still reaches the peer (docs/p2p.md, P11)."""
        now = self._now_ms()
        txids = [bytes(t) for t in self.service.mempool.txids_by_fee_rate()]
        for chunk in gossip.mempool_inv_batches(txids, peer.known):
            self._send_tx_inv(peer, chunk, now)

    def _reannounce_txs(self, now: int) -> None:
        """Every 30-60 s: pool txs a peer is not known to have and that we did not announce to
        it within the last 30 s, at most one ``inv`` of 1000 per peer (docs/p2p.md, P11)."""
        ready = self.ready_peers()
        if not ready or not len(self.service.mempool):
            return
        txids = [bytes(t) for t in self.service.mempool.txids_by_fee_rate()]
        for peer in ready:
            batches = gossip.mempool_inv_batches(
                txids,
                peer.known,
                peer.announced_txs,
                now,
                gossip.TX_REANNOUNCE_MIN_MS,
                gossip.TX_REANNOUNCE_MAX_ITEMS,
            )
            for chunk in batches:
                self._send_tx_inv(peer, chunk, now)

    # ------------------------------------------------------------------ timers
    async def _maintenance_loop(self) -> None:
        while True:
            await asyncio.sleep(MAINTENANCE_S)
            self._maintain()

    def _maintain(self) -> None:
        now = self._now_ms()
        loop_now = asyncio.get_running_loop().time()
        if self.tx_announcer.due(now):
            self._flush_txs(now)
        if self.tx_reannounce.due(now):
            self._reannounce_txs(now)
        for item, key in self.fetcher.expire(now):
            peer = self.peers.get(key)
            if peer is not None:
                self._request(peer, [(int(wire.InvKind.BLOCK), item)])
        for peer in list(self.peers.values()):
            if not peer.ready:
                continue
            self._keepalive(peer)
            for kind, deadline in list(peer.requests.items()):
                if loop_now >= deadline:
                    self._on_timeout(peer, kind)
        self._check_synced()
        if time.monotonic() - self._last_orphan_sweep > ORPHAN_SWEEP_S:
            self._last_orphan_sweep = time.monotonic()
            self._fetch_orphan_parents(now)
        if time.monotonic() - self._last_save > ADDRBOOK_SAVE_S:
            self._last_save = time.monotonic()
            self.addrbook.save()

    def _fetch_orphan_parents(self, now: int) -> None:
        """P13: ask peers for links that held orphans wait for (API-submitted orphans too)."""
        ready = self.ready_peers()
        if not ready:
            return
        missing = [
            bytes(m)
            for m in self.service.chain.orphans.missing_links()
            if m not in self.fetcher and not self.service.has_block(m)
        ]
        for item in sorted(missing)[:MAX_GETDATA_ITEMS]:
            order = self.rng.sample(ready, len(ready))
            for peer in order:
                self.fetcher.on_announce(item, peer.key, now)
            first = self.peers.get(self.fetcher.requested_from(item) or "")
            if first is not None:
                self._request(first, [(int(wire.InvKind.BLOCK), item)])

    def _keepalive(self, peer: Peer) -> None:
        mono = time.monotonic()
        if peer.ping_nonce is not None and mono - peer.ping_sent_at > PONG_TIMEOUT_S:
            log.info("peer %s: no pong within %.0f s", peer.key, PONG_TIMEOUT_S)
            peer.close_soon(1000)
            return
        if peer.ping_nonce is None and mono - peer.ping_sent_at > PING_INTERVAL_S:
            peer.ping_nonce = self.rng.getrandbits(63) + 1
            peer.ping_sent_at = mono
            peer.send(wire.Ping(peer.ping_nonce))

    def _on_timeout(self, peer: Peer, kind: str) -> None:
        peer.requests.pop(kind, None)
        peer.timeouts += 1
        log.info("peer %s: %s request timed out (%d)", peer.key, kind, peer.timeouts)
        if kind == "getdata":
            peer.pending_items.clear()
            peer.getdata_sets.clear()
            peer.getdata_out = 0
            self._flush_getdata(peer)
        if self._sync_peer == peer.key:
            self._reset_sync()
            self._maybe_start_sync()
        if peer.timeouts >= gossip.MAX_TIMEOUTS:
            peer.close_soon(1000)

    # ------------------------------------------------------------------ helpers
    def _now_ms(self) -> int:
        return int(self.service.clock())

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + REQUEST_TIMEOUT_S

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _verify_worker_init(parent_pid: int) -> None:
    """In a signature worker: die with the node, even when it is killed with SIGKILL."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the node died before prctl
        os._exit(0)


def _done_serving(peer: Peer) -> None:
    peer.serving_getdata = max(0, peer.serving_getdata - 1)


def _block_id(raw: bytes) -> bytes | None:
    """The id of a block frame: H(header) from the canonical prefix (H1 is the core's check)."""
    return gossip.block_frame_id(raw)


def _timestamp(chain: Any, block_id: bytes) -> int | None:
    block = chain.get_block(block_id)
    return None if block is None else int(block.header.timestamp_ms)


def _or(value: Any, default: int) -> int:
    return default if value is None else int(value)


def _datadir(config: Any) -> Any:
    path = getattr(config, "data_path", None)
    if callable(path):
        return path()
    return path if path is not None else getattr(config, "datadir", None)


def _peer_addresses(config: Any) -> list[tuple[str, int]]:
    fn = getattr(config, "peer_addresses", None)
    if callable(fn):
        return list(fn())
    out = []
    for text in getattr(config, "peers", ()) or ():
        host, _, port = str(text).rpartition(":")
        out.append((host, int(port)))
    return out


__all__ = ["PeerManager"]
