"""Group commit: several batches of the core written as one store batch (PROTOCOL.md §12, P9).

§12 A1 writes one synced batch per block *before it is acknowledged*; blocks downloaded by P9
are never acknowledged, so "one batch covers a whole level set". :class:`GroupingStore` wraps
the chain's KVStore: outside a group every call goes straight to the wrapped store (the bound
methods are the wrapped store's own, so the pass-through costs nothing); inside
:meth:`GroupingStore.group` each batch the core writes is collected, once its ``with`` block
exits cleanly, into an overlay (key -> value, or None for a delete; the last write of a key
wins), reads see the overlay first, and the overlay is written as one batch (synced, for
LevelDB) when the group ends.

Atomicity: the overlay is the union of complete batches (A1, A2+A3 units), applied in order, so
writing it is exactly the state those batches would have reached one by one; a crash before the
group's write leaves the store where it was when the group began, a crash after it leaves the
whole group. The group is written also when its block raises (the batches collected so far are
complete units, and the in-memory state the core keeps already reflects them).

Rows born and removed inside one group: for the key prefixes the owner names as *put only when
absent* (the chain names ``p``, storage.schema.PUT_ONLY_WHEN_ABSENT), a key whose first write in
the group is a put did not exist before the group, so if the group later deletes it the store
needs neither the put nor a deletion marker: the key leaves the overlay. A block downloaded by P9
is pending from its A1 batch until its milestone's A3 batch, usually in the same group, so this
saves a LevelDB deletion marker per block, which would otherwise be carried down through every
compaction level (docs/protocol.md decision 22).
"""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import final

from dagchain.storage import KVStore, WriteBatch


@final
class _Collector:
    """A batch inside a group: puts and deletes, merged into the overlay on a clean exit."""

    __slots__ = ("_owner", "gone", "ops", "put")

    def __init__(self, owner: "GroupingStore") -> None:
        ops: dict[bytes, bytes | None] = {}
        self._owner = owner
        self.ops = ops
        self.gone: list[bytes] = []  # keys born and removed inside the group: leave the overlay
        self.put: Callable[[bytes, bytes], None] = ops.__setitem__

    def delete(self, key: bytes) -> None:
        """Remove ``key`` when the group is written."""
        ops = self.ops
        owner = self._owner
        if key.startswith(owner.put_only_when_absent):
            pending = ops[key] if key in ops else owner._pending(key)
            if pending is None:  # the group's first write of the key, or deleted again
                owner._erased.add(key)
            elif key not in owner._erased:  # first written by a put: absent before the group
                ops.pop(key, None)
                self.gone.append(key)
                return
        ops[key] = None

    def __enter__(self) -> WriteBatch:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self._owner._merge(self.ops, self.gone)


@final
class GroupingStore:
    """A KVStore over ``inner`` whose batches can be grouped into one (see the module doc).

    ``batches_grouped`` and ``groups_written`` count, for tests and benchmarks, the batches
    collected inside groups and the store batches the groups became.
    """

    def __init__(self, inner: KVStore, put_only_when_absent: tuple[bytes, ...] = ()) -> None:
        self.inner = inner
        self.put_only_when_absent = put_only_when_absent
        """Key prefixes the owner puts only when the key is absent (see the module doc)."""
        self._overlay: dict[bytes, bytes | None] | None = None
        self._erased: set[bytes] = set()  # such keys the group deleted before any put of theirs
        self.batches_grouped = 0
        self.groups_written = 0
        self.get: Callable[[bytes], bytes | None] = inner.get
        self.iter_prefix: Callable[[bytes], Iterator[tuple[bytes, bytes]]] = inner.iter_prefix
        self.write_batch: Callable[[], AbstractContextManager[WriteBatch]] = inner.write_batch

    @property
    def grouping(self) -> bool:
        """True inside :meth:`group`."""
        return self._overlay is not None

    @contextmanager
    def group(self) -> Iterator[None]:
        """Collect every batch written inside the block; write them as one batch at its end.

        Nested groups join the outermost one.

        Raises:
            StorageError: the store failed to write the group (the in-memory state of the core
                is then ahead of the store: reopen the chain, §12 recovery).
        """
        if self._overlay is not None:
            yield
            return
        overlay: dict[bytes, bytes | None] = {}
        self._overlay = overlay
        inner = self.inner
        self.get = self._overlay_get
        self.iter_prefix = self._overlay_iter_prefix
        self.write_batch = self._collect
        try:
            yield
        finally:
            self._overlay = None
            self._erased = set()
            self.get = inner.get
            self.iter_prefix = inner.iter_prefix
            self.write_batch = inner.write_batch
            if overlay:
                with inner.write_batch() as wb:
                    put, delete = wb.put, wb.delete
                    for key, value in overlay.items():
                        if value is None:
                            delete(key)
                        else:
                            put(key, value)
                self.groups_written += 1

    def _collect(self) -> _Collector:
        return _Collector(self)

    def _merge(self, ops: dict[bytes, bytes | None], gone: list[bytes]) -> None:
        overlay = self._overlay
        if overlay is None:  # pragma: no cover - a batch may not outlive its group
            raise RuntimeError("a grouped batch was closed after its group ended")
        for key in gone:
            overlay.pop(key, None)
        overlay.update(ops)
        self.batches_grouped += 1

    def _pending(self, key: bytes) -> bytes | None:
        """The group's last write of ``key``: its value, or None if deleted or not written."""
        overlay = self._overlay
        return None if overlay is None else overlay.get(key)

    def _overlay_get(self, key: bytes) -> bytes | None:
        overlay = self._overlay
        if overlay is not None and key in overlay:
            return overlay[key]
        return self.inner.get(key)

    def _overlay_iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The wrapped store's rows under ``prefix`` with the overlay's writes merged in."""
        overlay = self._overlay or {}
        mine = sorted((k, v) for k, v in overlay.items() if k.startswith(prefix))
        i, n = 0, len(mine)
        for key, value in self.inner.iter_prefix(prefix):
            while i < n and mine[i][0] < key:
                okey, ovalue = mine[i]
                i += 1
                if ovalue is not None:
                    yield okey, ovalue
            if i < n and mine[i][0] == key:
                ovalue = mine[i][1]
                i += 1
                if ovalue is not None:
                    yield key, ovalue
                continue
            yield key, value
        for okey, ovalue in mine[i:]:
            if ovalue is not None:
                yield okey, ovalue

    def close(self) -> None:
        """Close the wrapped store."""
        self.inner.close()


__all__ = ["GroupingStore"]
