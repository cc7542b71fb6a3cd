"""A power-loss filesystem for tests: a FUSE passthrough that forgets what was never made durable.

The durability model is LazyFS's (docs/node.md, "Durability"):

- bytes written to a file (``write``, ``truncate``) are durable once that file is fsynced
  (``fsync`` or ``fdatasync``);
- a directory entry (a file created, renamed, hard-linked or unlinked) is durable once its
  directory is fsynced; fsync of a directory makes all of its current file entries durable.
- Simplifications: directories themselves (``mkdir``, ``rmdir``, renaming a directory) and
  metadata (mode, owner, times) are durable at once; symlinks and special files are refused.

``tests/powerloss/disk.py`` (the test side) runs this file in a child process, ``python
powerfs.py BACKING MOUNTPOINT WORKDIR``, and talks to it over stdin and stdout, one line each way.
While mounted, the mount shows the live state (a private copy in ``WORKDIR/live``); ``BACKING``
holds the durable state only: its file entries are hard links to ``WORKDIR/stash/<id>``, one
file per inode holding that inode's durable bytes, so fsync of a file updates every durable name
of it at once and fsync of a directory only relinks names. Each file's unsynced writes wait in
memory, in order. ``cut`` (the power cut) freezes the mount (every later operation fails with
EIO, so a process still running can neither change the disk nor write through to the
mountpoint's own directory), keeps none, a seeded random subset, or all but a torn last one of
the unsynced writes and removes the stash: ``BACKING`` holds exactly the surviving bytes. When
its stdin closes the child detaches the mount and exits, cutting the power first if that was not
done (so a crashed test never leaves a mount behind).

The server imports mfusepy (libfuse3 through ctypes) only when run as a program, so the model
(``surviving_writes``) imports without it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

CutMode = Literal["all", "subset", "torn"]
"""What survives a power cut of the unsynced writes: none, a seeded random half, or all but a torn
last one (the latest write keeps a seeded random proper prefix; directories are synced too)."""

CUT_MODES: tuple[CutMode, ...] = ("all", "subset", "torn")
COMMAND_TIMEOUT_S = 15.0
FUSERMOUNT = "fusermount3"


# --------------------------------------------------------------------------------------------------
# The model: pure bookkeeping of unsynced writes (no FUSE, testable alone)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """One unsynced change to a file: ``data`` at ``offset``, or a truncate to ``length``."""

    seq: int
    offset: int
    data: bytes
    length: int | None = None  # set for a truncate (``data`` is then empty)

    def apply(self, fd: int, keep: int | None = None) -> None:
        """Apply this change to ``fd``; only ``keep`` bytes of the data if given (a torn write)."""
        if self.length is not None:
            os.ftruncate(fd, self.length)
        else:
            os.pwrite(fd, self.data if keep is None else self.data[:keep], self.offset)


def surviving_writes(
    pending: dict[int, list[PendingWrite]], mode: CutMode, seed: int
) -> dict[int, list[tuple[PendingWrite, int | None]]]:
    """Per file id, the unsynced writes a power cut keeps, in order, each with its kept length.

    ``all`` keeps none; ``subset`` keeps each write with probability 1/2 (``random.Random(seed)``,
    files in id order); ``torn`` keeps every write but the latest data write of all, which keeps
    a proper prefix of ``randrange(len)`` bytes (at least one byte lost).
    """
    rng = random.Random(seed)
    kept: dict[int, list[tuple[PendingWrite, int | None]]] = {}
    if mode == "all":
        return kept
    if mode == "subset":
        for file_id in sorted(pending):
            kept[file_id] = [(w, None) for w in pending[file_id] if rng.random() < 0.5]
        return kept
    writes = [w for ws in pending.values() for w in ws if w.length is None and w.data]
    last = max(writes, key=lambda w: w.seq, default=None)
    for file_id in sorted(pending):
        kept[file_id] = [
            (w, rng.randrange(len(w.data)) if w is last else None) for w in pending[file_id]
        ]
    return kept


# --------------------------------------------------------------------------------------------------
# The server: a FUSE passthrough over WORKDIR/live that keeps BACKING durable-only
# --------------------------------------------------------------------------------------------------


class PowerLossOperations:
    """The FUSE operations (mfusepy calls the methods named like libfuse's): a passthrough to
    ``WORKDIR/live``, with the durable state kept in ``BACKING`` and ``WORKDIR/stash``.

    One lock serialises every operation and the power cut; errors are ``OSError``s, which mfusepy
    answers with their errno.
    """

    use_ns = True

    def __init__(self, backing: Path, workdir: Path) -> None:
        self.backing = backing
        self.live = workdir / "live"
        self.stash = workdir / "stash"
        self._mutex = threading.RLock()
        self.frozen = False
        self.ids: dict[int, int] = {}  # live inode number -> file id
        self.pending: dict[int, list[PendingWrite]] = {}
        self.seq = 0
        self.next_id = 0
        self._import_backing()

    # -- setup and bookkeeping --------------------------------------------------------------

    def _import_backing(self) -> None:
        """Copy BACKING into ``live`` and link every durable file into the stash."""
        for d in (self.live, self.stash):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        by_backing_inode: dict[int, int] = {}
        for root, dirs, files in os.walk(self.backing):
            rel = Path(root).relative_to(self.backing)
            for name in dirs:
                (self.live / rel / name).mkdir()
            for name in files:
                src = Path(root) / name
                st = src.lstat()
                if not stat.S_ISREG(st.st_mode):
                    continue
                file_id = by_backing_inode.get(st.st_ino)
                if file_id is None:
                    file_id = by_backing_inode[st.st_ino] = self._new_id()
                    os.link(src, self.stash / str(file_id))
                dst = self.live / rel / name
                shutil.copy2(src, dst)
                self.ids[dst.stat().st_ino] = file_id

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _live(self, path: str) -> str:
        return str(self.live) + path

    def _backing(self, path: str) -> str:
        return str(self.backing) + path

    def _check(self) -> None:
        if self.frozen:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    def _file_id(self, ino: int) -> int:
        file_id = self.ids.get(ino)
        if file_id is None:  # not created through us: cannot happen, but never lose track
            file_id = self.ids[ino] = self._new_id()
            (self.stash / str(file_id)).touch()
        return file_id

    def _record(self, ino: int, offset: int, data: bytes, length: int | None = None) -> None:
        self.seq += 1
        write = PendingWrite(self.seq, offset, data, length)
        self.pending.setdefault(self._file_id(ino), []).append(write)

    def _apply(self, file_id: int, writes: list[tuple[PendingWrite, int | None]]) -> None:
        fd = os.open(self.stash / str(file_id), os.O_WRONLY)
        try:
            for write, keep in writes:
                write.apply(fd, keep)
        finally:
            os.close(fd)

    def _sync_file(self, ino: int) -> None:
        file_id = self._file_id(ino)
        self._apply(file_id, [(w, None) for w in self.pending.pop(file_id, [])])

    def _sync_dir(self, path: str) -> None:
        """Make the durable file entries of directory ``path`` equal to the live ones."""
        live_dir, durable_dir = Path(self._live(path)), Path(self._backing(path))
        live_files: dict[str, int] = {}
        for entry in os.scandir(live_dir):
            if entry.is_file(follow_symlinks=False):
                live_files[entry.name] = self._file_id(entry.inode())
        for entry in os.scandir(durable_dir):
            if entry.is_file(follow_symlinks=False) and entry.name not in live_files:
                os.unlink(entry.path)
        for name, file_id in sorted(live_files.items()):
            source, target = self.stash / str(file_id), durable_dir / name
            with contextlib.suppress(FileNotFoundError):
                if target.lstat().st_ino == source.lstat().st_ino:
                    continue
            tmp = durable_dir / f".powerfs-link-{file_id}"
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            os.link(source, tmp)
            os.replace(tmp, target)

    def cut(self, mode: CutMode, seed: int) -> None:
        """The power cut: freeze, keep what ``mode`` keeps, leave BACKING durable-only."""
        with self._mutex:
            if self.frozen:
                return
            self.frozen = True
            for file_id, writes in surviving_writes(self.pending, mode, seed).items():
                self._apply(file_id, writes)
            if mode == "torn":
                self._sync_all_dirs()
            self.pending.clear()
            shutil.rmtree(self.stash, ignore_errors=True)

    def sync_everything(self) -> None:
        """What a clean shutdown does: every unsynced write and entry made durable."""
        with self._mutex:
            self._check()
            for file_id in sorted(self.pending):
                self._apply(file_id, [(w, None) for w in self.pending[file_id]])
            self.pending.clear()
            self._sync_all_dirs()

    def _sync_all_dirs(self) -> None:
        for root, _dirs, _files in os.walk(self.live):
            rel = Path(root).relative_to(self.live)
            self._sync_dir("" if rel == Path() else f"/{rel}")

    def status(self) -> dict[str, int]:
        with self._mutex:
            return {
                "pending_writes": sum(len(ws) for ws in self.pending.values()),
                "pending_files": len(self.pending),
            }

    # -- FUSE operations --------------------------------------------------------------------

    def init(self, path: str) -> None:
        print("ready", flush=True)

    def destroy(self, path: str) -> None:
        self.cut("all", 0)  # unmounted without a command: unsynced state is lost

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self._mutex:  # answered after the cut too, as reads are (see ``read``)
            st = os.fstat(fh) if fh is not None else os.lstat(self._live(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_blocks")
        attrs: dict[str, Any] = {k: getattr(st, k) for k in keys}
        attrs |= {"st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns}
        attrs["st_ctime"] = st.st_ctime_ns
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        with self._mutex:
            self._check()
            return [".", "..", *os.listdir(self._live(path))]

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self.live)
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree")
        return {k: getattr(sv, k) for k in (*keys, "f_files", "f_frsize", "f_namemax")}

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            self._check()
            # O_APPEND would make pwrite ignore the kernel's offset, which we record
            fd = os.open(self._live(path), flags & ~(os.O_APPEND | os.O_CREAT | os.O_EXCL))
            if flags & os.O_TRUNC:
                self._record(os.fstat(fd).st_ino, 0, b"", 0)
            return fd

    def create(self, path: str, mode: int, flags: int) -> int:
        with self._mutex:
            self._check()
            fd = os.open(self._live(path), (flags & ~os.O_APPEND) | os.O_CREAT, mode)
            file_id = self._new_id()
            self.ids[os.fstat(fd).st_ino] = file_id
            stashed = self.stash / str(file_id)
            stashed.touch()
            os.chmod(stashed, stat.S_IMODE(mode))
            return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        # Reads of open files go on after the cut: they change nothing, and a process that maps
        # a file (LevelDB maps its tables, and a compaction reads them from a background thread)
        # would otherwise die of SIGBUS on the next page it touches, taking the test with it.
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            self._check()
            written = os.pwrite(fh, data, offset)
            self._record(os.fstat(fh).st_ino, offset, data[:written])
            return written

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._mutex:
            self._check()
            if fh is not None:
                os.ftruncate(fh, length)
                ino = os.fstat(fh).st_ino
            else:
                assert path is not None
                os.truncate(self._live(path), length)
                ino = os.lstat(self._live(path)).st_ino
            self._record(ino, 0, b"", length)
            return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            self._check()
            self._sync_file(os.fstat(fh).st_ino)
            return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            self._check()
            self._sync_dir("" if path == "/" else path)
            return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            self._check()
            os.unlink(self._live(path))
            return 0

    def link(self, target: str, source: str) -> int:
        with self._mutex:
            self._check()
            os.link(self._live(source), self._live(target))
            return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            self._check()
            is_dir = stat.S_ISDIR(os.lstat(self._live(old)).st_mode)
            os.rename(self._live(old), self._live(new))
            if is_dir:  # directories are durable at once (see the module docstring)
                shutil.rmtree(self._backing(new), ignore_errors=True)
                os.rename(self._backing(old), self._backing(new))
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self._mutex:
            self._check()
            os.mkdir(self._live(path), mode)
            os.mkdir(self._backing(path), mode)
            return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            self._check()
            os.rmdir(self._live(path))
            shutil.rmtree(self._backing(path), ignore_errors=True)
            return 0

    def chmod(self, path: str, mode: int) -> int:
        with self._mutex:
            self._check()
            os.chmod(self._live(path), mode)
            st = os.lstat(self._live(path))
            if stat.S_ISREG(st.st_mode):
                os.chmod(self.stash / str(self._file_id(st.st_ino)), mode)
            else:
                os.chmod(self._backing(path), mode)
            return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        with self._mutex:
            self._check()
            os.lchown(self._live(path), uid, gid)
            return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self._mutex:
            self._check()
            if times is None:
                os.utime(self._live(path))
            else:
                os.utime(self._live(path), ns=times)
            return 0


def _server_main(argv: list[str]) -> int:  # pragma: no cover - runs in the child process
    """``powerfs.py BACKING MOUNTPOINT WORKDIR``: mount, serve commands on stdin until cut."""
    import mfusepy as fuse  # type: ignore[import-untyped]

    backing, mountpoint, workdir = (Path(a).resolve() for a in argv)

    ops = PowerLossOperations(backing, workdir)

    def unmount() -> None:
        subprocess.run(
            [FUSERMOUNT, "-u", "-z", str(mountpoint)],
            check=False,
            timeout=COMMAND_TIMEOUT_S,
            stdout=subprocess.DEVNULL,
        )

    def power_off() -> None:
        """Detach the mount and exit at once: requests still in flight fail (ENOTCONN)."""
        unmount()
        shutil.rmtree(workdir / "live", ignore_errors=True)
        os._exit(0)

    def serve_commands() -> None:
        """Commands on stdin, one answer line each on stdout; EOF cuts the power."""
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["status"]:
                print(json.dumps(ops.status()), flush=True)
            elif words[:1] == ["cut"] and len(words) == 3 and words[1] in CUT_MODES:
                # The durable state is final and every operation fails from now on, but the
                # mount stays until stdin closes: a process still running cannot fall through
                # to the mountpoint's own directory and write there.
                ops.cut(words[1], int(words[2]))
                print("ok", flush=True)
            elif words[:1] == ["sync"]:
                ops.sync_everything()
                print("ok", flush=True)
            else:
                print(f"error: unknown command {line.strip()!r}", flush=True)
        ops.cut("all", 0)
        power_off()

    threading.Thread(target=serve_commands, daemon=True).start()
    fuse.FUSE(ops, str(mountpoint), foreground=True, fsname="powerfs", subtype="powerfs")
    ops.cut("all", 0)  # unmounted from outside: unsynced state is lost
    shutil.rmtree(workdir / "live", ignore_errors=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_server_main(sys.argv[1:]))
