"""bench/core.py's workload streamed block by block (``bench/storage.py --prune-depth``) is the
one ``build_workload`` holds in memory, and building it is deterministic: the unpruned and the
pruned child of the prune bench each build their own copy and must apply the same blocks."""

from pathlib import Path

from bench.core import NOW, bench_params, build_workload, stream_workload, workload_setup
from dagchain.chain import Chain
from dagchain.storage.leveldb import LevelDBStore


def test_streamed_workload_on_leveldb_is_the_built_one(tmp_path: Path) -> None:
    params = bench_params()
    store, blocks = build_workload(params, 9, long_run=True)  # one level set and a block
    setup, start = workload_setup(params)
    assert setup.snapshot() == store.snapshot()
    db = LevelDBStore(tmp_path / "db")
    with db.write_batch() as wb:
        for key, value in setup.snapshot().items():
            wb.put(key, value)
    chain = Chain(params, db)
    streamed = []
    group = chain.write_group()  # as the prune bench applies them: one batch per level set
    group.__enter__()
    for block in stream_workload(chain, start, 9, long_run=True):
        if chain.on_block(block.raw, NOW).is_milestone:
            group.__exit__(None, None, None)
            group = chain.write_group()
            group.__enter__()
        streamed.append(block.raw)
    group.__exit__(None, None, None)
    assert streamed == [b.raw for b in blocks]
    assert chain.best_height >= 1
    db.close()
