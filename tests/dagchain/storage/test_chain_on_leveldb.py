"""The core on LevelDB, with a bounded memory window (docs/protocol.md decision 15).

The chain's delivery-order property runs on a real LevelDB store with a restart in the middle and
a one-milestone memory window (so nearly every read of history goes to disk); a reorganisation
works across a restart; and a small window keeps only recent history in memory while every query
of old history still answers exactly as a chain that keeps everything.
"""

import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagchain.blocks import decode_block
from dagchain.chain import BlockStatus, Chain
from dagchain.storage import KVStore, WriteBatch
from dagchain.storage.leveldb import LevelDBStore
from dagchain.storage.memory import MemoryStore
from tests.dagchain.chainkit import ledger_of, ledger_state
from tests.dagchain.test_forkchoice import two_branch_node
from tests.dagchain.test_properties import NOW, PARAMS, build_dag, dag_pool


def open_chain(path: Path, window: int | None = None) -> Chain:
    # sync=False: durability is test_crash.py's subject; here the logic over a real LevelDB.
    return Chain(PARAMS, LevelDBStore(path, sync=False), memory_window=window)


@pytest.mark.property
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_delivery_order_property_holds_on_leveldb_across_a_restart(data: st.DataObject) -> None:
    """test_properties' L1-L3/F2 property, on LevelDB, restarted after a random prefix."""
    dags = dag_pool()
    dag = dags[data.draw(st.integers(0, len(dags) - 1), label="dag")]
    order = data.draw(st.permutations(dag.blocks), label="order")
    cut = data.draw(st.integers(0, len(order)), label="restart after")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "db"
        chain = open_chain(db, window=1)
        for block in order[:cut]:
            chain.on_block(block.raw, NOW)
        chain.store.close()
        chain = open_chain(db, window=1)  # the orphan pool is not persisted: deliver again
        for block in [*order[cut:], *order[:cut]]:
            chain.on_block(block.raw, NOW)
        ids = [b.id for b in dag.blocks]
        try:
            assert [b for b in ids if not chain.has_block(b)] == []
            assert ledger_of(chain, ids) == dag.reference
        finally:
            chain.store.close()


def test_reorganisation_across_a_restart(tmp_path: Path) -> None:
    """§12: a branch seen before a restart is undone by a heavier one delivered after it."""
    node, common, losing, winning = two_branch_node()
    db = tmp_path / "db"
    chain = Chain(node.params, LevelDBStore(db))
    for block in [*common, *losing]:
        chain.on_block(block.raw, node.now_ms)
    assert chain.best_id == losing[-1].id
    chain.store.close()

    chain = Chain(node.params, LevelDBStore(db))
    outcomes = [chain.on_block(b.raw, node.now_ms) for b in winning]
    undone = [d.milestone for o in outcomes for r in o.reorgs for d in r.undone]
    assert undone == [losing[1].id, losing[0].id]
    ids = [b.id for b in node.sent]
    assert ledger_state(chain, ids) == ledger_state(node.chain, ids)
    chain.store.close()

    chain = Chain(node.params, LevelDBStore(db))
    assert ledger_state(chain, ids) == ledger_state(node.chain, ids)
    chain.store.close()


WINDOW = 3


@pytest.fixture(scope="module")
def long_dag() -> list[bytes]:
    return [b.raw for b in build_dag(seed=11, size=240, n_miners=3).blocks]


def query_everything(chain: Chain, raws: list[bytes]) -> tuple[object, ...]:
    ids = [decode_block(r, PARAMS).id for r in raws]
    best = chain.best_chain()
    txids = [tx.txid for r in raws for tx in decode_block(r, PARAMS).txs]
    return (
        best,
        [chain.level_set(m) for m in best],
        [(chain.get_block(b), chain.get_meta(b), chain.ls_height(b)) for b in ids],
        [chain.get_snapshot(b) for b in ids],
        [chain.blocks_with_tx(t) for t in txids],
        chain.pending_blocks(),
        chain.utxos(),
        chain.roots(),
        chain.final_id,
    )


def test_small_window_keeps_recent_history_only_and_answers_the_same(
    long_dag: list[bytes],
) -> None:
    everything = Chain(PARAMS, MemoryStore(), memory_window=10**9)
    windowed = Chain(PARAMS, MemoryStore(), memory_window=WINDOW)
    for raw in long_dag:
        everything.on_block(raw, NOW)
        windowed.on_block(raw, NOW)
    assert windowed.best_height > 10 * WINDOW
    assert query_everything(windowed, long_dag) == query_everything(everything, long_dag)
    st = windowed.state
    floor = windowed.best_height - WINDOW
    assert min(st.ls_height.recent.values()) >= floor
    assert min(s.height for s in st.snapshots.recent.values()) >= floor
    assert len(st.blocks.recent) < len(long_dag) // 4
    assert len(st.deltas.recent) <= WINDOW + 1


def test_reopen_loads_only_the_window(long_dag: list[bytes], tmp_path: Path) -> None:
    db = tmp_path / "db"
    chain = open_chain(db, window=WINDOW)
    for raw in long_dag:
        chain.on_block(raw, NOW)
    want = query_everything(chain, long_dag)
    chain.store.close()
    chain = open_chain(db, window=WINDOW)
    try:
        assert len(chain.state.blocks.recent) < len(long_dag) // 4
        assert len(chain.state.deltas.recent) <= WINDOW + 1
        assert query_everything(chain, long_dag) == want
    finally:
        chain.store.close()


class CountingStore:
    """A KVStore that records every key read through ``get``."""

    def __init__(self, inner: KVStore) -> None:
        self.inner = inner
        self.reads: list[bytes] = []

    def get(self, key: bytes) -> bytes | None:
        self.reads.append(key)
        return self.inner.get(key)

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.inner.iter_prefix(prefix)

    def write_batch(self) -> AbstractContextManager[WriteBatch]:
        return self.inner.write_batch()

    def close(self) -> None:
        self.inner.close()


def test_duplicates_are_recognised_across_a_restart_and_new_blocks_read_no_row(
    long_dag: list[bytes], tmp_path: Path
) -> None:
    """D1 from memory (decision 22): a new block whose milestone link arrived since the store was
    opened costs no store read of its own id; every earlier block, evicted or from before the
    restart, is still a duplicate."""
    db = tmp_path / "db"
    half = len(long_dag) // 2
    chain = open_chain(db, window=WINDOW)
    for raw in long_dag[:half]:
        chain.on_block(raw, NOW)
    chain.store.close()
    counting = CountingStore(LevelDBStore(db, sync=False))
    chain = Chain(PARAMS, counting, memory_window=WINDOW)
    try:
        seq_at_open = chain.state.next_seq
        served_from_memory = 0
        for raw in long_dag[half:]:
            block = decode_block(raw, PARAMS)
            link = chain.get_meta(block.header.milestone_link)
            counting.reads.clear()
            chain.on_block(raw, NOW)
            assert b"d" + block.id not in counting.reads  # accepted now: no delta stored before
            if link is not None and link.seq >= seq_at_open:
                assert b"m" + block.id not in counting.reads
                served_from_memory += 1
        assert served_from_memory > half // 2
        assert chain.best_height > 10 * WINDOW
        for raw in long_dag:
            block = decode_block(raw, PARAMS)
            meta = chain.get_meta(block.id)
            assert meta is not None
            outcome = chain.on_block(raw, NOW)
            assert outcome.status is BlockStatus.DUPLICATE
            assert outcome.is_milestone == meta.is_milestone
    finally:
        chain.store.close()
