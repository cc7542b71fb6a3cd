"""SimStore: the KVStore of a simulated node, a plain dict with cheap batches.

It holds exactly the rows a ``MemoryStore`` would hold (tests/simulator compare them byte for
byte); it differs only in cost. A simulated node never reopens its store, and a running ``Chain``
iterates key prefixes only while it opens an empty store, so no sorted key index is kept: the
rare ``iter_prefix`` sorts the matching keys on demand. A batch collects its writes in a dict
(the last write of a key wins, as when the writes are applied in order) and merges it into the
data with one ``dict.update`` when its ``with`` block exits cleanly; nothing is applied if it
raises. No generator-based context manager and no Python-level ``put`` per row: puts go straight
to ``dict.__setitem__``.
"""

from collections.abc import Callable, Iterator
from typing import final


@final
class SimBatch:
    """Puts and deletes of one batch; applied to the store's dict on a clean exit."""

    __slots__ = ("_data", "_deletes", "ops", "put")

    def __init__(self, data: dict[bytes, bytes]) -> None:
        ops: dict[bytes, bytes | None] = {}
        self._data = data
        self._deletes = False
        self.ops = ops
        self.put: Callable[[bytes, bytes], None] = ops.__setitem__

    def delete(self, key: bytes) -> None:
        """Remove ``key`` when the batch commits."""
        self.ops[key] = None
        self._deletes = True

    def __enter__(self) -> "SimBatch":
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            return
        ops, data = self.ops, self._data
        data.update(ops)  # type: ignore[arg-type]  # the None values are removed just below
        if self._deletes:
            for key in [k for k, v in ops.items() if v is None]:
                del data[key]


@final
class SimStore:
    """A KVStore in one dict (see the module doc)."""

    __slots__ = ("_data", "get")

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
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
        return SimBatch(self._data)

    def snapshot(self) -> dict[bytes, bytes]:
        """A copy of every key and value (tests compare states byte for byte)."""
        return dict(self._data)

    def close(self) -> None:
        """Nothing to release."""


__all__ = ["SimBatch", "SimStore"]
