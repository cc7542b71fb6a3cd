"""SimStore: the KVStore of a simulated node, a plain dict with cheap batches.

It holds exactly the rows a ``MemoryStore`` would hold (tests/simulator compare them byte for
byte); it differs only in cost. A simulated node never reopens its store, and a running ``Chain``
iterates key prefixes only while it opens an empty store, so no sorted key index is kept: the
rare ``iter_prefix`` sorts the matching keys on demand. A batch collects its writes in a dict
(the last write of a key wins, as when the writes are applied in order) and merges it into the
data with one ``dict.update`` when its ``with`` block exits cleanly; nothing is applied if it
raises. No generator-based context manager and no Python-level ``put`` per row: puts go straight
to ``dict.__setitem__``.

Rows shared between nodes (:class:`RowInterner`): the full nodes of one run that follow the same
best chain write the same rows, byte for byte, each as its own key and value objects. Stores made
with one interner keep one object per distinct key and per distinct value instead (the dicts and
their contents are unchanged; only which equal ``bytes`` object a row holds differs).

Rows most stores hold (:meth:`RowInterner.merged`, issue 23 item 2): a row set many stores
write unchanged (``dagchain.caches.SharedResults``: a milestone's ledger rows, a block's bytes
and tx index rows) is merged by each store's batch at once; once more than half the stores of
the interner have merged it, its rows move into the interner's one ``base`` dict and each store
keeps in its own dict only what differs from the base (a row it changed since, a None for a base
row it has deleted, and, in a store that has not merged the set yet, what it read before: the
old value, or a None). A store that merges a set already in the base writes only what differs
from it (:meth:`SimStore.merge_over_base`). Every read is what it was
(tests/simulator/test_store.py replays the same writes into MemoryStores and compares); a
store's own dict holds only the rows most stores have not merged yet and its own (block meta
with its sequence numbers, pending rows, rows of a branch only it follows or not yet caught up).
"""

import sys
from collections.abc import Callable, Iterator
from typing import final


@final
class RowInterner:
    """The one ``bytes`` object of each distinct key and value in the stores that share it.

    An entry nobody else holds any more (every store deleted the row) is swept once the table
    has doubled since the last sweep, so the table stays proportional to the live rows.
    """

    __slots__ = (
        "_in_base",
        "_next_sweep",
        "_pending",
        "_shared",
        "base",
        "intern",
        "stores",
        "table",
    )

    MIN_SWEEP = 1 << 16

    def __init__(self) -> None:
        self.table: dict[bytes, bytes] = {}
        self.intern: Callable[[bytes, bytes], bytes] = self.table.setdefault
        self._next_sweep = self.MIN_SWEEP
        self._shared: dict[
            int, tuple[dict[bytes, bytes | None], dict[bytes, bytes | None], list[bytes]]
        ] = {}
        self.base: dict[bytes, bytes] = {}
        """Rows every store made with this interner holds (see :meth:`merged`): one dict."""
        self.stores: list[SimStore] = []
        """The stores that share it, in creation order."""
        self._pending: dict[int, tuple[dict[bytes, bytes | None], set[int]]] = {}
        """Shared row sets (by identity) not yet in the base: which stores merged them."""
        self._in_base: dict[int, dict[bytes, bytes | None]] = {}
        """The last shared row sets moved into the base (by identity), for the stores that
        merge them afterwards (:meth:`in_base`)."""

    def rows(self, ops: dict[bytes, bytes | None]) -> dict[bytes, bytes | None]:
        """``ops`` with each key and value replaced by its shared object."""
        intern = self.intern
        out: dict[bytes, bytes | None] = {}
        for k, v in ops.items():
            if v is None:  # not interned: ``del`` finds the stored key by equality
                out[k] = None
            else:
                out[intern(k, k)] = intern(v, v)
        if len(self.table) >= self._next_sweep:
            self.sweep()
        return out

    def shared_rows(
        self, ops: dict[bytes, bytes | None]
    ) -> tuple[dict[bytes, bytes | None], list[bytes]]:
        """:meth:`rows` of a dict many stores merge unchanged (a shared result), and its
        deleted keys: computed once per dict (the last 64 are remembered by identity)."""
        found = self._shared.get(id(ops))
        if found is not None and found[0] is ops:
            return found[1], found[2]
        out = self.rows(ops)
        deletes = [k for k, v in out.items() if v is None]
        self._shared[id(ops)] = (ops, out, deletes)
        if len(self._shared) > 64:
            del self._shared[next(iter(self._shared))]
        return out, deletes

    def in_base(self, ops: dict[bytes, bytes | None]) -> bool:
        """Has the shared row set ``ops`` moved into :attr:`base` (one of the last 256)?"""
        found = self._in_base.get(id(ops))
        return found is ops

    def merged(self, store: "SimStore", ops: dict[bytes, bytes | None]) -> None:
        """``store`` merged the shared row set ``ops`` (a milestone's rows): once more than half
        the stores have, the rows move into :attr:`base`, and each store keeps in its own dict
        only what differs from the new base (what it changed since, or a row the base no longer
        has: a ``None`` marks a row absent here but present in the base; a store that has not
        merged the set keeps what it read before). What every store reads is unchanged; the
        memory of the rows is paid once instead of once per store that follows the majority."""
        key = id(ops)
        found = self._pending.get(key)
        if found is None or found[0] is not ops:
            found = self._pending[key] = (ops, set())
            if len(self._pending) > 256:  # never merged everywhere: not shared, still correct
                del self._pending[next(iter(self._pending))]
        merged_by = found[1]
        merged_by.add(id(store))
        if 2 * len(merged_by) <= len(self.stores):
            return
        del self._pending[key]
        self._in_base[key] = ops
        if len(self._in_base) > 256:
            del self._in_base[next(iter(self._in_base))]
        rows, _ = self.shared_rows(ops)
        base = self.base
        for each in self.stores:
            each.absorb(rows, base)
        for k, v in rows.items():
            if v is None:
                base.pop(k, None)
            else:
                base[k] = v

    def sweep(self) -> int:
        """Drop the entries only the table holds; how many were dropped."""
        table, refs = self.table, sys.getrefcount
        # the table holds an entry twice (key and value); getrefcount's argument is one more
        dead = [k for k in table if refs(k) <= 4]
        for k in dead:
            del table[k]
        self._next_sweep = max(self.MIN_SWEEP, 2 * len(table))
        return len(dead)


@final
class SimBatch:
    """Puts and deletes of one batch; applied to the store's dict on a clean exit."""

    __slots__ = ("_deletes", "_merged", "_store", "ops", "put")

    def __init__(self, store: "SimStore") -> None:
        ops: dict[bytes, bytes | None] = {}
        self._store = store
        self._deletes = False
        self._merged: list[dict[bytes, bytes | None]] = []
        self.ops = ops
        self.put: Callable[[bytes, bytes], None] = ops.__setitem__

    def delete(self, key: bytes) -> None:
        """Remove ``key`` when the batch commits."""
        self.ops[key] = None
        self._deletes = True

    def merge(self, rows: dict[bytes, bytes | None]) -> None:
        """Every put (value) and delete (None) of ``rows``, a row set many stores write
        unchanged (``dagchain.caches.SharedResults``): ``rows`` is never changed. Its keys are
        not written otherwise in this batch."""
        self._merged.append(rows)

    def __enter__(self) -> "SimBatch":
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            return
        store = self._store
        data, interner = store._data, store._rows
        for shared in self._merged:  # interned and its deletes listed once per run
            if interner is not None and interner.in_base(shared):
                store.merge_over_base(interner.shared_rows(shared)[0])
                continue
            if interner is not None:
                rows, deletes = interner.shared_rows(shared)
            else:
                rows, deletes = shared, [k for k, v in shared.items() if v is None]
            data.update(rows)
            store.drop(deletes)
            if interner is not None:
                interner.merged(store, shared)
        ops = self.ops
        if not ops:
            return
        if interner is not None:
            ops = interner.rows(ops)
        data.update(ops)
        if self._deletes:
            store.drop([k for k, v in ops.items() if v is None])


_MISSING = object()
_COMPACT_BYTES_PER_ROW = 400
"""A store's own dict is rebuilt after an absorb when its table holds more than this many bytes
per row left (a right-sized dict holds 30-60)."""
_COMPACT_FLOOR = 1 << 16


@final
class SimStore:
    """A KVStore in one dict, over the rows shared by every store of its interner (see the
    module doc)."""

    __slots__ = ("_base", "_data", "_rows", "get")

    def __init__(self, rows: RowInterner | None = None) -> None:
        """``rows``: share equal keys and values with the other stores made with it, and the
        rows they all hold (``RowInterner.base``)."""
        self._data: dict[bytes, bytes | None] = {}
        """Own rows; with an interner, over its base: a None is a base row deleted here."""
        self._rows = rows
        if rows is None:
            self._base: dict[bytes, bytes] = {}
            self.get: Callable[[bytes], bytes | None] = self._data.get
        else:
            rows.stores.append(self)
            self._base = base = rows.base
            own = self._data.get

            def get(key: bytes) -> bytes | None:
                value = own(key, _MISSING)
                return base.get(key) if value is _MISSING else value  # type: ignore[return-value]

            self.get = get

    def drop(self, keys: list[bytes]) -> None:
        """Apply a batch's deletes (their None values are in the own dict already)."""
        data, base = self._data, self._base
        for key in keys:
            if key not in base:
                del data[key]  # else the None stays: deleted here, still in the base

    def absorb(self, rows: dict[bytes, bytes | None], base: dict[bytes, bytes]) -> None:
        """``rows`` are about to move into ``base`` (every store merged them): keep reading
        the same values. A row this store holds as the new base will is dropped from its own
        dict; a row it reads from the old base that the new one changes is copied in first."""
        data = self._data
        for k, v in rows.items():
            cur = data.get(k, _MISSING)
            if cur is _MISSING:  # read from the base today
                old = base.get(k)
                if old is None:
                    if v is not None:
                        data[k] = None  # absent here, present in the new base
                elif v is None or (old is not v and old != v):
                    data[k] = old
            elif cur is None:
                if v is None:
                    del data[k]  # absent here and in the new base
            elif cur is v or cur == v:
                del data[k]
        self._compact()

    def _compact(self) -> None:
        """A dict never shrinks on deletes: once the rows of a set that moved to the base have
        left the own dict, its table, sized for them, would stay. Rebuild it in place (the same
        object: ``get`` binds it) when it holds far more than its rows need."""
        data = self._data
        if sys.getsizeof(data) > _COMPACT_BYTES_PER_ROW * len(data) + _COMPACT_FLOOR:
            rows_left = dict(data)
            data.clear()
            data.update(rows_left)

    def merge_over_base(self, rows: dict[bytes, bytes | None]) -> None:
        """Write ``rows`` (a None deletes), holding in the own dict only what differs from the
        base: for a shared row set already in the base, whose rows this store may hold as
        overrides (what it read before the set moved there)."""
        data, base = self._data, self._base
        for k, v in rows.items():
            current = base.get(k, _MISSING)
            if v is None:
                if current is _MISSING:
                    data.pop(k, None)
                else:
                    data[k] = None
            elif current is v or current == v:
                data.pop(k, None)
            else:
                data[k] = v
        self._compact()

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Ascending (key, value) pairs under ``prefix`` (a snapshot of the keys at call time)."""
        keys = {k for k in self._data if k.startswith(prefix)}
        keys.update(k for k in self._base if k.startswith(prefix))
        get = self.get
        for key in sorted(keys):
            value = get(key)
            if value is not None:
                yield key, value

    def write_batch(self) -> SimBatch:
        """Collect puts and deletes; apply them when the ``with`` block exits cleanly."""
        return SimBatch(self)

    def snapshot(self) -> dict[bytes, bytes]:
        """A copy of every key and value (tests compare states byte for byte)."""
        out = dict(self._base)
        for key, value in self._data.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def close(self) -> None:
        """Nothing to release."""


__all__ = ["RowInterner", "SimBatch", "SimStore"]
