"""The chain, ledger and mempool endpoints: reads, and ``POST /v1/txs`` (INTERFACES.md)."""

import contextlib
from typing import Literal

from aiohttp import web

from apiclient import models as M
from dagchain.chain import Chain
from dagchain.crypto import encode_address
from dagchain.errors import (
    InvalidTransaction,
    Reason,
)
from dagchain.fees import LIKELIHOOD, MILLI
from dagchain.mempool import MempoolDuplicate, MempoolError, MempoolFull
from dagchain.pow import encode_compact
from dagchain.pruning import get_bodies_from
from dagchain.queries import block_tx_reasons, milestone_at, utxos_of
from dagchain.types import Address, BlockId, TxId
from node.api.context import (
    CTX,
    DAG_LEVEL_SETS_MAX,
    DAG_PENDING_MAX,
    INT_MAX,
    MEMPOOL_TXIDS_MAX,
    MILESTONES_MAX,
    ApiContext,
    ApiError,
    json_answer,
)
from node.api.params import (
    hex32,
    int_query,
    parse_address,
    parse_hex,
    parse_hex32,
    parse_int,
    raw_body,
    raw_list_body,
)


async def status(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    chain = ctx.service.chain
    best = chain.best_id
    snap = chain.best_snapshot
    block = chain.get_block(best)
    peers = ctx.peers
    return json_answer(
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
            prune=M.PruneState(depth=ctx.prune_depth, bodies_from=get_bodies_from(chain)),
        )
    )


def _tx_status_labels(reasons: tuple[int, ...] | None, count: int) -> list[str]:
    if reasons is None:
        return ["pending"] * count
    return ["valid" if r == Reason.VALID else f"invalid:{Reason(r).label}" for r in reasons]


async def get_block(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    chain = ctx.service.chain
    bid = hex32(request.match_info["hash"])
    block = chain.get_block(bid)
    meta = chain.get_meta(bid)
    if block is None or meta is None:
        raise ApiError(404, "not-found", "no such block")
    h = block.header
    reasons = block_tx_reasons(chain, bid)
    return json_answer(
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
            txids=[txid.hex() for txid in block.txids],
            is_milestone=meta.is_milestone,
            level_set_height=chain.ls_height(bid),
            tx_status=_tx_status_labels(reasons, len(block.txids)),
            root=meta.root.hex(),
            peer_height=meta.peer_height,
            confirmations=chain.confirmations(bid),
            size=0 if block.pruned else len(block.raw),
            pruned=block.pruned,
        )
    )


async def get_block_raw(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    bid = hex32(request.match_info["hash"])
    raw = ctx.service.get_block_raw(bid)
    if raw is None:
        block = ctx.service.chain.get_block(bid)
        if block is not None and block.pruned:
            raise ApiError(
                410,
                "pruned",
                f"this node pruned the body of block {bid.hex()} (--prune-depth "
                f"{ctx.prune_depth}: bodies are kept from milestone height "
                f"{get_bodies_from(ctx.service.chain)} up)",
            )
        raise ApiError(404, "not-found", "no such block")
    return web.Response(body=raw, content_type="application/octet-stream")


async def milestones(request: web.Request) -> web.Response:
    chain = request.app[CTX].service.chain
    start = int_query(request, "start", 0, 0, INT_MAX)
    limit = int_query(request, "limit", 100, 1, MILESTONES_MAX)
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
    return json_answer(out)


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
        txs=len(block.txids),
    )


async def dag(request: web.Request) -> web.Response:
    """The explorer's DAG view in one request: recent level sets, then the pending blocks."""
    chain = request.app[CTX].service.chain
    best = chain.best_height
    limit = int_query(request, "limit", 20, 1, DAG_LEVEL_SETS_MAX)
    start = int_query(request, "start", max(0, best - limit + 1), 0, INT_MAX)
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
    return json_answer(M.DagResponse(best_height=best, blocks=out))


async def lookup(request: web.Request) -> web.Response:
    """Which of block, transaction or address the explorer's search string names."""
    ctx = request.app[CTX]
    chain = ctx.service.chain
    query = request.match_info["query"].strip()
    kind = "unknown"
    raw = parse_hex32(query)
    if raw is not None:
        if chain.get_meta(raw) is not None:
            kind = "block"
        elif chain.blocks_with_tx(TxId(raw)) or TxId(raw) in ctx.service.mempool:
            kind = "transaction"
        elif utxos_of(chain, Address(raw)):
            kind = "address"
    else:
        with contextlib.suppress(ApiError):
            parse_address(ctx, query)
            kind = "address"
    return json_answer(M.LookupResponse.model_validate({"query": query, "kind": kind}))


async def level_set(request: web.Request) -> web.Response:
    chain = request.app[CTX].service.chain
    height = parse_int(request.match_info["height"], "height", 0, INT_MAX, "bad-height")
    ms = milestone_at(chain, height)
    delta = chain.level_set(ms) if ms is not None else None
    if delta is None:
        raise ApiError(404, "not-found", f"no best-chain milestone at height {height}")
    return json_answer([b.hex() for b in delta.order])


async def get_tx(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    chain = ctx.service.chain
    txid = hex32(request.match_info["txid"], "txid")
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
        index = block.txids.index(txid)
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
    if txid in ctx.service.mempool or txid in ctx.service.waiting:
        # a tx waiting for a parent a reorganisation undid (decision 37) is still the node's
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
    return json_answer(
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
    addr = parse_address(ctx, request.match_info["address"])
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
    return json_answer(
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
    return json_answer(
        M.MempoolResponse(size=len(pool), bytes=pool.total_bytes, txids=[t.hex() for t in txids])
    )


async def fees(request: web.Request) -> web.Response:
    """``GET /v1/fees``: the node's fee estimates (``dagchain.fees``) in units per byte."""
    service = request.app[CTX].service
    estimate = service.fee_estimate()
    return json_answer(
        M.FeesResponse(
            fee_per_byte=M.FeeRates.model_validate(
                {str(n): None if rate is None else rate / MILLI for n, rate in estimate.rates}
            ),
            floor=estimate.floor / MILLI,
            likelihood=LIKELIHOOD[0] / LIKELIHOOD[1],
            sample=M.FeeSample(
                txs=estimate.txs, milestones=estimate.milestones, window=service.fees.window
            ),
        )
    )


async def peers(request: web.Request) -> web.Response:
    view = request.app[CTX].peers
    if view is None:
        return json_answer([])
    return json_answer([M.PeerInfo.model_validate(p) for p in view.peers_info()])


def _admit(
    ctx: ApiContext, raw: bytes
) -> tuple[TxId | None, Literal[202, 400, 409, 503], str, str]:
    """One tx into the mempool: (txid, status, code, message), as ``POST /v1/txs`` answers it.

    The txid is None when the bytes do not decode (T1).
    """
    try:
        return ctx.service.submit_tx(raw, peer="api"), 202, "", ""
    except MempoolDuplicate as exc:
        return TxId(exc.txid), 202, "", ""
    except InvalidTransaction as exc:
        txid = TxId(exc.txid) if exc.txid is not None else None
        if exc.rule == "V6":
            return txid, 409, exc.message, f"{exc.rule}: {exc.message}"
        return txid, 400, exc.rule, f"{exc.rule}: {exc.message}"
    except MempoolFull as exc:
        return TxId(exc.txid), 503, "mempool-full", exc.message
    except MempoolError as exc:
        return TxId(exc.txid), 409, exc.code, exc.message


async def submit_tx(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    txid, status, code, message = _admit(ctx, await raw_body(request))
    if status != 202 or txid is None:
        raise ApiError(status, code, message)
    return json_answer(M.SubmitTxResponse(txid=txid.hex()), status=202)


async def submit_tx_batch(request: web.Request) -> web.Response:
    """``POST /v1/txs/batch``: each item admitted in request order, as ``POST /v1/txs`` would
    admit it alone at its turn (no await between items: no other request interleaves)."""
    ctx = request.app[CTX]
    results: list[M.SubmitTxResult] = []
    for text in await raw_list_body(request):
        raw = parse_hex(text)
        if raw is None:
            results.append(M.SubmitTxResult(txid=None, status=400, reason="bad-hex"))
            continue
        txid, status, code, _ = _admit(ctx, raw)
        results.append(
            M.SubmitTxResult(
                txid=txid.hex() if txid is not None else None,
                status=status,
                reason=code if status != 202 else None,
            )
        )
    return json_answer(M.SubmitTxBatchResponse(results=results))
