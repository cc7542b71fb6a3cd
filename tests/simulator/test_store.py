"""SimStore keeps the KVStore contract of dagchain.storage (in-order writes, all or nothing)."""

import pytest

from dagchain.storage.memory import MemoryStore
from simulator.store import SimStore


def test_batches_end_like_memory_store_batches() -> None:
    sim, mem = SimStore(), MemoryStore()
    for store in (sim, mem):
        with store.write_batch() as wb:
            wb.put(b"b1", b"x")
            wb.put(b"a2", b"y")
            wb.put(b"a1", b"z")
            wb.delete(b"a1")  # a later delete wins
            wb.put(b"c", b"1")
        with store.write_batch() as wb:
            wb.delete(b"c")
            wb.put(b"c", b"2")  # a later put wins
            wb.delete(b"missing")
            wb.put(b"a3", b"w")
    assert sim.snapshot() == mem.snapshot() == {b"b1": b"x", b"a2": b"y", b"c": b"2", b"a3": b"w"}
    assert (
        list(sim.iter_prefix(b"a"))
        == list(mem.iter_prefix(b"a"))
        == [
            (b"a2", b"y"),
            (b"a3", b"w"),
        ]
    )
    assert sim.get(b"a2") == b"y"
    assert sim.get(b"a1") is None


def _write_then_fail(store: SimStore) -> None:
    with store.write_batch() as wb:
        wb.put(b"k", b"v")
        raise RuntimeError("boom")


def test_a_failed_batch_writes_nothing() -> None:
    store = SimStore()
    with pytest.raises(RuntimeError, match="boom"):
        _write_then_fail(store)
    assert store.snapshot() == {}
