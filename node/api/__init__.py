"""The HTTP API of INTERFACES.md (node/api/routes.py until it is split by resource family)."""

from node.api.routes import (
    INT_MAX,
    ROUTES,
    ApiContext,
    ParserErrorFilter,
    PeerView,
    create_app,
    openapi_document,
)

__all__ = [
    "INT_MAX",
    "ROUTES",
    "ApiContext",
    "ParserErrorFilter",
    "PeerView",
    "create_app",
    "openapi_document",
]
