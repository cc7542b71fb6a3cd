"""One batch per level set (PROTOCOL.md §12 A1, §11.4 P9): ``Chain.write_group``.

The grouped store answers reads from the writes it holds back, writes nothing before the group
ends and then exactly one batch; a batch whose block raises is dropped alone; an exception inside
the group still writes the complete batches before it. A chain fed in groups (per level set, in
random chunks, in random delivery order with orphans, with a one-milestone memory window so
history is read back from the store mid-group) ends with the same rows, byte for byte, as one
fed block by block, on both backends, and so does a reorganisation with F8 invalidate and
reconsider inside one group; a rejected block inside a group leaves the store exactly as
per-block application up to that block.
"""

import contextlib
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from dagchain.blocks import Block
from dagchain.chain import Chain
from dagchain.errors import InvalidBlock
from dagchain.storage import KVStore, WriteBatch
from dagchain.storage.group import GroupingStore
from dagchain.storage.leveldb import LevelDBStore
from dagchain.storage.memory import MemoryStore
from dagchain.types import BlockId
from tests.dagchain.storage.conftest import StoreFactory
from tests.dagchain.test_forkchoice import two_branch_node
from tests.dagchain.test_properties import NOW, PARAMS, Dag, build_dag


@pytest.fixture(scope="module")
def dag() -> Dag:
    return build_dag(seed=5, size=260, n_miners=3)


def rows(store: KVStore) -> dict[bytes, bytes]:
    return dict(store.iter_prefix(b""))


def per_block(
    blocks: Sequence[Block], window: int | None = None
) -> tuple[Chain, dict[bytes, bytes]]:
    chain = Chain(PARAMS, MemoryStore(), memory_window=window)
    for block in blocks:
        chain.on_block(block.raw, NOW)
    return chain, rows(chain.store)


# --- the grouping store ---------------------------------------------------------------------


def test_group_reads_its_own_writes_and_writes_once_at_the_end(open_store: StoreFactory) -> None:
    inner = open_store()
    with inner.write_batch() as wb:
        for key in (b"a1", b"a3", b"a5", b"b1"):
            wb.put(key, key)
    store = GroupingStore(inner)
    with store.group():
        with store.write_batch() as wb:
            wb.put(b"a2", b"new")
            wb.put(b"a3", b"changed")
            wb.delete(b"a5")
        with store.write_batch() as wb:
            wb.put(b"a6", b"x")
            wb.put(b"a2", b"newer")  # the last write of a key wins
        assert store.get(b"a2") == b"newer"
        assert store.get(b"a5") is None
        assert store.get(b"a1") == b"a1"
        assert list(store.iter_prefix(b"a")) == [
            (b"a1", b"a1"),
            (b"a2", b"newer"),
            (b"a3", b"changed"),
            (b"a6", b"x"),
        ]
        assert inner.get(b"a2") is None
        assert inner.get(b"a5") == b"a5"
    assert rows(inner) == {
        b"a1": b"a1",
        b"a2": b"newer",
        b"a3": b"changed",
        b"a6": b"x",
        b"b1": b"b1",
    }
    assert store.groups_written == 1
    assert store.batches_grouped == 2


def test_group_is_one_store_batch_and_nested_groups_join() -> None:
    inner = MemoryStore()
    store = GroupingStore(inner)
    with store.group():
        for n in range(5):
            with store.group(), store.write_batch() as wb:
                wb.put(bytes([n]), b"v")
        assert inner.batches_written == 0
    assert inner.batches_written == 1
    with store.write_batch() as wb:  # outside a group: straight to the store
        wb.put(b"z", b"v")
    assert inner.batches_written == 2


def test_a_failing_batch_is_dropped_and_the_complete_ones_are_written() -> None:
    inner = MemoryStore()
    store = GroupingStore(inner)

    def fill() -> None:
        with store.group():
            with store.write_batch() as wb:
                wb.put(b"kept", b"1")
            with store.write_batch() as wb:
                wb.put(b"dropped", b"2")
                raise KeyError("inside the batch")

    with pytest.raises(KeyError):
        fill()
    assert rows(inner) == {b"kept": b"1"}
    assert not store.grouping
    assert store.get == inner.get


class RecordingStore(MemoryStore):
    """A MemoryStore that records every put and delete its batches write."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[tuple[bytes, bytes | None]] = []

    @contextlib.contextmanager
    def write_batch(self) -> Iterator[WriteBatch]:  # type: ignore[override]
        with super().write_batch() as wb:
            yield wb
            self.written.extend(wb.ops)


def test_rows_born_and_removed_in_a_group_are_not_written() -> None:
    """Keys under a put-only-when-absent prefix: a put then a delete inside one group leaves no
    trace in the store (no deletion marker); a key deleted first existed before the group, so its
    deletion is written however often it is put and deleted again; other prefixes unchanged."""
    inner = RecordingStore()
    with inner.write_batch() as wb:
        wb.put(b"p-old", b"1")
        wb.put(b"a-old", b"1")
    inner.written.clear()
    store = GroupingStore(inner, put_only_when_absent=(b"p",))
    with store.group():
        with store.write_batch() as wb:
            wb.put(b"p-born", b"1")
            wb.put(b"p-same-batch", b"1")
            wb.delete(b"p-same-batch")
            wb.put(b"p-back", b"1")
            wb.put(b"a-born", b"1")
        with store.write_batch() as wb:
            wb.delete(b"p-born")
            wb.delete(b"p-old")
            wb.delete(b"p-back")
            wb.delete(b"a-born")
        assert store.get(b"p-born") is None
        assert list(store.iter_prefix(b"p")) == []
        with store.write_batch() as wb:
            wb.put(b"p-old", b"2")  # an undo puts it back, a re-apply deletes it again
            wb.put(b"p-back", b"2")
        with store.write_batch() as wb:
            wb.delete(b"p-old")
    assert rows(inner) == {b"a-old": b"1", b"p-back": b"2"}
    assert sorted(inner.written) == [(b"a-born", None), (b"p-back", b"2"), (b"p-old", None)]


def test_a_failed_batch_does_not_drop_a_row_born_in_the_group() -> None:
    inner = RecordingStore()
    store = GroupingStore(inner, put_only_when_absent=(b"p",))

    def fill() -> None:
        with store.group():
            with store.write_batch() as wb:
                wb.put(b"p1", b"1")
            with store.write_batch() as wb:
                wb.delete(b"p1")
                raise KeyError("inside the batch")

    with pytest.raises(KeyError):
        fill()
    assert rows(inner) == {b"p1": b"1"}


def test_level_set_groups_write_no_pending_row_of_their_own_blocks(dag: Dag) -> None:
    """A block accepted and ordered inside one group never gets a ``p`` row or a deletion marker
    (docs/protocol.md decision 22: one LevelDB entry less per downloaded block): the group
    deletes only ``p`` rows an earlier group wrote, and the rows equal per-block ones."""
    ref, expected = per_block(dag.blocks)
    store = RecordingStore()
    chain = Chain(PARAMS, store)
    put_before: set[bytes] = set()
    deleted = puts = 0
    for group in level_set_groups(ref, dag.blocks):
        store.written.clear()
        with chain.write_group():
            for block in group:
                chain.on_block(block.raw, NOW)
        for key, value in store.written:
            if key[:1] == b"p" and value is None:
                assert key in put_before
                deleted += 1
        written = [key for key, value in store.written if key[:1] == b"p" and value]
        puts += len(written)
        put_before |= set(written)
    assert rows(store) == expected
    assert 0 < len(put_before) < len(dag.blocks) // 2
    # Each p row written is deleted once unless it stays pending; a reorganisation that returns
    # an ordered block to the pending set writes (and later deletes) its row again.
    still_pending = len(put_before & {b"p" + b for b in ref.pending_blocks()})
    assert deleted == puts - still_pending


# --- the chain in groups ------------------------------------------------------------------------


def level_set_groups(chain_ref: Chain, blocks: Sequence[Block]) -> list[list[Block]]:
    """Blocks in arrival order cut after each milestone block (what P9 applies at once)."""
    groups: list[list[Block]] = [[]]
    for block in blocks:
        groups[-1].append(block)
        meta = chain_ref.get_meta(block.id)
        if meta is not None and meta.is_milestone:
            groups.append([])
    return [g for g in groups if g]


@pytest.mark.parametrize("window", [None, 1])
def test_level_set_groups_reach_the_per_block_state_byte_for_byte(
    dag: Dag, open_store: StoreFactory, window: int | None
) -> None:
    ref, expected = per_block(dag.blocks, window)
    store = open_store()
    chain = Chain(PARAMS, store, memory_window=window)
    batches_before = getattr(store, "batches_written", 0)
    groups = level_set_groups(ref, dag.blocks)
    for group in groups:
        with chain.write_group():
            for block in group:
                chain.on_block(block.raw, NOW)
            assert chain.in_write_group
    assert rows(store) == expected
    assert chain.best_id == ref.best_id
    assert chain.utxos() == ref.utxos()
    if isinstance(store, MemoryStore):
        assert store.batches_written - batches_before == len(groups)
    reopened = Chain(PARAMS, store, memory_window=window)  # §12 recovery from the grouped rows
    assert reopened.best_id == ref.best_id
    assert reopened.utxos() == ref.utxos()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_chunks_in_random_order_reach_the_per_block_state(dag: Dag, seed: int) -> None:
    """Orphans released inside a group, reorganisations across chunks, one-milestone window."""
    rng = random.Random(seed)
    order = list(dag.blocks)
    rng.shuffle(order)
    _, expected_rows = per_block(order, window=1)
    chain = Chain(PARAMS, MemoryStore(), memory_window=1)
    pos = 0
    while pos < len(order):
        size = rng.choice([1, 3, 10, 60])
        with chain.write_group():
            for block in order[pos : pos + size]:
                chain.on_block(block.raw, NOW)
        pos += size
    # The orphan pool holds nothing at the end (every link arrived), so stores compare whole.
    assert rows(chain.store) == expected_rows


def test_a_rejected_block_inside_a_group_keeps_what_came_before(dag: Dag, tmp_path: Path) -> None:
    """The group is written up to the rejected block, exactly as per-block application."""
    cut = 120
    _, expected = per_block(dag.blocks[:cut])
    store = LevelDBStore(tmp_path / "db", sync=False)
    try:
        chain = Chain(PARAMS, store)

        def apply() -> None:
            with chain.write_group():
                for block in dag.blocks[:cut]:
                    chain.on_block(block.raw, NOW)
                chain.on_block(tampered(dag.blocks[cut]), NOW)

        with pytest.raises(InvalidBlock):
            apply()
        assert rows(store) == expected
    finally:
        store.close()


def tampered(block: Block) -> bytes:
    """The block's bytes with the last byte of the body changed (H7 merkle or H8 fails)."""
    raw = bytearray(block.raw)
    raw[-1] ^= 1
    return bytes(raw)


@pytest.mark.parametrize("window", [None, 1])
def test_reorganisation_and_f8_inside_one_group_match_per_batch(window: int | None) -> None:
    """A reorg, invalidate and reconsider inside one group (F2 over milestones read back through
    the overlay, with a one-milestone window: the store scan merges the pending writes)."""
    node, _, losing, winning = two_branch_node()
    blocks = [b.raw for b in node.sent]

    def run(grouped: bool) -> tuple[Chain, list[BlockId]]:
        chain = Chain(node.params, MemoryStore(), memory_window=window)
        heads: list[BlockId] = []
        with chain.write_group() if grouped else contextlib.nullcontext():
            for raw in blocks:
                chain.on_block(raw, node.now_ms)
            heads.append(chain.best_id)
            chain.invalidate(winning[0].id)
            heads.append(chain.best_id)
            chain.reconsider(winning[0].id)
            heads.append(chain.best_id)
        return chain, heads

    per_batch, heads = run(grouped=False)
    grouped, grouped_heads = run(grouped=True)
    assert heads == [winning[-1].id, losing[-1].id, winning[-1].id]
    assert grouped_heads == heads
    assert rows(grouped.store) == rows(per_batch.store)
    assert isinstance(grouped.store, MemoryStore)
    assert grouped.store.batches_written == 2  # genesis, then the one group
