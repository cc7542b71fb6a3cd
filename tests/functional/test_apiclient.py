"""A real node's answer to every endpoint parses into its model of apiclient/models.py, through
both clients (:class:`apiclient.SyncNodeApi`, :class:`apiclient.NodeApi`), and the JSON itself
fits the model strictly (no field the schema does not name), so the node, the schema and the
clients cannot drift apart unnoticed."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter

from apiclient import ApiError, NodeApi
from apiclient import models as M
from dagchain.blocks import decode_block
from dagchain.crypto import encode_address
from dagchain.genesis import FAUCET_ADDRESS
from dagchain.params import DEVNET
from dagchain.transactions import Transaction
from tests.dagchain.chainkit import key, transfer
from tests.functional.framework import BlockFactory, NodeProcess, network_context

pytestmark = pytest.mark.integration

FAUCET_COINS = 10**14
_, BOB = key(9)


@dataclass
class Net:
    a: NodeProcess
    b: NodeProcess
    factory: BlockFactory
    milestone: str
    pending: str
    pay: Transaction


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    """Two linked nodes; a milestone, a pending block, a pool tx."""
    with network_context(tmp_path_factory.mktemp("apiclient")) as network:
        a, b = network.start(2)
        factory = BlockFactory(miners=2)
        first = factory.mine(1, want_milestone=True)[0]
        second = factory.mine(1, want_milestone=False)[0]
        for block in (first, second):
            assert a.submit_block(block).status == "accepted"
        network.wait_connected([a, b])
        pay = transfer([(factory.chain.genesis_id, 0)], [(FAUCET_COINS - 1000, BOB)], DEVNET)
        assert a.api.submit_tx(pay.raw) == pay.txid.hex()
        yield Net(a, b, factory, first.id.hex(), second.id.hex(), pay)


def _strict(schema: Any, body: Any) -> Any:
    """``body`` read as ``schema`` with the models' own ``extra="forbid"``."""
    return TypeAdapter(schema).validate_python(body)


def _same(node: NodeProcess, path: str, schema: Any, typed: Any, auth: bool = False) -> None:
    """The typed answer equals the raw JSON of the same GET read strictly into ``schema``."""
    assert _strict(schema, node.request("GET", path, auth=auth)) == typed


def test_every_read_endpoint_parses_into_its_model(net: Net) -> None:
    api = net.a.api
    status = api.status()
    assert isinstance(status, M.StatusResponse)
    assert (status.network, status.peers, status.best_milestone.hash) == (
        "devnet",
        1,
        net.milestone,
    )
    strict = _strict(M.StatusResponse, net.a.request("GET", "/v1/status"))
    assert strict.best_milestone == status.best_milestone  # counters may move between calls

    for block_hash in (net.milestone, net.pending):
        block = api.block(block_hash)
        assert isinstance(block, M.BlockResponse)
        assert block.hash == block_hash
        _same(net.a, f"/v1/blocks/{block_hash}", M.BlockResponse, api.block(block_hash))
        raw = api.block_raw(block_hash)
        assert (decode_block(raw, DEVNET).id.hex(), len(raw)) == (block_hash, block.size)
    with pytest.raises(ApiError) as exc:
        api.block_raw("cd" * 32)
    assert (exc.value.status, exc.value.code) == (404, "not-found")

    milestones = api.milestones(0, 10)
    assert [m.height for m in milestones] == [0, 1]
    assert all(isinstance(m, M.MilestoneItem) for m in milestones)
    _same(net.a, "/v1/milestones?start=0&limit=10", list[M.MilestoneItem], milestones)

    level_set = api.level_set(1)
    assert level_set[-1] == net.milestone
    _same(net.a, "/v1/milestones/1/level-set", list[str], level_set)

    dag = api.dag(0, 5)
    assert isinstance(dag, M.DagResponse)
    assert {b.hash for b in dag.blocks} >= {net.milestone, net.pending}
    _same(net.a, "/v1/dag?start=0&limit=5", M.DagResponse, dag)

    for query, kind in ((net.milestone, "block"), (net.pay.txid.hex(), "transaction")):
        found = api.lookup(query)
        assert (found.query, found.kind) == (query, kind)
        _same(net.a, f"/v1/lookup/{query}", M.LookupResponse, found)

    tx = api.tx(net.pay.txid.hex())
    assert isinstance(tx, M.TxResponse)
    assert tx.status == "mempool"
    _same(net.a, f"/v1/txs/{net.pay.txid.hex()}", M.TxResponse, tx)
    assert api.tx("cd" * 32).status == "unknown"

    faucet = encode_address(DEVNET.hrp, FAUCET_ADDRESS)
    address = api.address(faucet)
    assert isinstance(address, M.AddressResponse)
    assert address.utxos
    _same(net.a, f"/v1/addresses/{faucet}", M.AddressResponse, address)

    pool = api.mempool()
    assert isinstance(pool, M.MempoolResponse)
    assert pool.txids == [net.pay.txid.hex()]
    _same(net.a, "/v1/mempool", M.MempoolResponse, pool)

    for node in (net.a, net.b):
        (peer,) = node.api.peers()
        assert isinstance(peer, M.PeerInfo)
        raw = node.request("GET", "/v1/peers")
        strict = _strict(list[M.PeerInfo], raw)
        assert [p.node_id for p in strict] == [peer.node_id]  # connected_s grows

    register = encode_address(DEVNET.hrp, net.factory.keys[0])
    fresh = api.template(register=register)
    assert isinstance(fresh, M.TemplateResponse)
    assert fresh.needs_registration
    extend = api.template(root=net.milestone)
    assert (extend.root, extend.needs_registration) == (net.milestone, False)
    raw = net.a.request("GET", f"/v1/mining/template?root={net.milestone}", auth=True)
    assert _strict(M.TemplateResponse, raw).root == net.milestone


def test_submit_and_admin_answers_parse_into_their_models(net: Net) -> None:
    api = net.a.api
    (block,) = net.factory.mine(1, want_milestone=True)
    answer = api.submit_block(block.raw)
    assert isinstance(answer, M.SubmitBlockResponse)
    assert (answer.hash, answer.status, answer.is_milestone) == (block.id.hex(), "accepted", True)
    again = api.submit_block(block.raw)
    assert (again.hash, again.status) == (block.id.hex(), "duplicate")

    # an orphan (202): its parent is not sent first
    parent, child = net.factory.mine(2, want_milestone=False)
    orphan = api.submit_block(child.raw)
    assert (orphan.status, orphan.hash) == ("orphan", child.id.hex())
    assert api.submit_block(parent.raw).status == "accepted"

    # a batch: the pool tx again (202, a duplicate is accepted), a spend of the same coin
    # (409), bytes that are no tx (400)
    rival = transfer([(net.factory.chain.genesis_id, 0)], [(FAUCET_COINS - 9, BOB)], DEVNET)
    batch = api.submit_tx_batch([net.pay.raw, rival.raw, b"\x00"])
    assert isinstance(batch, M.SubmitTxBatchResponse)
    assert [(r.txid, r.status) for r in batch.results[:2]] == [
        (net.pay.txid.hex(), 202),
        (rival.txid.hex(), 409),
    ]
    assert (batch.results[2].status, batch.results[2].txid) == (400, None)
    raw = net.a.request("POST", "/v1/txs/batch", {"raw": [net.pay.raw.hex()]})
    assert _strict(M.SubmitTxBatchResponse, raw).results[0].status == 202

    best_hash, best_height = net.a.best()
    gone = api.admin("invalidate", best_hash)
    assert isinstance(gone, M.AdminResponse)
    assert (gone.changed, gone.height) == (True, best_height - 1)
    back = api.admin("reconsider", best_hash)
    assert (back.best_milestone, back.height, back.changed) == (best_hash, best_height, True)


async def test_the_asyncio_client_reads_the_same_models(net: Net) -> None:
    a = net.a
    async with NodeApi(a.url, token_file=a.datadir / "api.token") as api:
        answers: list[BaseModel | list[Any]] = [
            await api.status(),
            await api.block(net.milestone),
            await api.milestones(0, 2),
            await api.dag(0, 2),
            await api.lookup(net.milestone),
            await api.tx(net.pay.txid.hex()),
            await api.address(FAUCET_ADDRESS.hex()),
            await api.mempool(),
            await api.peers(),
            await api.template(root=net.milestone),
        ]
        assert await api.level_set(1) == a.api.level_set(1)
        assert await api.block_raw(net.milestone) == a.api.block_raw(net.milestone)
    kinds = [
        M.StatusResponse,
        M.BlockResponse,
        list,
        M.DagResponse,
        M.LookupResponse,
        M.TxResponse,
        M.AddressResponse,
        M.MempoolResponse,
        list,
        M.TemplateResponse,
    ]
    for answer, kind in zip(answers, kinds, strict=True):
        assert isinstance(answer, kind), (answer, kind)
    assert answers[1] == a.api.block(net.milestone)
    assert isinstance(answers[2], list)
    assert all(isinstance(m, M.MilestoneItem) for m in answers[2])
    assert isinstance(answers[8], list)
    assert all(isinstance(p, M.PeerInfo) for p in answers[8])
