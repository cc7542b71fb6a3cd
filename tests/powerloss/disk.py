"""The test side of the power-loss filesystem: mount it, cut the power, boot again.

``PowerLossMount`` runs ``powerfs.py`` (the FUSE server) in a child process and talks to it over
the child's stdin and stdout, one line each way; ``PowerLossDisk`` is the disk a test boots, cuts
and boots again. Every wait is bounded, and ``close()`` leaves nothing mounted and no process
behind, also after a failure. The durability model is in powerfs.py's docstring.
"""

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from tests.powerloss.powerfs import FUSERMOUNT, CutMode

SERVER = str(Path(__file__).with_name("powerfs.py"))
STARTUP_TIMEOUT_S = 15.0
COMMAND_TIMEOUT_S = 15.0
EXIT_TIMEOUT_S = 10.0


class PowerFsError(RuntimeError):
    """The filesystem process did not start or did not answer in time."""


def is_mounted(mountpoint: Path) -> bool:
    """True if ``mountpoint`` is in /proc/mounts (also for a dead FUSE server)."""
    target = str(mountpoint.resolve())
    with open("/proc/mounts", encoding="utf-8") as mounts:
        return any(line.split()[1] == target for line in mounts if len(line.split()) > 1)


def force_unmount(mountpoint: Path) -> None:
    """``fusermount3 -u -z``: detach the mount even if files on it are open or its server died."""
    if is_mounted(mountpoint):
        subprocess.run(
            [FUSERMOUNT, "-u", "-z", str(mountpoint)],
            check=False,
            timeout=COMMAND_TIMEOUT_S,
            capture_output=True,
        )


class PowerLossMount:
    """One mount of the power-loss filesystem; ``backing`` keeps only durable bytes.

    ``start()`` mounts ``backing``'s content at ``mountpoint``; ``cut(mode, seed)`` cuts the power
    (see ``surviving_writes``); ``sync()`` makes everything durable, as a clean shutdown would;
    ``close()`` unmounts and always leaves nothing mounted and no process behind (call it in a
    fixture's teardown, also after a failure).
    """

    def __init__(self, backing: Path, mountpoint: Path, workdir: Path) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.workdir = workdir
        self.log_path = workdir / "powerfs.log"
        self.process: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None

    def start(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        """Mount, and wait until the kernel has sent FUSE's INIT (the mount is usable)."""
        for d in (self.backing, self.mountpoint, self.workdir):
            d.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, SERVER, str(self.backing), str(self.mountpoint), str(self.workdir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,  # a Ctrl-C in the terminal reaches pytest, not the server
        )
        line = self._read_line(timeout)
        if line != "ready":
            self.close()
            raise PowerFsError(f"powerfs did not mount {self.mountpoint}: {self.log_tail()}")

    def status(self) -> dict[str, int]:
        """Unsynced writes and the files they belong to."""
        status: dict[str, int] = json.loads(self._command("status"))
        return status

    def cut(self, mode: CutMode = "all", seed: int = 0) -> None:
        """Cut the power: the surviving bytes are final in ``backing`` and every operation on the
        mount fails (EIO) until ``close()``; kill the processes using it before that."""
        self._expect_ok(self._command(f"cut {mode} {seed}"))

    def sync(self) -> None:
        """What a clean shutdown does first: everything written is made durable."""
        self._expect_ok(self._command("sync"))

    def close(self, timeout: float = EXIT_TIMEOUT_S) -> None:
        """Wait for the server to exit (killing it after ``timeout``) and detach the mount."""
        process, self.process = self.process, None
        if process is not None:
            if process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()  # the server cuts the power on EOF
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
            if process.stdout is not None:
                process.stdout.close()
        force_unmount(self.mountpoint)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's stderr."""
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _command(self, command: str) -> str:
        if self.process is None or self.process.stdin is None:
            raise PowerFsError("powerfs is not running")
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._read_line(COMMAND_TIMEOUT_S)

    def _expect_ok(self, answer: str) -> None:
        if answer != "ok":
            raise PowerFsError(f"powerfs answered {answer!r}: {self.log_tail()}")

    def _read_line(self, timeout: float) -> str:
        assert self.process is not None
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise PowerFsError(f"powerfs did not answer within {timeout} s: {self.log_tail()}")
        return self.process.stdout.readline().strip()


class PowerLossDisk:
    """A simulated disk: ``backing`` is what the platters hold, mounted at ``path`` for use.

    ``mount()`` (again after a cut, like booting after a power loss) shows the surviving bytes;
    ``close()`` unmounts whatever is mounted, also after a failure.
    """

    def __init__(self, root: Path) -> None:
        self.backing = root / "disk"
        self.path = root / "mnt"
        self.workdir = root / "powerfs"
        self.mount: PowerLossMount | None = None

    def boot(self) -> PowerLossMount:
        """Mount the backing directory (closing a previous mount first)."""
        self.close()
        self.mount = PowerLossMount(self.backing, self.path, self.workdir)
        self.mount.start()
        return self.mount

    def freeze(self, mode: CutMode = "all", seed: int = 0) -> None:
        """Cut the power but keep the dead disk mounted (every operation fails) until ``close()``:
        kill the processes using it in between, or one could write to the bare mountpoint."""
        if self.mount is None:
            raise PowerFsError("the disk is not mounted")
        self.mount.cut(mode, seed)

    def cut(self, mode: CutMode = "all", seed: int = 0) -> None:
        """Cut the power (see ``surviving_writes``) and unmount: for tests whose own process is
        the only user of the disk."""
        self.freeze(mode, seed)
        self.close()

    def close(self) -> None:
        """Unmount (if mounted) and stop the filesystem process; bounded in time."""
        mount, self.mount = self.mount, None
        if mount is not None:
            mount.close()
        force_unmount(self.path)
