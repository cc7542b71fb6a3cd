"""P8 header checks and the P9 level-set plan against real devnet milestones (PROTOCOL.md §11.4)."""

import pytest

from dagchain.blocks import Block
from dagchain.chain import Chain
from dagchain.params import DEVNET
from p2p.sync import SyncError, SyncPlan, VerifiedHeader, verify_milestone_headers
from tests.dagchain.builders import address_of_secret, secret_of
from tests.dagchain.chainkit import Node


def milestone_chain(count: int) -> tuple[Node, list[Block]]:
    node = Node(DEVNET)
    first = node.register(address_of_secret(secret_of(7)), ms=True)
    return node, [first, *node.milestones(first, count - 1)]


def verify(fresh: Chain, headers: list[bytes], now_ms: int) -> list[VerifiedHeader]:
    def timestamp(block_id: bytes) -> int | None:
        block = fresh.get_block(block_id)
        return None if block is None else block.header.timestamp_ms

    return verify_milestone_headers(
        headers,
        [fresh.genesis_id],
        fresh.get_snapshot,
        timestamp,
        fresh.genesis_id,
        DEVNET,
        now_ms,
    )


def test_a_real_milestone_chain_passes_with_the_cores_snapshots() -> None:
    node, blocks = milestone_chain(5)
    fresh = Node(DEVNET)
    out = verify(fresh.chain, [b.header_bytes for b in blocks], node.now_ms)
    assert [v.block_id for v in out] == [b.id for b in blocks]
    assert out[-1].snapshot == node.chain.get_snapshot(blocks[-1].id)


def test_a_gap_in_the_chain_costs_100() -> None:
    node, blocks = milestone_chain(3)
    with pytest.raises(SyncError) as info:
        verify(Node(DEVNET).chain, [blocks[0].header_bytes, blocks[2].header_bytes], node.now_ms)
    assert info.value.score == 100


def test_a_non_milestone_header_costs_100() -> None:
    node = Node(DEVNET)
    plain = node.register(address_of_secret(secret_of(7)), ms=False)
    with pytest.raises(SyncError, match="milestone") as info:
        verify(Node(DEVNET).chain, [plain.header_bytes], node.now_ms)
    assert info.value.score == 100


def test_a_future_header_pauses_without_penalty() -> None:
    _, blocks = milestone_chain(1)
    now_ms = blocks[0].header.timestamp_ms - DEVNET.max_future_drift_ms - 1
    with pytest.raises(SyncError) as info:
        verify(Node(DEVNET).chain, [blocks[0].header_bytes], now_ms)
    assert (info.value.pause, info.value.score) == (True, 0)


def test_level_sets_are_downloaded_eight_at_a_time_and_applied_in_height_order() -> None:
    node, blocks = milestone_chain(10)
    fresh = Node(DEVNET)
    headers = verify(fresh.chain, [b.header_bytes for b in blocks], node.now_ms)
    plan = SyncPlan()
    plan.add_headers(headers)
    requests = plan.start_jobs()
    assert len(requests) == 8
    # answer the second level set first: nothing may be applied before the first
    for ms, _ in reversed(requests):
        delta = node.chain.level_set(ms)
        assert delta is not None
        assert plan.on_levelset(ms, 0, len(delta.order), delta.order) is None
    wanted = plan.wanted_blocks(fresh.chain.has_block, 500)
    raw_of: dict[bytes, bytes] = {b.id: b.raw for b in blocks}
    for block_id in wanted[1:]:
        assert plan.on_block(block_id, raw_of[block_id])
    assert plan.pop_ready(fresh.chain.has_block) == []
    assert plan.on_block(wanted[0], raw_of[wanted[0]])
    ready = plan.pop_ready(fresh.chain.has_block)
    assert [job.milestone.block_id for job, _ in ready] == [b.id for b in blocks[:8]]
    for _, raws in ready:
        for raw in raws:
            fresh.chain.on_block(raw, node.now_ms)
    assert fresh.chain.best_id == blocks[7].id
    assert len(plan.start_jobs()) == 2


def test_complete_level_sets_go_to_workers_early_and_a_gate_holds_back_the_front() -> None:
    """complete_jobs lists every complete level set (any position) for the signature workers;
    pop_ready's may_apply gate holds the front job, and so every later one, until it says yes."""
    node, blocks = milestone_chain(3)
    fresh = Node(DEVNET)
    headers = verify(fresh.chain, [b.header_bytes for b in blocks], node.now_ms)
    plan = SyncPlan()
    plan.add_headers(headers)
    requests = plan.start_jobs()
    for ms, _ in requests:
        delta = node.chain.level_set(ms)
        assert delta is not None
        plan.on_levelset(ms, 0, len(delta.order), delta.order)
    raw_of: dict[bytes, bytes] = {b.id: b.raw for b in blocks}
    wanted = plan.wanted_blocks(fresh.chain.has_block, 500)
    assert plan.complete_jobs(fresh.chain.has_block) == []
    for block_id in wanted[1:]:
        plan.on_block(block_id, raw_of[block_id])
    complete = plan.complete_jobs(fresh.chain.has_block)
    assert [job.milestone.block_id for job, _ in complete] == [b.id for b in blocks[1:]]
    assert [raws for _, raws in complete] == [[b.raw] for b in blocks[1:]]
    plan.on_block(wanted[0], raw_of[wanted[0]])
    checked: set[bytes] = {blocks[1].id, blocks[2].id}
    assert plan.pop_ready(fresh.chain.has_block, lambda j: j.milestone.block_id in checked) == []
    checked.add(blocks[0].id)
    checked.discard(blocks[2].id)
    ready = plan.pop_ready(fresh.chain.has_block, lambda j: j.milestone.block_id in checked)
    assert [job.milestone.block_id for job, _ in ready] == [b.id for b in blocks[:2]]
    ready = plan.pop_ready(fresh.chain.has_block)
    assert [job.milestone.block_id for job, _ in ready] == [blocks[2].id]
    assert plan.idle


def test_an_unsolicited_levelset_costs_10() -> None:
    plan = SyncPlan()
    with pytest.raises(SyncError) as info:
        plan.on_levelset(b"\x01" * 32, 0, 1, [b"\x01" * 32])
    assert info.value.score == 10
