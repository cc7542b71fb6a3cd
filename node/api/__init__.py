"""The HTTP API of INTERFACES.md on aiohttp: JSON in and out, pydantic models at the edge.

Every error is ``{"error": {"code", "message"}}`` with a 4xx/5xx status (unknown paths 404, bodies
over the limit 413, never a traceback). Handlers read and write the chain only through the
NodeService, on the event loop's one thread, so the core needs no locks; template and submit
requests of one peer chain are serialised by an ``asyncio.Lock`` per root (§3.4).

One module per resource family: :mod:`~node.api.chain` (blocks, milestones, the DAG, txs,
addresses, the mempool, status and peers), :mod:`~node.api.mining` (template and submit),
:mod:`~node.api.admin` (invalidate, reconsider), :mod:`~node.api.events` (the WebSocket),
:mod:`~node.api.site` (explorer, static files, ``/metrics``); :mod:`~node.api.context` (the
shared context, ``ApiError``, JSON answers), :mod:`~node.api.params` (reading a request),
:mod:`~node.api.routes` (the route table and the OpenAPI document built from it) and
:mod:`~node.api.app` (the application, its error middleware and log filter).
"""

from node.api.app import ParserErrorFilter, create_app
from node.api.context import INT_MAX, ApiContext, PeerView
from node.api.routes import ROUTES, openapi_document

__all__ = [
    "INT_MAX",
    "ROUTES",
    "ApiContext",
    "ParserErrorFilter",
    "PeerView",
    "create_app",
    "openapi_document",
]
