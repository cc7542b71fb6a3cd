"""``GET /v1/events``: a WebSocket of node events, one JSON message per event."""

import asyncio
from typing import Any

from aiohttp import WSCloseCode, web

from node.api.context import CTX, ApiError
from p2p.service import NodeEvent

EVENT_QUEUE = 1024
"""Events buffered per WebSocket client; a slower client is disconnected, never buffered more."""
EVENTS_MSG_MAX = 4096
"""A client message of this many bytes or more closes the events socket with 1009."""


EVENT_TYPES = ("block", "milestone", "reorg", "tx")
"""The ``type`` of each event (``NodeEvent.kind``), in the order the API documents them."""


def event_types(request: web.Request) -> frozenset[str]:
    """``?types=milestone,reorg``: the kinds a client wants (all when absent).

    A miner needs milestones and reorganisations only; without the filter it is sent, and the
    node encodes, one message per tx and block, thousands a second under load.
    """
    text = request.query.get("types")
    if text is None:
        return frozenset(EVENT_TYPES)
    kinds = frozenset(text.split(","))
    if not kinds or not kinds <= frozenset(EVENT_TYPES):
        raise ApiError(
            400,
            "bad-parameter",
            f"types must be a comma-separated list of {', '.join(EVENT_TYPES)}",
        )
    return kinds


async def events(request: web.Request) -> web.WebSocketResponse:
    ctx = request.app[CTX]
    kinds = event_types(request)
    # aiohttp refuses a message of max_msg_size bytes or more (1009), so 4096 means < 4096 bytes.
    ws = web.WebSocketResponse(heartbeat=30, max_msg_size=EVENTS_MSG_MAX)
    if request.method != "GET" or not ws.can_prepare(request).ok:  # HEAD answers as GET does
        raise ApiError(
            400,
            "websocket-upgrade-required",
            "GET /v1/events is a WebSocket: send Upgrade: websocket and Connection: Upgrade",
        )
    await ws.prepare(request)
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def listener(event: NodeEvent) -> None:
        if event.kind not in kinds:
            return
        if queue.qsize() < EVENT_QUEUE:
            queue.put_nowait(event.to_json())
        else:  # a slow client is dropped, never buffered without bound
            ctx.service.unsubscribe(listener)
            queue.put_nowait(None)

    ctx.service.subscribe(listener)
    ctx.sockets.add(ws)
    try:
        async with asyncio.TaskGroup() as tg:
            sender = tg.create_task(_send_events(ws, queue))
            async for _ in ws:  # clients send nothing we need; this ends when they close
                pass
            sender.cancel()
    finally:
        ctx.service.unsubscribe(listener)
        ctx.sockets.discard(ws)
    return ws


async def _send_events(
    ws: web.WebSocketResponse, queue: asyncio.Queue[dict[str, Any] | None]
) -> None:
    while not ws.closed:
        message = await queue.get()
        try:
            if message is None:
                await ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=b"too slow")
                return
            await ws.send_json(message)
        except (ConnectionError, RuntimeError):  # closed under us: the reader ends too
            return


async def close_sockets(app: web.Application) -> None:
    for ws in list(app[CTX].sockets):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"node shutting down")
