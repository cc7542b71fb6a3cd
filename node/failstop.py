"""Stop the node at once when the disk refuses a write (docs/node.md, "Durability").

A failed batch write (EIO, a full or dead disk) leaves the chain's in-memory state ahead of the
store, and LevelDB keeps refusing writes after its first failure, so nothing the node does next
can be made durable. Like Bitcoin Core on a failed block write, and PostgreSQL, which since its
"fsyncgate" stops rather than retry a failed fsync, the node stops: one line on stderr, exit
status 1, no further acknowledgement. Restarting on the same datadir recovers from the last
synced batch (the power-loss tests cut at every such point).

The stop is immediate (``os._exit``), not the SIGTERM shutdown: the write fails deep inside a
peer's or a request's handler, each of which would log its own traceback, and the clean
shutdown's last step (close the store) has nothing left to save.
"""

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import NoReturn, final

from dagchain.errors import StorageError
from dagchain.storage import KVStore, WriteBatch

__all__ = ["EXIT_STORAGE_FAILURE", "FailStopStore", "exit_on_write_error"]

EXIT_STORAGE_FAILURE = 1
"""Exit status after a failed write: a runtime failure, not a user error (2)."""


def exit_on_write_error(error: StorageError) -> NoReturn:
    """Print one line naming the failed write and end the process at once."""
    logging.shutdown()  # flush what was logged before
    print(
        f"dagchain-node: error: {error}; stopped (nothing after the last durable write was "
        "acknowledged): free or replace the disk, then start the node again",
        file=sys.stderr,
        flush=True,
    )
    os._exit(EXIT_STORAGE_FAILURE)


@final
class FailStopStore:
    """A :class:`KVStore` that hands a failed batch write to ``on_write_error`` (which stops
    the node); reads and everything else go to the wrapped store unchanged."""

    __slots__ = ("_on_write_error", "_store")

    def __init__(self, store: KVStore, on_write_error: Callable[[StorageError], NoReturn]) -> None:
        self._store = store
        self._on_write_error = on_write_error

    def get(self, key: bytes) -> bytes | None:
        """The wrapped store's value of ``key``."""
        return self._store.get(key)

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The wrapped store's rows under ``prefix``."""
        return self._store.iter_prefix(prefix)

    def write_batch(self) -> AbstractContextManager[WriteBatch]:
        """The wrapped store's batch; a failure to write it goes to ``on_write_error``."""
        return _Batch(self._store.write_batch(), self._on_write_error)

    def close(self) -> None:
        """Close the wrapped store."""
        self._store.close()


@final
class _Batch:
    """The wrapped batch context; a class, as one is opened per block (its cost counts)."""

    __slots__ = ("_inner", "_on_write_error")

    def __init__(
        self,
        inner: AbstractContextManager[WriteBatch],
        on_write_error: Callable[[StorageError], NoReturn],
    ) -> None:
        self._inner = inner
        self._on_write_error = on_write_error

    def __enter__(self) -> WriteBatch:
        return self._inner.__enter__()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool | None:
        try:
            return self._inner.__exit__(exc_type, exc, tb)  # type: ignore[arg-type]
        except StorageError as error:
            self._on_write_error(error)
