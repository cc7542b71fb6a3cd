"""E7: the spliced stripped encoding equals re-encoding the stripped tx, for any transaction."""

import pytest
from hypothesis import given

from dagchain.transactions import Transaction, _stripped_by_packing, stripped_encoding
from tests.dagchain.strategies import transactions


@pytest.mark.property
@given(tx=transactions())
def test_e7_stripped_encoding_matches_reencoding(tx: Transaction) -> None:
    """The fast splice of ``c4 00`` over each signature gives exactly packb(tx') of E7."""
    assert stripped_encoding(tx) == _stripped_by_packing(tx)


def test_e7_stripped_encoding_with_an_array16_of_inputs() -> None:
    """Sixteen or more inputs use a 3-byte array header; large out_index values use uint32."""
    from dagchain.transactions import TxIn, TxKind, TxOut, make_transaction
    from dagchain.types import Address, TxId

    inputs = [
        TxIn(TxId(bytes([i]) * 32), i * 70_000, bytes([i + 1]) * 32, bytes([i + 2]) * 64)
        for i in range(20)
    ]
    tx = make_transaction(TxKind.TRANSFER, inputs, [TxOut(5, Address(bytes(32)))])
    assert stripped_encoding(tx) == _stripped_by_packing(tx)
