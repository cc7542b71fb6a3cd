"""NodeService.submit_level_set: P9's downloaded level set as one synced batch (§12 A1).

The blocks of a level set reach the store in one batch; listeners and the mempool hear of them
only after that batch is written (nothing is announced before it is durable); a block that fails
leaves the blocks before it stored and reported, and raises.
"""

import pytest

from dagchain.blocks import Block
from dagchain.errors import InvalidBlock
from dagchain.mempool import Mempool
from dagchain.params import DEVNET
from p2p.service import NodeEvent, NodeService
from tests.dagchain.chainkit import Node, key

_, ALICE = key(2)


def level_set() -> list[Block]:
    """Two plain blocks and the milestone that completes their level set, from another node."""
    src = Node(DEVNET)
    first = src.mine(src.genesis, register=ALICE)
    second = src.mine(first.id)
    milestone = src.mine(second.id, ms=True)
    return [first, second, milestone]


def receiver() -> tuple[Node, NodeService, list[tuple[NodeEvent, bool, bool]]]:
    node = Node(DEVNET)
    service = NodeService(DEVNET, node.chain, Mempool(DEVNET), lambda: node.now_ms)
    seen: list[tuple[NodeEvent, bool, bool]] = []

    def listener(event: NodeEvent) -> None:
        assert event.block_id is not None
        durable = node.store.get(b"b" + event.block_id) is not None
        seen.append((event, node.chain.in_write_group, durable))

    service.subscribe(listener)
    return node, service, seen


def test_a_level_set_is_one_batch_and_announced_after_it() -> None:
    blocks = level_set()
    node, service, seen = receiver()
    before = node.store.batches_written
    outcomes = service.submit_level_set([b.raw for b in blocks], "peer")
    assert node.store.batches_written - before == 1
    assert [o.block_id for o in outcomes] == [b.id for b in blocks]
    assert node.chain.best_id == blocks[-1].id
    assert [e.kind for e, _, _ in seen] == ["block", "block", "block", "milestone"]
    assert [(grouping, durable) for _, grouping, durable in seen] == [(False, True)] * 4


def test_a_failing_block_keeps_and_reports_the_ones_before_it() -> None:
    blocks = level_set()
    node, service, seen = receiver()
    bad = bytearray(blocks[1].raw)
    bad[-1] ^= 1
    with pytest.raises(InvalidBlock) as err:
        service.submit_level_set([blocks[0].raw, bytes(bad), blocks[2].raw], "peer")
    assert service.rejected[f"block:{err.value.rule}"] == 1
    assert node.chain.has_block(blocks[0].id)
    assert not node.chain.has_block(blocks[2].id)
    assert [(e.block_id, durable) for e, _, durable in seen] == [(blocks[0].id, True)]


def two_level_sets() -> list[list[Block]]:
    src = Node(DEVNET)
    first = src.mine(src.genesis, register=ALICE)
    ms1 = src.mine(first.id, ms=True)
    second = src.mine(ms1.id)
    ms2 = src.mine(second.id, ms=True)
    return [[first, ms1], [second, ms2]]


def test_a_sync_batch_writes_several_level_sets_once_and_reports_after() -> None:
    sets = two_level_sets()
    node, service, seen = receiver()
    before = node.store.batches_written
    with service.sync_batch():
        for blocks in sets:
            service.submit_level_set([b.raw for b in blocks], "peer")
        assert seen == []  # nothing announced before the batch is written
    assert node.store.batches_written - before == 1
    assert node.chain.best_id == sets[1][1].id
    assert [e.kind for e, _, _ in seen] == ["block", "block", "milestone"] * 2
    assert all(not grouping and durable for _, grouping, durable in seen)


def test_a_failing_level_set_in_a_sync_batch_keeps_the_ones_before() -> None:
    sets = two_level_sets()
    node, service, seen = receiver()
    bad = bytearray(sets[1][1].raw)
    bad[-1] ^= 1

    def apply() -> None:
        with service.sync_batch():
            service.submit_level_set([b.raw for b in sets[0]], "peer")
            service.submit_level_set([sets[1][0].raw, bytes(bad)], "peer")

    with pytest.raises(InvalidBlock):
        apply()
    assert node.chain.best_id == sets[0][1].id
    assert node.store.get(b"b" + sets[1][0].id) is not None
    assert [e.block_id for e, _, _ in seen if e.kind == "block"] == [
        sets[0][0].id,
        sets[0][1].id,
        sets[1][0].id,
    ]
