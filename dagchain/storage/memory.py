"""In-memory KVStore: a dict with sorted prefix iteration and all-or-nothing batches."""

import bisect
from collections.abc import Iterator
from contextlib import contextmanager


class _Batch:
    __slots__ = ("ops",)

    def __init__(self) -> None:
        self.ops: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.ops.append((key, value))

    def delete(self, key: bytes) -> None:
        self.ops.append((key, None))


class MemoryStore:
    """A KVStore in a dict; a batch is applied only if its ``with`` block raises nothing."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted; may hold deleted keys until the next merge
        self._added: set[bytes] = set()  # keys new since the last merge
        self._stale = False  # a key was deleted since the last merge
        self.batches_written = 0

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None."""
        return self._data.get(key)

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Ascending (key, value) pairs under ``prefix`` (a snapshot of the keys at call time)."""
        if self._added or self._stale:
            self._merge_keys()
        keys = self._keys
        start = bisect.bisect_left(keys, prefix)
        for i in range(start, len(keys)):
            key = keys[i]
            if not key.startswith(prefix):
                break
            value = self._data.get(key)
            if value is not None:
                yield key, value

    @contextmanager
    def write_batch(self) -> Iterator[_Batch]:
        """Collect puts and deletes; apply them in order when the block exits cleanly."""
        batch = _Batch()
        yield batch
        data, added = self._data, self._added
        for key, value in batch.ops:
            if value is None:
                if data.pop(key, None) is not None:
                    self._stale = True
            else:
                if key not in data:
                    added.add(key)
                data[key] = value
        self.batches_written += 1

    def _merge_keys(self) -> None:
        """Merge new keys into the sorted list: two sorted runs, so the sort is nearly linear."""
        data, added = self._data, self._added
        keys = [k for k in self._keys if k in data and k not in added]
        keys.extend(sorted(k for k in added if k in data))
        keys.sort()
        self._keys = keys
        self._added = set()
        self._stale = False

    def snapshot(self) -> dict[bytes, bytes]:
        """A copy of every key and value (tests compare states byte for byte)."""
        return dict(self._data)

    def close(self) -> None:
        """Nothing to release."""


__all__ = ["MemoryStore"]
