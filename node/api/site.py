"""The explorer page, its static files and ``/metrics``."""

from pathlib import Path

from aiohttp import web

from node.api.context import CTX, ApiError
from node.metrics import CONTENT_TYPE

STATIC_DIR = Path(__file__).parent.parent / "static"
"""node/static: the explorer page and its assets (package data)."""


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


STATIC_FILES = frozenset(p.name for p in STATIC_DIR.iterdir() if p.is_file())
"""The explorer's assets; any other name under /static/ is a JSON 404 (no directory walking)."""


async def static_file(request: web.Request) -> web.FileResponse:
    name = request.match_info["name"]
    if name not in STATIC_FILES:
        raise ApiError(404, "not-found", f"no such path: {request.path}")
    return web.FileResponse(STATIC_DIR / name)


async def metrics(request: web.Request) -> web.Response:
    body = request.app[CTX].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
