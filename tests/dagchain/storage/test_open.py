"""Opening a LevelDB store: locks, corruption, half-written directories, schema and head checks.

PROTOCOL.md §12 and docs/protocol.md decision 17: an unusable database fails at open with one
clear StorageError that names the path (or the versions), never with a silently wrong state.
"""

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dagchain.chain import Chain
from dagchain.errors import StorageError
from dagchain.storage import schema as S
from dagchain.storage.leveldb import LevelDBStore
from dagchain.storage.walcheck import scan_log_file
from dagchain.types import BlockId
from tests.dagchain.test_properties import PARAMS, dag_pool

NOW = PARAMS.genesis_timestamp_ms + 10**9


Template = tuple[Path, BlockId, int]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """A closed LevelDB chain holding every pool DAG, in table files; its best id and height."""
    path = tmp_path_factory.mktemp("open") / "template"
    store = LevelDBStore(path, sync=False)
    chain = Chain(PARAMS, store)
    for dag in dag_pool():
        for block in dag.blocks:
            chain.on_block(block.raw, NOW)
    store.close()
    LevelDBStore(path).close()  # the reopen turns the log into a level-0 table
    return path, chain.best_id, chain.best_height


def filled_db(template: Template, path: Path) -> tuple[BlockId, int]:
    shutil.copytree(template[0], path)
    return template[1], template[2]


def largest(path: Path, suffix: str) -> Path:
    return max(path.glob(f"*{suffix}"), key=lambda p: p.stat().st_size)


def test_second_process_gets_a_clear_locked_error(tmp_path: Path) -> None:
    db = tmp_path / "db"
    LevelDBStore(db).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from dagchain.storage.leveldb import LevelDBStore;"
            f"s = LevelDBStore({str(db)!r}); print('open', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "open\n"
        with pytest.raises(StorageError, match=f"{db} is in use by another process"):
            LevelDBStore(db)
    finally:
        holder.communicate("")
    LevelDBStore(db).close()  # released when the holder exits


def test_a_database_whose_parent_directory_is_missing_is_not_called_in_use(
    tmp_path: Path,
) -> None:
    """LevelDB reports the missing parent as a NotFound on its LOCK file: that is no lock held
    by another process (the message it got before), and nothing is created."""
    db = tmp_path / "missing" / "chain"
    with pytest.raises(StorageError, match=f"{db}: its parent directory does not exist") as err:
        LevelDBStore(db)
    assert "in use" not in str(err.value)
    assert not (tmp_path / "missing").exists()


def test_the_same_database_opened_twice_in_one_process_is_in_use(tmp_path: Path) -> None:
    first = LevelDBStore(tmp_path / "db")
    try:
        with pytest.raises(StorageError, match="is in use by another process"):
            LevelDBStore(tmp_path / "db")
    finally:
        first.close()


def test_missing_database_without_create_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=f"{tmp_path / 'none'}.*does not exist"):
        LevelDBStore(tmp_path / "none", create_if_missing=False)


def truncate_table(db: Path) -> None:
    table = largest(db, ".ldb")
    table.write_bytes(table.read_bytes()[: table.stat().st_size // 2])


def flip_table_bytes(db: Path) -> None:
    table = largest(db, ".ldb")
    data = bytearray(table.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 8):
        data[i] ^= 0xFF
    table.write_bytes(bytes(data))


def truncate_manifest(db: Path) -> None:
    manifest = next(db.glob("MANIFEST-*"))
    manifest.write_bytes(manifest.read_bytes()[:20])


def remove_current(db: Path) -> None:
    (db / "CURRENT").unlink()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (truncate_table, "damaged table file|corrupted"),
        (flip_table_bytes, "corrupted"),
        (truncate_manifest, "corrupted"),
        (remove_current, "half-written or damaged: .* CURRENT is missing"),
    ],
)
def test_damaged_files_are_detected_at_open(
    template: Template, tmp_path: Path, damage: Callable[[Path], None], message: str
) -> None:
    db = tmp_path / "db"
    filled_db(template, db)
    damage(db)
    with pytest.raises(StorageError, match=message) as info:
        LevelDBStore(db)
    assert str(db) in str(info.value)


def logged_store(db: Path, batches: int) -> list[bytes]:
    """A store whose last ``batches`` batches (40 kB each: every one spans log blocks) are only
    in its log; their keys."""
    for _ in range(2):
        LevelDBStore(db).close()  # an older datadir: its log holds only what follows
    store = LevelDBStore(db)
    keys = [b"batch-%03d" % i for i in range(batches)]
    for k in keys:
        with store.write_batch() as wb:
            wb.put(k, os.urandom(40_000))
    store.close()  # LevelDB 1.22 leaves the memtable in the log: the next open replays it
    return keys


def only_log(db: Path) -> Path:
    (log,) = db.glob("*.log")
    return log


def test_a_torn_log_tail_is_dropped_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The last batch's records were cut off before its fsync (garbage where its end should be):
    the paranoid open refuses it ("checksum mismatch"); the store drops that tail, says so in one
    WARNING, and keeps every earlier batch (docs/protocol.md decision 38)."""
    db = tmp_path / "db"
    keys = logged_store(db, 5)
    log = only_log(db)
    data = bytearray(log.read_bytes())
    data[-30_000:] = os.urandom(30_000)
    log.write_bytes(bytes(data))
    scan = scan_log_file(log)
    assert scan.torn_tail
    caplog.set_level(logging.WARNING, logger="dagchain.storage.leveldb")
    store = LevelDBStore(db)
    try:
        assert [k for k in keys if store.get(k) is None] == [keys[-1]]
    finally:
        store.close()
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"LevelDB database {db}: dropped the torn last {scan.tail_bytes} bytes of its log "
        f"{log.name}, a write cut off before it was synced (never acknowledged); every synced "
        "write is kept"
    )
    caplog.clear()
    LevelDBStore(db).close()
    assert caplog.records == []


def test_damage_in_the_middle_of_the_log_stays_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Flipped bytes in an early batch, with valid batches after it: synced data is damaged, so
    the store refuses to open (decision 17), and drops nothing."""
    db = tmp_path / "db"
    logged_store(db, 5)
    log = only_log(db)
    data = bytearray(log.read_bytes())
    for i in range(50_000, 50_008):
        data[i] ^= 0xFF
    log.write_bytes(bytes(data))
    scan = scan_log_file(log)
    assert scan.first_bad is not None
    assert scan.valid_after
    with pytest.raises(StorageError, match=r"is corrupted: .*checksum mismatch") as info:
        LevelDBStore(db)
    assert str(db) in str(info.value)
    assert log.read_bytes() == bytes(data)
    assert caplog.records == []


def test_a_torn_log_tail_with_a_damaged_table_stays_fatal(
    template: Template, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The torn tail is dropped, but the verify pass still finds the damaged table."""
    caplog.set_level(logging.WARNING, logger="dagchain.storage.leveldb")
    db = tmp_path / "db"
    filled_db(template, db)
    flip_table_bytes(db)
    log = only_log(db)
    bad_crc = bytes(4) + (10).to_bytes(2, "little") + bytes([1]) + b"x" * 10  # a FULL record
    log.write_bytes(log.read_bytes() + bad_crc)
    assert scan_log_file(log).torn_tail
    with pytest.raises(StorageError, match="is corrupted: Corruption: block checksum mismatch"):
        LevelDBStore(db, verify=False)  # verified anyway after a recovery
    assert "dropped the torn last 17 bytes" in caplog.text


def put_row(db: Path, key: bytes, value: bytes | None) -> None:
    store = LevelDBStore(db)
    with store.write_batch() as wb:
        if value is None:
            wb.delete(key)
        else:
            wb.put(key, value)
    store.close()


def open_chain(db: Path) -> Chain:
    store = LevelDBStore(db)
    try:
        return Chain(PARAMS, store)
    except StorageError:
        store.close()
        raise


def test_newer_schema_version_names_both_versions(template: Template, tmp_path: Path) -> None:
    """§12 (v2): the schema version is 2; a newer one is never opened by older code."""
    assert S.SCHEMA_VERSION == 2
    db = tmp_path / "db"
    filled_db(template, db)
    put_row(db, S.META_SCHEMA, S.encode_row([S.SCHEMA_VERSION + 1]))
    with pytest.raises(StorageError, match=r"version 3 is newer than this software's version 2"):
        open_chain(db)


def test_other_network_is_refused(template: Template, tmp_path: Path) -> None:
    db = tmp_path / "db"
    filled_db(template, db)
    put_row(db, S.META_NETWORK, S.encode_row([b"dagchain-mainnet"]))
    with pytest.raises(StorageError, match="network b'dagchain-mainnet'"):
        open_chain(db)


def test_rows_without_schema_are_a_half_written_database(tmp_path: Path) -> None:
    db = tmp_path / "db"
    put_row(db, b"bsomething", b"x")
    with pytest.raises(StorageError, match="no schema version"):
        open_chain(db)


def head_of(db: Path) -> list[object]:
    store = LevelDBStore(db)
    try:
        raw = store.get(S.HEAD)
        assert raw is not None
        return S.decode_row(raw, S.HEAD)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("head", "corrupted row"),
        ("head snapshot", "corrupted row"),
        ("head meta", "corrupted row"),
        ("no head", "no head record"),
        ("no snapshot", "head|snapshot"),
        ("no height row", "head record does not match"),
    ],
)
def test_damaged_or_missing_rows_are_detected_at_open(
    template: Template, tmp_path: Path, row: str, message: str
) -> None:
    db = tmp_path / "db"
    best, height = filled_db(template, db)
    key, value = {
        "head": (S.HEAD, b"\xc1garbage"),
        "head snapshot": (S.P_SNAPSHOT + best, b"\x93\x01"),
        "head meta": (S.P_META + best, b"\x91\xc1"),
        "no head": (S.HEAD, None),
        "no snapshot": (S.P_SNAPSHOT + best, None),
        "no height row": (S.height_key(S.P_HEIGHT, height), None),
    }[row]
    put_row(db, key, value)
    with pytest.raises(StorageError, match=message):
        open_chain(db)
