"""The operator's endpoints: invalidate and reconsider a milestone (token required)."""

from aiohttp import web

from apiclient import models as M
from node.api.context import CTX, ApiError, json_answer
from node.api.params import check_token, hex32


async def _admin(request: web.Request, invalidate: bool) -> web.Response:
    check_token(request)
    service = request.app[CTX].service
    ms = hex32(request.match_info["milestone"], "milestone")
    if not service.is_milestone(ms):
        # Checked here for both tools: reconsider of an id it never marked was a silent no-op
        # (200, changed false), so a typo looked like success.
        raise ApiError(404, "not-a-milestone", "not an accepted milestone (or genesis)")
    try:
        reorg = service.invalidate(ms) if invalidate else service.reconsider(ms)
    except KeyError:
        raise ApiError(404, "not-a-milestone", "not an accepted milestone (or genesis)") from None
    except ValueError as exc:  # below a pruned node's bodies: it cannot undo that far
        raise ApiError(409, "pruned", str(exc)) from None
    best, height, _ = service.best()
    return json_answer(
        M.AdminResponse(best_milestone=best.hex(), height=height, changed=reorg is not None)
    )


async def admin_invalidate(request: web.Request) -> web.Response:
    return await _admin(request, invalidate=True)


async def admin_reconsider(request: web.Request) -> web.Response:
    return await _admin(request, invalidate=False)
