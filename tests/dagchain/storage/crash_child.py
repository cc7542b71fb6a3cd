"""Child process of test_crash.py: apply a DAG file to a LevelDB store, acknowledging each block.

Run: ``python -m tests.dagchain.storage.crash_child DB_DIR DAG_FILE MS_TARGET_BITS [levelset]``.
Prints ``ready`` once the store is open (recovery done), then one block id (hex) per accepted
block, flushed after ``on_block`` returned (the block's A1 batch is synced by then), and ``done``.
With ``levelset``, blocks are applied in ``Chain.write_group`` groups that end after each
milestone block, as P9 applies a downloaded level set (§12: one synced batch per level set), and
a group's ids are printed only once the group has been written.
Blocks the store already holds are skipped, so a restarted child resumes where the last left off.
"""

import contextlib
import sys
from pathlib import Path

from dagchain.blocks import decode_block
from dagchain.chain import Chain
from dagchain.params import DEVNET, ConsensusParams
from dagchain.storage.leveldb import LevelDBStore

NOW_AFTER_GENESIS_MS = 10**9


def write_dag(path: Path, blocks: list[bytes]) -> None:
    """Length-prefixed raw blocks."""
    with path.open("wb") as f:
        for raw in blocks:
            f.write(len(raw).to_bytes(4, "big") + raw)


def read_dag(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


def params_for(ms_target_bits: str) -> ConsensusParams:
    return DEVNET.replace(genesis_ms_target_bits=int(ms_target_bits, 16))


def main(argv: list[str]) -> None:
    db, dag_file, bits, *mode = argv
    grouped = mode == ["levelset"]
    params = params_for(bits)
    blocks = read_dag(Path(dag_file))
    now = params.genesis_timestamp_ms + NOW_AFTER_GENESIS_MS
    store = LevelDBStore(db)
    chain = Chain(params, store)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    todo = [raw for raw in blocks if not chain.has_block(decode_block(raw, params).id)]
    pos = 0
    while pos < len(todo):
        acked: list[bytes] = []
        with chain.write_group() if grouped else contextlib.nullcontext():
            while pos < len(todo):
                outcome = chain.on_block(todo[pos], now)
                pos += 1
                acked += outcome.accepted
                if not grouped or outcome.is_milestone:
                    break
        for bid in acked:
            out.write(bid.hex() + "\n")
            out.flush()
    out.write("done\n")
    out.flush()
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
