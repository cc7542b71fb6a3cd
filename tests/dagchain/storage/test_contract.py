"""The KVStore contract (dagchain/storage/__init__.py), run against MemoryStore and LevelDBStore."""

import pytest

from dagchain.storage import KVStore
from tests.dagchain.storage.conftest import StoreFactory


class Boom(Exception):
    pass


def put_all(store: KVStore, rows: dict[bytes, bytes]) -> None:
    with store.write_batch() as wb:
        for key, value in rows.items():
            wb.put(key, value)


def test_get_returns_what_a_batch_put(store: KVStore) -> None:
    put_all(store, {b"a": b"1", b"b\x00": b""})
    assert store.get(b"a") == b"1"
    assert store.get(b"b\x00") == b""
    assert store.get(b"missing") is None


def test_put_overwrites_and_delete_removes(store: KVStore) -> None:
    put_all(store, {b"k": b"old", b"gone": b"x"})
    with store.write_batch() as wb:
        wb.put(b"k", b"new")
        wb.delete(b"gone")
        wb.delete(b"never-existed")
    assert (store.get(b"k"), store.get(b"gone")) == (b"new", None)


def test_later_operations_in_a_batch_win(store: KVStore) -> None:
    with store.write_batch() as wb:
        wb.put(b"k", b"1")
        wb.delete(b"k")
        wb.put(b"j", b"1")
        wb.put(b"j", b"2")
    assert (store.get(b"k"), store.get(b"j")) == (None, b"2")


def test_iter_prefix_is_in_ascending_key_order_not_insertion_order(store: KVStore) -> None:
    """A backend iterating a dict in insertion order fails here (STYLE.md rule 9)."""
    keys = [b"p\xff", b"p\x02\x01", b"p", b"q\x00", b"p\x02", b"o\xff", b"p\x00\x00", b"p\x80"]
    for key in keys:  # one batch each: insertion order is the list order
        put_all(store, {key: key[::-1]})
    got = list(store.iter_prefix(b"p"))
    want = sorted(k for k in keys if k.startswith(b"p"))
    assert [k for k, _ in got] == want
    assert all(v == k[::-1] for k, v in got)


def test_iter_prefix_sees_the_latest_batch(store: KVStore) -> None:
    put_all(store, {b"x1": b"a", b"x3": b"c"})
    assert [k for k, _ in store.iter_prefix(b"x")] == [b"x1", b"x3"]
    with store.write_batch() as wb:
        wb.put(b"x2", b"b")
        wb.delete(b"x1")
    assert list(store.iter_prefix(b"x")) == [(b"x2", b"b"), (b"x3", b"c")]


def test_empty_prefix_iterates_every_key_in_order(store: KVStore) -> None:
    put_all(store, {b"\xff": b"", b"\x00": b"", b"m": b""})
    assert [k for k, _ in store.iter_prefix(b"")] == [b"\x00", b"m", b"\xff"]


def test_prefix_with_no_match_yields_nothing(store: KVStore) -> None:
    put_all(store, {b"a": b"1"})
    assert list(store.iter_prefix(b"b")) == []
    assert list(store.iter_prefix(b"ab")) == []


def test_an_exception_inside_a_batch_writes_nothing(store: KVStore) -> None:
    """All-or-nothing (§12): a failure halfway through a block's batch leaves no trace."""
    put_all(store, {b"keep": b"1", b"del": b"2"})

    def fail_halfway() -> None:
        with store.write_batch() as wb:
            wb.put(b"new", b"x")
            wb.put(b"keep", b"changed")
            wb.delete(b"del")
            raise Boom

    with pytest.raises(Boom):
        fail_halfway()
    assert list(store.iter_prefix(b"")) == [(b"del", b"2"), (b"keep", b"1")]


def test_large_batch_is_applied_whole(store: KVStore) -> None:
    rows = {i.to_bytes(4, "big"): bytes(i % 251) for i in range(5_000)}
    put_all(store, rows)
    assert dict(store.iter_prefix(b"")) == rows


def test_rows_survive_close_and_reopen(open_store: StoreFactory) -> None:
    """Only meaningful for disk backends; MemoryStore's factory returns the same object."""
    store = open_store()
    put_all(store, {b"a": b"1", b"b": b"2"})
    with store.write_batch() as wb:
        wb.delete(b"a")
    store.close()
    again = open_store()
    assert list(again.iter_prefix(b"")) == [(b"b", b"2")]
