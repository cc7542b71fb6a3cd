"""E5: the two paths of ``tx_from_obj`` agree (a fast path for speed, PROTOCOL.md §2.2).

Decoders unpack arrays as tuples and type-check the common shape inline (fast path); any other
shape, lists included, goes through the field-by-field checks that name the failure. Both must
build the same transaction from the same object and reject the same malformed ones.
"""

from typing import Any

import msgpack
import pytest
from hypothesis import given

from dagchain.encoding import unpack_canonical
from dagchain.errors import EncodingError as _EncodingError
from dagchain.transactions import Transaction, tx_from_obj
from tests.dagchain.strategies import transactions


def _as_lists(obj: Any) -> Any:
    return [_as_lists(x) for x in obj] if isinstance(obj, tuple | list) else obj


@pytest.mark.property
@given(tx=transactions())
def test_e5_tuple_and_list_shapes_decode_to_the_same_transaction(tx: Transaction) -> None:
    """The fast (tuples) and checked (lists) paths give equal txs, with the same raw and txid."""
    as_tuples = unpack_canonical(tx.raw, len(tx.raw), tuples=True)
    fast = tx_from_obj(as_tuples, tx.raw)
    checked = tx_from_obj(_as_lists(as_tuples), tx.raw)
    assert fast == checked == tx
    assert fast.txid == checked.txid == tx.txid
    assert tx_from_obj(as_tuples).raw == tx.raw  # raw re-packed from tuples is canonical too


GOOD_INPUT = (bytes(32), 0, bytes(32), bytes(64))
GOOD_OUTPUT = (5, bytes(32))


@pytest.mark.parametrize(
    "obj",
    [
        (1, 0, (GOOD_INPUT,)),  # three fields
        (1, True, (GOOD_INPUT,), (GOOD_OUTPUT,)),  # a bool kind
        (1, 0, (GOOD_INPUT[:3],), (GOOD_OUTPUT,)),  # a short input
        (1, 0, ((bytes(31), 0, bytes(32), bytes(64)),), (GOOD_OUTPUT,)),  # 31-byte txid
        (1, 0, ((bytes(32), 2**32, bytes(32), bytes(64)),), (GOOD_OUTPUT,)),  # index > u32
        (1, 0, ((bytes(32), 0, bytes(32), bytes(63)),), (GOOD_OUTPUT,)),  # 63-byte signature
        (1, 0, ((bytes(32), 0, "k" * 32, bytes(64)),), (GOOD_OUTPUT,)),  # a str key
        (1, 0, (GOOD_INPUT,), ((2**64, bytes(32)),)),  # amount > u64
        (1, 0, (GOOD_INPUT,), ((5, bytes(33)),)),  # 33-byte address
        (1, 0, (GOOD_INPUT,), (GOOD_OUTPUT, {b"a": 1})),  # a map as an output
    ],
)
def test_e5_both_paths_reject_a_malformed_tx(obj: Any) -> None:
    """Wrong shapes, widths or lengths raise EncodingError whether arrays are tuples or lists."""
    with pytest.raises(_EncodingError):
        tx_from_obj(obj, b"raw")
    with pytest.raises(_EncodingError):
        tx_from_obj(_as_lists(obj), b"raw")


def test_e5_a_msgpack_str_is_not_a_bin() -> None:
    """A str where a bin belongs is rejected after canonical unpacking (E5), in tuple form."""
    raw = msgpack.packb([1, 0, [[bytes(32), 0, "k" * 32, bytes(64)]], [[5, bytes(32)]]])
    obj = unpack_canonical(raw, len(raw), tuples=True)
    with pytest.raises(_EncodingError):
        tx_from_obj(obj, raw)
