"""The power-loss filesystem itself: what survives a cut is exactly what was made durable.

Data is durable after fsync of its file; a create, rename or unlink after fsync of its directory
(LazyFS's model; docs/node.md, "Durability").
"""

import contextlib
import os
import random
from pathlib import Path

import pytest

from tests.powerloss.disk import PowerLossDisk, is_mounted
from tests.powerloss.powerfs import PendingWrite, surviving_writes


def write(path: Path, data: bytes, offset: int | None = None, sync: bool = False) -> None:
    """``data`` written into ``path`` (created if needed) at ``offset`` (default: appended)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, os.fstat(fd).st_size if offset is None else offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """fsync of a directory: its entries become durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_file(disk: PowerLossDisk, name: str, data: bytes) -> Path:
    """A file whose data and directory entry are both durable."""
    path = disk.path / name
    write(path, data, sync=True)
    fsync_dir(disk.path)
    return path


def test_synced_write_survives_and_unsynced_write_is_lost(disk: PowerLossDisk) -> None:
    path = durable_file(disk, "data", b"first ")
    write(path, b"second")
    assert path.read_bytes() == b"first second"  # the live view sees both
    disk.cut()
    assert not is_mounted(disk.path)
    assert (disk.backing / "data").read_bytes() == b"first "


def test_fdatasync_makes_data_durable(disk: PowerLossDisk) -> None:
    path = durable_file(disk, "data", b"")
    fd = os.open(path, os.O_WRONLY)
    os.write(fd, b"synced")
    os.fdatasync(fd)
    os.write(fd, b" lost")
    os.close(fd)
    disk.cut()
    assert (disk.backing / "data").read_bytes() == b"synced"


def test_unsynced_truncate_is_lost(disk: PowerLossDisk) -> None:
    path = durable_file(disk, "data", b"0123456789")
    os.truncate(path, 3)
    assert path.read_bytes() == b"012"
    disk.cut()
    assert (disk.backing / "data").read_bytes() == b"0123456789"


def test_created_file_is_durable_only_after_directory_fsync(disk: PowerLossDisk) -> None:
    write(disk.path / "entry-synced", b"a", sync=True)
    fsync_dir(disk.path)
    write(disk.path / "entry-not-synced", b"b", sync=True)  # its data, not its name
    disk.cut()
    assert sorted(p.name for p in disk.backing.iterdir()) == ["entry-synced"]


def test_directory_fsync_without_file_fsync_keeps_an_empty_file(disk: PowerLossDisk) -> None:
    write(disk.path / "name-only", b"never synced")
    fsync_dir(disk.path)
    disk.cut()
    assert (disk.backing / "name-only").read_bytes() == b""


def test_rename_is_durable_only_after_directory_fsync(disk: PowerLossDisk) -> None:
    """LevelDB's switch of CURRENT: write a temp file, fsync it, rename it over CURRENT."""
    durable_file(disk, "CURRENT", b"MANIFEST-000001\n")
    write(disk.path / "000002.dbtmp", b"MANIFEST-000002\n", sync=True)
    os.rename(disk.path / "000002.dbtmp", disk.path / "CURRENT")
    assert (disk.path / "CURRENT").read_bytes() == b"MANIFEST-000002\n"
    disk.cut()
    assert sorted(p.name for p in disk.backing.iterdir()) == ["CURRENT"]
    assert (disk.backing / "CURRENT").read_bytes() == b"MANIFEST-000001\n"


def test_rename_then_directory_fsync_is_durable(disk: PowerLossDisk) -> None:
    durable_file(disk, "CURRENT", b"MANIFEST-000001\n")
    write(disk.path / "000002.dbtmp", b"MANIFEST-000002\n", sync=True)
    os.rename(disk.path / "000002.dbtmp", disk.path / "CURRENT")
    fsync_dir(disk.path)
    write(disk.path / "CURRENT", b"unsynced tail")
    disk.cut()
    assert sorted(p.name for p in disk.backing.iterdir()) == ["CURRENT"]
    assert (disk.backing / "CURRENT").read_bytes() == b"MANIFEST-000002\n"


def test_unlink_is_durable_only_after_directory_fsync(disk: PowerLossDisk) -> None:
    """Neither the two unlinks nor the create reach the disk without fsync of the directory."""
    durable_file(disk, "kept", b"k")
    durable_file(disk, "removed", b"r")
    os.unlink(disk.path / "kept")
    os.unlink(disk.path / "removed")
    fd = os.open(disk.path / "survivor", os.O_RDONLY | os.O_CREAT, 0o644)
    os.close(fd)
    disk.cut()
    assert sorted(p.name for p in disk.backing.iterdir()) == ["kept", "removed"]


def test_entries_in_a_subdirectory_need_that_directory_fsync(disk: PowerLossDisk) -> None:
    sub = disk.path / "chain"
    sub.mkdir()  # directories themselves are durable at once (a documented simplification)
    write(sub / "a", b"a", sync=True)
    fsync_dir(disk.path)  # the parent's fsync does not cover the subdirectory's entries
    write(sub / "b", b"b", sync=True)
    fsync_dir(sub)
    os.unlink(sub / "a")
    disk.cut()
    assert sorted(p.name for p in (disk.backing / "chain").iterdir()) == ["a", "b"]


def test_open_unlinked_file_keeps_working_until_the_cut(disk: PowerLossDisk) -> None:
    path = durable_file(disk, "open", b"x")
    fd = os.open(path, os.O_RDWR)
    os.unlink(path)
    os.pwrite(fd, b"y", 1)
    os.fsync(fd)
    assert os.pread(fd, 2, 0) == b"xy"
    os.close(fd)
    disk.cut()
    assert (disk.backing / "open").read_bytes() == b"xy"  # the unlink itself was never synced


def test_subset_cut_keeps_each_unsynced_write_whole_or_not_at_all(disk: PowerLossDisk) -> None:
    path = durable_file(disk, "data", bytes(80))
    for i in range(20):
        write(path, bytes([i + 1]) * 4, offset=4 * i)
    seed = 7
    disk.cut("subset", seed)
    data = (disk.backing / "data").read_bytes()
    kept = [i for i in range(20) if data[4 * i : 4 * i + 4] == bytes([i + 1]) * 4]
    lost = [i for i in range(20) if data[4 * i : 4 * i + 4] == bytes(4)]
    assert sorted(kept + lost) == list(range(20))  # every write whole or absent
    pending = {1: [PendingWrite(i, 4 * i, bytes([i + 1]) * 4) for i in range(20)]}
    expected = [w.offset // 4 for w, _ in surviving_writes(pending, "subset", seed)[1]]
    assert (kept, 0 < len(kept) < 20) == (expected, True)


def test_subset_cut_is_reproducible_from_its_seed(tmp_path: Path) -> None:
    outcomes = []
    for run in range(2):
        disk = PowerLossDisk(tmp_path / f"run{run}")
        try:
            disk.boot()
            path = durable_file(disk, "data", bytes(64))
            for i in range(64):
                write(path, b"\xff", offset=i)
            disk.cut("subset", seed=1234)
        finally:
            disk.close()
        outcomes.append((disk.backing / "data").read_bytes())
    assert outcomes[0] == outcomes[1]
    assert 0 < outcomes[0].count(b"\xff") < 64


def test_torn_cut_keeps_a_proper_prefix_of_the_last_write(disk: PowerLossDisk) -> None:
    path = durable_file(disk, "log", b"header")
    write(path, b"A" * 100)
    write(disk.path / "new", b"created")  # torn mode syncs directories: this name survives
    write(path, b"B" * 1000)
    seed = 99
    disk.cut("torn", seed)
    keep = random.Random(seed).randrange(1000)
    assert (disk.backing / "log").read_bytes() == b"header" + b"A" * 100 + b"B" * keep
    assert (disk.backing / "new").read_bytes() == b"created"


def test_clean_unmount_makes_everything_durable(disk: PowerLossDisk) -> None:
    write(disk.path / "f", b"never synced")
    assert disk.mount is not None
    disk.mount.sync()
    disk.close()
    assert (disk.backing / "f").read_bytes() == b"never synced"


def test_remount_shows_the_surviving_bytes_and_takes_new_writes(disk: PowerLossDisk) -> None:
    path = durable_file(disk, "data", b"durable")
    write(path, b" lost")
    disk.cut()
    disk.boot()
    assert path.read_bytes() == b"durable"
    write(path, b" again", sync=True)
    write(path, b" lost again")
    disk.cut()
    assert (disk.backing / "data").read_bytes() == b"durable again"


def test_cut_freezes_the_mount_for_processes_still_using_it(disk: PowerLossDisk) -> None:
    """After the cut and until ``close()`` every operation but a read fails: a process still
    running can neither change the disk nor create files in the bare mountpoint directory,
    which it would reach through a detached mount (a harness race the store test once hit)."""
    path = durable_file(disk, "data", b"d")
    fd = os.open(path, os.O_WRONLY)
    try:
        disk.freeze()
        with pytest.raises(OSError, match=r"Input/output error"):
            os.pwrite(fd, b"after the cut", 0)
        with pytest.raises(OSError, match=r"Input/output error"):
            os.open(disk.path / "created-after-the-cut", os.O_WRONLY | os.O_CREAT, 0o644)
    finally:
        with contextlib.suppress(OSError):  # EIO or ENOTCONN: the disk is gone (fd freed anyway)
            os.close(fd)
    disk.close()
    assert (is_mounted(disk.path), list(disk.path.iterdir())) == (False, [])
    assert sorted(p.name for p in disk.backing.iterdir()) == ["data"]
    assert (disk.backing / "data").read_bytes() == b"d"


def test_open_files_stay_readable_after_the_cut(disk: PowerLossDisk) -> None:
    """A read changes nothing on the disk, so it is answered after the cut: LevelDB maps its
    tables, and a page its compaction thread touched after a failed read would kill the test
    process with SIGBUS (a CI run once died so). Writes still fail."""
    path = durable_file(disk, "table", b"t" * 65536)
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the next read goes to the disk
        disk.freeze()
        assert os.pread(fd, 16, 32768) == b"t" * 16
        with pytest.raises(OSError, match=r"Input/output error"):
            os.pwrite(fd, b"after the cut", 0)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    disk.close()


def test_surviving_writes_modes() -> None:
    pending = {
        2: [PendingWrite(1, 0, b"abcd"), PendingWrite(3, 0, b"", length=2)],
        1: [PendingWrite(2, 10, b"xyz")],
    }
    assert surviving_writes(pending, "all", 0) == {}
    torn = surviving_writes(pending, "torn", 5)
    assert torn == {
        1: [(pending[1][0], random.Random(5).randrange(3))],
        2: [(w, None) for w in pending[2]],
    }


def test_close_with_files_still_open_leaves_nothing_mounted(disk: PowerLossDisk) -> None:
    """The fixture's teardown after a failed test: a process may still hold files open."""
    fd = os.open(disk.path / "held", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"unsynced")
        mount = disk.mount
        assert mount is not None
        server = mount.process
        assert server is not None
        disk.close()  # no cut command: closing the server's stdin cuts the power
        assert (server.poll(), is_mounted(disk.path)) == (0, False)
    finally:
        with contextlib.suppress(OSError):  # ENOTCONN: the filesystem is gone (fd freed anyway)
            os.close(fd)
    assert list(disk.backing.iterdir()) == []
