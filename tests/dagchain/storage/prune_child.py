"""Child process of test_crash.py's pruning test: a node that prunes while it validates.

Run: ``python -m tests.dagchain.storage.prune_child DB_DIR DAG_FILE MS_TARGET_BITS DEPTH``.
Opens the LevelDB store (crash recovery), prints ``ready``, applies the blocks of the DAG file it
does not hold yet (one synced batch each), then prunes in steps of one level set (one synced
batch each, as the daemon's pruning task does when ``--prune-depth`` is first turned on for a
long chain), printing ``pruned H`` once a step's batch is written (H: the lowest height whose
bodies remain) and then waiting for a line on stdin (the test's ``go``, so that it is never more
than one step ahead of the reader), and ``done`` at the end. A kill lands while it validates or
while it prunes.
"""

import sys
from pathlib import Path

from dagchain.blocks import decode_block
from dagchain.chain import Chain
from dagchain.pruning import Pruner
from dagchain.storage.leveldb import LevelDBStore
from tests.dagchain.storage.crash_child import NOW_AFTER_GENESIS_MS, params_for, read_dag

STEP_BLOCKS = 1


def main(argv: list[str]) -> None:
    db, dag_file, bits, depth = argv
    params = params_for(bits)
    now = params.genesis_timestamp_ms + NOW_AFTER_GENESIS_MS
    store = LevelDBStore(db)
    chain = Chain(params, store)
    pruner = Pruner(chain, int(depth))
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    blocks = read_dag(Path(dag_file))
    for raw in blocks:
        if chain.has_block(decode_block(raw, params).id):
            continue
        chain.on_block(raw, now)
    while pruner.step(STEP_BLOCKS):
        out.write(f"pruned {pruner.next_height}\n")
        out.flush()
        sys.stdin.readline()  # the test's "go" (EOF: go on): at most one step ahead of it
    out.write("done\n")
    out.flush()
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
