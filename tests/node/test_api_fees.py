"""``GET /v1/fees`` (INTERFACES.md, docs/node.md "Fee estimates") on a real node: a devnet
NodeService on LevelDB behind the real app on 127.0.0.1, fed real blocks and txs."""

import json
from pathlib import Path
from typing import Any

from dagchain.fees import _BOUNDS, _bucket, rate_of
from tests.dagchain.chainkit import transfer
from tests.node.test_api_fuzz import BOB, FAUCET_COINS, Api, check, serving

FEE = 3_000
"""The fee of each tx of the made-up busy level set."""


def fees(api: Api) -> dict[str, Any]:
    answer = api.request("GET", "/v1/fees")
    assert check(answer, "/v1/fees") is None
    assert answer.status == 200
    body: dict[str, Any] = json.loads(answer.body)
    return body


def test_a_quiet_node_answers_the_floor_and_the_sample_it_saw(tmp_path: Path) -> None:
    """One pool tx became VALID: too few samples to learn from, so any fee the pool takes."""
    with serving(tmp_path) as api:
        body = fees(api)
        assert body == {
            "fee_per_byte": {"1": 0.0, "3": 0.0, "10": 0.0},
            "floor": 0.0,
            "likelihood": 0.9,
            "sample": {"txs": 1, "milestones": api.node.chain.best_height, "window": 100},
        }


def test_txs_seen_valid_within_a_milestone_set_the_estimate(tmp_path: Path) -> None:
    """25 pool txs paying FEE went VALID one milestone after they arrived: that rate suffices."""
    with serving(tmp_path) as api:
        node = api.node
        genesis = node.chain.genesis_id
        carrier = node.blocks[-1]  # the pending block: the next block of the peer chain is on it
        txs = [
            transfer(
                [(genesis, i)],
                [(FAUCET_COINS - FEE, BOB)],
                node.chain.params,
                assigned_to=[carrier.id],
            )
            for i in range(2, 27)
        ]
        for tx in txs:
            node.service.submit_tx(tx.raw)
        node.now_ms += 1_000
        node.mine(carrier.id, txs=txs, ms=True)
        assert not any(tx.txid in node.service.mempool for tx in txs)
        body = fees(api)
        rate = rate_of(FEE, len(txs[0].raw))
        expected = _BOUNDS[_bucket(rate)] / 1000
        assert 0 < expected <= rate / 1000
        assert body["fee_per_byte"] == {"1": expected, "3": expected, "10": expected}
        assert body["sample"]["txs"] == 1 + len(txs)


def test_the_estimate_is_reused_for_a_second_then_computed_again(tmp_path: Path) -> None:
    """It walks the whole pool: a client polling GET /v1/fees costs one walk a second at most."""
    with serving(tmp_path) as api:
        service = api.node.service
        first = service.fee_estimate()
        api.node.now_ms += 999
        assert service.fee_estimate() is first
        api.node.now_ms += 1
        assert service.fee_estimate() is not first
