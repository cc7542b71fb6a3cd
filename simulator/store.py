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

    __slots__ = ("_next_sweep", "_shared", "intern", "table")

    MIN_SWEEP = 1 << 16

    def __init__(self) -> None:
        self.table: dict[bytes, bytes] = {}
        self.intern: Callable[[bytes, bytes], bytes] = self.table.setdefault
        self._next_sweep = self.MIN_SWEEP
        self._shared: dict[
            int, tuple[dict[bytes, bytes | None], dict[bytes, bytes | None], list[bytes]]
        ] = {}

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

    __slots__ = ("_borrowed", "_data", "_deletes", "_rows", "ops", "put")

    def __init__(self, data: dict[bytes, bytes], rows: RowInterner | None = None) -> None:
        ops: dict[bytes, bytes | None] = {}
        self._data = data
        self._rows = rows
        self._deletes = False
        self._borrowed = False
        """``ops`` is a merged dict other batches share: copied before any change."""
        self.ops = ops
        self.put: Callable[[bytes, bytes], None] = ops.__setitem__

    def delete(self, key: bytes) -> None:
        """Remove ``key`` when the batch commits."""
        if self._borrowed:
            self._own()
        self.ops[key] = None
        self._deletes = True

    def merge(self, rows: dict[bytes, bytes | None]) -> None:
        """Every put (value) and delete (None) of ``rows`` at once; ``rows`` is not changed and
        may be merged into many batches (``dagchain.caches.SharedResults.apply_rows``)."""
        if self.ops:
            if self._borrowed:
                self._own()
            self.ops.update(rows)
        else:
            self.ops = rows
            self._borrowed = True
            self.put = self._put_borrowed
        self._deletes = True

    def _own(self) -> None:
        self.ops = dict(self.ops)
        self.put = self.ops.__setitem__
        self._borrowed = False

    def _put_borrowed(self, key: bytes, value: bytes) -> None:
        self._own()
        self.ops[key] = value

    def __enter__(self) -> "SimBatch":
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            return
        ops, data = self.ops, self._data
        if self._borrowed:  # a shared result: interned and its deletes listed once per run
            if self._rows is not None:
                ops, deletes = self._rows.shared_rows(ops)
            else:
                deletes = [k for k, v in ops.items() if v is None]
            data.update(ops)  # type: ignore[arg-type]  # the None values are removed just below
            for key in deletes:
                del data[key]
            return
        if self._rows is not None:
            ops = self._rows.rows(ops)
        data.update(ops)  # type: ignore[arg-type]  # the None values are removed just below
        if self._deletes:
            for key in [k for k, v in ops.items() if v is None]:
                del data[key]


@final
class SimStore:
    """A KVStore in one dict (see the module doc)."""

    __slots__ = ("_data", "_rows", "get")

    def __init__(self, rows: RowInterner | None = None) -> None:
        """``rows``: share equal keys and values with the other stores made with it."""
        self._data: dict[bytes, bytes] = {}
        self._rows = rows
        self.get: Callable[[bytes], bytes | None] = self._data.get

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Ascending (key, value) pairs under ``prefix`` (a snapshot of the keys at call time)."""
        data = self._data
        for key in sorted(k for k in data if k.startswith(prefix)):
            value = data.get(key)
            if value is not None:
                yield key, value

    def write_batch(self) -> SimBatch:
        """Collect puts and deletes; apply them when the ``with`` block exits cleanly."""
        return SimBatch(self._data, self._rows)

    def snapshot(self) -> dict[bytes, bytes]:
        """A copy of every key and value (tests compare states byte for byte)."""
        return dict(self._data)

    def close(self) -> None:
        """Nothing to release."""


__all__ = ["RowInterner", "SimBatch", "SimStore"]
