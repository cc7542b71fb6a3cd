"""``dagchain-sim sweep --executor dask|ray --address ADDR`` where no cluster listens.

The CLI runs as a subprocess, as a user runs it, against a 127.0.0.1 port that is bound but not
listening (so nothing can accept a connection there for the test's length): it must fail within a
few seconds with one line naming the address and exit 2, print no traceback, and leave no empty
``--out`` behind. The ray path fails the same way whether or not ray is installed: the check
needs no import of ray.
"""

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulator.scenario import ScenarioError
from simulator.sweep import cluster_endpoint

REPO_ROOT = Path(__file__).resolve().parents[2]
FAIL_FAST_S = 15.0
"""Bound on one failing CLI run, interpreter start and imports included (the check itself: 3 s)."""
SWEEP = 'set = ["nodes=2", "duration_s=1"]\n[grid]\nseed = [1]\n'


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A 127.0.0.1 port held bound without listening: every connect to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def sweep_cli(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    spec = tmp_path / "sweep.toml"
    spec.write_text(SWEEP)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "simulator", "sweep", str(spec), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc, time.monotonic() - started


@pytest.mark.parametrize(
    ("executor", "form"),
    [
        ("dask", "127.0.0.1:{port}"),
        ("dask", "tcp://127.0.0.1:{port}"),
        ("ray", "127.0.0.1:{port}"),
        ("ray", "ray://127.0.0.1:{port}"),
    ],
)
def test_an_address_where_nothing_listens_fails_fast_in_one_line(
    tmp_path: Path, closed_port: int, executor: str, form: str
) -> None:
    address = form.format(port=closed_port)
    out = tmp_path / "out"
    proc, elapsed = sweep_cli(
        tmp_path, "--executor", executor, "--address", address, "--out", str(out)
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert address in lines[0]
    assert lines[0].startswith("dagchain-sim: error: cannot reach the ")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert elapsed < FAIL_FAST_S
    assert not out.exists()


def test_workers_with_an_address_is_noted_as_ignored(tmp_path: Path, closed_port: int) -> None:
    address = f"127.0.0.1:{closed_port}"
    proc, _ = sweep_cli(
        tmp_path, "--executor", "dask", "--address", address, "--workers", "4", "--out", "o"
    )
    assert proc.returncode == 2
    note, error = proc.stderr.strip().splitlines()
    assert note == (
        "dagchain-sim: note: --workers is ignored with --address: the dask cluster's own "
        "workers run the sweep"
    )
    assert address in error


def test_an_existing_out_directory_is_kept(tmp_path: Path, closed_port: int) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    address = f"127.0.0.1:{closed_port}"
    proc, _ = sweep_cli(tmp_path, "--executor", "dask", "--address", address, "--out", str(out))
    assert proc.returncode == 2
    assert out.is_dir()


@pytest.mark.parametrize(
    ("executor", "address", "endpoint"),
    [
        ("dask", "sched.example:9000", ("sched.example", 9000)),
        ("dask", "tls://sched.example", ("sched.example", 8786)),
        ("dask", "[::1]:8787", ("::1", 8787)),
        ("ray", "head.example", ("head.example", 6379)),
        ("ray", "ray://head.example", ("head.example", 10001)),
        ("ray", "auto", None),
    ],
)
def test_cluster_addresses_name_their_endpoint(
    executor: str, address: str, endpoint: tuple[str, int] | None
) -> None:
    assert cluster_endpoint(executor, address) == endpoint


@pytest.mark.parametrize(
    ("executor", "address"),
    [("dask", "host:port"), ("dask", "host:70000"), ("dask", "ray://h:1"), ("ray", "[::1")],
)
def test_unreadable_addresses_are_user_errors(executor: str, address: str) -> None:
    with pytest.raises(ScenarioError, match="--address"):
        cluster_endpoint(executor, address)
