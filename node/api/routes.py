"""The route table of the HTTP API and the OpenAPI 3.1 document built from it."""

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from apiclient import models as M
from node.api.admin import admin_invalidate, admin_reconsider
from node.api.chain import (
    address,
    dag,
    fees,
    get_block,
    get_block_raw,
    get_tx,
    level_set,
    lookup,
    mempool,
    milestones,
    peers,
    status,
    submit_tx,
    submit_tx_batch,
)
from node.api.context import (
    CTX,
    DAG_LEVEL_SETS_MAX,
    DAG_PENDING_MAX,
    INT_MAX,
    MEMPOOL_TXIDS_MAX,
    MILESTONES_MAX,
)
from node.api.events import EVENT_QUEUE, EVENTS_MSG_MAX, events
from node.api.mining import mining_submit, mining_template
from node.api.site import index, metrics


async def openapi(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    return web.json_response(openapi_document(ctx.version, ctx.service.params.hrp))


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    operation_id: str
    summary: str
    description: str
    response: type[BaseModel] | None = None
    many: bool = False
    request: type[BaseModel] | None = None
    auth: bool = False
    statuses: tuple[int, ...] = (200,)
    content: str = "application/json"
    query: tuple[tuple[str, str, dict[str, Any] | None], ...] = ()
    """Query parameters: (name, description, JSON schema or None for an address); optional."""
    schema: dict[str, Any] | None = None
    """The success schema when no pydantic model describes it."""
    error_models: tuple[tuple[int, type[BaseModel]], ...] = ()
    """Error statuses whose body is more than ErrorResponse."""


HEX32_PATTERN = "^[0-9a-fA-F]{64}$"
"""A hash, txid, root or milestone id in a request: 64 hex digits (answers are lowercase)."""
_BECH32 = "[02-9ac-hj-np-z]{58}"
"""The 58 data and checksum characters of a 32-byte address in bech32m (E8)."""
_HEX32_SCHEMA: dict[str, Any] = {"type": "string", "pattern": HEX32_PATTERN}
_HEIGHT_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": INT_MAX}
_HASH_LIST = {"type": "array", "items": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}


def address_pattern(hrp: str | None) -> str:
    """A display address of the network with ``hrp`` (either case, not mixed) or 64 hex digits."""
    low = re.escape(hrp) if hrp is not None else "[a-z]{1,83}"
    high = re.escape(hrp.upper()) if hrp is not None else "[A-Z]{1,83}"
    return f"^(?:[0-9a-fA-F]{{64}}|{low}1{_BECH32}|{high}1{_BECH32.upper()})$"


def _limit(hi: int, default: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "maximum": hi, "default": default}


PATH_PARAMS: dict[str, tuple[str, Any]] = {
    "hash": ("Block id: 64 hex digits", _HEX32_SCHEMA),
    "txid": ("Transaction id: 64 hex digits", _HEX32_SCHEMA),
    "milestone": ("Milestone block id: 64 hex digits", _HEX32_SCHEMA),
    "height": (f"Best-chain milestone height: decimal digits, 0..{INT_MAX}", _HEIGHT_SCHEMA),
    "address": ("A display address (bech32m) of this network, or 64 hex digits", None),
    "query": ("A search string: a block id, txid or address", {"type": "string"}),
}
"""Description and schema of each path parameter by name (None: the network's address)."""

_START = ("start", f"First milestone height: decimal digits, 0..{INT_MAX}", _HEIGHT_SCHEMA)
_INT_RULE = (
    f" Integers in the path and query are ASCII decimal digits only (no sign, spaces, `_` or "
    f"other scripts' digits); a height is in 0..{INT_MAX}; anything else is 400."
)

ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/status",
        status,
        "getStatus",
        "Node status",
        "Network, version, the best milestone, stored and pending blocks, mempool, peers, "
        "whether the node is synced, and the current compact targets.",
        M.StatusResponse,
    ),
    Route(
        "GET",
        "/v1/blocks/{hash}",
        get_block,
        "getBlock",
        "A block",
        "The header fields, the tip links, the txids and each transaction's status, and where "
        "the block stands: milestone or not, its level set (null while pending), peer chain and "
        "confirmations. 404 for a block the node does not store.",
        M.BlockResponse,
        statuses=(200, 400, 404),
    ),
    Route(
        "GET",
        "/v1/blocks/{hash}/raw",
        get_block_raw,
        "getBlockRaw",
        "Canonical block bytes",
        "The block exactly as hashed and relayed (PROTOCOL.md), as application/octet-stream. "
        "410 `pruned` for a block whose body this node pruned (--prune-depth).",
        statuses=(200, 400, 404, 410),
        content="application/octet-stream",
        schema={"type": "string", "format": "binary"},
    ),
    Route(
        "GET",
        "/v1/milestones",
        milestones,
        "listMilestones",
        "Best-chain milestones from ?start=H, at most ?limit=N",
        "Milestones of the best chain at heights start..start+limit-1 that exist, each with "
        "its level-set size; an empty list past the best milestone." + _INT_RULE,
        M.MilestoneItem,
        many=True,
        statuses=(200, 400),
        query=(
            _START,
            ("limit", f"At most this many (1..{MILESTONES_MAX})", _limit(MILESTONES_MAX, 100)),
        ),
    ),
    Route(
        "GET",
        "/v1/milestones/{height}/level-set",
        level_set,
        "getLevelSet",
        "Block hashes of a level set in total order",
        "The level set of the best-chain milestone at this height, in total order (PROTOCOL.md). "
        "404 if the best chain has no milestone there." + _INT_RULE,
        statuses=(200, 400, 404),
        schema=_HASH_LIST,
    ),
    Route(
        "GET",
        "/v1/dag",
        dag,
        "getDag",
        "Explorer DAG view: level sets of milestones ?start=H, ?limit=N (default: the last 20), "
        "then the pending blocks",
        "The explorer's view in one request: the blocks of the level sets of best-chain "
        "milestones start..start+limit-1 in total order, then the pending blocks (at most "
        f"{DAG_PENDING_MAX}) when that range reaches the best milestone." + _INT_RULE,
        M.DagResponse,
        statuses=(200, 400),
        query=(
            (
                "start",
                f"First milestone height (default: the last `limit`): 0..{INT_MAX}",
                _HEIGHT_SCHEMA,
            ),
            (
                "limit",
                f"Level sets (1..{DAG_LEVEL_SETS_MAX})",
                _limit(DAG_LEVEL_SETS_MAX, 20),
            ),
        ),
    ),
    Route(
        "GET",
        "/v1/lookup/{query}",
        lookup,
        "lookup",
        "Explorer search: whether a string names a block, transaction or address (or unknown)",
        "The explorer's search box: `unknown` is an answer, not an error.",
        M.LookupResponse,
    ),
    Route(
        "GET",
        "/v1/txs/{txid}",
        get_tx,
        "getTx",
        "A transaction's status (status unknown for a txid the node does not know)",
        "Where a transaction stands: in the mempool, in a pending block, confirmed (with its "
        "block, milestone height and confirmations), invalid (with the rule), or unknown: a "
        "txid the node does not know is a normal answer, so a client polls one shape.",
        M.TxResponse,
        statuses=(200, 400),
    ),
    Route(
        "POST",
        "/v1/txs",
        submit_tx,
        "submitTx",
        "Submit a transaction",
        "Canonical transaction bytes as hex. 202 with the txid when the mempool holds it (also "
        "for a duplicate); 400 malformed or failing T1-T7, V7, V8 (the code is the rule id); 409 "
        "an input is spent in the best chain or by a pool tx, or is not in the best-chain UTXO "
        "set; 413 a body over the limit; 503 the mempool is full.",
        M.SubmitTxResponse,
        request=M.RawRequest,
        statuses=(202, 400, 409, 413, 503),
    ),
    Route(
        "POST",
        "/v1/txs/batch",
        submit_tx_batch,
        "submitTxBatch",
        "Submit up to 1,000 transactions",
        f"1..{M.TX_BATCH_MAX} transactions as hex, admitted in request order as POST /v1/txs "
        "would admit each alone at its turn (a later item may spend an earlier one's output "
        "only where POST /v1/txs would allow it: it does not, unconfirmed parents are refused). "
        "200 with one result per item, in order: the txid (null when the bytes do not decode), "
        "the status POST /v1/txs would answer (202, 400, 409, 503) and its error code as the "
        "reason (null for 202). 400 a body that is not such a list; 413 a body over the limit.",
        M.SubmitTxBatchResponse,
        request=M.SubmitTxBatchRequest,
        statuses=(200, 400, 413),
    ),
    Route(
        "GET",
        "/v1/addresses/{address}",
        address,
        "getAddress",
        "Balance and UTXOs",
        "The balance (UTXOs with one confirmation or more), the pending balance (with mempool "
        "spends and outputs) and the UTXOs of an address.",
        M.AddressResponse,
        statuses=(200, 400),
    ),
    Route(
        "GET",
        "/v1/mempool",
        mempool,
        "getMempool",
        "Mempool summary",
        f"Size, bytes and the first {MEMPOOL_TXIDS_MAX} txids by fee rate.",
        M.MempoolResponse,
    ),
    Route(
        "GET",
        "/v1/fees",
        fees,
        "getFees",
        "Fee estimates",
        "Units per byte to be VALID within 1, 3 and 10 milestones with 90 % likelihood, from the "
        "txs of this node's pool that recent level sets made VALID and from the pool itself "
        '(docs/node.md, "Fee estimates"); null for a target no fee rate reached; the floor the '
        "mempool admits; the sample the estimates rest on.",
        M.FeesResponse,
    ),
    Route(
        "GET",
        "/v1/peers",
        peers,
        "listPeers",
        "Connected peers",
        "Per connected peer: node id, address, direction, best milestone height, score and "
        "seconds connected.",
        M.PeerInfo,
        many=True,
    ),
    Route(
        "GET",
        "/v1/mining/template",
        mining_template,
        "getMiningTemplate",
        "Block template for ?root=ROOT or ?register=KEYADDR",
        "Bearer token. Exactly one of root (extend that peer chain) or register (a new peer "
        "chain whose registration names this redemption-key address). Template and submit are "
        "serialised per root. 404 unknown root; 503 no template yet (the code says why).",
        M.TemplateResponse,
        auth=True,
        statuses=(200, 400, 401, 404, 503),
        query=(
            (
                "root",
                "Registration block of the peer chain to extend (64 hex digits); or register",
                _HEX32_SCHEMA,
            ),
            ("register", "Redemption-key address of a new peer chain to register; or root", None),
        ),
    ),
    Route(
        "POST",
        "/v1/mining/submit",
        mining_submit,
        "submitBlock",
        "Submit a solved block",
        "Bearer token. Canonical block bytes as hex. 200 accepted or duplicate; 202 an orphan "
        "held until its parents arrive; 400 invalid (the code is the rule id); 409 dropped by "
        "H11 (timestamp too far ahead; retry later).",
        M.SubmitBlockResponse,
        request=M.RawRequest,
        auth=True,
        statuses=(200, 202, 400, 401, 409, 413),
    ),
    Route(
        "POST",
        "/v1/admin/invalidate/{milestone}",
        admin_invalidate,
        "adminInvalidate",
        "Leave a milestone branch (F8)",
        "Bearer token. Marks the milestone and its descendants invalid and moves to the best "
        "other branch; 404 for anything but an accepted milestone other than genesis; 409 "
        "`pruned` for a best-chain milestone below a pruned node's bodies (--prune-depth).",
        M.AdminResponse,
        auth=True,
        statuses=(200, 400, 401, 404, 409, 413),
    ),
    Route(
        "POST",
        "/v1/admin/reconsider/{milestone}",
        admin_reconsider,
        "adminReconsider",
        "Return to a milestone branch (F8)",
        "Bearer token. Clears the operator's mark on the milestone and returns to its branch "
        "if it is the best; 404 for anything but an accepted milestone other than genesis.",
        M.AdminResponse,
        auth=True,
        statuses=(200, 400, 401, 404, 413),
    ),
    Route(
        "GET",
        "/v1/events",
        events,
        "events",
        "WebSocket push of block/milestone/reorg/tx events",
        "A WebSocket (RFC 6455): send Upgrade: websocket, Connection: Upgrade, Sec-WebSocket-Key "
        "and Sec-WebSocket-Version: 13; the answer is 101 and then one JSON text message per "
        "event (EventMessage; fields per type in docs/node.md). Without a valid upgrade the "
        f"answer is 400. The server reads nothing from the client: a client message of "
        f"{EVENTS_MSG_MAX} bytes or more closes the socket with 1009, and a client that falls "
        f"{EVENT_QUEUE} events behind is closed with 1013. `types` keeps only those kinds "
        "(a miner: milestone,reorg); an unknown kind is 400.",
        statuses=(101, 400),
        query=(
            (
                "types",
                "Comma-separated event types to receive: block, milestone, reorg, tx (all if "
                "absent)",
                {
                    "type": "string",
                    "pattern": "^(block|milestone|reorg|tx)(,(block|milestone|reorg|tx))*$",
                },
            ),
        ),
    ),
    Route(
        "GET",
        "/metrics",
        metrics,
        "getMetrics",
        "Prometheus metrics",
        "Prometheus text exposition format 0.0.4.",
        content="text/plain",
        schema={"type": "string"},
    ),
    Route(
        "GET",
        "/",
        index,
        "getExplorer",
        "Explorer page",
        "The explorer: a live DAG view with milestones, level sets and peer chains.",
        content="text/html",
        schema={"type": "string"},
    ),
    Route(
        "GET",
        "/v1/openapi.json",
        openapi,
        "getOpenApi",
        "This document",
        "This OpenAPI 3.1 description of the API.",
        schema={"type": "object"},
    ),
)


def openapi_document(version: str, hrp: str | None = None) -> dict[str, Any]:
    """OpenAPI 3.1 from the route table and the pydantic models' JSON schemas.

    ``hrp``: the network's address prefix, for the address pattern (any prefix if None).
    """
    schemas: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict[str, Any]:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    address_schema = {"type": "string", "pattern": address_pattern(hrp)}
    error = {"application/json": {"schema": ref(M.ErrorResponse)}}
    paths: dict[str, Any] = {}
    for route in ROUTES:
        ok: dict[str, Any] = {"description": "OK"}
        if route.response is not None:
            schema = ref(route.response)
            if route.many:
                schema = {"type": "array", "items": schema}
            ok["content"] = {route.content: {"schema": schema}}
        elif route.schema is not None:
            ok["content"] = {route.content: {"schema": route.schema}}
        special = dict(route.error_models)
        responses: dict[str, Any] = {}
        for code in route.statuses:
            if code == 101:
                responses["101"] = {
                    "description": "Switching Protocols: the WebSocket, one JSON text message "
                    "per event",
                    "x-websocket-message": ref(M.EventMessage),
                }
            elif code < 300:
                responses[str(code)] = ok
            elif code in special:
                body = {"application/json": {"schema": ref(special[code])}}
                responses[str(code)] = {"description": "Error", "content": body}
            else:
                responses[str(code)] = {"description": "Error", "content": error}
        op: dict[str, Any] = {
            "operationId": route.operation_id,
            "summary": route.summary,
            "description": route.description,
            "responses": responses,
        }
        params: list[dict[str, Any]] = []
        for part in route.path.split("/"):
            if part.startswith("{"):
                name = part[1:-1]
                text, param_schema = PATH_PARAMS[name]
                params.append(
                    {
                        "name": name,
                        "in": "path",
                        "required": True,
                        "description": text,
                        "schema": param_schema or address_schema,
                    }
                )
        params += [
            {
                "name": name,
                "in": "query",
                "required": False,
                "description": text,
                "schema": param_schema or address_schema,
            }
            for name, text, param_schema in route.query
        ]
        if params:
            op["parameters"] = params
        if route.request is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref(route.request)}},
            }
        if route.auth:
            op["security"] = [{"bearer": []}]
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "dagchain node API",
            "version": version,
            "description": 'Errors are {"error": {"code", "message"}} with a 4xx/5xx '
            "status; unknown paths are 404, a method a path does not take is 405 with Allow, "
            "and HEAD answers every GET route with the GET answer's status and headers.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
