"""§12 (v2): a schema-1 data directory is refused with one line naming it, and left untouched;
v2.1: so is a v2 devnet data directory (written with c = 1/1), saying to wipe it."""

import subprocess
import sys
from pathlib import Path

from dagchain.chain import Chain
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


def _start(datadir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
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


def _stored_rows(path: Path) -> dict[bytes, bytes]:
    store = LevelDBStore(path)
    try:
        return dict(store.iter_prefix(b""))
    finally:
        store.close()


def test_v2_devnet_datadir_is_refused_with_one_line_saying_to_wipe_it(tmp_path: Path) -> None:
    """PROTOCOL.md v2.1: devnet's c went from 1/1 to 1/16, so a block's VALID set can differ; a
    devnet directory a v2 node wrote (schema 2, no sortition row) is refused, exit 2, with one
    line naming the directory and saying to wipe it (docs/protocol.md decision 31)."""
    datadir = tmp_path / "v2-devnet-node"
    datadir.mkdir()
    store = LevelDBStore(datadir / "chain")
    Chain(DEVNET.replace(sortition_c_den=1), store)  # what a v2 devnet node wrote...
    with store.write_batch() as wb:
        wb.delete(S.META_SORTITION)  # ...which had no sortition row
    store.close()
    rows = _stored_rows(datadir / "chain")
    proc = _start(datadir)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    refusal = [line for line in lines if "wipe this data directory" in line]
    assert len(refusal) == 1, proc.stderr
    assert str(datadir) in refusal[0]
    assert "K = 4, c = 1/1, uniform;" in refusal[0]
    assert "c = 1/16" in refusal[0]
    assert _stored_rows(datadir / "chain") == rows


def test_schema_1_datadir_is_refused_with_one_line(tmp_path: Path) -> None:
    """§12 Crash recovery: a schema-1 directory holds v1 block bytes and is refused with one
    line naming the directory and saying to start a new one; nothing in it changes."""
    datadir = tmp_path / "old-v1-node"
    rows = _make_v1_datadir(datadir)
    proc = _start(datadir)
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
