"""PROTOCOL.md v2.1 and docs/protocol.md decision 31: a store remembers the S1-S5 parameters its
verdicts were computed with, and a v2 devnet store (c = 1/1) is refused, not reinterpreted.

v2.1 changed devnet's c from 1/1 to 1/16, so a block's VALID set can differ: the level-set deltas
a v2 devnet node stored do not hold under v2.1.
"""

import pytest

from dagchain.chain import Chain
from dagchain.errors import StorageError
from dagchain.params import DEVNET, MAINNET, SIM, ConsensusParams
from dagchain.storage import schema as S
from dagchain.storage.memory import MemoryStore
from tests.dagchain.chainkit import Node, key, transfer

FAUCET_COINS = 10**14
_, ALICE = key(2)
_, BOB = key(3)


def written_by(params: ConsensusParams, *, v2: bool = False) -> MemoryStore:
    """A store a node of ``params`` wrote (a peer chain, a VALID tx); ``v2``: without the
    ``META_SORTITION`` row, as every store written before v2.1."""
    node = Node(params)
    last = node.warm_peer_chain(ALICE)[-1]
    on = [last.id] if params.sortition_weighting == "uniform" else []  # share: S2 decides
    pay = transfer([(node.genesis, 0)], [(FAUCET_COINS, BOB)], params, assigned_to=on)
    node.mine(last.id, txs=[pay], ms=True)
    if v2:
        with node.store.write_batch() as wb:
            wb.delete(S.META_SORTITION)
    return node.store


def test_a_new_store_records_k_c_and_the_weighting_and_reopens() -> None:
    store = written_by(DEVNET)
    raw = store.get(S.META_SORTITION)
    assert raw is not None
    assert S.decode_row(raw, S.META_SORTITION) == [4, 1, 16, b"uniform"]
    rows = store.snapshot()
    Chain(DEVNET, store)
    assert store.snapshot() == rows


def test_a_v2_devnet_store_is_refused_with_one_line_saying_to_wipe_it() -> None:
    """Devnet v2 (c = 1/1) wrote no row: v2.1 (c = 1/16) refuses it and changes nothing."""
    store = written_by(DEVNET.replace(sortition_c_den=1), v2=True)
    rows = store.snapshot()
    with pytest.raises(StorageError) as err:
        Chain(DEVNET, store)
    message = str(err.value)
    assert "\n" not in message
    assert "PROTOCOL.md v2" in message
    assert "K = 4, c = 1/1, uniform;" in message
    assert "c = 1/16" in message
    assert "wipe this data directory" in message
    assert store.snapshot() == rows


def test_a_store_without_the_row_opens_where_v2_1_changed_nothing() -> None:
    """Mainnet, testnet and sim kept their K, c and weighting: their v2 stores still open, and
    opening writes nothing (a devnet variant with v2's own values opens too)."""
    for params in (MAINNET, SIM, DEVNET.replace(sortition_c_den=1)):
        store = MemoryStore()
        Chain(params, store)
        with store.write_batch() as wb:
            wb.delete(S.META_SORTITION)
        rows = store.snapshot()
        Chain(params, store)
        assert store.snapshot() == rows, params.network_id


@pytest.mark.parametrize(
    "changes",
    [{"sortition_c_den": 1}, {"sortition_warmup": 5}, {"sortition_weighting": "share"}],
)
def test_a_store_written_with_other_sortition_parameters_is_refused(
    changes: dict[str, object],
) -> None:
    store = written_by(DEVNET.replace(**changes))
    with pytest.raises(StorageError, match=r"written with sortition K = \d+, c = 1/\d+, \w+ while"):
        Chain(DEVNET, store)
