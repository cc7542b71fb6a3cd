"""The HTTP API of INTERFACES.md on aiohttp: JSON in and out, pydantic models at the edge.

Every error is ``{"error": {"code", "message"}}`` with a 4xx/5xx status (unknown paths 404, bodies
over the limit 413, never a traceback). Handlers read and write the chain only through the
NodeService, on the event loop's one thread, so the core needs no locks; template and submit
requests of one peer chain are serialised by an ``asyncio.Lock`` per root (§3.4).
"""

import asyncio
import contextlib
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, final

from aiohttp import WSCloseCode, web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import BaseModel, ValidationError

from apiclient import models as M
from dagchain.blocks import decode_block
from dagchain.chain import BlockStatus, Chain
from dagchain.crypto import decode_address, encode_address
from dagchain.errors import (
    EncodingError,
    InvalidBlock,
    InvalidTransaction,
    NotYetValid,
    Reason,
)
from dagchain.mempool import MempoolDuplicate, MempoolError, MempoolFull
from dagchain.pow import encode_compact
from dagchain.queries import block_tx_reasons, milestone_at, utxos_of
from dagchain.template import BlockTemplate, TemplateUnavailable, try_build_template
from dagchain.types import Address, BlockId, TxId
from node.metrics import CONTENT_TYPE, NodeMetrics
from p2p.service import NodeEvent, NodeService

__all__ = [
    "INT_MAX",
    "ROUTES",
    "ApiContext",
    "ParserErrorFilter",
    "PeerView",
    "create_app",
    "openapi_document",
]

log = logging.getLogger("dagchain.api")
STATIC_DIR = Path(__file__).parent.parent / "static"
EVENT_QUEUE = 1024
"""Events buffered per WebSocket client; a slower client is disconnected, never buffered more."""
MILESTONES_MAX = 1000
MEMPOOL_TXIDS_MAX = 1000
DAG_LEVEL_SETS_MAX = 100
DAG_PENDING_MAX = 1000
INT_MAX = 2**63 - 1
"""The bound of every height in a path or query: 0..INT_MAX (docs/node.md, "Integers")."""
EVENTS_MSG_MAX = 4096
"""A client message of this many bytes or more closes the events socket with 1009."""
PARSER_LOG_WINDOW_S = 10.0
"""At most one log line per this many seconds for requests aiohttp's HTTP parser refuses."""


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


def _json(model: BaseModel | list[Any], status: int = 200) -> web.Response:
    if isinstance(model, BaseModel):
        data: Any = model.model_dump(mode="json")
    else:
        data = [m.model_dump(mode="json") if isinstance(m, BaseModel) else m for m in model]
    return web.json_response(data, status=status)


def _error_response(status: int, code: str, message: str) -> web.Response:
    body = M.ErrorResponse(error=M.ErrorBody(code=code, message=message))
    return web.json_response(body.model_dump(), status=status)


_HTTP_CODES = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    413: "body-too-large",
    415: "unsupported-media-type",
}


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Turn every error into the JSON error shape; log unexpected ones, never leak them.

    A declared body over the limit is refused with 413 before routing and authentication, on
    every path; a chunked body without a length is cut off at the limit when a handler reads it.
    """
    length = request.content_length
    if length is not None and length > request.app[BODY_LIMIT]:
        return _error_response(413, "body-too-large", "request body exceeds the configured limit")
    try:
        return await handler(request)
    except ApiError as exc:
        return _error_response(exc.status, exc.code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http-error")
        message = exc.reason if exc.status != 404 else f"no such path: {request.path}"
        if exc.status == 413:
            message = "request body exceeds the configured limit"
        response = _error_response(exc.status, code, message)
        if isinstance(exc, web.HTTPMethodNotAllowed):  # RFC 9110 §15.5.6: name what is allowed
            response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return response
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unexpected error in %s %s", request.method, request.path)
        return _error_response(500, "internal", "internal error (see the node's log)")


# ---------------------------------------------------------------------- aiohttp's own log


class ParserErrorFilter(logging.Filter):
    """Requests aiohttp's HTTP parser refuses become one WARNING line per window, not tracebacks.

    aiohttp answers them (request line or header too long, bad framing, a bad method after the
    first request) with a plain 400 before the app runs, and logs each with ``logger.exception``:
    anyone could flood the node's log without a token. Here the first refusal in a window of
    ``window_s`` seconds is logged as one line (the reason and the client's address, newlines
    removed), later ones in that window are counted, and the next line says how many were
    suppressed. Every other record of that logger (a real bug in aiohttp's handling, say) passes
    unchanged, traceback and all.
    """

    def __init__(
        self, window_s: float = PARSER_LOG_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__("dagchain.api.http")
        self.window_s = window_s
        self.clock = clock
        self.suppressed = 0
        self._logged_at: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError) or record.levelno < logging.WARNING:
            return True
        now = self.clock()
        if self._logged_at is not None and now - self._logged_at < self.window_s:
            self.suppressed += 1
            return False
        self._logged_at = now
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        reason = " ".join(str(exc.message or type(exc).__name__).split())[:200]
        note = (
            f" ({self.suppressed} more suppressed since the last line)" if self.suppressed else ""
        )
        self.suppressed = 0
        record.msg = "refused a malformed HTTP request from %s: %d %s%s"
        record.args = (str(remote)[:100], exc.code, reason, note)
        record.exc_info = None
        record.exc_text = None
        record.levelno = logging.WARNING
        record.levelname = logging.getLevelName(logging.WARNING)
        return True


def _http_logger() -> logging.Logger:
    """The logger aiohttp's request handler writes to, with the ParserErrorFilter (once)."""
    logger = logging.getLogger("dagchain.api.http")
    if not any(isinstance(f, ParserErrorFilter) for f in logger.filters):
        logger.addFilter(ParserErrorFilter())
    return logger


# ---------------------------------------------------------------------- parsing helpers


_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_HEX_BYTES = re.compile(r"(?:[0-9a-fA-F]{2})*")


def _parse_hex32(text: str) -> bytes | None:
    """Exactly 64 hex digits as 32 bytes, else None.

    Not ``bytes.fromhex`` alone: it skips whitespace, so 64 characters with spaces in them would
    give fewer than 32 bytes, which the store's prefix scans would match against longer keys.
    """
    return bytes.fromhex(text) if _HEX64.fullmatch(text) else None


def _hex32(text: str, what: str = "hash") -> bytes:
    value = _parse_hex32(text)
    if value is None:
        raise ApiError(400, f"bad-{what}", f"{what} must be 64 hex characters")
    return value


_DECIMAL = re.compile(r"[0-9]{1,19}")
"""ASCII decimal digits only, never ``int()``: it reads ``1_0``, other scripts' digits, spaces and
signs. INT_MAX has 19 digits, so a longer string is out of range before any conversion."""


def _parse_int(text: str, name: str, lo: int, hi: int, code: str = "bad-parameter") -> int:
    """``text`` as an integer in ``lo..hi``; anything else is one 400 naming the bound."""
    value = int(text) if _DECIMAL.fullmatch(text) else None
    if value is None or not lo <= value <= hi:
        raise ApiError(400, code, f"{name} must be a decimal integer in {lo}..{hi}")
    return value


def _int_query(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    text = request.query.get(name)
    return default if text is None else _parse_int(text, name, lo, hi)


async def _raw_body(request: web.Request) -> bytes:
    # The bytes are parsed as JSON (UTF-8, or the UTF-16/32 that json detects), whatever charset
    # the Content-Type names: request.json() would decode by that charset, and an unknown one is
    # a LookupError. Nesting deep enough to exhaust the parser's recursion is not JSON we take.
    data = await request.read()
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError):
        raise ApiError(400, "bad-json", "the body is not JSON") from None
    try:
        body = M.RawRequest.model_validate(payload)
    except ValidationError as exc:
        raise ApiError(400, "bad-request", 'the body must be {"raw": "<hex>"}') from exc
    # Not bytes.fromhex alone: it skips whitespace, so "00 11" would pass as two bytes.
    if not _HEX_BYTES.fullmatch(body.raw):
        raise ApiError(400, "bad-hex", "raw must be hex digits, two per byte")
    return bytes.fromhex(body.raw)


def _check_token(request: web.Request) -> None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "missing bearer token (see <datadir>/api.token)")
    # Bytes, not str: compare_digest refuses str with non-ASCII characters (a TypeError).
    given = token.strip().encode("utf-8", "surrogateescape")
    if not secrets.compare_digest(given, request.app[CTX].token.encode()):
        raise ApiError(401, "unauthorized", "bad bearer token")


def _address(ctx: ApiContext, text: str) -> Address:
    """A bech32m display address of this network, or 64 hex characters."""
    raw = _parse_hex32(text)
    if raw is not None:
        return Address(raw)
    try:
        return decode_address(ctx.service.params.hrp, text)
    except EncodingError as exc:
        raise ApiError(400, "bad-address", f"not a {ctx.network} address: {exc}") from None


# ---------------------------------------------------------------------- read endpoints


async def status(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    chain = ctx.service.chain
    best = chain.best_id
    snap = chain.best_snapshot
    block = chain.get_block(best)
    peers = ctx.peers
    return _json(
        M.StatusResponse(
            network=ctx.network,
            version=ctx.version,
            node_id=ctx.node_id.hex(),
            best_milestone=M.BestMilestone(
                hash=best.hex(),
                height=chain.best_height,
                chainwork=str(snap.chainwork),
                timestamp_ms=block.header.timestamp_ms if block is not None else 0,
            ),
            blocks=chain.state.block_count,
            pending_blocks=len(chain.state.pending),
            mempool=M.MempoolSummary(
                size=len(ctx.service.mempool), bytes=ctx.service.mempool.total_bytes
            ),
            peers=peers.connected_count if peers is not None else 0,
            synced=peers.synced if peers is not None else True,
            targets=M.Targets(
                block=encode_compact(snap.blk_target), milestone=encode_compact(snap.ms_target)
            ),
            p2p=peers is not None,
        )
    )


def _tx_status_labels(reasons: tuple[int, ...] | None, count: int) -> list[str]:
    if reasons is None:
        return ["pending"] * count
    return ["valid" if r == Reason.VALID else f"invalid:{Reason(r).label}" for r in reasons]


async def get_block(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    chain = ctx.service.chain
    bid = _hex32(request.match_info["hash"])
    block = chain.get_block(bid)
    meta = chain.get_meta(bid)
    if block is None or meta is None:
        raise ApiError(404, "not-found", "no such block")
    h = block.header
    reasons = block_tx_reasons(chain, bid)
    return _json(
        M.BlockResponse(
            hash=bid.hex(),
            version=h.version,
            milestone_link=h.milestone_link.hex(),
            previous_link=h.previous_link.hex(),
            tips_root=h.tips_root.hex(),
            tip_links=[t.hex() for t in block.tip_links],
            merkle_root=h.merkle_root.hex(),
            timestamp_ms=h.timestamp_ms,
            target=h.target,
            nonce=str(h.nonce),
            txids=[tx.txid.hex() for tx in block.txs],
            is_milestone=meta.is_milestone,
            level_set_height=chain.ls_height(bid),
            tx_status=_tx_status_labels(reasons, len(block.txs)),
            root=meta.root.hex(),
            peer_height=meta.peer_height,
            confirmations=chain.confirmations(bid),
            size=len(block.raw),
        )
    )


async def get_block_raw(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    raw = ctx.service.get_block_raw(_hex32(request.match_info["hash"]))
    if raw is None:
        raise ApiError(404, "not-found", "no such block")
    return web.Response(body=raw, content_type="application/octet-stream")


async def milestones(request: web.Request) -> web.Response:
    chain = request.app[CTX].service.chain
    start = _int_query(request, "start", 0, 0, INT_MAX)
    limit = _int_query(request, "limit", 100, 1, MILESTONES_MAX)
    out = []
    for height in range(start, min(chain.best_height + 1, start + limit)):
        ms = milestone_at(chain, height)
        block = chain.get_block(ms) if ms is not None else None
        delta = chain.level_set(ms) if ms is not None else None
        if ms is None or block is None or delta is None:
            break
        out.append(
            M.MilestoneItem(
                hash=ms.hex(),
                height=height,
                timestamp_ms=block.header.timestamp_ms,
                level_set_size=len(delta.order),
            )
        )
    return _json(out)


def _dag_block(chain: Chain, bid: BlockId, height: int | None) -> M.DagBlock | None:
    block = chain.get_block(bid)
    meta = chain.get_meta(bid)
    if block is None or meta is None:
        return None
    h = block.header
    return M.DagBlock(
        hash=bid.hex(),
        milestone_link=h.milestone_link.hex(),
        previous_link=h.previous_link.hex(),
        tip_links=[t.hex() for t in block.tip_links],
        root=meta.root.hex(),
        peer_height=meta.peer_height,
        is_milestone=meta.is_milestone,
        level_set_height=height,
        timestamp_ms=h.timestamp_ms,
        txs=len(block.txs),
    )


async def dag(request: web.Request) -> web.Response:
    """The explorer's DAG view in one request: recent level sets, then the pending blocks."""
    chain = request.app[CTX].service.chain
    best = chain.best_height
    limit = _int_query(request, "limit", 20, 1, DAG_LEVEL_SETS_MAX)
    start = _int_query(request, "start", max(0, best - limit + 1), 0, INT_MAX)
    out: list[M.DagBlock] = []
    for height in range(start, min(best + 1, start + limit)):
        ms = milestone_at(chain, height)
        delta = chain.level_set(ms) if ms is not None else None
        if delta is None:
            break
        out += [b for bid in delta.order if (b := _dag_block(chain, bid, height)) is not None]
    if start + limit > best:
        pending = chain.pending_blocks()[:DAG_PENDING_MAX]
        out += [b for bid in pending if (b := _dag_block(chain, bid, None)) is not None]
    return _json(M.DagResponse(best_height=best, blocks=out))


async def lookup(request: web.Request) -> web.Response:
    """Which of block, transaction or address the explorer's search string names."""
    ctx = request.app[CTX]
    chain = ctx.service.chain
    query = request.match_info["query"].strip()
    kind = "unknown"
    raw = _parse_hex32(query)
    if raw is not None:
        if chain.get_meta(raw) is not None:
            kind = "block"
        elif chain.blocks_with_tx(TxId(raw)) or TxId(raw) in ctx.service.mempool:
            kind = "transaction"
        elif utxos_of(chain, Address(raw)):
            kind = "address"
    else:
        with contextlib.suppress(ApiError):
            _address(ctx, query)
            kind = "address"
    return _json(M.LookupResponse.model_validate({"query": query, "kind": kind}))


async def level_set(request: web.Request) -> web.Response:
    chain = request.app[CTX].service.chain
    height = _parse_int(request.match_info["height"], "height", 0, INT_MAX, "bad-height")
    ms = milestone_at(chain, height)
    delta = chain.level_set(ms) if ms is not None else None
    if delta is None:
        raise ApiError(404, "not-found", f"no best-chain milestone at height {height}")
    return _json([b.hex() for b in delta.order])


async def get_tx(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    chain = ctx.service.chain
    txid = _hex32(request.match_info["txid"], "txid")
    confirmed: tuple[BlockId, int] | None = None
    pending: BlockId | None = None
    invalid: tuple[BlockId, int, str] | None = None
    for bid in chain.blocks_with_tx(txid):
        block = chain.get_block(bid)
        reasons = block_tx_reasons(chain, bid)
        if block is None:
            continue
        if reasons is None:
            pending = pending or bid
            continue
        index = next(i for i, tx in enumerate(block.txs) if tx.txid == txid)
        height = chain.ls_height(bid) or 0
        if reasons[index] == Reason.VALID:
            confirmed = (bid, height)
        elif invalid is None:
            invalid = (bid, height, Reason(reasons[index]).label)
    best_h = chain.best_height
    if confirmed is not None:
        return _tx(txid, "confirmed", confirmed[0], confirmed[1], best_h - confirmed[1] + 1)
    if pending is not None:
        return _tx(txid, "pending", pending, None, 0)
    if txid in ctx.service.mempool:
        return _tx(txid, "mempool", None, None, 0)
    if invalid is not None:
        return _tx(txid, "invalid", invalid[0], invalid[1], 0, invalid[2])
    # INTERFACES.md lists "unknown" among the statuses of this answer: a txid the node does not
    # know (never seen, or dropped from the pool) is a normal 200 answer, so a client polling a
    # tx it sent reads one shape until the tx is confirmed; docs/node.md.
    return _tx(txid, "unknown", None, None, 0)


def _tx(
    txid: bytes,
    status: str,
    block: bytes | None,
    height: int | None,
    confirmations: int,
    reason: str | None = None,
) -> web.Response:
    return _json(
        M.TxResponse.model_validate(
            {
                "txid": txid.hex(),
                "status": status,
                "block": block.hex() if block is not None else None,
                "milestone_height": height,
                "confirmations": confirmations,
                "reason": reason,
            }
        )
    )


async def address(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    chain = ctx.service.chain
    addr = _address(ctx, request.match_info["address"])
    best_h = chain.best_height
    utxos = utxos_of(chain, addr)
    balance = sum(u.amount for _, _, u in utxos)
    pending = balance
    pool = ctx.service.mempool
    for txid in pool.txids_by_fee_rate():
        entry = pool.get(txid)
        if entry is None:
            continue
        for out in entry.tx.outputs:
            if out.address == addr:
                pending += out.amount
        for inp in entry.tx.inputs:
            spent = chain.get_utxo(inp.txid, inp.out_index)
            if spent is not None and spent.address == addr:
                pending -= spent.amount
    return _json(
        M.AddressResponse(
            address=encode_address(ctx.service.params.hrp, addr),
            balance=str(balance),
            pending_balance=str(pending),
            utxos=[
                M.UtxoItem(
                    txid=t.hex(),
                    index=i,
                    amount=str(u.amount),
                    confirmations=best_h - u.height + 1,
                )
                for t, i, u in utxos
            ],
        )
    )


async def mempool(request: web.Request) -> web.Response:
    pool = request.app[CTX].service.mempool
    txids = pool.txids_by_fee_rate(MEMPOOL_TXIDS_MAX)
    return _json(
        M.MempoolResponse(size=len(pool), bytes=pool.total_bytes, txids=[t.hex() for t in txids])
    )


async def peers(request: web.Request) -> web.Response:
    view = request.app[CTX].peers
    if view is None:
        return _json([])
    return _json([M.PeerInfo.model_validate(p) for p in view.peers_info()])


async def metrics(request: web.Request) -> web.Response:
    body = request.app[CTX].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


STATIC_FILES = frozenset(p.name for p in STATIC_DIR.iterdir() if p.is_file())
"""The explorer's assets; any other name under /static/ is a JSON 404 (no directory walking)."""


async def static_file(request: web.Request) -> web.FileResponse:
    name = request.match_info["name"]
    if name not in STATIC_FILES:
        raise ApiError(404, "not-found", f"no such path: {request.path}")
    return web.FileResponse(STATIC_DIR / name)


async def openapi(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    return web.json_response(openapi_document(ctx.version, ctx.service.params.hrp))


# ---------------------------------------------------------------------- write endpoints


async def submit_tx(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    raw = await _raw_body(request)
    try:
        txid = ctx.service.submit_tx(raw, peer="api")
    except MempoolDuplicate as exc:
        txid = TxId(exc.txid)
    except InvalidTransaction as exc:
        status = 409 if exc.rule == "V6" else 400
        code = exc.message if exc.rule == "V6" else exc.rule
        raise ApiError(status, code, f"{exc.rule}: {exc.message}") from None
    except MempoolFull as exc:
        raise ApiError(503, "mempool-full", exc.message) from None
    except MempoolError as exc:
        raise ApiError(409, exc.code, exc.message) from None
    return _json(M.SubmitTxResponse(txid=txid.hex()), status=202)


def _template_json(ctx: ApiContext, t: BlockTemplate) -> M.TemplateResponse:
    hrp = ctx.service.params.hrp
    return M.TemplateResponse(
        template_id=t.template_id.hex(),
        version=t.version,
        milestone_link=t.milestone_link.hex(),
        previous_link=t.previous_link.hex(),
        tips_root=t.tips_root.hex(),
        tip_links=[x.hex() for x in t.tip_links],
        merkle_root=t.merkle_root.hex(),
        timestamp_ms=t.timestamp_ms,
        target=t.target_bits,
        target_value=str(t.target),
        milestone_target_value=str(t.ms_target),
        txs=[tx.raw.hex() for tx in t.txs],
        peer_height=t.peer_height,
        root=t.root.hex() if t.root is not None else None,
        anchor=t.anchor.hex() if t.anchor is not None else None,
        anchor_address=encode_address(hrp, t.anchor_address) if t.anchor_address else None,
        redeemable=str(t.redeemable),
        needs_registration=t.needs_registration,
        catch_up=t.catch_up,
    )


async def mining_template(request: web.Request) -> web.Response:
    _check_token(request)
    ctx = request.app[CTX]
    root_text = request.query.get("root")
    register_text = request.query.get("register")
    if (root_text is None) == (register_text is None):
        raise ApiError(400, "bad-parameter", "give exactly one of ?root=HASH or ?register=ADDR")
    root = _hex32(root_text, "root") if root_text is not None else None
    register = _address(ctx, register_text) if register_text is not None else None
    key = f"root:{root.hex()}" if root is not None else f"register:{bytes(register or b'').hex()}"
    service = ctx.service
    async with ctx.lock_for(key):
        try:
            template = try_build_template(
                service.chain, service.mempool, service.clock(), root=root, register=register
            )
        except KeyError:
            raise ApiError(404, "unknown-root", "no peer chain with that root") from None
        except TemplateUnavailable as exc:
            raise ApiError(503, exc.code, exc.message) from None
    return _json(_template_json(ctx, template))


def _root_key(ctx: ApiContext, raw: bytes) -> str:
    """The lock key of a submitted block: its peer chain's root (or its own id if new)."""
    chain = ctx.service.chain
    try:
        block = decode_block(raw, ctx.service.params)
    except EncodingError:
        return "malformed"
    prev = block.header.previous_link
    if prev == chain.genesis_id:
        address = block.txs[0].outputs[0].address if block.txs and block.txs[0].outputs else b""
        return f"register:{bytes(address).hex()}"
    meta = chain.get_meta(prev)
    return f"root:{meta.root.hex()}" if meta is not None else "orphan"


async def mining_submit(request: web.Request) -> web.Response:
    _check_token(request)
    ctx = request.app[CTX]
    raw = await _raw_body(request)
    async with ctx.lock_for(_root_key(ctx, raw)):
        try:
            outcome = ctx.service.submit_block(raw, peer="api")
        except InvalidBlock as exc:
            raise ApiError(400, exc.rule, exc.message) from None
        except NotYetValid as exc:
            raise ApiError(409, exc.rule, f"{exc.message}; retry later") from None
    status = 202 if outcome.status is BlockStatus.ORPHAN else 200
    return _json(
        M.SubmitBlockResponse(
            hash=outcome.block_id.hex(),
            is_milestone=outcome.is_milestone,
            status=outcome.status.value,
            missing=[m.hex() for m in outcome.missing],
        ),
        status=status,
    )


async def _admin(request: web.Request, invalidate: bool) -> web.Response:
    _check_token(request)
    service = request.app[CTX].service
    ms = _hex32(request.match_info["milestone"], "milestone")
    if ms == service.chain.genesis_id or service.chain.get_snapshot(ms) is None:
        # Checked here for both tools: reconsider of an id it never marked was a silent no-op
        # (200, changed false), so a typo looked like success.
        raise ApiError(404, "not-a-milestone", "not an accepted milestone (or genesis)")
    try:
        reorg = service.invalidate(ms) if invalidate else service.reconsider(ms)
    except KeyError:
        raise ApiError(404, "not-a-milestone", "not an accepted milestone (or genesis)") from None
    chain = service.chain
    return _json(
        M.AdminResponse(
            best_milestone=chain.best_id.hex(), height=chain.best_height, changed=reorg is not None
        )
    )


async def admin_invalidate(request: web.Request) -> web.Response:
    return await _admin(request, invalidate=True)


async def admin_reconsider(request: web.Request) -> web.Response:
    return await _admin(request, invalidate=False)


# ---------------------------------------------------------------------- events WebSocket


async def events(request: web.Request) -> web.WebSocketResponse:
    ctx = request.app[CTX]
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


async def _close_sockets(app: web.Application) -> None:
    for ws in list(app[CTX].sockets):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"node shutting down")


# ---------------------------------------------------------------------- routes and OpenAPI


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
        "The block exactly as hashed and relayed (PROTOCOL.md), as application/octet-stream.",
        statuses=(200, 400, 404),
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
        "other branch; 404 for anything but an accepted milestone other than genesis.",
        M.AdminResponse,
        auth=True,
        statuses=(200, 400, 401, 404, 413),
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
        f"{EVENT_QUEUE} events behind is closed with 1013.",
        statuses=(101, 400),
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


def create_app(ctx: ApiContext, body_limit: int) -> web.Application:
    """The API application: routes, JSON errors, body limit, static files."""
    # auto_decompress off: a body is read as sent. aiohttp's parser would otherwise decode a
    # Content-Encoding before the app runs, and answer a body that does not decode (or an
    # encoding it lacks, br or zstd) with a plain-text 400, or fail the handler's read with a 500.
    app = web.Application(
        middlewares=[error_middleware],
        client_max_size=body_limit,
        handler_args={"auto_decompress": False, "logger": _http_logger()},
    )
    app[CTX] = ctx
    app[BODY_LIMIT] = body_limit
    for route in ROUTES:
        if route.method == "GET":  # HEAD too: the GET answer's headers without its body
            app.router.add_get(route.path, route.handler, allow_head=True)
        else:
            app.router.add_route(route.method, route.path, route.handler)
    app.router.add_get("/static/{name}", static_file, allow_head=True)
    app.on_shutdown.append(_close_sockets)
    return app
