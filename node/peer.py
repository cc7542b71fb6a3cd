"""One peer connection: an aiohttp WebSocket pumped through the sans-I/O codec (§11.1, §11.2).

A reader loop (run by the manager) and a writer task draining a bounded queue: a peer that
cannot keep up is dropped, never buffered without limit (STYLE.md rule 11).
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from aiohttp import ClientWebSocketResponse, web

from node import wire
from node.gossip import (
    AddrLimiter,
    AnnouncedTxs,
    KnownInventory,
    Misbehaviour,
    MissingInputLimiter,
    TokenBucket,
)

log = logging.getLogger(__name__)

SEND_QUEUE_SIZE = 4096
"""Frames waiting for the socket; beyond this the peer is too slow and is dropped."""

Direction = Literal["inbound", "outbound"]
WebSocket = web.WebSocketResponse | ClientWebSocketResponse


class Peer:
    """State of one connection; the manager owns the protocol logic."""

    def __init__(
        self,
        ws: WebSocket,
        direction: Direction,
        host: str,
        port: int,
        key: str,
        max_frame: int,
    ) -> None:
        self.ws = ws
        self.direction = direction
        self.host = host
        self.port = port
        """The remote TCP port (outbound: the port we dialed)."""
        self.key = key
        self.max_frame = max_frame
        self.handshake = wire.Handshake(
            wire.Role.CLIENT if direction == "outbound" else wire.Role.SERVER
        )
        self.hello: wire.Hello | None = None
        self.known = KnownInventory()
        """Ids the peer has: it sent or announced them to us, or we sent it the item itself
        (and, for blocks, announced it: P11's one announcer at a time)."""
        self.announced_txs = AnnouncedTxs()
        """Txids we announced to the peer, and when (re-announced while not ``known``)."""
        self.unbacked_until_ms = 0
        """P9 (v2): no new sync round with this peer before this time (its claim was unbacked)."""
        self.score = Misbehaviour()
        self.bucket = TokenBucket()
        self.addr_limiter = AddrLimiter()
        self.missing_inputs = MissingInputLimiter()
        self.connected_at = time.monotonic()
        self.best_height = 0
        self.chainwork = 0
        self.answered_getaddr = False
        self.getaddr_sent = False
        self.serving_getdata = 0
        """Our answers to this peer's getdata still in the send queue (≤ 2, §11.7)."""
        self.requests: dict[str, float] = {}
        """Outstanding request kind → loop-time deadline (P6)."""
        self.getdata_out = 0
        """Our getdata requests to this peer not yet answered."""
        self.getdata_backlog: list[tuple[int, bytes]] = []
        self.pending_items: set[bytes] = set()
        """Items of our getdata requests to this peer not yet answered."""
        self.getdata_sets: list[set[bytes]] = []
        """Items of each of our outstanding getdata (one counts until all its items answered)."""
        self.got_addr = False
        self.timeouts = 0
        self.ping_nonce: int | None = None
        self.ping_sent_at = 0.0
        self.last_pong = time.monotonic()
        self.closed = False
        self.close_code: int | None = None
        self._queue: asyncio.Queue[bytes | Callable[[], None]] = asyncio.Queue(SEND_QUEUE_SIZE)
        self._writer: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None

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
        try:
            self._queue.put_nowait(wire.encode_message(msg))
            if after is not None:
                self._queue.put_nowait(after)
        except asyncio.QueueFull:
            log.info("peer %s: send queue full, dropping the slow peer", self.key)
            self.close_soon(wire.CLOSE_PROTOCOL_ERROR)
            return False
        return True

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
        self._closer = asyncio.get_running_loop().create_task(self._close())

    async def _close(self) -> None:
        code = self.close_code if self.close_code is not None else 1000
        with contextlib.suppress(TimeoutError, ConnectionError, RuntimeError):
            await asyncio.wait_for(self.ws.close(code=code), 2.0)

    async def stop(self) -> None:
        """Close (after any close already decided: its frame goes out first, so the server's
        handler never returns, and aiohttp never closes with 1000, before it) and stop the
        writer."""
        if not self.closed:
            self.closed = True
            if self.close_code is None:
                self.close_code = 1001
            self.handshake.close()
            self._closer = asyncio.get_running_loop().create_task(self._close())
        if self._closer is not None:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, RuntimeError):
                await asyncio.shield(self._closer)
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, RuntimeError):
                await self._writer

    async def _write_loop(self) -> None:
        while True:
            item = await self._queue.get()
            if callable(item):
                item()
                continue
            if self.ws.closed:
                return
            try:
                await self.ws.send_bytes(item)
            except (ConnectionError, RuntimeError) as exc:
                log.debug("peer %s: send failed: %s", self.key, exc)
                self.closed = True
                return

    def info(self, now_ms: int) -> dict[str, Any]:
        """``GET /v1/peers`` row."""
        return {
            "node_id": self.node_id.hex(),
            "address": f"{self.host}:{self.port}",
            "direction": self.direction,
            "best_milestone_height": self.best_height,
            "score": self.score.value(now_ms),
            "connected_s": int(time.monotonic() - self.connected_at),
        }


__all__ = ["SEND_QUEUE_SIZE", "Direction", "Peer", "WebSocket"]
