"""The mining endpoints: a block template for a peer chain and a block's submission (§3.4).

Template and submit requests of one peer chain are serialised by the context's lock per root.
"""

from aiohttp import web

from apiclient import models as M
from dagchain.blocks import decode_block
from dagchain.chain import BlockStatus
from dagchain.crypto import encode_address
from dagchain.errors import (
    EncodingError,
    InvalidBlock,
    NotYetValid,
)
from dagchain.template import BlockTemplate, TemplateUnavailable
from node.api.context import CTX, ApiContext, ApiError, json_answer
from node.api.params import check_token, hex32, parse_address, raw_body


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
    check_token(request)
    ctx = request.app[CTX]
    root_text = request.query.get("root")
    register_text = request.query.get("register")
    if (root_text is None) == (register_text is None):
        raise ApiError(400, "bad-parameter", "give exactly one of ?root=HASH or ?register=ADDR")
    root = hex32(root_text, "root") if root_text is not None else None
    register = parse_address(ctx, register_text) if register_text is not None else None
    key = f"root:{root.hex()}" if root is not None else f"register:{bytes(register or b'').hex()}"
    service = ctx.service
    async with ctx.lock_for(key):
        try:
            template = service.build_template(root=root, register=register)
        except KeyError:
            raise ApiError(404, "unknown-root", "no peer chain with that root") from None
        except TemplateUnavailable as exc:
            raise ApiError(503, exc.code, exc.message) from None
    return json_answer(_template_json(ctx, template))


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
    check_token(request)
    ctx = request.app[CTX]
    raw = await raw_body(request)
    async with ctx.lock_for(_root_key(ctx, raw)):
        try:
            outcome = ctx.service.submit_block(raw, peer="api")
        except InvalidBlock as exc:
            raise ApiError(400, exc.rule, exc.message) from None
        except NotYetValid as exc:
            raise ApiError(409, exc.rule, f"{exc.message}; retry later") from None
    status = 202 if outcome.status is BlockStatus.ORPHAN else 200
    return json_answer(
        M.SubmitBlockResponse(
            hash=outcome.block_id.hex(),
            is_milestone=outcome.is_milestone,
            status=outcome.status.value,
            missing=[m.hex() for m in outcome.missing],
        ),
        status=status,
    )
