"""The orphan pool (PROTOCOL.md §11.6 P13, §10 limits) as seen through ``Chain.on_block``."""

import hashlib

from dagchain.blocks import Block, BlockHeader, compute_tips_root, make_block
from dagchain.chain import BlockOutcome, BlockStatus, Chain
from dagchain.errors import MalformedBlock
from dagchain.genesis import genesis_block
from dagchain.orphans import OrphanPool
from dagchain.params import SIM, ConsensusParams, genesis_blk_target
from dagchain.pow import encode_compact
from dagchain.storage.memory import MemoryStore
from dagchain.types import BlockId
from tests.dagchain.builders import address_of_secret, build_block, registration_tx, secret_of

NOW = SIM.genesis_timestamp_ms + 10**9
SMALL = SIM.replace(orphan_peer_max_blocks=3, orphan_max_blocks=5)


def new_chain(params: ConsensusParams = SIM) -> Chain:
    return Chain(params, MemoryStore())


def stored(chain: Chain) -> dict[bytes, bytes]:
    store = chain.store
    assert isinstance(store, MemoryStore)
    return store.snapshot()


def accept(chain: Chain, block: Block, now_ms: int = NOW) -> BlockOutcome:
    out = chain.on_block(block.raw, now_ms)
    assert out.status is BlockStatus.ACCEPTED, out
    return out


def stray(i: int) -> bytes:
    """A block whose milestone link nobody has: held as raw bytes after steps 1-3 (189 bytes)."""
    gid = genesis_block(SIM).id
    unknown = BlockId(hashlib.blake2b(b"unknown %d" % i, digest_size=32).digest())
    header = BlockHeader(
        1,
        unknown,
        gid,
        compute_tips_root([gid]),
        bytes(32),
        SIM.genesis_timestamp_ms + 1,
        encode_compact(genesis_blk_target(SIM)),
        0,
    )
    return make_block(header, [gid], ()).raw


def held(chain: Chain, raw: bytes) -> bool:
    return OrphanPool.key_of(raw) in chain.orphans


def send_orphan(chain: Chain, raw: bytes, peer: str, now_ms: int = NOW) -> None:
    before = stored(chain)
    out = chain.on_block(raw, now_ms, peer)
    assert out.status is BlockStatus.ORPHAN
    assert stored(chain) == before  # orphans live in memory only


def peer_chain(source: Chain, length: int, n: int = 1) -> list[Block]:
    """A registration block and ``length - 1`` ordinary successors, accepted by ``source``."""
    blocks = [
        build_block(
            source,
            previous=source.genesis_id,
            register=address_of_secret(secret_of(n)),
            want_milestone=False,
        )
    ]
    accept(source, blocks[0])
    while len(blocks) < length:
        block = build_block(source, previous=blocks[-1].id, want_milestone=False)
        accept(source, block)
        blocks.append(block)
    return blocks


def test_p13_mutated_copy_does_not_shadow_the_real_block() -> None:
    """Keyed by H(bytes): both copies are held; the real one is accepted, the copy is MALFORMED."""
    source, chain = new_chain(), new_chain()
    m1 = build_block(
        source,
        previous=source.genesis_id,
        register=address_of_secret(secret_of(9)),
        want_milestone=True,
    )
    accept(source, m1)
    reg = registration_tx(address_of_secret(secret_of(1)))
    real = build_block(
        source, previous=source.genesis_id, milestone=m1.id, register=None, txs=[reg]
    )
    copy = make_block(
        real.header, real.tip_links, [reg, registration_tx(address_of_secret(secret_of(2)))]
    )
    assert copy.id == real.id
    assert copy.raw != real.raw

    send_orphan(chain, copy.raw, "mallory", NOW)
    send_orphan(chain, real.raw, "honest", NOW + 1)
    assert len(chain.orphans) == 2

    out = accept(chain, m1, NOW + 2)
    assert out.accepted == (m1.id, real.id)
    assert [(bid, type(exc), exc.rule) for bid, exc in out.rejected_orphans] == [
        (real.id, MalformedBlock, "H7")
    ]
    assert chain.has_block(real.id)
    assert not chain.is_known_invalid(real.id)
    assert len(chain.orphans) == 0


def test_p13_same_bytes_are_held_once() -> None:
    chain = new_chain()
    send_orphan(chain, stray(0), "a")
    out = chain.on_block(stray(0), NOW, "b")
    assert out.status is BlockStatus.DUPLICATE
    assert len(chain.orphans) == 1


def test_p13_per_peer_limit_evicts_the_senders_own_oldest_orphans() -> None:
    chain = new_chain(SMALL)
    send_orphan(chain, stray(0), "b")
    for i in (1, 2, 3):
        send_orphan(chain, stray(i), "a")
    send_orphan(chain, stray(4), "a")  # a is at its limit of 3: its oldest (1) goes
    assert [held(chain, stray(i)) for i in range(5)] == [True, False, True, True, True]
    assert len(chain.orphans) == 4


def test_p13_total_limit_evicts_the_senders_own_oldest_first() -> None:
    chain = new_chain(SMALL)
    for i, peer in enumerate(["a", "a", "b", "b", "c"]):
        send_orphan(chain, stray(i), peer)
    assert len(chain.orphans) == 5
    send_orphan(chain, stray(5), "c")  # total limit: c's own oldest (4), not a's older ones
    assert [held(chain, stray(i)) for i in range(6)] == [True, True, True, True, False, True]
    send_orphan(chain, stray(6), "d")  # d holds nothing: the pool still stays within its limit
    assert len(chain.orphans) == 5
    assert held(chain, stray(6))


def test_p13_per_peer_byte_limit_evicts_the_senders_oldest() -> None:
    size = len(stray(0))
    chain = new_chain(SIM.replace(orphan_peer_max_bytes=2 * size + size // 2))
    for i in range(3):
        send_orphan(chain, stray(i), "a")
    assert [held(chain, stray(i)) for i in range(3)] == [False, True, True]
    assert chain.orphans.total_bytes == 2 * size


def test_p13_evicted_orphan_is_not_remembered_as_invalid() -> None:
    chain = new_chain(SMALL)
    for i in range(4):
        send_orphan(chain, stray(i), "a")
    assert not held(chain, stray(0))
    send_orphan(chain, stray(0), "a")  # may be offered again, and is held again
    assert held(chain, stray(0))


def test_p13_orphans_expire_after_orphan_expiry_ms() -> None:
    source, chain = new_chain(), new_chain()
    parent, child = peer_chain(source, 2)
    send_orphan(chain, child.raw, "a", NOW)
    expiry = chain.params.orphan_expiry_ms
    assert chain.expire_orphans(NOW + expiry - 1) == 0
    assert held(chain, child.raw)
    assert chain.expire_orphans(NOW + expiry + 1) == 1
    assert len(chain.orphans) == 0
    # the parent no longer releases it; offered again, the child is accepted at once
    assert accept(chain, parent, NOW + expiry + 2).accepted == (parent.id,)
    assert accept(chain, child, NOW + expiry + 3).accepted == (child.id,)


def test_p13_orphans_waiting_on_one_parent_are_released_in_arrival_order() -> None:
    source, chain = new_chain(), new_chain()
    (parent,) = peer_chain(source, 1)
    first = build_block(source, previous=parent.id, want_milestone=False, nonce_start=0)
    second = build_block(source, previous=parent.id, want_milestone=False, nonce_start=10**6)
    assert first.id != second.id
    send_orphan(chain, second.raw, "a", NOW)
    send_orphan(chain, first.raw, "b", NOW + 1)
    assert accept(chain, parent, NOW + 2).accepted == (parent.id, second.id, first.id)


def test_p13_orphan_missing_two_links_waits_for_both() -> None:
    source, chain = new_chain(), new_chain()
    prev_chain = peer_chain(source, 1, n=1)
    tip_chain = peer_chain(source, 1, n=2)
    block = build_block(
        source, previous=prev_chain[0].id, tip=tip_chain[0].id, want_milestone=False
    )
    out = chain.on_block(block.raw, NOW, "a")
    assert out.status is BlockStatus.ORPHAN
    assert set(out.missing) == {prev_chain[0].id, tip_chain[0].id}
    assert accept(chain, prev_chain[0]).accepted == (prev_chain[0].id,)
    assert not chain.has_block(block.id)
    assert accept(chain, tip_chain[0]).accepted == (tip_chain[0].id, block.id)
    assert len(chain.orphans) == 0


def test_p13_outcome_reports_the_suppliers_of_evicted_orphans() -> None:
    chain = new_chain(SMALL)
    outcomes = [chain.on_block(stray(i), NOW, "a") for i in range(3)]
    assert all(o.evicted_orphans == () for o in outcomes)  # within a's limit of 3
    out = chain.on_block(stray(3), NOW, "a")  # beyond it: a's oldest goes, a is told
    assert out.status is BlockStatus.ORPHAN
    assert out.evicted_orphans == ("a",)
    assert chain.on_block(stray(4), NOW, "b").evicted_orphans == ()
    assert chain.on_block(stray(5), NOW, "c").evicted_orphans == ()  # 5 held: the total limit
    out = chain.on_block(stray(6), NOW, "d")  # d holds nothing: the oldest (a's) goes
    assert out.evicted_orphans == ("a",)
