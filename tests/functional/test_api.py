"""The API end to end: every endpoint of INTERFACES.md on a real devnet node.

One ``dagchain-node start --network devnet`` process on free ports and a temporary datadir. Blocks
come from the node's own mining template, solved with real PoW (devnet: nearly every hash is a
block), and submitted with the bearer token; errors are checked for status and JSON shape.
"""

import asyncio
import dataclasses
import json
import logging
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from apiclient.models import MempoolSummary, SubmitBlockResponse
from dagchain.blocks import Block, BlockHeader, compute_tips_root, make_block
from dagchain.crypto import encode_address
from dagchain.genesis import FAUCET_ADDRESS
from dagchain.params import DEVNET
from dagchain.transactions import decode_transaction
from tests.dagchain.builders import grind
from tests.dagchain.chainkit import key, transfer
from tests.functional.framework import ApiError, NodeProcess, wait_until

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

FAUCET_COINS = 10**14
_, MINER_KEY = key(7)
_, BOB = key(8)
GENESIS = "d5475c0b8b110e9dcc2f71742e6d4e72454f32eee3b4fb4a5cc669063bc5d5ee"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    n = NodeProcess(0, tmp_path / "node0" / "data")
    n.start()
    try:
        yield n
    finally:
        n.kill()
        if n.log_path.exists():
            log.info("node log:\n%s", n.log_tail(40))


def error_of(call: Any) -> tuple[int, str]:
    """The status and error code of a call that must fail with the JSON error shape."""
    with pytest.raises(ApiError) as err:
        call()
    body = err.value.body
    assert isinstance(body, dict), body
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    return err.value.status, str(body["error"]["code"])


def raw_request(
    node: NodeProcess, method: str, path: str, data: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    req = urllib.request.Request(node.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def solve(template: dict[str, Any], want_milestone: bool | None = None) -> Block:
    """A block from a template (JSON of GET /v1/mining/template) with real PoW."""
    txs = [decode_transaction(bytes.fromhex(t), DEVNET) for t in template["txs"]]
    tips = [bytes.fromhex(t) for t in template["tip_links"]]
    assert tips == sorted(tips), "tip_links are ascending (PROTOCOL.md v2 §2.2)"
    assert bytes.fromhex(template["tips_root"]) == compute_tips_root(tips)
    header = BlockHeader(
        template["version"],
        bytes.fromhex(template["milestone_link"]),  # type: ignore[arg-type]
        bytes.fromhex(template["previous_link"]),  # type: ignore[arg-type]
        bytes.fromhex(template["tips_root"]),
        bytes.fromhex(template["merkle_root"]),
        template["timestamp_ms"],
        template["target"],
        0,
    )
    header = grind(
        header,
        int(template["target_value"]),
        want_milestone,
        int(template["milestone_target_value"]),
    )
    return make_block(header, tips, txs)


def mine(node: NodeProcess, query: str, want_milestone: bool | None = None) -> SubmitBlockResponse:
    template = node.request("GET", f"/v1/mining/template?{query}", auth=True)
    block = solve(template, want_milestone)
    result = node.submit_block(block)
    assert result.status == "accepted", result
    assert result.hash == block.id.hex()
    return result


MAX_BLOCKS_TO_ASSIGNMENT = 200
"""Blocks mined at most before a template carries a pool tx (devnet c = 1/16: about 16; the
chance that 200 in a row are not assigned is (15/16)^200, about 2.5e-6)."""


def mine_until_carried(node: NodeProcess, root: str, txid: str) -> SubmitBlockResponse:
    """Extend the peer chain with empty non-milestone blocks until its template carries ``txid``
    (S5 assigns it to a previous link: PROTOCOL.md v2.1 §8.1, devnet c = 1/16), then mine that
    block as a milestone; at most ``MAX_BLOCKS_TO_ASSIGNMENT`` blocks."""
    for _ in range(MAX_BLOCKS_TO_ASSIGNMENT):
        template = node.request("GET", f"/v1/mining/template?root={root}", auth=True)
        carries = [decode_transaction(bytes.fromhex(t), DEVNET).txid.hex() for t in template["txs"]]
        block = solve(template, want_milestone=txid in carries)
        result = node.submit_block(block)
        assert result.status == "accepted", result
        if txid in carries:
            return result
        assert template["txs"] == [], "the template carries nothing else"
    raise AssertionError(f"no template carried {txid} in {MAX_BLOCKS_TO_ASSIGNMENT} blocks")


def test_api_end_to_end(node: NodeProcess) -> None:
    addr = encode_address(DEVNET.hrp, MINER_KEY)
    log.info("status of a fresh devnet node")
    status = node.status()
    assert status.network == "devnet"
    assert status.best_milestone.hash == GENESIS
    assert status.best_milestone.chainwork == "0"
    assert status.blocks == 1
    assert status.mempool == MempoolSummary(size=0, bytes=0)
    assert isinstance(status.targets.block, int)

    log.info("register a peer chain through the template API, then extend it")
    first = mine(node, f"register={addr}", want_milestone=True)
    root = first.hash
    assert first.is_milestone is True
    for _ in range(DEVNET.sortition_warmup - 1):
        mine(node, f"root={root}", want_milestone=False)
    template = node.request("GET", f"/v1/mining/template?root={root}", auth=True)
    assert template["root"] == root
    assert template["peer_height"] == DEVNET.sortition_warmup + 1
    assert template["needs_registration"] is False
    assert template["anchor_address"] == addr
    assert template["redeemable"] == "0", "the warm-up blocks are still pending"

    log.info("a transaction: submitted, in the mempool, then mined into a milestone")
    pay = transfer([(bytes.fromhex(GENESIS), 0)], [(FAUCET_COINS - 1000, BOB)], DEVNET)
    assert node.request("POST", "/v1/txs", {"raw": pay.raw.hex()}) == {"txid": pay.txid.hex()}
    assert node.request("GET", f"/v1/txs/{pay.txid.hex()}")["status"] == "mempool"
    pool = node.request("GET", "/v1/mempool")
    assert pool["size"] == 1
    assert pool["txids"] == [pay.txid.hex()]
    rival = transfer([(bytes.fromhex(GENESIS), 0)], [(FAUCET_COINS - 9, BOB)], DEVNET)
    assert error_of(lambda: node.request("POST", "/v1/txs", {"raw": rival.raw.hex()}))[0] == 409
    carrier = mine_until_carried(node, root, pay.txid.hex())
    block = node.request("GET", f"/v1/blocks/{carrier.hash}")
    assert block["txids"] == [pay.txid.hex()]
    assert block["tx_status"] == ["valid"]
    assert block["is_milestone"] is True
    height = block["level_set_height"]
    assert height == node.best()[1]
    tx = node.request("GET", f"/v1/txs/{pay.txid.hex()}")
    assert tx["status"] == "confirmed"
    assert tx["block"] == carrier.hash
    assert tx["milestone_height"] == height
    assert tx["confirmations"] == 1
    again = node.request("GET", f"/v1/mining/template?root={root}", auth=True)
    assert int(again["redeemable"]) > 0
    assert again["previous_link"] == carrier.hash

    log.info("addresses, milestones and level sets")
    bob = node.request("GET", f"/v1/addresses/{encode_address(DEVNET.hrp, BOB)}")
    assert bob["balance"] == str(FAUCET_COINS - 1000)
    assert bob["utxos"] == [
        {"txid": pay.txid.hex(), "index": 0, "amount": str(FAUCET_COINS - 1000), "confirmations": 1}
    ]
    faucet = node.request("GET", f"/v1/addresses/{FAUCET_ADDRESS.hex()}")
    assert len(faucet["utxos"]) == 63
    milestones = node.request("GET", "/v1/milestones?start=0&limit=1000")
    assert milestones[0]["hash"] == GENESIS
    assert [m["height"] for m in milestones] == list(range(height + 1))
    assert milestones[-1]["hash"] == carrier.hash
    level_set = node.request("GET", f"/v1/milestones/{height}/level-set")
    assert level_set[-1] == carrier.hash
    raw = raw_request(node, "GET", f"/v1/blocks/{carrier.hash}/raw", b"", {})
    assert raw[0] == 200
    assert len(raw[1]) == block["size"]

    log.info("mempool: duplicate submission is idempotent, spent inputs conflict")
    assert error_of(lambda: node.request("POST", "/v1/txs", {"raw": pay.raw.hex()})) == (
        409,
        "spent-input",
    )

    log.info("admin: invalidate the tip milestone and reconsider it")
    best = node.best()
    done = node.request("POST", f"/v1/admin/invalidate/{carrier.hash}", auth=True)
    assert done["changed"] is True
    assert done["height"] == best[1] - 1
    assert node.request("GET", f"/v1/txs/{pay.txid.hex()}")["status"] in ("mempool", "pending")
    back = node.request("POST", f"/v1/admin/reconsider/{carrier.hash}", auth=True)
    assert (back["best_milestone"], back["height"]) == best
    assert node.request("GET", f"/v1/txs/{pay.txid.hex()}")["status"] == "confirmed"

    log.info("peers, metrics, explorer page, OpenAPI")
    assert node.request("GET", "/v1/peers") == []
    code, body = raw_request(node, "GET", "/metrics", b"", {})
    text = body.decode()
    assert code == 200
    for name in (
        "dagchain_blocks_accepted_total",
        "dagchain_milestones_applied_total",
        "dagchain_mempool_txs",
        "dagchain_peers",
        "dagchain_tps",
        "dagchain_reorgs_total",
        "dagchain_block_propagation_seconds_bucket",
        'dagchain_rejected_total{kind="tx",reason="conflict"}',
    ):
        assert name in text, name
    code, body = raw_request(node, "GET", "/", b"", {})
    assert code == 200
    assert b"<html" in body
    assert b"https://" not in body, "no CDN"
    spec = node.request("GET", "/v1/openapi.json")
    assert spec["openapi"].startswith("3.")
    for path in (
        "/v1/status",
        "/v1/blocks/{hash}",
        "/v1/blocks/{hash}/raw",
        "/v1/milestones",
        "/v1/milestones/{height}/level-set",
        "/v1/txs/{txid}",
        "/v1/txs",
        "/v1/addresses/{address}",
        "/v1/mempool",
        "/v1/peers",
        "/v1/mining/template",
        "/v1/mining/submit",
        "/v1/admin/invalidate/{milestone}",
        "/v1/admin/reconsider/{milestone}",
        "/v1/events",
        "/metrics",
        "/",
        "/v1/openapi.json",
    ):
        assert path in spec["paths"], path
    assert "TemplateResponse" in spec["components"]["schemas"]


def test_api_errors_are_json_with_the_right_status(node: NodeProcess) -> None:
    get = node.request
    unknown = "ab" * 32
    assert error_of(lambda: get("GET", "/v1/nope")) == (404, "not-found")
    assert error_of(lambda: get("GET", "/v1/blocks/xyz")) == (400, "bad-hash")
    assert error_of(lambda: get("GET", "/v1/blocks/" + "zz" * 32)) == (400, "bad-hash")
    assert error_of(lambda: get("GET", f"/v1/blocks/{unknown}")) == (404, "not-found")
    assert error_of(lambda: get("GET", f"/v1/blocks/{unknown}/raw")) == (404, "not-found")
    missing_tx = get("GET", f"/v1/txs/{unknown}")  # a 200 answer: "unknown" is a status
    assert (missing_tx["status"], missing_tx["block"], missing_tx["confirmations"]) == (
        "unknown",
        None,
        0,
    )
    assert error_of(lambda: get("GET", "/v1/milestones/99/level-set")) == (404, "not-found")
    assert error_of(lambda: get("GET", "/v1/milestones/x/level-set")) == (400, "bad-height")
    assert error_of(lambda: get("GET", "/v1/milestones?limit=0")) == (400, "bad-parameter")
    assert error_of(lambda: get("GET", "/v1/addresses/nope")) == (400, "bad-address")
    assert error_of(lambda: get("POST", "/v1/txs", {"raw": "zz"})) == (400, "bad-hex")
    assert error_of(lambda: get("POST", "/v1/txs", {"hex": "00"})) == (400, "bad-request")
    assert error_of(lambda: get("POST", "/v1/txs", {"raw": "9300"})) == (400, "T1")
    code, body = raw_request(node, "POST", "/v1/txs", b"{not json", {})
    assert (code, json.loads(body)["error"]["code"]) == (400, "bad-json")
    missing = transfer([(bytes(32), 0)], [(5, BOB)], DEVNET)
    assert error_of(lambda: get("POST", "/v1/txs", {"raw": missing.raw.hex()})) == (
        409,
        "missing-input",
    )

    log.info("oversized bodies get 413")
    big = json.dumps({"raw": "00" * 600_000}).encode()
    code, body = raw_request(node, "POST", "/v1/txs", big, {"Content-Type": "application/json"})
    assert code == 413
    assert json.loads(body)["error"]["code"] == "body-too-large"

    log.info("mining and admin endpoints need the bearer token")
    for method, path in (
        ("GET", "/v1/mining/template?register=" + FAUCET_ADDRESS.hex()),
        ("POST", "/v1/mining/submit"),
        ("POST", f"/v1/admin/invalidate/{unknown}"),
        ("POST", f"/v1/admin/reconsider/{unknown}"),
    ):
        code, body = raw_request(node, method, path, b"", {})
        assert (code, json.loads(body)["error"]["code"]) == (401, "unauthorized"), path
        bad = {"Authorization": "Bearer " + "0" * 64}
        code, body = raw_request(node, method, path, b"", bad)
        assert (code, json.loads(body)["error"]["code"]) == (401, "unauthorized"), path
    auth = node.request
    assert error_of(lambda: auth("GET", "/v1/mining/template", auth=True)) == (
        400,
        "bad-parameter",
    )
    assert error_of(lambda: auth("GET", f"/v1/mining/template?root={unknown}", auth=True)) == (
        404,
        "unknown-root",
    )
    assert error_of(lambda: auth("POST", "/v1/mining/submit", {"raw": "00"}, auth=True)) == (
        400,
        "H1",
    )
    assert error_of(lambda: auth("POST", f"/v1/admin/invalidate/{GENESIS}", auth=True)) == (
        404,
        "not-a-milestone",
    )

    log.info("a block with a bad proof of work is rejected with its rule id")
    template = auth("GET", f"/v1/mining/template?register={FAUCET_ADDRESS.hex()}", auth=True)
    block = solve(template)
    h = block.header
    future = dataclasses.replace(h, timestamp_ms=h.timestamp_ms + 60_000)
    future = grind(future, int(template["target_value"]), None, 0)
    late = make_block(future, block.tip_links, block.txs)
    assert error_of(
        lambda: auth("POST", "/v1/mining/submit", {"raw": late.raw.hex()}, auth=True)
    ) == (
        409,
        "H11",
    )
    bumped = make_block(dataclasses.replace(h, version=2), block.tip_links, block.txs)
    assert error_of(
        lambda: auth("POST", "/v1/mining/submit", {"raw": bumped.raw.hex()}, auth=True)
    ) == (400, "H2")
    assert node.submit_block(block).status == "accepted"
    assert node.submit_block(block).status == "duplicate"
    assert node.status().best_milestone.hash is not None


async def _collect_events(node: NodeProcess, want: int) -> list[dict[str, Any]]:
    token = node.token
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(node.url + "/v1/events") as ws,
    ):
        template_url = node.url + f"/v1/mining/template?register={FAUCET_ADDRESS.hex()}"
        headers = {"Authorization": f"Bearer {token}"}
        async with session.get(template_url, headers=headers) as resp:
            template = await resp.json()
        block = solve(template, want_milestone=True)
        async with session.post(
            node.url + "/v1/mining/submit", json={"raw": block.raw.hex()}, headers=headers
        ) as resp:
            assert resp.status == 200
        out: list[dict[str, Any]] = []
        async with asyncio.timeout(10):
            while len(out) < want:
                out.append(await ws.receive_json())
        return out


def test_events_websocket_pushes_block_and_milestone(node: NodeProcess) -> None:
    events = asyncio.run(_collect_events(node, 2))
    assert [e["type"] for e in events] == ["block", "milestone"]
    assert events[0]["hash"] == events[1]["hash"]
    assert events[1]["height"] == 1


def test_sigterm_exits_0_quickly_and_the_datadir_reopens(node: NodeProcess) -> None:
    template = node.request(
        "GET", f"/v1/mining/template?register={FAUCET_ADDRESS.hex()}", auth=True
    )
    block = solve(template, want_milestone=True)
    assert node.submit_block(block).status == "accepted"
    best = node.best()

    log.info("a second node on the same datadir exits 2 with one line")
    second = subprocess.run(
        [*node.command(), "--api-port", "1", "--p2p-port", "1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert second.returncode == 2
    assert "in use by another dagchain-node" in second.stderr
    assert second.stderr.count("\n") == 1

    log.info("SIGTERM: exit 0 within 10 s")
    started = time.monotonic()
    assert node.stop(timeout=10) == 0
    assert time.monotonic() - started < 10
    log.info("restart on the same datadir: the block survived")
    node.start()
    wait_until(lambda: node.best() == best, 10, "the restarted node's best milestone")
    assert node.has_block(block.id)
    assert (node.datadir / "api.token").stat().st_mode & 0o777 == 0o600
