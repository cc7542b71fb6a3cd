"""One peer connection: an aiohttp WebSocket pumped through the sans-I/O codec (§11.1, §11.2).

A reader loop (run by the manager) and a writer task draining a bounded queue: a peer that
cannot keep up is dropped, never buffered without limit (STYLE.md rule 11). While more than
``SEND_QUEUE_SOFT_BYTES`` wait for a peer's socket, the manager defers that peer's requests
(:attr:`Peer.deferred`, served in order once the queue drains) and reads on, so two nodes
answering each other never wait for each other; beyond ``MAX_DEFERRED_REQUESTS`` deferred
requests nothing more is read from the peer until its queue drains (docs/protocol.md decision
44). A peer that asks and does not read holds that much of our memory, not an answer per request.
"""

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Literal, final

import aiohttp
from aiohttp import ClientWebSocketResponse, WSMsgType, web

from p2p import wire
from p2p.connection import Connection

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 10.0
PING_INTERVAL_S = 30.0
PONG_TIMEOUT_S = 60.0
SEND_QUEUE_SIZE = 4096
"""Frames waiting for the socket; beyond this the peer is too slow and is dropped."""
SEND_QUEUE_SOFT_BYTES = 4 * 1024 * 1024
"""Bytes waiting for the socket above which the peer's requests wait until they drain
(decision 44; Bitcoin Core stops processing a peer's messages above its 5 MB send buffer)."""
MAX_DEFERRED_REQUESTS = 1024
"""Deferred requests beyond which the peer's frames are not read until its queue drains (an
honest peer has a few outstanding: two ``getdata``, eight level sets, a ping)."""

Direction = Literal["inbound", "outbound"]
WebSocket = web.WebSocketResponse | ClientWebSocketResponse


@final
class FrameCounts:
    """Frames and their bytes written to peers, by wire message type (``GET /metrics``:
    ``dagchain_p2p_messages_sent_total{type}``, ``dagchain_p2p_bytes_sent_total{type}``).

    Counted when the frame has been handed to the socket, so a frame still queued when its
    peer is dropped is not counted. Bytes are the message's encoding (the WebSocket payload),
    without the WebSocket header.
    """

    __slots__ = ("bytes", "frames")

    def __init__(self) -> None:
        self.frames: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def add(self, kind: str, size: int) -> None:
        """One frame of ``kind`` and ``size`` bytes was written."""
        self.frames[kind] += 1
        self.bytes[kind] += size


class Peer:
    """State of one connection; the manager owns the protocol logic.

    What the relay, the sync session and address gossip know of the peer they keep themselves,
    under its ``key``.
    """

    def __init__(
        self,
        ws: WebSocket,
        direction: Direction,
        host: str,
        port: int,
        key: str,
        max_frame: int,
        sent: FrameCounts | None = None,
    ) -> None:
        self.ws = ws
        self.direction = direction
        self.host = host
        self.port = port
        """The remote TCP port (outbound: the port we dialed)."""
        self.key = key
        self.max_frame = max_frame
        role = wire.Role.CLIENT if direction == "outbound" else wire.Role.SERVER
        self.conn = Connection(key, role, max_frame)
        """The protocol state (p2p/connection.py): handshake, score, token bucket."""
        self.handshake = self.conn.handshake
        self.score = self.conn.score
        self.hello: wire.Hello | None = None
        self.connected_at = time.monotonic()
        self.timeouts = 0
        self.ping_nonce: int | None = None
        self.ping_sent_at = 0.0
        self.last_pong = time.monotonic()
        self.closed = False
        self.close_code: int | None = None
        self.sent = sent if sent is not None else FrameCounts()
        """Where the frames written to this peer are counted (the manager's, shared)."""
        self._queue: asyncio.Queue[tuple[str, bytes] | Callable[[], None]] = asyncio.Queue(
            SEND_QUEUE_SIZE
        )
        self._writer: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None
        self.queued_bytes = 0
        """Bytes of the frames waiting for the socket."""
        self.deferred: deque[wire.Message] = deque()
        """The peer's requests waiting for :attr:`behind` to end (decision 44), oldest first."""
        self.on_drained: Callable[[Peer], None] | None = None
        """Called when the queue drains to the bound with requests deferred (the manager
        serves them)."""
        self.read_pauses = 0
        """Times reading waited for the queue to drain (decision 44)."""
        self._drained = asyncio.Event()
        """Set while ``queued_bytes`` is at most ``SEND_QUEUE_SOFT_BYTES``, or once closed."""
        self._drained.set()
        self._receiving: asyncio.Timeout | None = None
        """The timeout of the read waiting for the peer's next frame, if one waits."""

    @property
    def ready(self) -> bool:
        """Handshake complete and not closed."""
        return self.handshake.ready and not self.closed

    @property
    def node_id(self) -> bytes:
        """The peer's node id (32 zero bytes before its hello)."""
        return self.hello.node if self.hello is not None else bytes(32)

    @property
    def listen_port(self) -> int:
        """The port the peer listens on (from its hello, else the dialed port)."""
        if self.hello is not None and self.hello.port:
            return self.hello.port
        return self.port if self.direction == "outbound" else 0

    def is_closing(self) -> bool:
        """True once a close was decided (re-read after every await)."""
        return self.closed

    def start_writer(self) -> None:
        """Start the writer task."""
        self._writer = asyncio.create_task(self._write_loop(), name=f"peer-writer-{self.key}")

    def send(self, msg: wire.Message, after: Callable[[], None] | None = None) -> bool:
        """Queue one message (and an optional callback run once it is written).

        Returns False (and closes the peer) if the queue is full.
        """
        if self.closed:
            return False
        self.handshake.on_send(msg)
        frame = wire.encode_message(msg)
        try:
            self._queue.put_nowait((msg.TYPE, frame))
            self._queued(len(frame))
            if after is not None:
                self._queue.put_nowait(after)
        except asyncio.QueueFull:
            log.info("peer %s: send queue full, dropping the slow peer", self.key)
            self.close_soon(wire.CLOSE_PROTOCOL_ERROR)
            return False
        return True

    @property
    def behind(self) -> bool:
        """More than ``SEND_QUEUE_SOFT_BYTES`` wait for the socket: defer the peer's requests."""
        return self.queued_bytes > SEND_QUEUE_SOFT_BYTES

    def _queued(self, change: int) -> None:
        """``change`` bytes more (or fewer) wait for the socket."""
        was_behind = self.behind
        self.queued_bytes += change
        if self.behind and not self.closed:
            self._drained.clear()
            return
        self._drained.set()
        if was_behind and self.deferred and self.on_drained is not None and not self.closed:
            # soon, not here in the writer's step: a failing handler must not stop the writer
            asyncio.get_running_loop().call_soon(self.on_drained, self)

    def call_when_sent(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once everything queued so far has been written."""
        try:
            self._queue.put_nowait(callback)
        except asyncio.QueueFull:
            self.close_soon(wire.CLOSE_PROTOCOL_ERROR)

    def close_soon(self, code: int, override: bool = False) -> None:
        """Close the connection from a synchronous handler.

        The first code wins, unless ``override`` (a ban, §11.7) comes before the close frame
        was sent: the frame carries the code current when it is written.
        """
        if self.closed:
            if override and self._closer is not None and not self._closer.done():
                self.close_code = code
            return
        self.closed = True
        self.close_code = code
        self.handshake.close()
        self._drained.set()  # a reader waiting for the queue to drain sees the close
        self._closer = asyncio.get_running_loop().create_task(self._close())

    async def _close(self) -> None:
        code = self.close_code if self.close_code is not None else 1000
        with contextlib.suppress(TimeoutError, ConnectionError, RuntimeError):
            await asyncio.wait_for(self.ws.close(code=code), 2.0)
        receiving = self._receiving
        if receiving is not None:
            # The close had its 2 s and the reader still waits: the peer neither read our close
            # frame nor sent anything. End the read now (its caller then stops the peer), or the
            # connection, its queue and its slot would be held until the peer goes away.
            receiving.reschedule(asyncio.get_running_loop().time())

    async def stop(self) -> None:
        """Close (after any close already decided: its frame goes out first, so the server's
        handler never returns, and aiohttp never closes with 1000, before it) and stop the
        writer."""
        if not self.closed:
            self.closed = True
            if self.close_code is None:
                self.close_code = 1001
            self.handshake.close()
            self._drained.set()
            self._closer = asyncio.get_running_loop().create_task(self._close())
        if self._closer is not None:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, RuntimeError):
                await asyncio.shield(self._closer)
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, RuntimeError):
                await self._writer

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if callable(item):
                    item()
                    continue
                if self.ws.closed:
                    return
                kind, frame = item
                try:
                    await self.ws.send_bytes(frame)
                except (ConnectionError, RuntimeError) as exc:
                    log.debug("peer %s: send failed: %s", self.key, exc)
                    self.closed = True
                    return
                finally:
                    self._queued(-len(frame))
                self.sent.add(kind, len(frame))
        finally:
            self._drained.set()  # nothing will drain the queue now: the reader must not wait

    async def read(self, on_frame: Callable[[bytes | str], None]) -> bool:
        """Hand every frame to ``on_frame`` until the connection ends or a close is decided.

        Returns True if the peer sent a frame over ``max_frame`` (P1: the caller bans, 1009).
        A peer without a hello within 10 s is closed.
        """
        ws, loop = self.ws, asyncio.get_running_loop()
        deadline = loop.time() + HELLO_TIMEOUT_S
        while not self.closed:
            if len(self.deferred) >= MAX_DEFERRED_REQUESTS and not self._drained.is_set():
                # decision 44: a peer that asks this much without reading is read again once
                # our answers to it drain
                self.read_pauses += 1
                log.debug("peer %s: %d bytes queued, reading paused", self.key, self.queued_bytes)
                await self._drained.wait()
                continue
            try:
                async with asyncio.timeout_at(None if self.ready else deadline) as receiving:
                    self._receiving = receiving
                    msg = await ws.receive()
            except TimeoutError:
                if self.is_closing():
                    return False  # a close the peer did not answer (_close): read no further
                log.info("peer %s: no hello within %.0f s", self.key, HELLO_TIMEOUT_S)
                self.close_soon(wire.CLOSE_PROTOCOL_ERROR)
                return False
            finally:
                self._receiving = None
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                return False
            if self.is_closing():
                return False  # we decided to close meanwhile (a timeout, a ban): read no further
            if msg.type == WSMsgType.ERROR:
                # aiohttp puts a protocol error (an oversize frame among them) in the message,
                # other failures in ws.exception(); on both sides, client and server
                exc = msg.data if isinstance(msg.data, BaseException) else ws.exception()
                code = getattr(exc, "code", None)
                too_big = aiohttp.WSCloseCode.MESSAGE_TOO_BIG
                if code == too_big or ws.close_code == too_big or "too big" in str(exc).lower():
                    return True
                log.debug("peer %s: websocket error %s", self.key, exc)
                return False
            if msg.type == WSMsgType.TEXT:
                on_frame(str(msg.data))
            elif msg.type == WSMsgType.BINARY:
                on_frame(bytes(msg.data))
        return False

    def keepalive(self, nonce: int) -> None:
        """Ping every 30 s (with ``nonce``); close (1000) after 60 s without the pong."""
        mono = time.monotonic()
        if self.ping_nonce is not None and mono - self.ping_sent_at > PONG_TIMEOUT_S:
            log.info("peer %s: no pong within %.0f s", self.key, PONG_TIMEOUT_S)
            self.close_soon(1000)
        elif self.ping_nonce is None and mono - self.ping_sent_at > PING_INTERVAL_S:
            self.ping_nonce = nonce
            self.ping_sent_at = mono
            self.send(wire.Ping(nonce))

    def info(self, now_ms: int, best_height: int) -> dict[str, Any]:
        """``GET /v1/peers`` row (``best_height``: its best milestone as far as we know)."""
        return {
            "node_id": self.node_id.hex(),
            "address": f"{self.host}:{self.port}",
            "direction": self.direction,
            "best_milestone_height": best_height,
            "score": self.score.value(now_ms),
            "connected_s": int(time.monotonic() - self.connected_at),
        }


__all__ = [
    "MAX_DEFERRED_REQUESTS",
    "SEND_QUEUE_SIZE",
    "SEND_QUEUE_SOFT_BYTES",
    "Direction",
    "FrameCounts",
    "Peer",
    "WebSocket",
]
