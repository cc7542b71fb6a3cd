"""Synced batches per second into a fresh LevelDBStore, with or without the directory fsync.

docs/benchmarks.md, "The directory fsync after a synced batch" (docs/protocol.md decision 39):
``python bench/dirsync.py on`` is the store as it is; ``off`` replaces
``LevelDBStore._sync_directory`` by a no-op (the store before). Run the two side by side, A B A B.
"""

import argparse
import os
import shutil
import tempfile
import time

from dagchain.storage.leveldb import LevelDBStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("on", "off"), help="the directory fsync on or off")
    parser.add_argument("--batches", type=int, default=3000, help="synced batches (3000)")
    parser.add_argument("--size", type=int, default=8192, help="bytes per batch (8192)")
    args = parser.parse_args()
    if args.mode == "off":
        LevelDBStore._sync_directory = lambda self: None  # type: ignore[method-assign]
    work = tempfile.mkdtemp(prefix="dirsync-")
    try:
        store = LevelDBStore(os.path.join(work, "db"))
        started = time.perf_counter()
        for i in range(args.batches):
            with store.write_batch() as wb:
                wb.put(b"k%d" % i, os.urandom(args.size))
        elapsed = time.perf_counter() - started
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.mode}: {args.batches / elapsed:.0f} synced {args.size}-byte batches/s")


if __name__ == "__main__":
    main()
