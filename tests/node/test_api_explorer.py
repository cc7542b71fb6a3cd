"""The explorer's read-only API: GET /v1/dag (recent level sets, then pending blocks), GET
/v1/lookup/{query}, and the page with its local assets."""

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dagchain.blocks import Block
from dagchain.chain import BlockStatus
from dagchain.crypto import encode_address
from dagchain.genesis import FAUCET_ADDRESS
from dagchain.mempool import Mempool
from dagchain.params import DEVNET
from node.api import ApiContext, create_app
from node.metrics import NodeMetrics
from p2p.service import NodeService
from tests.dagchain.chainkit import Node, key, transfer

_, ALICE = key(2)


class Dag:
    """A NodeService over a chainkit Node, and the blocks mined so far."""

    def __init__(self) -> None:
        self.node = Node(DEVNET)
        self.service = NodeService(
            DEVNET, self.node.chain, Mempool(DEVNET), lambda: self.node.now_ms
        )

    def mine(self, previous: bytes, **kw: Any) -> Block:
        block = self.node.build(previous, **kw)
        assert self.service.submit_block(block.raw, peer="test").status is BlockStatus.ACCEPTED
        return block


@pytest.fixture
async def client_and_dag(aiohttp_client: Any) -> tuple[TestClient[Any, Any], Dag, list[Block]]:
    dag = Dag()
    first = dag.mine(dag.node.genesis, register=ALICE, ms=True)  # level set 1
    second = dag.mine(first.id, ms=False)
    third = dag.mine(second.id, ms=True)  # level set 2: second, third
    pending = dag.mine(third.id, ms=False)
    ctx = ApiContext(
        dag.service, "devnet", "test", bytes(32), "token", NodeMetrics(dag.service, lambda: 0)
    )
    client = await aiohttp_client(create_app(ctx, 1 << 20))
    return client, dag, [first, second, third, pending]


async def _get(client: TestClient[Any, Any], path: str) -> tuple[int, Any]:
    resp = await client.get(path)
    return resp.status, await resp.json()


async def test_dag_lists_recent_level_sets_in_total_order_then_pending_blocks(
    client_and_dag: tuple[TestClient[Any, Any], Dag, list[Block]],
) -> None:
    client, dag, (first, second, third, pending) = client_and_dag
    status, body = await _get(client, "/v1/dag")
    assert status == 200
    assert body["best_height"] == 2
    rows = [(b["hash"], b["level_set_height"], b["is_milestone"]) for b in body["blocks"]]
    genesis = dag.node.genesis.hex()
    level_set_2 = [h.hex() for h in dag.node.chain.level_set(third.id).order]  # type: ignore[union-attr]
    assert sorted(level_set_2) == sorted([second.id.hex(), third.id.hex()])
    assert rows == [
        (genesis, 0, True),
        (first.id.hex(), 1, True),
        *[(h, 2, h == third.id.hex()) for h in level_set_2],
        (pending.id.hex(), None, False),
    ]
    last = body["blocks"][-1]
    assert last == {
        "hash": pending.id.hex(),
        "milestone_link": pending.header.milestone_link.hex(),
        "previous_link": third.id.hex(),
        "tip_links": [t.hex() for t in pending.tip_links],
        "root": first.id.hex(),
        "peer_height": 4,
        "is_milestone": False,
        "level_set_height": None,
        "timestamp_ms": pending.header.timestamp_ms,
        "txs": len(pending.txs),
    }


async def test_dag_range_below_the_best_milestone_has_no_pending_blocks(
    client_and_dag: tuple[TestClient[Any, Any], Dag, list[Block]],
) -> None:
    client, _, (first, *_) = client_and_dag
    status, body = await _get(client, "/v1/dag?start=1&limit=1")
    assert status == 200
    assert [(b["hash"], b["level_set_height"]) for b in body["blocks"]] == [(first.id.hex(), 1)]


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "start=-1", "start=x"])
async def test_dag_rejects_bad_ranges_with_a_json_error(
    client_and_dag: tuple[TestClient[Any, Any], Dag, list[Block]], query: str
) -> None:
    client, _, _ = client_and_dag
    status, body = await _get(client, f"/v1/dag?{query}")
    assert status == 400
    assert body["error"]["code"] == "bad-parameter"


async def test_explorer_page_and_its_assets_are_served(
    client_and_dag: tuple[TestClient[Any, Any], Dag, list[Block]],
) -> None:
    client, _, _ = client_and_dag
    page = await client.get("/")
    assert page.status == 200
    assert page.content_type == "text/html"
    html = await page.text()
    links = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert {"/static/explorer.js", "/static/explorer.css"} <= set(links)
    assert [u for u in links if not u.startswith(("/", "#", "data:"))] == []  # no CDN
    for asset in ("/static/explorer.js", "/static/explorer.css"):
        resp = await client.get(asset)
        assert resp.status == 200, asset
        assert "https://" not in await resp.text()


async def test_lookup_names_blocks_transactions_and_addresses_and_misses_without_an_error(
    client_and_dag: tuple[TestClient[Any, Any], Dag, list[Block]],
) -> None:
    client, dag, (first, *_) = client_and_dag
    payment = transfer([(dag.node.genesis, 3)], [(10**13, ALICE)], DEVNET)
    dag.service.submit_tx(payment.raw, peer="test")
    faucet = encode_address(DEVNET.hrp, FAUCET_ADDRESS)
    cases = {
        first.id.hex(): "block",
        payment.txid.hex(): "transaction",
        FAUCET_ADDRESS.hex(): "address",
        faucet: "address",
        "ab" * 32: "unknown",
        "not-an-address": "unknown",
    }
    for query, kind in cases.items():
        status, body = await _get(client, f"/v1/lookup/{query}")
        assert (status, body) == (200, {"query": query, "kind": kind})


async def test_status_counts_blocks_without_scanning_the_store(
    client_and_dag: tuple[TestClient[Any, Any], Dag, list[Block]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GET /v1/status is O(1) in chain length: the block count is a counter, not len(meta)."""
    client, dag, blocks = client_and_dag
    chain = dag.node.chain
    assert chain.state.block_count == len(chain.state.meta) == 1 + len(blocks)
    dag.mine(blocks[-1].id, ms=True)

    def scan(self: object) -> int:
        raise AssertionError("len(meta) scans the store")

    monkeypatch.setattr(type(chain.state.meta), "__len__", scan)
    status, body = await _get(client, "/v1/status")
    assert status == 200
    assert body["blocks"] == 2 + len(blocks)
