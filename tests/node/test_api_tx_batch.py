"""``POST /v1/txs/batch`` (INTERFACES.md): up to 1,000 raw txs, admitted in order, one result each.

The batch must answer every item exactly as ``POST /v1/txs`` answers that item alone at its turn
(§7.5 admission: duplicates, pool conflicts, unconfirmed parents, spent and unknown inputs, T1's
undecodable bytes), leave the mempool as those single submissions leave it, and refuse a body
that is not such a list with one 400 that changes nothing.
"""

import json
from pathlib import Path
from typing import Any

from dagchain.transactions import Transaction, decode_transaction
from tests.dagchain.chainkit import key, transfer
from tests.node.test_api_fuzz import BOB, CAROL, FAUCET_COINS, Api, FuzzNode, check, serving

JSON = {"Content-Type": "application/json"}
BOB_SECRET, _ = key(3)


def items(node: FuzzNode) -> list[str]:
    """Hex items covering every outcome of admission, in an order where each depends on the last."""
    genesis = node.chain.genesis_id
    params = node.chain.params
    first = transfer([(genesis, 3)], [(FAUCET_COINS - 11, BOB)], params)
    rival = transfer([(genesis, 3)], [(FAUCET_COINS - 12, CAROL)], params)
    child = transfer([(first.txid, 0)], [(FAUCET_COINS - 20, CAROL)], params, BOB_SECRET)
    spent = transfer([(genesis, 0)], [(FAUCET_COINS - 13, CAROL)], params)
    later = transfer([(genesis, 4)], [(FAUCET_COINS - 14, CAROL)], params)
    unknown_input, overspend, _ = node.fresh_txs
    txs: list[Transaction] = [first, first, rival, child, unknown_input, overspend, spent]
    return [*(t.raw.hex() for t in txs), "zz", "00", later.raw.hex()]


def post(api: Api, path: str, payload: Any) -> tuple[int, Any]:
    answer = api.request("POST", path, json.dumps(payload).encode(), JSON)
    error = check(answer, path)
    return answer.status, error if error is not None else json.loads(answer.body)


def one_by_one(api: Api, raws: list[str]) -> list[dict[str, Any]]:
    """What ``POST /v1/txs`` answers each item alone, in order, as batch results."""
    results = []
    for text in raws:
        status, body = post(api, "/v1/txs", {"raw": text})
        if status == 202:
            results.append({"txid": body["txid"], "status": 202, "reason": None})
        else:
            txid = None
            if text not in ("zz", "00"):  # decodable items: the id of their bytes
                txid = decode_transaction(bytes.fromhex(text), api.node.chain.params).txid.hex()
            results.append({"txid": txid, "status": status, "reason": body["error"]["code"]})
    return results


def test_batch_answers_each_item_as_post_txs_does_alone_and_leaves_the_same_pool(
    tmp_path: Path,
) -> None:
    for name in ("single", "batch"):
        (tmp_path / name).mkdir()
    with serving(tmp_path / "single") as single:
        raws = items(single.node)
        expected = one_by_one(single, raws)
        single_pool = list(single.node.service.mempool.txids_by_fee_rate())
    with serving(tmp_path / "batch") as api:
        status, body = post(api, "/v1/txs/batch", {"raw": raws})
        assert status == 200
        assert body == {"results": expected}
        assert list(api.node.service.mempool.txids_by_fee_rate()) == single_pool
    statuses = [(r["status"], r["reason"]) for r in expected]
    assert statuses[:4] == [(202, None), (202, None), (409, statuses[2][1]), (409, "missing-input")]
    assert statuses[7:] == [(400, "bad-hex"), (400, "T1"), (202, None)]
    assert {s for s, _ in statuses} == {202, 400, 409}
    assert [r["txid"] is None for r in expected] == [False] * 7 + [True, True, False]
    assert len(single_pool) == 3  # the pool's own tx, the first and the last item


def test_a_body_that_is_not_1_to_1000_hex_items_is_one_400_and_changes_nothing(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as api:
        pool = list(api.node.service.mempool.txids_by_fee_rate())
        valid = api.node.fresh_txs[2].raw.hex()
        payloads: list[Any] = [
            {"raw": valid},
            {"raw": []},
            {"raw": [valid] + ["zz"] * 1000},
            {"raw": [valid, 1]},
            {"raw": [valid], "more": 1},
            [valid],
            {},
        ]
        for payload in payloads:
            status, body = post(api, "/v1/txs/batch", payload)
            assert (status, body["error"]["code"]) == (400, "bad-request"), str(payload)[:40]
        assert post(api, "/v1/txs/batch", "{")[0] == 400
        assert list(api.node.service.mempool.txids_by_fee_rate()) == pool
        status, body = post(api, "/v1/txs/batch", {"raw": ["zz"] * 999 + [valid]})
        assert status == 200
        assert len(body["results"]) == 1000
        assert body["results"][-1]["status"] == 202
        assert api.node.fresh_txs[2].txid in api.node.service.mempool
