"""LevelDB KVStore through plyvel: the only module that imports plyvel (PROTOCOL.md §12).

plyvel is imported when a store is opened, so ``import dagchain`` (and the simulator, which runs on
:class:`~dagchain.storage.memory.MemoryStore`) never needs it. Every batch is
``write_batch(transaction=True, sync=True)``: all-or-nothing, and durable when the ``with`` block
returns, so a block is acknowledged only after it survives a power cut (STYLE.md rule 7).

Damage is reported as :class:`~dagchain.errors.StorageError` naming the path: a lock held by
another process, a corrupted table or log (``paranoid_checks`` plus, by default, a checksum scan of
every table at open), or table files without the ``CURRENT`` pointer (LevelDB would otherwise
create a fresh, empty database over them).

One kind of corruption is recovered from rather than reported: a torn tail of the newest log,
the end of a batch the power cut off before its fsync (never acknowledged). When the paranoid open
fails and :mod:`dagchain.storage.walcheck` finds no valid record after the damage, the store lets
LevelDB recover once without ``paranoid_checks`` (it drops the torn records), logs one WARNING
naming the bytes dropped, reopens paranoid and verifies every table (docs/protocol.md decision 38).
"""

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, final

from dagchain.errors import StorageError
from dagchain.storage import WriteBatch
from dagchain.storage.walcheck import scan_log_file

logger = logging.getLogger(__name__)

_TABLE_SUFFIXES = (".ldb", ".sst", ".log")
BLOOM_FILTER_BITS = 10
"""Bits per key of LevelDB's bloom filter: a lookup of an absent key rarely touches a table."""
BLOCK_CACHE_BYTES = 8 * 1024 * 1024
"""LevelDB's default: recent rows live in the chain's own window, so a bigger cache buys little."""
WRITE_BUFFER_BYTES = 8 * 1024 * 1024
"""Memtable size (LevelDB's default is 4 MiB): fewer level-0 tables and compactions per block
applied; a fixed cap, so it adds at most twice this much resident memory, whatever the chain's
length. 16 MiB was no faster once new blocks stopped costing a read (docs/protocol.md decision
22), and its level-0 compactions (four tables of about 12 MB merged at once, memory-mapped)
raised the whole-run peak resident set at 300,000 blocks by about 30 MB (bench/storage.py)."""
MAX_OPEN_FILES = 50
"""LevelDB keeps at most this many table files open (default 1,000), and memory-maps each open
one; a smaller cap bounds the mapped pages counted in the resident set as the database grows
(bench/storage.py, two pairs of runs: peak VmRSS 100k -> 300k blocks 1.10-1.12 times against
1.27-1.48 with the default, same apply rates; docs/protocol.md decision 20)."""
COMPRESSION: str | None = None
"""No Snappy: rows are mostly random 32-byte ids that do not compress, and compressing them cost
about a quarter of the apply CPU time (bench/storage.py)."""


@final
class LevelDBStore:
    """A KVStore on a LevelDB directory (one process owns it; LevelDB locks it).

    Args:
        path: the database directory.
        create_if_missing: create an empty database if ``path`` holds none.
        sync: fsync every batch (PROTOCOL.md §12 requires it; only benchmarks turn it off).
        verify: read every table once at open, checking block checksums, so a damaged file is
            reported now rather than when its rows are first read (always done after a torn log
            tail was dropped).
        block_cache_bytes: LevelDB's cache of uncompressed table blocks (a fixed cap).
        write_buffer_bytes: LevelDB's memtable size (a fixed cap).

    Raises:
        StorageError: locked by another process, corrupted, half-written or not a database.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        create_if_missing: bool = True,
        *,
        sync: bool = True,
        verify: bool = True,
        block_cache_bytes: int = BLOCK_CACHE_BYTES,
        write_buffer_bytes: int = WRITE_BUFFER_BYTES,
    ) -> None:
        import plyvel  # lazily: only a node on disk needs LevelDB

        self.path = os.fspath(path)
        self._sync = sync
        self._plyvel: Any = plyvel
        self._dir_mtime_ns = -1
        """The directory's mtime when we last fsynced it (see :meth:`_sync_directory`)."""
        _check_directory(Path(self.path))
        new = create_if_missing and not (Path(self.path) / "CURRENT").exists()

        def open_db(paranoid: bool = True) -> Any:
            return plyvel.DB(
                self.path,
                create_if_missing=create_if_missing,
                paranoid_checks=paranoid,
                bloom_filter_bits=BLOOM_FILTER_BITS,
                lru_cache_size=block_cache_bytes,
                write_buffer_size=write_buffer_bytes,
                compression=COMPRESSION,
                max_open_files=MAX_OPEN_FILES,
            )

        try:
            self._db: Any = open_db()
            if new:
                # LevelDB 1.22 (plyvel's) neither fsyncs a new database's first MANIFEST nor
                # the directory after CURRENT's rename: until the database is opened again, a
                # power cut leaves CURRENT naming an empty MANIFEST and every synced write is
                # unreadable (issue 26, tests/powerloss). Reopening writes a synced MANIFEST.
                self._db.close()
                self._db = open_db()
        except plyvel.Error as exc:
            torn = _torn_log_tail(Path(self.path)) if self._is_corruption(exc) else None
            if torn is None:
                raise self._error("cannot open", exc) from None
            try:
                # Without paranoid_checks, recovery drops the torn records, writes what the log
                # held before them to a table and starts a new log: the paranoid reopen is clean.
                open_db(paranoid=False).close()
                self._db = open_db()
            except plyvel.Error as again:
                raise self._error("cannot open", again) from None
            log_name, dropped = torn
            logger.warning(
                "LevelDB database %s: dropped the torn last %d bytes of its log %s, a write cut "
                "off before it was synced (never acknowledged); every synced write is kept",
                self.path,
                dropped,
                log_name,
            )
            verify = True  # the disk just lost a write: check every table too
        if verify:
            try:
                for _ in self._db.iterator(verify_checksums=True, fill_cache=False):
                    pass
            except plyvel.Error as exc:
                self._db.close()
                raise self._error("damaged table file in", exc) from None

    def _error(self, what: str, exc: BaseException) -> StorageError:
        text = _message(exc)
        if self._is_corruption(exc):
            return StorageError(f"LevelDB database {self.path} is corrupted: {text}")
        if text.startswith("IO error: lock "):  # "already held by process" or an errno
            return StorageError(f"LevelDB database {self.path} is in use by another process")
        if text.startswith("NotFound") and not Path(self.path).parent.is_dir():
            return StorageError(
                f"{what} LevelDB database {self.path}: its parent directory does not exist"
            )
        return StorageError(f"{what} LevelDB database {self.path}: {text}")

    def _is_corruption(self, exc: BaseException) -> bool:
        return isinstance(exc, self._plyvel.CorruptionError) or _message(exc).startswith(
            "Corruption"
        )

    def _sync_directory(self) -> None:
        """After a synced batch: fsync the database directory if its entries changed.

        LevelDB 1.22 switches to a new log file (each time its memtable fills) without an fsync
        of the directory, and a synced batch may sit in that new log: until its background
        flush writes the next MANIFEST, a power cut could lose the new log's name and every
        acknowledged write in it (issue 26; docs/protocol.md decision 39). One ``stat`` per
        batch; an fsync of the directory only when a file was created, renamed or removed.
        """
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if mtime == self._dir_mtime_ns:
                return
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            what = f"cannot sync the directory of LevelDB database {self.path}"
            raise StorageError(f"{what}: {exc}") from None
        self._dir_mtime_ns = mtime

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None."""
        try:
            value: bytes | None = self._db.get(key)
        except self._plyvel.Error as exc:
            raise self._error("cannot read", exc) from None
        return value

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Ascending (key, value) pairs under ``prefix`` (LevelDB's sorted order, a snapshot)."""
        try:
            it = self._db.iterator(prefix=prefix) if prefix else self._db.iterator()
            with it:
                yield from it
        except self._plyvel.Error as exc:
            raise self._error("cannot read", exc) from None

    def write_batch(self) -> "_Transaction":
        """A transaction: written (and fsynced) only if the ``with`` block raises nothing."""
        return _Transaction(self)

    def compact(self) -> None:
        """Compact the whole key range now, so deleted rows (pruning) leave the disk.

        LevelDB reclaims the space of deletions in its background compactions, in its own
        time; ``bench/storage.py --prune-depth`` calls this to measure disk use after them.
        """
        try:
            self._db.compact_range()
        except self._plyvel.Error as exc:
            raise self._error("compact", exc) from None

    def close(self) -> None:
        """Close the database and release its lock."""
        self._db.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return bool(self._db.closed)


@final
class _Transaction:
    """``with store.write_batch() as wb``: plyvel's batch, written on a clean exit only.

    A class rather than a generator context manager: one is opened per block and per
    milestone, so its cost counts (docs/benchmarks.md, "Storage").
    """

    __slots__ = ("_batch", "_store")

    def __init__(self, store: LevelDBStore) -> None:
        self._store = store
        self._batch: Any = None

    def __enter__(self) -> WriteBatch:
        store = self._store
        self._batch = store._db.write_batch(sync=store._sync)
        batch: WriteBatch = self._batch
        return batch

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        batch, self._batch = self._batch, None
        if exc_type is not None:
            batch.clear()
            return
        store = self._store
        try:
            batch.write()
        except store._plyvel.Error as error:
            raise store._error("cannot write", error) from None
        if store._sync:
            store._sync_directory()


def _message(exc: BaseException) -> str:
    """The first line of a plyvel error's message (or the error's class name)."""
    arg = exc.args[0] if exc.args else ""
    text = arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _torn_log_tail(path: Path) -> tuple[str, int] | None:
    """The newest log's name and its bytes to drop, if its torn tail is all the logs' damage.

    A torn tail: no valid record after the first bad one (:mod:`dagchain.storage.walcheck`).

    Older logs (LevelDB keeps one until the flush of its memtable has been recorded) must be
    clean: a sync covers only the current log, and the node syncs every batch, so damage in an
    older one is damage to acknowledged writes.
    """
    logs = sorted(
        (int(p.name[: -len(".log")]), p)
        for p in path.glob("*.log")
        if p.name[: -len(".log")].isdigit()
    )
    if not logs:
        return None
    try:
        scans = [(p, scan_log_file(p)) for _, p in logs]
    except OSError:
        return None
    *older, (newest, last) = scans
    if not last.torn_tail or not all(scan.clean for _, scan in older):
        return None
    return newest.name, last.tail_bytes


def _check_directory(path: Path) -> None:
    """Refuse table or log files without ``CURRENT``: LevelDB would start an empty database."""
    if not path.is_dir() or (path / "CURRENT").exists():
        return
    leftovers = sorted(
        p.name
        for p in path.iterdir()
        if p.name.endswith(_TABLE_SUFFIXES) or p.name.startswith("MANIFEST-")
    )
    if leftovers:
        raise StorageError(
            f"LevelDB database {path} is half-written or damaged: "
            f"{leftovers[0]} exists but CURRENT is missing"
        )


__all__ = ["LevelDBStore"]
