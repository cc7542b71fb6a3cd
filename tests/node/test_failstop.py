"""node/failstop.py: a failed batch write stops the node (issue 26; the end-to-end test is
tests/powerloss/test_node.py::test_disk_write_error_during_sync_stops_the_node_with_one_line)."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import pytest

from dagchain.errors import StorageError
from dagchain.storage import WriteBatch
from dagchain.storage.memory import MemoryStore
from node.failstop import FailStopStore


class Stopped(Exception):
    """Raised by the test's stand-in for the process exit."""


def stop(error: StorageError) -> NoReturn:
    raise Stopped(str(error))


class DeadDiskStore:
    """A MemoryStore whose batches fail to write, as LevelDB's do on EIO."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    def get(self, key: bytes) -> bytes | None:
        return self.inner.get(key)

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.inner.iter_prefix(prefix)

    @contextmanager
    def write_batch(self) -> Iterator[WriteBatch]:
        with self.inner.write_batch() as batch:
            yield batch
        raise StorageError("cannot write LevelDB database /x/chain: IO error: EIO")

    def close(self) -> None:
        self.inner.close()


def test_failed_batch_write_goes_to_the_stop_handler() -> None:
    store = FailStopStore(DeadDiskStore(), stop)
    with pytest.raises(Stopped, match="cannot write LevelDB database"), store.write_batch() as wb:
        wb.put(b"k", b"v")


def test_healthy_writes_and_reads_pass_through() -> None:
    inner = MemoryStore()
    store = FailStopStore(inner, stop)
    with store.write_batch() as wb:
        wb.put(b"a1", b"x")
        wb.put(b"b1", b"y")
    assert (store.get(b"a1"), list(store.iter_prefix(b"b"))) == (b"x", [(b"b1", b"y")])


def test_an_error_inside_the_batch_body_is_not_a_write_failure() -> None:
    """A rule that raises inside the batch discards it; the node does not stop for that."""
    store = FailStopStore(MemoryStore(), stop)

    def apply_failing_rule() -> None:
        with store.write_batch() as wb:
            wb.put(b"k", b"v")
            raise KeyError("rule")

    with pytest.raises(KeyError):
        apply_failing_rule()
    assert store.get(b"k") is None
