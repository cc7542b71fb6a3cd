"""The key-value storage protocol the consensus core writes through (PROTOCOL.md §12, STYLE.md 9).

Backends: :class:`dagchain.storage.memory.MemoryStore` (tests, simulator) and, later, a LevelDB
backend. Every state change of the core is one :meth:`KVStore.write_batch` (A1, A2+A3).
"""

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Protocol


class WriteBatch(Protocol):
    """Puts and deletes collected and applied atomically when the batch context exits cleanly."""

    def put(self, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value`` when the batch commits."""

    def delete(self, key: bytes) -> None:
        """Remove ``key`` when the batch commits."""


class KVStore(Protocol):
    """A sorted byte-key store with atomic batches."""

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None."""

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) whose key starts with ``prefix``, in ascending key order."""

    def write_batch(self) -> AbstractContextManager[WriteBatch]:
        """A batch applied all-or-nothing (and durably, for disk backends) on a clean exit."""

    def close(self) -> None:
        """Release the store."""


__all__ = ["KVStore", "WriteBatch"]
