"""The hot-path records (TxIn, TxOut, Transaction) keep value semantics (and Utxo, frozen).

They are slotted dataclasses with ``Final`` fields (read-only under mypy strict) instead of
``frozen=True`` (for speed: docs/benchmarks.md, "Core"); equality, hashing and
``dataclasses.replace`` must behave as for the frozen records they replace (STYLE.md rule 1),
since caches and sets rely on them.
"""

import dataclasses

from dagchain.ledger import Utxo
from dagchain.transactions import TxIn, TxKind, TxOut, make_transaction
from dagchain.types import Address, TxId

A = Address(bytes(range(32)))
T = TxId(bytes(range(1, 33)))


def test_equal_records_hash_equal_and_dedupe_in_sets() -> None:
    """Field-wise ``==`` and ``hash`` (what ``frozen=True, eq=True`` generated)."""
    assert TxIn(T, 1, A, bytes(64)) == TxIn(T, 1, A, bytes(64))
    assert hash(TxIn(T, 1, A, bytes(64))) == hash(TxIn(T, 1, A, bytes(64)))
    assert TxIn(T, 1, A, bytes(64)) != TxIn(T, 2, A, bytes(64))
    assert len({TxOut(5, A), TxOut(5, A), TxOut(6, A)}) == 2
    assert len({Utxo(5, A, 3), Utxo(5, A, 3)}) == 1
    assert {Utxo(5, A, 3): 1}[Utxo(5, A, 3)] == 1


def test_transaction_equality_ignores_the_derived_raw_and_txid() -> None:
    """§2.2: ``raw`` and ``txid`` are derived (compare=False), the fields decide equality."""
    tx = make_transaction(TxKind.TRANSFER, [TxIn(T, 0, A, bytes(64))], [TxOut(5, A)])
    twin = dataclasses.replace(tx, raw=b"", txid=TxId(bytes(32)))
    assert twin == tx
    assert hash(twin) == hash(tx)
    other = dataclasses.replace(tx, outputs=(TxOut(6, A),))
    assert other != tx


def test_replace_builds_a_new_record_and_leaves_the_old_one() -> None:
    """STYLE.md rule 1: copy with ``dataclasses.replace``; the original is unchanged."""
    inp = TxIn(T, 0, A, bytes(64))
    signed = dataclasses.replace(inp, signature=bytes([1]) * 64)
    assert signed.signature == bytes([1]) * 64
    assert inp.signature == bytes(64)
