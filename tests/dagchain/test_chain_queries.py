"""Chain queries users rely on (F7 confirmations, R8 redeemable) and orphan cascades (§1, D2)."""

import pytest

from dagchain.blocks import BlockHeader, compute_tips_root, make_block
from dagchain.chain import BlockStatus, Chain
from dagchain.errors import RejectedBlock
from dagchain.params import DEVNET
from dagchain.storage import schema as S
from tests.dagchain.builders import build_block, grind
from tests.dagchain.chainkit import Node, key


def test_f7_confirmations_count_from_the_level_set_height() -> None:
    """F7: confirmations(B) = best height - LS height(B) + 1, and 0 while B is pending."""
    node = Node(DEVNET)
    _, addr = key(1)
    reg = node.register(addr)
    assert node.chain.confirmations(reg.id) == 0
    m1 = node.mine(reg.id, ms=True)
    assert node.chain.ls_height(reg.id) == 1
    assert node.chain.confirmations(reg.id) == 1
    m2 = node.mine(m1.id, ms=True)
    node.mine(m2.id, ms=True)
    assert node.chain.best_height == 3
    assert node.chain.confirmations(reg.id) == 3
    assert node.chain.confirmations(bytes(32)) == 0


def test_r8_redeemable_is_the_best_chain_balance_of_the_root() -> None:
    """R8: a miner's redeemable amount is balance(root) on the best chain."""
    node = Node(DEVNET)
    _, addr = key(1)
    reg = node.register(addr)
    b1 = node.mine(reg.id)
    assert node.chain.redeemable(reg.id) == 0, "nothing is credited while pending"
    node.mine(b1.id, ms=True)
    record = node.chain.get_root(reg.id)
    assert record is not None
    assert record.balance > 0
    assert node.chain.redeemable(reg.id) == record.balance
    assert node.chain.redeemable(bytes(32)) == 0


def test_orphans_of_a_rejected_parent_are_rejected_at_once() -> None:
    """§1: a block with a REJECTed parent is REJECTed; held orphans do not wait for expiry."""
    node = Node(DEVNET)
    chain = node.chain
    _, addr = key(1)
    reg = node.register(addr)
    good = build_block(chain, previous=reg.id)
    # A parent that will fail D6 (timestamp before its previous block's) once it arrives.
    bad_header = BlockHeader(
        1,
        chain.best_id,
        reg.id,
        compute_tips_root([chain.genesis_id]),
        good.header.merkle_root,
        reg.header.timestamp_ms - 1,
        good.header.target,
        0,
    )
    snap = chain.best_snapshot
    bad = make_block(
        grind(bad_header, snap.blk_target, None, snap.ms_target), [chain.genesis_id], ()
    )
    child = build_block(chain, previous=reg.id, tip=chain.genesis_id)
    child_header = BlockHeader(
        1,
        chain.best_id,
        bad.id,
        compute_tips_root([chain.genesis_id]),
        child.header.merkle_root,
        reg.header.timestamp_ms + 5,
        child.header.target,
        0,
    )
    orphan = make_block(
        grind(child_header, snap.blk_target, None, snap.ms_target), [chain.genesis_id], ()
    )
    held = chain.on_block(orphan.raw, node.now_ms)
    assert held.status is BlockStatus.ORPHAN
    assert held.missing == (bad.id,)
    with pytest.raises(RejectedBlock) as err:
        chain.on_block(bad.raw, node.now_ms)
    assert err.value.rule == "D6"
    assert len(chain.orphans) == 0
    assert chain.is_known_invalid(orphan.id)
    with pytest.raises(RejectedBlock) as again:
        chain.on_block(orphan.raw, node.now_ms)
    assert again.value.rule == "D1"


def test_shared_caches_do_not_change_verdicts() -> None:
    """Two chains sharing a signature and decode cache reach the same state as separate ones.

    The simulator shares them between its nodes; a txid commits to its signatures, so a cached
    txid may skip T6, and a decoded block is a pure function of its bytes.
    """
    from dagchain.caches import DecodeCache, SignatureCache
    from dagchain.chain import Chain
    from dagchain.storage.memory import MemoryStore

    source = Node(DEVNET)
    _, addr = key(1)
    reg = source.register(addr)
    blocks = [reg, source.mine(reg.id, ms=True)]
    sigs, decoded = SignatureCache(), DecodeCache(DEVNET)
    shared = [
        Chain(DEVNET, MemoryStore(), signature_cache=sigs, decode_cache=decoded) for _ in range(2)
    ]
    for chain in shared:
        for block in blocks:
            chain.on_block(block.raw, source.now_ms)
    assert shared[0].signature_checks == 1, "the first chain verifies the registration tx"
    assert shared[1].signature_checks == 0, "the second is answered from the shared cache"
    for chain in shared:
        assert chain.best_id == source.chain.best_id
        assert chain.utxos() == source.chain.utxos()
        assert chain.roots() == source.chain.roots()


def test_signature_cache_property_feeds_on_block() -> None:
    """``Chain.signature_cache`` is the cache ``on_block`` reads: a txid added to it ahead of
    time (sync's signature workers) is not verified again; the property cannot be replaced."""
    from dagchain.caches import SignatureCache
    from dagchain.chain import Chain
    from dagchain.storage.memory import MemoryStore

    source = Node(DEVNET)
    _, addr = key(1)
    reg = source.register(addr)
    blocks = [reg, source.mine(reg.id, ms=True)]
    own = Chain(DEVNET, MemoryStore())
    assert isinstance(own.signature_cache, SignatureCache)
    given = SignatureCache()
    chain = Chain(DEVNET, MemoryStore(), signature_cache=given)
    assert chain.signature_cache is given
    with pytest.raises(AttributeError):
        chain.signature_cache = SignatureCache()  # type: ignore[misc]
    for block in blocks:
        for tx in block.txs:
            chain.signature_cache.add(tx.txid)
        chain.on_block(block.raw, source.now_ms)
    assert chain.signature_checks == 0
    assert chain.best_id == source.chain.best_id
    assert chain.utxos() == source.chain.utxos()


def test_block_count_is_the_number_of_stored_blocks_after_the_window_moves() -> None:
    node = Node(DEVNET)
    node.chain = Chain(DEVNET, node.store, memory_window=1)
    tip = node.genesis
    for i in range(6):
        block = node.build(tip, ms=i % 2 == 1, register=key(3)[1] if i == 0 else None)
        assert node.chain.on_block(block.raw, node.now_ms, "t").status is BlockStatus.ACCEPTED
        tip = block.id
    rows = sum(1 for _ in node.store.iter_prefix(S.P_META))
    assert node.chain.state.meta.floor > 0  # history left memory: len(meta) would scan
    assert node.chain.state.block_count == rows == 7
    assert Chain(DEVNET, node.store, memory_window=1).state.block_count == rows


def test_has_block_given_the_milestone_link_answers_as_without_it() -> None:
    """``has_block(id, milestone_link)`` (P14's stale filter asks it with the link read from the
    block's bytes, to answer from memory) says what ``has_block(id)`` says: for accepted blocks
    and milestones, for a block built but never submitted, and on a chain reopened from its
    store, where no link is mirrored in memory and the store answers."""
    node = Node(DEVNET)
    _, addr = key(1)
    reg = node.register(addr)
    m1 = node.mine(reg.id, ms=True)
    b2 = node.mine(m1.id)
    m2 = node.mine(b2.id, ms=True)
    unsent = build_block(node.chain, previous=m2.id)
    blocks = [reg, m1, b2, m2]
    for chain in (node.chain, Chain(node.params, node.store)):
        for block in blocks:
            assert chain.has_block(block.id)
            assert chain.has_block(block.id, block.header.milestone_link)
        assert not chain.has_block(unsent.id)
        assert not chain.has_block(unsent.id, unsent.header.milestone_link)
        assert not chain.has_block(bytes(32), m2.id)
