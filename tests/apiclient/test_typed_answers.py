"""apiclient reads every 2xx answer into its pydantic model (apiclient/models.py, the schema the
node answers with): extra fields of a newer node are dropped, a missing field or a wrong type is
``ApiError`` ``bad-answer``, and no endpoint answers an untyped ``dict``."""

import inspect
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from apiclient import ApiError, NodeApi, SyncNodeApi, endpoints
from apiclient import models as M
from apiclient.core import Call, decode

H = "ab" * 32
ZERO = "00" * 32

STATUS: dict[str, Any] = {
    "network": "devnet",
    "version": "0.1.0",
    "node_id": H,
    "best_milestone": {"hash": H, "height": 3, "chainwork": "12", "timestamp_ms": 5},
    "blocks": 4,
    "pending_blocks": 1,
    "mempool": {"size": 2, "bytes": 300},
    "peers": 1,
    "synced": True,
    "targets": {"block": 0x2100FFFF, "milestone": 0x2000FFFF},
    "p2p": True,
    "prune": {"depth": None, "bodies_from": 1},
}
BLOCK: dict[str, Any] = {
    "hash": H,
    "version": 1,
    "milestone_link": ZERO,
    "previous_link": ZERO,
    "tips_root": ZERO,
    "tip_links": [ZERO],
    "merkle_root": ZERO,
    "timestamp_ms": 7,
    "target": 0x2100FFFF,
    "nonce": "18446744073709551615",
    "txids": [H],
    "is_milestone": False,
    "level_set_height": None,
    "tx_status": ["pending"],
    "root": H,
    "peer_height": 2,
    "confirmations": 0,
    "size": 321,
    "pruned": False,
}
DAG_BLOCK: dict[str, Any] = {
    "hash": H,
    "milestone_link": ZERO,
    "previous_link": ZERO,
    "tip_links": [ZERO],
    "root": H,
    "peer_height": 1,
    "is_milestone": True,
    "level_set_height": 1,
    "timestamp_ms": 9,
    "txs": 0,
}
TEMPLATE: dict[str, Any] = {
    "template_id": H,
    "version": 1,
    "milestone_link": ZERO,
    "previous_link": ZERO,
    "tips_root": ZERO,
    "tip_links": [ZERO],
    "merkle_root": ZERO,
    "timestamp_ms": 11,
    "target": 0x2100FFFF,
    "target_value": str(1 << 255),
    "milestone_target_value": str(1 << 250),
    "txs": ["00ff"],
    "peer_height": 0,
    "root": None,
    "anchor": None,
    "anchor_address": None,
    "redeemable": "0",
    "needs_registration": True,
    "catch_up": False,
}

# (the call, a body the node could answer, the type the client returns)
CASES: list[tuple[Call[Any], Any, Any]] = [
    (endpoints.status(), STATUS, M.StatusResponse),
    (endpoints.block(H), BLOCK, M.BlockResponse),
    (
        endpoints.milestones(0, 2),
        [{"hash": H, "height": 0, "timestamp_ms": 1, "level_set_size": 1}],
        list,
    ),
    (endpoints.level_set(1), [H, ZERO], list),
    (endpoints.dag(0, 5), {"best_height": 1, "blocks": [DAG_BLOCK]}, M.DagResponse),
    (endpoints.lookup(H), {"query": H, "kind": "block"}, M.LookupResponse),
    (
        endpoints.tx(H),
        {
            "txid": H,
            "status": "confirmed",
            "block": H,
            "milestone_height": 3,
            "confirmations": 1,
            "reason": None,
        },
        M.TxResponse,
    ),
    (endpoints.submit_tx(b"\x01"), {"txid": H}, str),
    (
        endpoints.submit_tx_batch([b"\x01", b"\x02"]),
        {
            "results": [
                {"txid": H, "status": 202, "reason": None},
                {"txid": None, "status": 400, "reason": "T1"},
            ]
        },
        M.SubmitTxBatchResponse,
    ),
    (
        endpoints.address("ddag1x"),
        {
            "address": "ddag1x",
            "balance": "10",
            "pending_balance": "9",
            "utxos": [{"txid": H, "index": 0, "amount": "10", "confirmations": 2}],
        },
        M.AddressResponse,
    ),
    (endpoints.mempool(), {"size": 1, "bytes": 200, "txids": [H]}, M.MempoolResponse),
    (
        endpoints.fees(),
        {
            "fee_per_byte": {"1": None, "3": 2.501, "10": 0.5},
            "floor": 0.0,
            "likelihood": 0.9,
            "sample": {"txs": 40, "milestones": 100, "window": 100},
        },
        M.FeesResponse,
    ),
    (
        endpoints.peers(),
        [
            {
                "node_id": H,
                "address": "127.0.0.1:1",
                "direction": "outbound",
                "best_milestone_height": 3,
                "score": 0,
                "connected_s": 1.5,
            }
        ],
        list,
    ),
    (endpoints.template({"root": H}), TEMPLATE, M.TemplateResponse),
    (
        endpoints.submit_block(b"\x01"),
        {"hash": H, "is_milestone": False, "status": "orphan", "missing": [ZERO]},
        M.SubmitBlockResponse,
    ),
    (
        endpoints.admin("invalidate", H),
        {"best_milestone": H, "height": 2, "changed": True},
        M.AdminResponse,
    ),
]


def _ids() -> list[str]:
    return [f"{call.method} {call.path}" for call, _, _ in CASES]


def _with_extras(body: Any) -> Any:
    """``body`` with an unknown key in every object, at every depth (a newer node's answer)."""
    if isinstance(body, dict):
        return {**{k: _with_extras(v) for k, v in body.items()}, "added_later": {"x": 1}}
    if isinstance(body, list):
        return [_with_extras(v) for v in body]
    return body


@pytest.mark.parametrize(("call", "body", "kind"), CASES, ids=_ids())
def test_every_answer_is_read_into_its_model(call: Call[Any], body: Any, kind: Any) -> None:
    result = decode(call, 200, body)
    assert isinstance(result, kind)
    if isinstance(result, BaseModel):
        assert result.model_dump(mode="json") == body
    elif isinstance(result, list) and result and isinstance(result[0], BaseModel):
        assert [r.model_dump(mode="json") for r in result] == body


@pytest.mark.parametrize(("call", "body", "kind"), CASES, ids=_ids())
def test_fields_a_newer_node_adds_are_dropped(call: Call[Any], body: Any, kind: Any) -> None:
    assert decode(call, 200, _with_extras(body)) == decode(call, 200, body)


@pytest.mark.parametrize(("call", "body", "kind"), CASES, ids=_ids())
def test_a_body_missing_a_field_is_a_bad_answer(call: Call[Any], body: Any, kind: Any) -> None:
    # a dict: its first field gone; a list: an object instead
    broken = dict(list(body.items())[1:]) if isinstance(body, dict) else {"not": "a list"}
    with pytest.raises(ApiError) as exc:
        decode(call, 200, broken)
    assert (exc.value.status, exc.value.code) == (200, "bad-answer")


def test_a_wrong_type_deep_inside_is_a_bad_answer_naming_the_field() -> None:
    body = {**STATUS, "best_milestone": {**STATUS["best_milestone"], "height": "three"}}
    with pytest.raises(ApiError) as exc:
        decode(endpoints.status(), 200, body)
    assert exc.value.code == "bad-answer"
    assert "best_milestone.height" in exc.value.message
    assert str(exc.value).startswith("GET /v1/status: HTTP 200 bad-answer: ")
    with pytest.raises(ApiError, match="bad-answer"):
        decode(endpoints.block(H), 200, {**BLOCK, "hash": "not hex"})


def test_a_refusal_is_still_the_nodes_error_not_a_bad_answer() -> None:
    body = {"error": {"code": "T3", "message": "bad signature"}}
    with pytest.raises(ApiError) as exc:
        decode(endpoints.submit_tx(b"\x01"), 400, body)
    assert (exc.value.status, exc.value.code, exc.value.message) == (400, "T3", "bad signature")


def test_raw_block_bytes_are_bytes_and_a_refusal_is_json() -> None:
    call = endpoints.block_raw(H)
    assert (call.path, call.binary) == (f"/v1/blocks/{H}/raw", True)
    assert decode(call, 200, b"\x01\x02") == b"\x01\x02"
    with pytest.raises(ApiError, match="bad-answer"):
        decode(call, 200, {"not": "bytes"})
    with pytest.raises(ApiError) as exc:
        decode(call, 404, {"error": {"code": "not-found", "message": "no such block"}})
    assert (exc.value.status, exc.value.code) == (404, "not-found")


def _untyped(annotation: Any) -> bool:
    """``Any``, a ``dict`` or a ``list`` of one (what the client returned before it was typed)."""
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if annotation is dict or origin is dict:
        return True
    return origin is list and any(_untyped(a) for a in typing.get_args(annotation))


def test_no_endpoint_returns_an_untyped_dict() -> None:
    """Every endpoint constructor but ``raw``, and the client methods of the same names."""
    calls = {
        name: typing.get_type_hints(fn)["return"]
        for name, fn in vars(endpoints).items()
        if isinstance(fn, staticmethod) and name != "raw"
    }
    assert len(calls) == len(CASES) + 1, "each endpoint has a case above (block_raw: below)"
    for name, hint in calls.items():
        assert typing.get_origin(hint) is Call, name
        (result,) = typing.get_args(hint)
        assert not _untyped(result), f"endpoints.{name} returns {result}"
    for client in (NodeApi, SyncNodeApi):
        for name in calls:
            method = getattr(client, name)
            hint = typing.get_type_hints(method)["return"]
            assert not _untyped(hint), f"{client.__name__}.{name} returns {hint}"
            assert inspect.iscoroutinefunction(method) == (client is NodeApi), name
