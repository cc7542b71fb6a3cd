"""A typed client of the node's HTTP API (INTERFACES.md), for every program that talks to a node.

The wallet, the miner, ``scripts/devnet.py`` and the functional tests use it; it imports no
first-party package (an import-linter contract), so any layer may import it. The endpoint table
and the one error type, :class:`ApiError` (HTTP status and JSON error code), are in
:mod:`apiclient.core`; :class:`NodeApi` (asyncio, aiohttp) and :class:`SyncNodeApi` (blocking,
urllib) send the same calls; every call returns the pydantic model of :mod:`apiclient.models`
that the node answers with.
"""

from apiclient import models
from apiclient.aio import NodeApi
from apiclient.core import Answer, ApiError, NodeUnreachable, TxState, endpoints
from apiclient.sync import SyncNodeApi

__all__ = [
    "Answer",
    "ApiError",
    "NodeApi",
    "NodeUnreachable",
    "SyncNodeApi",
    "TxState",
    "endpoints",
    "models",
]
