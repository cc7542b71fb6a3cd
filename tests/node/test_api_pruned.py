"""The API of a pruned node (``--prune-depth``, issue 27 item 1): its status says how far it
pruned, a pruned body is a clear 410, and what it kept of old blocks and txs still answers."""

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from apiclient import models as M
from dagchain.chain import Chain
from dagchain.errors import Reason
from dagchain.mempool import Mempool
from dagchain.pruning import Pruner
from dagchain.queries import block_tx_reasons
from dagchain.storage.memory import MemoryStore
from node.api import ApiContext, create_app
from node.metrics import NodeMetrics
from p2p.service import NodeService
from tests.dagchain.test_properties import PARAMS, build_dag

NOW = PARAMS.genesis_timestamp_ms + 10**9
DEPTH = PARAMS.punctuality + 5
TOKEN = "pruned-" + "cd" * 16


def _chain(pruned: bool) -> Chain:
    chain = Chain(PARAMS, MemoryStore())
    for block in build_dag(seed=3, size=500, n_miners=4).blocks:
        chain.on_block(block.raw, NOW)
    if pruned:
        Pruner(chain, DEPTH).run()
    return chain


@pytest.fixture(scope="module")
def chain() -> Chain:
    return _chain(pruned=True)


@pytest.fixture
async def client(chain: Chain) -> AsyncIterator[TestClient[Any, Any]]:
    service = NodeService(PARAMS, chain, Mempool(PARAMS), lambda: NOW)
    metrics = NodeMetrics(service, lambda: 0)
    ctx = ApiContext(service, "devnet", "test", bytes(32), TOKEN, metrics, prune_depth=DEPTH)
    client: TestClient[Any, Any] = TestClient(
        TestServer(create_app(ctx, 1 << 16), host="127.0.0.1")
    )
    await client.start_server()
    yield client
    await client.close()


def _old_block_with_txs(chain: Chain) -> bytes:
    for height in range(1, chain.best_height - DEPTH + 1):
        delta = chain.level_set(chain.best_chain()[height])
        assert delta is not None
        for bid in delta.order:
            block = chain.get_block(bid)
            if block is not None and block.txids:
                return bid
    raise AssertionError("no pruned block holds a tx")


async def test_status_shows_the_prune_depth_and_the_lowest_height_with_bodies(
    client: TestClient[Any, Any], chain: Chain
) -> None:
    resp = await client.get("/v1/status")
    assert resp.status == 200
    status = M.StatusResponse.model_validate(await resp.json())
    assert status.prune == M.PruneState(depth=DEPTH, bodies_from=chain.best_height - DEPTH + 1)


async def test_a_pruned_body_is_410_with_a_message_and_its_header_still_answers(
    client: TestClient[Any, Any], chain: Chain
) -> None:
    bid = _old_block_with_txs(chain)
    raw = await client.get(f"/v1/blocks/{bid.hex()}/raw")
    assert raw.status == 410
    error = (await raw.json())["error"]
    assert error["code"] == "pruned"
    assert f"--prune-depth {DEPTH}" in error["message"]
    resp = await client.get(f"/v1/blocks/{bid.hex()}")
    assert resp.status == 200
    block = M.BlockResponse.model_validate(await resp.json())
    assert block.pruned
    assert block.txids
    assert len(block.tx_status) == len(block.txids)
    assert "pending" not in block.tx_status
    recent = await client.get(f"/v1/blocks/{chain.best_id.hex()}/raw")
    assert recent.status == 200


async def test_a_tx_of_a_pruned_block_keeps_its_status(
    client: TestClient[Any, Any], chain: Chain
) -> None:
    bid = _old_block_with_txs(chain)
    block = chain.get_block(bid)
    assert block is not None
    reasons = block_tx_reasons(_chain(pruned=False), bid)  # read from the bodies
    assert reasons is not None
    resp = await client.get(f"/v1/txs/{block.txids[0].hex()}")
    assert resp.status == 200
    answer = await resp.json()
    assert answer["block"] == bid.hex()
    assert answer["status"] == ("confirmed" if reasons[0] == Reason.VALID else "invalid")
