"""SimStore keeps the KVStore contract of dagchain.storage (in-order writes, all or nothing),
also when stores share their rows through a RowInterner."""

import sys

import pytest

from dagchain.storage.memory import MemoryStore
from simulator.scenario import load_scenario
from simulator.sim_node import SimNode
from simulator.simulation import WALL_FIELDS, Simulation
from simulator.store import RowInterner, SimStore


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


def _write_rows(store: SimStore | MemoryStore, tag: bytes) -> None:
    with store.write_batch() as wb:
        wb.put(b"u" + tag, b"value-" + tag)  # built at run time: a new object per call
        wb.put(b"k" + tag, b"spent")
        wb.put(b"p" + tag, b"")
    with store.write_batch() as wb:
        wb.delete(b"p" + tag)


def test_stores_sharing_an_interner_hold_one_object_per_distinct_row() -> None:
    rows = RowInterner()
    a, b, mem = SimStore(rows), SimStore(rows), MemoryStore()
    for store in (a, b, mem):
        _write_rows(store, bytes([1, 2, 3]))
    assert a.snapshot() == b.snapshot() == mem.snapshot()
    assert list(a.iter_prefix(b"u")) == list(mem.iter_prefix(b"u"))
    (key_a, value_a), (key_b, value_b) = next(a.iter_prefix(b"u")), next(b.iter_prefix(b"u"))
    assert key_a is key_b
    assert value_a is value_b
    # without an interner each store keeps its own objects
    c, d = SimStore(), SimStore()
    _write_rows(c, bytes([1, 2, 3]))
    _write_rows(d, bytes([1, 2, 3]))
    assert next(c.iter_prefix(b"u"))[0] is not next(d.iter_prefix(b"u"))[0]


def test_the_sweep_drops_rows_every_store_deleted_and_keeps_live_ones() -> None:
    rows = RowInterner()
    a, b = SimStore(rows), SimStore(rows)
    for store in (a, b):
        _write_rows(store, b"x")
        _write_rows(store, b"y")
        with store.write_batch() as wb:
            wb.delete(b"ux")
    assert b"ux" in rows.table
    assert rows.sweep() >= 1
    assert b"ux" not in rows.table  # deleted everywhere: gone from the table
    assert b"uy" in rows.table  # live in both stores
    assert a.get(b"uy") == b"value-y"
    assert a.snapshot() == b.snapshot()
    # a row written again after its sweep is shared again
    for store in (a, b):
        _write_rows(store, b"x")
    assert next(a.iter_prefix(b"ux"))[0] is next(b.iter_prefix(b"ux"))[0]


def _store(node: SimNode) -> SimStore:
    store = node.chain.store
    assert isinstance(store, SimStore)
    return store


def test_a_run_is_the_same_with_and_without_shared_rows() -> None:
    scenario = load_scenario(None, ["load.tps=40"], nodes=4, duration_s=8, seed=3)
    shared, own = Simulation(scenario), Simulation(scenario, share_rows=False)
    results = [sim.run() for sim in (shared, own)]
    for sim in (shared, own):
        assert len(sim.observer.chain.state.best) > 1
    snapshots = [[_store(n).snapshot() for n in sim.full_nodes] for sim in (shared, own)]
    assert snapshots[0] == snapshots[1]
    assert results[0].blocks == results[1].blocks
    strip = [{k: v for k, v in r.metrics.items() if k not in WALL_FIELDS} for r in results]
    assert strip[0] == strip[1]
    # the shared run's nodes hold one object per row their stores have in common
    first, second = (_store(n) for n in shared.full_nodes[:2])
    common = set(first.snapshot()) & set(second.snapshot())
    assert common
    keys_a, keys_b = ({k: k for k in s.snapshot()} for s in (first, second))
    assert all(keys_a[k] is keys_b[k] for k in common)


def _merge(store: SimStore | MemoryStore, rows: dict[bytes, bytes | None]) -> None:
    """A shared row set: merged at once by a SimStore, row by row by a MemoryStore."""
    if isinstance(store, SimStore):
        with store.write_batch() as batch:
            batch.merge(rows)
        return
    for key, value in rows.items():
        _put(store, key, value)


def _put(store: SimStore | MemoryStore, key: bytes, value: bytes | None) -> None:
    with store.write_batch() as wb:
        if value is None:
            wb.delete(key)
        else:
            wb.put(key, value)


def test_row_sets_most_stores_merged_move_to_the_shared_base_and_reads_stay_the_same() -> None:
    """RowInterner.merged: once more than half the stores merged a shared row set it lives once,
    in the base; each store reads exactly what a MemoryStore given the same writes reads, before
    and after, whatever it changed in between (a delete of a base row, a put over one, a row set
    it merges only after the set moved to the base, and after later sets moved there too)."""
    rows = RowInterner()
    stores = [SimStore(rows) for _ in range(3)]
    mems = [MemoryStore() for _ in stores]

    def check() -> None:
        for store, mem in zip(stores, mems, strict=True):
            assert store.snapshot() == mem.snapshot()
            assert list(store.iter_prefix(b"u")) == list(mem.iter_prefix(b"u"))
            for key in (b"u1", b"u2", b"u3", b"u4", b"own"):
                assert store.get(key) == mem.get(key)

    first: dict[bytes, bytes | None] = {b"u1": b"one", b"u2": b"two", b"u3": b"three"}
    for i, (store, mem) in enumerate(zip(stores, mems, strict=True)):
        _put(store, b"own", b"%d" % i)
        _put(mem, b"own", b"%d" % i)
        if i == 1:  # this store changes a row of the set before the others merge it
            for s in (store, mem):
                _merge(s, first)
                _put(s, b"u2", b"changed")
        else:
            for s in (store, mem):
                _merge(s, first)
        check()
    assert rows.base == {b"u1": b"one", b"u2": b"two", b"u3": b"three"}  # merged by 2 of 3
    assert b"u1" not in stores[0]._data  # no longer held per store
    assert stores[1]._data[b"u2"] == b"changed"  # what differs stays
    for s in (stores[0], mems[0]):
        _put(s, b"u1", None)  # a delete of a base row
    check()
    second: dict[bytes, bytes | None] = {b"u3": None, b"u4": b"four", b"u1": b"again"}
    for store, mem in zip(stores[:2], mems[:2], strict=True):
        _merge(store, second)
        _merge(mem, second)
    check()
    assert rows.base == {b"u1": b"again", b"u2": b"two", b"u4": b"four"}  # 2 of 3 again
    assert stores[2]._data[b"u4"] is None  # not merged here yet: it still reads no u4
    assert stores[2]._data[b"u3"] == b"three"
    third: dict[bytes, bytes | None] = {b"u4": None, b"u5": b"five"}
    for store, mem in zip(stores[:2], mems[:2], strict=True):
        _merge(store, third)
        _merge(mem, third)
    check()
    for later in (second, third):  # the third store catches up, over a base that moved on
        _merge(stores[2], later)
        _merge(mems[2], later)
        check()
    assert rows.base == {b"u1": b"again", b"u2": b"two", b"u5": b"five"}
    assert all(k not in s._data for s in stores for k in (b"u3", b"u4", b"u5"))


def test_a_store_gives_back_the_table_of_rows_that_moved_to_the_base() -> None:
    """A dict never shrinks on deletes: once a large shared set moves to the base, each store's
    own dict is rebuilt to fit the rows it still holds (the memory per full node between two
    milestones, not only at the peak), and reads stay the same."""
    rows = RowInterner()
    stores = [SimStore(rows) for _ in range(3)]
    big: dict[bytes, bytes | None] = {b"u%06d" % i: b"v%d" % i for i in range(20_000)}
    for store in stores:
        _put(store, b"own", b"mine")
        _merge(store, big)
    assert len(rows.base) == 20_000
    for store in stores:
        assert store._data == {b"own": b"mine"}
        assert sys.getsizeof(store._data) < 70_000  # a 20,000-row table is about 1.3 MB
        assert store.get(b"u000123") == b"v123"
        assert store.get(b"own") == b"mine"
