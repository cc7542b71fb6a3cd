"""Store fixtures: every contract test runs once per backend (STYLE.md rule 9)."""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dagchain.storage import KVStore
from dagchain.storage.leveldb import LevelDBStore
from dagchain.storage.memory import MemoryStore

StoreFactory = Callable[[], KVStore]
"""Opens the test's store; for LevelDB, the same directory each call (reopen after close)."""


@pytest.fixture(params=["memory", "leveldb"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    opened: list[KVStore] = []
    memory = MemoryStore()

    def factory() -> KVStore:
        store: KVStore = memory if request.param == "memory" else LevelDBStore(tmp_path / "db")
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: StoreFactory) -> KVStore:
    return open_store()
