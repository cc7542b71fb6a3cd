"""§12 (v2): a schema-1 data directory is refused with one line naming it, and left untouched."""

import subprocess
import sys
from pathlib import Path

from dagchain.genesis import genesis_block
from dagchain.params import DEVNET
from dagchain.storage import schema as S
from dagchain.storage.leveldb import LevelDBStore


def _make_v1_datadir(datadir: Path) -> dict[bytes, bytes]:
    """A LevelDB store whose meta rows say schema 1 (what a v1 node left behind)."""
    datadir.mkdir()
    store = LevelDBStore(datadir / "chain")
    rows = {
        S.META_SCHEMA: S.encode_row([1]),
        S.META_NETWORK: S.encode_row([DEVNET.network_id.encode("ascii")]),
        S.META_GENESIS: S.encode_row([genesis_block(DEVNET).id]),
        S.P_BLOCK + b"\x01" * 32: b"v1 block bytes",
    }
    with store.write_batch() as wb:
        for key, value in rows.items():
            wb.put(key, value)
    store.close()
    return rows


def test_schema_1_datadir_is_refused_with_one_line(tmp_path: Path) -> None:
    """§12 Crash recovery: a schema-1 directory holds v1 block bytes and is refused with one
    line naming the directory and saying to start a new one; nothing in it changes."""
    datadir = tmp_path / "old-v1-node"
    rows = _make_v1_datadir(datadir)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "node.cli",
            "start",
            "--network",
            "devnet",
            "--datadir",
            str(datadir),
            "--p2p-port",
            "0",
            "--api-port",
            "0",
            "--no-discovery",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    refusal = [line for line in lines if "schema version 1" in line]
    assert len(refusal) == 1, proc.stderr
    assert str(datadir) in refusal[0]
    assert "new data directory" in refusal[0]
    assert "Traceback" not in proc.stderr
    store = LevelDBStore(datadir / "chain")
    try:
        for key, value in rows.items():
            assert store.get(key) == value
    finally:
        store.close()
