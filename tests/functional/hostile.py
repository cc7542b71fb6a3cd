"""A hostile peer that a node dials: an aiohttp WebSocket server speaking the wire protocol
from PROTOCOL.md §11, on its own thread and event loop (for the P1, P9 and §11.7 defect tests)."""

import asyncio
import contextlib
import os
import threading
import time
from typing import Any

from aiohttp import WSMsgType, web

from dagchain.chain import Chain
from dagchain.params import DEVNET
from dagchain.storage.memory import MemoryStore
from p2p import wire
from tests.functional.framework import free_port


class HostileServer:
    """Listens on 127.0.0.1; answers the dialing node's ``hello`` with one claiming ``work``,
    every ``getmilestones`` with no headers and every ``getpending`` with no ids, and records
    what the node sends (with the time it arrived)."""

    def __init__(self, work: int = 2**200, height: int = 1_000_000) -> None:
        self.work = work
        self.height = height
        self.port = free_port()
        self.node_id = os.urandom(32)
        self.received: list[tuple[float, wire.Message]] = []
        self.close_code: int | None = None
        self.connected = threading.Event()
        self.closed = threading.Event()
        self._ws: web.WebSocketResponse | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, for ``--peer``."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start listening."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get(wire.PROTOCOL_PATH, self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0, compress=False)
        await ws.prepare(request)
        self._ws = ws
        async for msg in ws:
            if msg.type != WSMsgType.BINARY:
                continue
            with contextlib.suppress(wire.RemoteProtocolError):
                await self._on_message(ws, wire.decode_frame(bytes(msg.data), 2**30))
        self.close_code = ws.close_code
        self.closed.set()
        return ws

    async def _on_message(self, ws: web.WebSocketResponse, msg: wire.Message) -> None:
        self.received.append((time.monotonic(), msg))
        if isinstance(msg, wire.Hello):
            await ws.send_bytes(wire.encode_message(self.hello()))
            self.connected.set()
        elif isinstance(msg, wire.GetMilestones):
            await ws.send_bytes(wire.encode_message(wire.Milestones(())))
        elif isinstance(msg, wire.GetPending):
            await ws.send_bytes(wire.encode_message(wire.Pending(())))
        elif isinstance(msg, wire.Ping):
            await ws.send_bytes(wire.encode_message(wire.Pong(msg.nonce)))

    def hello(self) -> wire.Hello:
        """Our hello: a huge claim of chainwork, nothing behind it."""
        genesis = Chain(DEVNET, MemoryStore()).genesis_id
        return wire.Hello(
            proto=1,
            network=DEVNET.network_id,
            genesis=genesis,
            node=self.node_id,
            best=os.urandom(32),
            height=self.height,
            work=self.work.to_bytes(32, "little"),
            port=self.port,
            agent="hostile",
            time=int(time.time() * 1000),
        )

    def count(self, kind: type[Any]) -> int:
        """Messages of ``kind`` received so far."""
        return sum(1 for _, m in list(self.received) if isinstance(m, kind))

    def send_raw(self, data: bytes) -> None:
        """One binary frame to the node."""

        async def send() -> None:
            if self._ws is not None and not self._ws.closed:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await self._ws.send_bytes(data)

        asyncio.run_coroutine_threadsafe(send(), self._loop).result(30)

    def stop(self) -> None:
        """Stop listening and the thread."""

        async def stop() -> None:
            if self._ws is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._ws.close(), 3)
            if self._runner is not None:
                await self._runner.cleanup()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()
