"""The aiohttp application: the route table mounted, JSON errors, the body limit, the log filter."""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from node.api.context import BODY_LIMIT, CTX, ApiContext, ApiError, error_response
from node.api.events import close_sockets
from node.api.routes import ROUTES
from node.api.site import static_file

log = logging.getLogger("dagchain.api")
PARSER_LOG_WINDOW_S = 10.0
"""At most one log line per this many seconds for requests aiohttp's HTTP parser refuses."""

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
        return error_response(413, "body-too-large", "request body exceeds the configured limit")
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http-error")
        message = exc.reason if exc.status != 404 else f"no such path: {request.path}"
        if exc.status == 413:
            message = "request body exceeds the configured limit"
        response = error_response(exc.status, code, message)
        if isinstance(exc, web.HTTPMethodNotAllowed):  # RFC 9110 §15.5.6: name what is allowed
            response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return response
    except asyncio.CancelledError:
        raise
    except Exception:
        # Reason: a bug in one handler must not take the node down or leak a traceback to the
        # client; it is logged with its traceback, counted in dagchain_internal_errors_total
        # and answered 500, and the next request is served as usual.
        route = request.match_info.route.resource
        where = route.canonical if route is not None else "unrouted"
        request.app[CTX].metrics.api_errors[f"{request.method} {where}"] += 1
        log.exception("unexpected error in %s %s", request.method, request.path)
        return error_response(500, "internal", "internal error (see the node's log)")


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
    app.on_shutdown.append(close_sockets)
    return app
