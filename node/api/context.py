"""What every handler of the API shares: its context, its one error type and JSON answers."""

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol, final

from aiohttp import web
from pydantic import BaseModel

from apiclient import models as M
from node.metrics import NodeMetrics
from p2p.service import NodeService

MILESTONES_MAX = 1000
MEMPOOL_TXIDS_MAX = 1000
DAG_LEVEL_SETS_MAX = 100
DAG_PENDING_MAX = 1000
INT_MAX = 2**63 - 1
"""The bound of every height in a path or query: 0..INT_MAX (docs/node.md, "Integers")."""


class PeerView(Protocol):
    """What the API reads of the PeerManager (owner B)."""

    @property
    def connected_count(self) -> int: ...

    @property
    def synced(self) -> bool: ...

    def peers_info(self) -> list[dict[str, Any]]: ...


@final
@dataclass
class ApiContext:
    """Everything the handlers use; built by the daemon, stored under one typed AppKey."""

    service: NodeService
    network: str
    version: str
    node_id: bytes
    token: str
    metrics: NodeMetrics
    peers: PeerView | None = None
    prune_depth: int | None = None
    """``--prune-depth`` (None: the node does not prune)."""
    root_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    sockets: set[web.WebSocketResponse] = field(default_factory=set)

    def lock_for(self, key: str) -> asyncio.Lock:
        """The lock serialising template and submit requests of one peer chain."""
        lock = self.root_locks.get(key)
        if lock is None:
            if len(self.root_locks) > 10_000:  # bounded: forget idle locks
                for name in [k for k, v in self.root_locks.items() if not v.locked()]:
                    del self.root_locks[name]
            lock = self.root_locks[key] = asyncio.Lock()
        return lock


CTX = web.AppKey("ctx", ApiContext)
BODY_LIMIT = web.AppKey("body_limit", int)


class ApiError(Exception):
    """An error answered as JSON with ``status``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def json_answer(model: BaseModel | list[Any], status: int = 200) -> web.Response:
    if isinstance(model, BaseModel):
        data: Any = model.model_dump(mode="json")
    else:
        data = [m.model_dump(mode="json") if isinstance(m, BaseModel) else m for m in model]
    return web.json_response(data, status=status)


def error_response(status: int, code: str, message: str) -> web.Response:
    body = M.ErrorResponse(error=M.ErrorBody(code=code, message=message))
    return web.json_response(body.model_dump(), status=status)
