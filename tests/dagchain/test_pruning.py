"""Pruning (``--prune-depth``, issue 27 item 1): bodies and undo records of old level sets go,
everything else stays, row for row; the pruned chain reopens, validates new blocks and refuses
what it can no longer do."""

import pytest

from dagchain.blocks import decode_stored_block, encode_pruned_block
from dagchain.chain import Chain
from dagchain.errors import StorageError
from dagchain.pruning import Pruner, check_prune_depth, get_bodies_from
from dagchain.reindex import reindex
from dagchain.storage import KVStore
from dagchain.storage import schema as S
from dagchain.storage.memory import MemoryStore
from tests.dagchain.test_properties import PARAMS, Dag, build_dag

NOW = PARAMS.genesis_timestamp_ms + 10**9
DEPTH = PARAMS.punctuality


def expected_pruned(reference: dict[bytes, bytes], below: int, depth: int) -> dict[bytes, bytes]:
    """The rows of ``reference`` (an unpruned store) pruned below height ``below``: what a
    pruned store must hold, derived from the stored rows alone."""
    rows = dict(reference)
    for height in range(1, below):
        ms = S.decode_row(rows[S.height_key(S.P_HEIGHT, height)], b"h")[0]
        order = S.decode_row(rows[S.P_LEVEL_SET + ms], b"l")[1]
        for bid in order:
            block = decode_stored_block(rows[S.P_BLOCK + bid], PARAMS)
            rows[S.P_BLOCK + bid] = encode_pruned_block(block)
        del rows[S.P_DELTA + ms]
    if below > 0:
        rows[S.META_PRUNE] = S.encode_row([depth, below])
    return rows


def apply_all(chain: Chain, raws: list[bytes]) -> None:
    for raw in raws:
        chain.on_block(raw, NOW)


@pytest.fixture(scope="module")
def dag() -> Dag:
    return build_dag(seed=3, size=500, n_miners=4)


@pytest.fixture(scope="module")
def reference(dag: Dag) -> dict[bytes, bytes]:
    store = MemoryStore()
    apply_all(Chain(PARAMS, store), [b.raw for b in dag.blocks])
    return store.snapshot()


def test_pruned_block_stub_round_trips_header_tips_and_txids(dag: Dag) -> None:
    block = next(b for b in dag.blocks if len(b.txs) > 1)
    stub = decode_stored_block(encode_pruned_block(block), PARAMS)
    assert (stub.header, stub.tip_links, stub.id) == (block.header, block.tip_links, block.id)
    assert stub.pruned
    assert stub.txs == ()
    assert stub.txids == block.txids == tuple(tx.txid for tx in block.txs)
    assert not decode_stored_block(block.raw, PARAMS).pruned


def test_prune_keeps_everything_but_old_bodies_and_undo_records(
    dag: Dag, reference: dict[bytes, bytes]
) -> None:
    store = MemoryStore()
    chain = Chain(PARAMS, store)
    apply_all(chain, [b.raw for b in dag.blocks])
    pruner = Pruner(chain, DEPTH)
    assert pruner.run() > 0
    below = chain.best_height - DEPTH + 1
    assert pruner.next_height == below
    assert store.snapshot() == expected_pruned(reference, below, DEPTH)
    assert get_bodies_from(chain) == below
    last_pruned = chain.get_block(chain.best_chain()[below - 1])
    first_kept = chain.get_block(chain.best_chain()[below])
    assert last_pruned is not None
    assert last_pruned.pruned
    assert first_kept is not None
    assert not first_kept.pruned


def test_pruned_chain_reopens_answers_and_serves_only_bodies_it_has(
    dag: Dag, reference: dict[bytes, bytes]
) -> None:
    store = MemoryStore()
    chain = Chain(PARAMS, store)
    apply_all(chain, [b.raw for b in dag.blocks])
    Pruner(chain, DEPTH).run()
    reopened = Chain(PARAMS, store)  # crash recovery reads the pruned rows
    assert (reopened.best_id, reopened.best_height) == (chain.best_id, chain.best_height)
    old_ms = reopened.best_chain()[1]
    old = reopened.get_block(old_ms)
    assert old is not None
    assert old.pruned
    delta = reopened.level_set(old_ms)
    assert delta is not None
    assert delta.order[-1] == old_ms
    recent = reopened.get_block(reopened.best_id)
    assert recent is not None
    assert not recent.pruned


def test_pruned_node_keeps_validating_new_blocks(dag: Dag, reference: dict[bytes, bytes]) -> None:
    """Prune part-way, apply the rest of the DAG (forks and reorgs included), prune again: the
    state equals the unpruned reference's, pruned the same way."""
    raws = [b.raw for b in dag.blocks]
    store = MemoryStore()
    chain = Chain(PARAMS, store)
    cut = len(raws) * 2 // 3
    apply_all(chain, raws[:cut])
    pruner = Pruner(chain, DEPTH)
    pruner.run()
    for raw in raws[cut:]:
        chain.on_block(raw, NOW)
        pruner.step(max_blocks=3)
    pruner.run()
    assert store.snapshot() == expected_pruned(reference, pruner.next_height, DEPTH)


def test_each_step_is_bounded_and_persists_its_progress(dag: Dag) -> None:
    store = MemoryStore()
    chain = Chain(PARAMS, store)
    apply_all(chain, [b.raw for b in dag.blocks])
    pruner = Pruner(chain, DEPTH)
    assert pruner.step(max_blocks=1) == 1  # one whole level set, however large
    assert S.decode_row(store.get(S.META_PRUNE) or b"", S.META_PRUNE) == [DEPTH, 2]
    assert Pruner(Chain(PARAMS, store), DEPTH).next_height == 2  # a restart resumes there


def test_prune_depth_below_punctuality_is_refused() -> None:
    with pytest.raises(ValueError, match=f"use at least {PARAMS.punctuality}"):
        check_prune_depth(PARAMS.punctuality - 1, PARAMS.punctuality)


def _pruned(dag: Dag) -> tuple[Chain, KVStore]:
    store = MemoryStore()
    chain = Chain(PARAMS, store)
    apply_all(chain, [b.raw for b in dag.blocks])
    Pruner(chain, DEPTH).run()
    return chain, store


def test_reindex_of_a_pruned_store_is_refused_with_one_line(dag: Dag) -> None:
    _, store = _pruned(dag)
    with pytest.raises(StorageError, match="cannot reindex a pruned node") as info:
        reindex(PARAMS, store)
    assert "\n" not in str(info.value)


def test_invalidating_a_milestone_below_the_pruned_bodies_is_refused(dag: Dag) -> None:
    chain, _ = _pruned(dag)
    best = chain.best_id
    with pytest.raises(ValueError, match="below this pruned node's bodies"):
        chain.invalidate(chain.best_chain()[2])
    assert chain.best_id == best
