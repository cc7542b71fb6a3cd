"""The power-loss disk fixture: a mounted tests/powerloss/powerfs.py, skipped without FUSE.

Needs Debian's ``fuse3`` and ``libfuse3-3``, ``/dev/fuse`` and the ``mfusepy`` package (test
extra). ``make test`` installs the Debian packages when it runs as root with apt-get
(scripts/ensure-system-deps.sh). Without them these tests skip with one line naming what is
missing; on CI (``CI`` set) they fail instead (docs/architecture.md, "System packages").
"""

import ctypes.util
import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.powerloss.disk import PowerFsError, PowerLossDisk


def fuse_unavailable_reason() -> str | None:
    """Why a FUSE filesystem cannot be mounted here, or None."""
    missing = [
        package
        for package, present in (
            ("fuse3", shutil.which("fusermount3") is not None),
            ("libfuse3-3", ctypes.util.find_library("fuse3") is not None),
        )
        if not present
    ]
    if missing:
        return (
            f"missing Debian packages: {' '.join(missing)}; install with "
            "'sudo apt-get install fuse3 libfuse3-3' (make test does this as root)"
        )
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed: .venv/bin/pip install -e '.[test]'"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is absent (a container needs --device /dev/fuse --cap-add SYS_ADMIN)"
    return None


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``; fail instead on CI, which must run these tests."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PowerLossDisk]:
    """A power-loss disk, mounted at ``disk.path``; unmounted in teardown, whatever happened."""
    reason = fuse_unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)
    power_disk = PowerLossDisk(tmp_path)
    try:
        try:
            power_disk.boot()
        except PowerFsError as exc:
            if "fusermount3: " not in str(exc):  # our bug, not the machine's: never skip it
                raise
            skip_or_fail(f"this machine refuses FUSE mounts: {str(exc).splitlines()[-1]}")
        yield power_disk
    finally:
        power_disk.close()
