"""Block acceptance: arrival rules H1-H11, DAG-context rules D1-D6 and the §3.3 procedure order.

Every invalid block is crafted with real proof of work (SIM parameters) wherever the rule under test
comes after H4, so the test reaches the rule it names. Each refusal asserts the verdict class, the
rule id, that the store and best head are unchanged, and whether the id entered the invalid cache
(REJECT yes; MALFORMED and DROP no).
"""

import dataclasses
import hashlib
from collections.abc import Sequence

import pytest

from dagchain.blocks import Block, BlockHeader, compute_merkle_root, compute_tips_root, make_block
from dagchain.chain import BlockOutcome, BlockStatus, Chain
from dagchain.errors import MalformedBlock, NotYetValid, RejectedBlock
from dagchain.genesis import FAUCET_SECRET, genesis_block
from dagchain.params import SIM, ConsensusParams, genesis_blk_target
from dagchain.pow import decode_compact, encode_compact, is_valid_compact_target
from dagchain.storage.memory import MemoryStore
from dagchain.transactions import (
    REDEMPTION_INDEX,
    Transaction,
    TxIn,
    TxKind,
    TxOut,
    make_transaction,
    sign_transaction,
)
from dagchain.types import NULL_ID, Address, BlockId, TxId
from tests.dagchain.builders import (
    address_of_secret,
    build_block,
    grind,
    registration_tx,
    secret_of,
)

G = SIM.genesis_timestamp_ms
NOW = G + 10**9
PUNCTUAL = SIM.replace(punctuality=5)
"""Small punctuality so D5b edges are a few milestones away."""

Refusal = type[MalformedBlock] | type[RejectedBlock] | type[NotYetValid]


# ------------------------------------------------------------------------------------ helpers
def new_chain(params: ConsensusParams = SIM) -> Chain:
    return Chain(params, MemoryStore())


def stored(chain: Chain) -> dict[bytes, bytes]:
    store = chain.store
    assert isinstance(store, MemoryStore)
    return store.snapshot()


def submit(chain: Chain, block: Block, now_ms: int = NOW, peer: str = "local") -> BlockOutcome:
    return chain.on_block(block.raw, now_ms, peer)


def accept(chain: Chain, block: Block, now_ms: int = NOW) -> BlockOutcome:
    out = submit(chain, block, now_ms)
    assert out.status is BlockStatus.ACCEPTED, out
    return out


def assert_refused(
    chain: Chain,
    raw: bytes,
    verdict: Refusal,
    rule: str,
    *,
    block_id: bytes,
    now_ms: int = NOW,
) -> None:
    """The verdict and rule; nothing stored, best head unchanged; cached iff REJECT."""
    before = stored(chain)
    best = chain.best_id
    orphans = len(chain.orphans)
    with pytest.raises(verdict) as info:
        chain.on_block(raw, now_ms, "peer")
    assert type(info.value) is verdict
    assert info.value.rule == rule, info.value
    assert stored(chain) == before
    assert chain.best_id == best
    assert len(chain.orphans) == orphans
    assert not chain.has_block(block_id)
    assert chain.is_known_invalid(block_id) is (verdict is RejectedBlock)


def refuse(chain: Chain, block: Block, verdict: Refusal, rule: str, now_ms: int = NOW) -> None:
    assert_refused(chain, block.raw, verdict, rule, block_id=block.id, now_ms=now_ms)


def craft(
    chain: Chain,
    *,
    previous: bytes,
    tip: bytes | None = None,
    tips: Sequence[bytes] | None = None,
    tips_root: bytes | None = None,
    milestone: bytes | None = None,
    txs: Sequence[Transaction] = (),
    timestamp_ms: int | None = None,
    version: int = 1,
    target: int | None = None,
    merkle_root: bytes | None = None,
    real_pow: bool = True,
) -> Block:
    """A block built field by field (links need not be accepted, fields need not be valid).

    With ``real_pow`` the nonce meets the milestone link's block target (and the header's own
    target if that is a smaller valid one), and the block is not a milestone; otherwise the nonce
    is chosen so that the hash is *above* the block target (H4 fails). ``tips`` is the tip list as
    given, ``tip`` a one-tip shorthand; ``tips_root`` overrides §2.1's commitment (H7 tests).
    """
    if tips is None:
        assert tip is not None, "craft needs tip= or tips="
        tips = [tip]
    ms = BlockId(milestone if milestone is not None else chain.genesis_id)
    snap = chain.get_snapshot(ms)
    blk_target = snap.blk_target if snap is not None else genesis_blk_target(chain.params)
    ms_target = snap.ms_target if snap is not None else 0
    if target is None:
        target = encode_compact(blk_target)
    pow_target = blk_target
    if is_valid_compact_target(target):
        pow_target = min(pow_target, decode_compact(target))
    if timestamp_ms is None:
        known = [chain.get_block(link) for link in (ms, previous)]
        timestamp_ms = max([G] + [b.header.timestamp_ms for b in known if b is not None]) + 1
    header = BlockHeader(
        version,
        ms,
        BlockId(previous),
        compute_tips_root(tips) if tips_root is None else tips_root,
        compute_merkle_root(txs) if merkle_root is None else merkle_root,
        timestamp_ms,
        target,
        0,
    )
    if real_pow:
        # an ordinary block, unless the header's own target only admits milestone hashes
        header = grind(header, pow_target, False if pow_target > ms_target else None, ms_target)
    else:
        header = above_target(header, blk_target)
    return make_block(header, tips, txs)


def above_target(header: BlockHeader, target: int) -> BlockHeader:
    """A nonce whose hash is above ``target``: no real proof of work."""
    nonce = header.nonce
    while True:
        candidate = dataclasses.replace(header, nonce=nonce)
        digest = hashlib.blake2b(candidate.encode(), digest_size=32).digest()
        if int.from_bytes(digest, "little") > target:
            return candidate
        nonce += 1


def faucet_tx(index: int, params: ConsensusParams = SIM) -> Transaction:
    """A correctly signed spend of faucet output ``index``."""
    return sign_transaction(
        TxKind.TRANSFER,
        [(TxId(genesis_id(params)), index)],
        [TxOut(10**14 - 10_000, Address(address_of_secret(secret_of(100 + index))))],
        [FAUCET_SECRET],
        params,
    )


def genesis_id(params: ConsensusParams) -> BlockId:
    return genesis_block(params).id


def unsigned_transfer(n: int, amount: int = 1) -> Transaction:
    """A well-formed transfer (T1-T5) with a zero signature: passes H8, fails H9."""
    inp = TxIn(
        TxId(hashlib.blake2b(n.to_bytes(8, "little"), digest_size=32).digest()),
        0,
        bytes(32),
        bytes(64),
    )
    return make_transaction(
        TxKind.TRANSFER, [inp], [TxOut(amount, Address(address_of_secret(secret_of(1))))]
    )


def redemption(anchor: bytes, n: int, params: ConsensusParams = SIM) -> Transaction:
    """A structurally valid REDEMPTION (T2, T5) of the anchor ``anchor``."""
    secret = secret_of(n)
    return sign_transaction(
        TxKind.REDEMPTION,
        [(TxId(anchor), REDEMPTION_INDEX)],
        [TxOut(0, Address(address_of_secret(secret)))],
        [secret],
        params,
    )


def register(chain: Chain, n: int, timestamp_ms: int | None = None) -> Block:
    """Build and accept an ordinary (non-milestone) registration block linking the best head."""
    block = build_block(
        chain,
        previous=chain.genesis_id,
        register=address_of_secret(secret_of(n)),
        want_milestone=False,
        timestamp_ms=timestamp_ms,
    )
    accept(chain, block)
    return block


def mine_milestones(chain: Chain, count: int, n: int = 90) -> list[Block]:
    """Extend the best chain by ``count`` milestones of one miner's peer chain (accepted)."""
    out: list[Block] = []
    previous: BlockId | None = None
    for _ in range(count):
        if previous is None:
            block = build_block(
                chain,
                previous=chain.genesis_id,
                register=address_of_secret(secret_of(n)),
                want_milestone=True,
            )
        else:
            last = chain.get_block(previous)
            assert last is not None
            # the head is the previous link: tip-link its parent milestone instead (H5)
            tip = last.header.milestone_link
            block = build_block(chain, previous=previous, tip=tip, want_milestone=True)
        outcome = accept(chain, block)
        assert outcome.is_milestone
        assert chain.best_id == block.id
        previous = block.id
        out.append(block)
    return out


@pytest.fixture
def chain() -> Chain:
    return new_chain()


@pytest.fixture
def peer(chain: Chain) -> Block:
    """A registered peer chain: its ordinary registration block R (linking genesis)."""
    return register(chain, 1)


# ------------------------------------------------------------------------------------ H1
def test_h1_trailing_byte_is_malformed_and_not_cached(chain: Chain, peer: Block) -> None:
    block = build_block(chain, previous=peer.id)
    assert_refused(chain, block.raw + b"\x00", MalformedBlock, "H1", block_id=block.id)
    accept(chain, block)


def test_h1_non_canonical_tx_encoding_is_malformed(chain: Chain, peer: Block) -> None:
    """E3: a tx version encoded as uint8 (cc 01) instead of a fixint is not canonical."""
    tx = faucet_tx(0)
    block = build_block(chain, previous=peer.id, txs=[tx])
    assert tx.raw.startswith(b"\x94\x01")
    bad = block.raw.replace(tx.raw, b"\x94\xcc\x01" + tx.raw[2:])
    assert bad != block.raw
    assert_refused(chain, bad, MalformedBlock, "H1", block_id=block.id)
    accept(chain, block)
    assert not chain.is_known_invalid(block.id)


def test_h1_oversized_block_is_malformed(chain: Chain, peer: Block) -> None:
    block = build_block(chain, previous=peer.id)
    raw = block.raw + bytes(chain.params.max_block_bytes)
    assert_refused(chain, raw, MalformedBlock, "H1", block_id=block.id)


# ------------------------------------------------------------------------------------ H2-H5
def test_h2_version_2_is_rejected(chain: Chain, peer: Block) -> None:
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, version=2)
    refuse(chain, block, RejectedBlock, "H2")


@pytest.mark.parametrize(
    "bits",
    [
        pytest.param(0x04923456, id="negative"),
        pytest.param(0x2200FFFF, id="above-max-target"),
        pytest.param(0x00000000, id="zero"),
        # the genesis block target 0x20028000 written with a leading zero byte: same value,
        # not canonical, so H3 (not D4) decides
        pytest.param(0x21000280, id="non-canonical-same-value"),
    ],
)
def test_h3_target_violating_e9_is_rejected(chain: Chain, peer: Block, bits: int) -> None:
    assert encode_compact(genesis_blk_target(SIM)) == 0x20028000
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, target=bits)
    refuse(chain, block, RejectedBlock, "H3")


def test_h4_hash_above_target_is_rejected(chain: Chain, peer: Block) -> None:
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, real_pow=False)
    assert int.from_bytes(block.id, "little") > chain.best_snapshot.blk_target
    refuse(chain, block, RejectedBlock, "H4")


@pytest.mark.parametrize("field", ["milestone", "previous", "tip", "tips_root"])
def test_h5_null_link_is_rejected(chain: Chain, peer: Block, field: str) -> None:
    """H5 (v2): no header link (milestone, previous, ``tips_root``) and no tip link is null."""
    links = {"milestone": chain.genesis_id, "previous": peer.id, "tip": chain.genesis_id}
    if field != "tips_root":
        links[field] = NULL_ID
    block = craft(
        chain,
        previous=links["previous"],
        tip=links["tip"],
        milestone=links["milestone"],
        tips_root=NULL_ID if field == "tips_root" else None,
    )
    refuse(chain, block, RejectedBlock, "H5")


def test_h5_tip_equal_to_previous_is_rejected(chain: Chain, peer: Block) -> None:
    block = craft(chain, previous=peer.id, tip=peer.id)
    refuse(chain, block, RejectedBlock, "H5")


def test_h5_tip_equal_to_previous_is_allowed_when_both_are_genesis(chain: Chain) -> None:
    block = build_block(
        chain,
        previous=chain.genesis_id,
        tip=chain.genesis_id,
        register=address_of_secret(secret_of(2)),
    )
    assert block.tip_links == (block.header.previous_link,) == (chain.genesis_id,)
    accept(chain, block)


# ------------------------------------------------------------------------------------ H6-H10
def test_h6_129_transactions_are_rejected(chain: Chain, peer: Block) -> None:
    txs = [unsigned_transfer(i) for i in range(chain.params.block_capacity + 1)]
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, txs=txs)
    refuse(chain, block, RejectedBlock, "H6")


def test_h7_wrong_merkle_root_is_malformed_then_the_real_block_is_accepted(
    chain: Chain, peer: Block
) -> None:
    tx = faucet_tx(0)
    wrong = craft(
        chain, previous=peer.id, tip=chain.genesis_id, txs=[tx], merkle_root=bytes(31) + b"\x01"
    )
    refuse(chain, wrong, MalformedBlock, "H7")
    # the id was not cached: the same body under its true merkle root is accepted
    real = craft(chain, previous=peer.id, tip=chain.genesis_id, txs=[tx])
    accept(chain, real)


def test_h8_duplicate_txid_is_rejected(chain: Chain, peer: Block) -> None:
    tx = faucet_tx(0)
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, txs=[tx, tx])
    refuse(chain, block, RejectedBlock, "H8")


def test_h8_transaction_failing_a_stateless_rule_is_rejected(chain: Chain, peer: Block) -> None:
    """T3: an output amount of 0 in a transfer."""
    block = craft(
        chain, previous=peer.id, tip=chain.genesis_id, txs=[unsigned_transfer(1, amount=0)]
    )
    refuse(chain, block, RejectedBlock, "H8")


def test_h9_bad_signature_is_rejected_after_every_other_check(chain: Chain, peer: Block) -> None:
    checks = chain.signature_checks
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, txs=[unsigned_transfer(1)])
    refuse(chain, block, RejectedBlock, "H9")
    assert chain.signature_checks == checks + 1


def test_h9_good_signatures_are_accepted_and_counted(chain: Chain, peer: Block) -> None:
    checks = chain.signature_checks
    accept(chain, build_block(chain, previous=peer.id, txs=[faucet_tx(0), faucet_tx(1)]))
    assert chain.signature_checks == checks + 2


def _h10_cases(chain: Chain, peer: Block) -> dict[str, tuple[bytes, list[Transaction]]]:
    reg = registration_tx(address_of_secret(secret_of(5)))
    redeem = redemption(peer.txs[0].txid, 1)
    gid = chain.genesis_id
    return {
        "registration-block-without-txs": (gid, []),
        "registration-block-starting-with-transfer": (gid, [faucet_tx(0), reg]),
        "registration-not-at-tx0": (gid, [reg, registration_tx(address_of_secret(secret_of(6)))]),
        "redemption-in-registration-block": (gid, [reg, redeem]),
        "registration-in-ordinary-block": (peer.id, [reg]),
        "redemption-not-at-tx0": (peer.id, [faucet_tx(0), redeem]),
    }


@pytest.mark.parametrize(
    "case",
    [
        "registration-block-without-txs",
        "registration-block-starting-with-transfer",
        "registration-not-at-tx0",
        "redemption-in-registration-block",
        "registration-in-ordinary-block",
        "redemption-not-at-tx0",
    ],
)
def test_h10_misplaced_registration_or_redemption_is_rejected(
    chain: Chain, peer: Block, case: str
) -> None:
    previous, txs = _h10_cases(chain, peer)[case]
    checks = chain.signature_checks
    block = craft(
        chain,
        previous=previous,
        tip=chain.genesis_id if previous != chain.genesis_id else peer.id,
        txs=txs,
    )
    refuse(chain, block, RejectedBlock, "H10")
    assert chain.signature_checks == checks  # H10 precedes H9


def test_h10_redemption_at_tx0_of_an_ordinary_block_is_accepted(chain: Chain, peer: Block) -> None:
    """Placement is a block rule; whether the redemption pays is a ledger matter (R4)."""
    accept(
        chain,
        build_block(chain, previous=peer.id, txs=[redemption(peer.txs[0].txid, 1), faucet_tx(0)]),
    )


def test_h10_registration_block_may_carry_more_txs_after_its_registration(chain: Chain) -> None:
    block = build_block(
        chain,
        previous=chain.genesis_id,
        register=address_of_secret(secret_of(3)),
        txs=[faucet_tx(0)],
    )
    accept(chain, block)


# ------------------------------------------------------------------------------------ H11
def test_h11_future_block_is_dropped_then_accepted_later(chain: Chain, peer: Block) -> None:
    """Clock skew must not get an honest sender banned: DROP, not cached, retried later."""
    drift = chain.params.max_future_drift_ms
    block = build_block(chain, previous=peer.id, txs=[faucet_tx(0)], timestamp_ms=NOW + drift + 1)
    checks = chain.signature_checks
    refuse(chain, block, NotYetValid, "H11")
    assert chain.signature_checks == checks
    accept(chain, block, now_ms=NOW + 1)


def test_h11_timestamp_exactly_at_the_drift_limit_is_accepted(chain: Chain, peer: Block) -> None:
    block = build_block(
        chain, previous=peer.id, timestamp_ms=NOW + chain.params.max_future_drift_ms
    )
    accept(chain, block)


# ------------------------------------------------------------------------------------ D1
def test_d1_already_accepted_block_is_a_duplicate_and_changes_nothing(
    chain: Chain, peer: Block
) -> None:
    before = stored(chain)
    out = submit(chain, peer)
    assert out.status is BlockStatus.DUPLICATE
    assert out.block_id == peer.id
    assert stored(chain) == before


def test_d1_milestone_duplicate_reports_milestone(chain: Chain) -> None:
    (m1,) = mine_milestones(chain, 1)
    out = submit(chain, m1)
    assert (out.status, out.is_milestone) == (BlockStatus.DUPLICATE, True)


def test_d1_block_in_the_invalid_cache_is_rejected_again(chain: Chain, peer: Block) -> None:
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, version=2)
    refuse(chain, block, RejectedBlock, "H2")
    refuse(chain, block, RejectedBlock, "D1")


def test_d1_orphan_with_the_same_bytes_is_a_duplicate(chain: Chain) -> None:
    source = new_chain()
    parent = register(source, 1)
    child = build_block(source, previous=parent.id)
    assert submit(chain, child).status is BlockStatus.ORPHAN
    assert submit(chain, child).status is BlockStatus.DUPLICATE
    assert len(chain.orphans) == 1


# ------------------------------------------------------------------------------------ D2
def test_d2_block_whose_previous_link_was_rejected_is_rejected(chain: Chain, peer: Block) -> None:
    parent = craft(chain, previous=peer.id, tip=chain.genesis_id, version=2)
    refuse(chain, parent, RejectedBlock, "H2")
    child = craft(chain, previous=parent.id, tip=chain.genesis_id)
    refuse(chain, child, RejectedBlock, "D2")
    grandchild = craft(chain, previous=child.id, tip=chain.genesis_id)
    refuse(chain, grandchild, RejectedBlock, "D2")


def test_d2_block_whose_tip_link_was_rejected_is_rejected(chain: Chain, peer: Block) -> None:
    bad = craft(chain, previous=peer.id, tip=chain.genesis_id, real_pow=False)
    refuse(chain, bad, RejectedBlock, "H4")
    refuse(chain, craft(chain, previous=peer.id, tip=bad.id), RejectedBlock, "D2")


def test_d2_block_whose_milestone_link_was_rejected_is_rejected(chain: Chain, peer: Block) -> None:
    bad = craft(chain, previous=peer.id, tip=chain.genesis_id, version=2)
    refuse(chain, bad, RejectedBlock, "H2")
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, milestone=bad.id)
    refuse(chain, block, RejectedBlock, "D2")


def test_d2_unknown_links_make_an_orphan(chain: Chain) -> None:
    """ORPHAN is not an invalid verdict: nothing stored, not cached."""
    source = new_chain()
    parent = register(source, 1)
    child = build_block(source, previous=parent.id)
    before = stored(chain)
    out = submit(chain, child)
    assert (out.status, out.missing) == (BlockStatus.ORPHAN, (parent.id,))
    assert stored(chain) == before
    assert not chain.is_known_invalid(child.id)
    assert not chain.has_block(child.id)


# ------------------------------------------------------------------------------------ D3, D4
def test_d3_milestone_link_to_an_ordinary_block_is_rejected(chain: Chain, peer: Block) -> None:
    assert chain.get_snapshot(peer.id) is None  # R is accepted but not a milestone block
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, milestone=peer.id)
    refuse(chain, block, RejectedBlock, "D3")


def test_d4_valid_compact_target_other_than_the_links_block_target_is_rejected(
    chain: Chain, peer: Block
) -> None:
    """A harder (valid, canonical) target with real PoW under it still fails D4."""
    harder = encode_compact(chain.best_snapshot.blk_target // 2)
    assert is_valid_compact_target(harder)
    assert harder != encode_compact(chain.best_snapshot.blk_target)
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, target=harder)
    assert int.from_bytes(block.id, "little") <= decode_compact(harder)
    refuse(chain, block, RejectedBlock, "D4")


def test_d4_target_of_another_milestone_is_rejected() -> None:
    """The genesis ms_target is a valid compact target, but not the link's blk_target."""
    chain = new_chain()
    peer = register(chain, 1)
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, target=SIM.genesis_ms_target_bits)
    refuse(chain, block, RejectedBlock, "D4")


# ------------------------------------------------------------------------------------ D5a, D5b
def test_d5a_peer_chain_cannot_step_back_to_an_older_milestone_link(
    chain: Chain, peer: Block
) -> None:
    m1, m2 = mine_milestones(chain, 2)
    a1 = build_block(chain, previous=peer.id, milestone=m2.id, tip=m2.id, want_milestone=False)
    accept(chain, a1)
    back = build_block(chain, previous=a1.id, milestone=m1.id, tip=m1.id, want_milestone=False)
    refuse(chain, back, RejectedBlock, "D5a")
    same = build_block(chain, previous=a1.id, milestone=m2.id, tip=m1.id, want_milestone=False)
    accept(chain, same)


def test_d5a_registration_block_may_link_any_milestone(chain: Chain) -> None:
    m1, _m2 = mine_milestones(chain, 2)
    block = build_block(
        chain,
        previous=chain.genesis_id,
        milestone=m1.id,
        register=address_of_secret(secret_of(7)),
        want_milestone=False,
    )
    accept(chain, block)


@pytest.fixture
def punctual() -> tuple[Chain, Block, list[Block]]:
    """punctuality 5: a registration R linking genesis (msh 0), then milestones M1..M6."""
    chain = new_chain(PUNCTUAL)
    peer = register(chain, 1)
    return chain, peer, mine_milestones(chain, 6)


def test_d5b_previous_link_at_the_edge_passes_one_beyond_is_rejected(
    punctual: tuple[Chain, Block, list[Block]],
) -> None:
    chain, peer, ms = punctual
    late = build_block(chain, previous=peer.id, milestone=ms[4].id, tip=ms[4].id)
    refuse(chain, late, RejectedBlock, "D5b")  # 5 - msh(R)=0 >= 5
    accept(chain, build_block(chain, previous=peer.id, milestone=ms[3].id, tip=ms[3].id))  # 4 < 5


def test_d5b_tip_link_at_the_edge_passes_one_beyond_is_rejected(
    punctual: tuple[Chain, Block, list[Block]],
) -> None:
    """Registration blocks are exempt for their genesis previous link, not for the tip link."""
    chain, peer, ms = punctual
    reg = address_of_secret(secret_of(8))
    late = build_block(
        chain, previous=chain.genesis_id, milestone=ms[4].id, tip=peer.id, register=reg
    )
    refuse(chain, late, RejectedBlock, "D5b")
    on_time = build_block(
        chain, previous=chain.genesis_id, milestone=ms[3].id, tip=peer.id, register=reg
    )
    accept(chain, on_time)


def test_d5b_tip_link_to_a_milestone_counts_its_own_height(
    punctual: tuple[Chain, Block, list[Block]],
) -> None:
    """msh(M1) = 1: linking M6 with tip M1 is 5 >= 5, linking M5 is 4."""
    chain, _peer, ms = punctual
    reg = address_of_secret(secret_of(8))
    late = build_block(
        chain, previous=chain.genesis_id, milestone=ms[5].id, tip=ms[0].id, register=reg
    )
    refuse(chain, late, RejectedBlock, "D5b")
    accept(
        chain,
        build_block(
            chain, previous=chain.genesis_id, milestone=ms[4].id, tip=ms[0].id, register=reg
        ),
    )


def test_d5b_tip_link_to_genesis_only_below_punctuality(
    punctual: tuple[Chain, Block, list[Block]],
) -> None:
    chain, _peer, ms = punctual
    reg = address_of_secret(secret_of(8))
    gid = chain.genesis_id
    late = build_block(chain, previous=gid, milestone=ms[4].id, tip=gid, register=reg)
    refuse(chain, late, RejectedBlock, "D5b")
    accept(chain, build_block(chain, previous=gid, milestone=ms[3].id, tip=gid, register=reg))


# ------------------------------------------------------------------------------------ D6
def test_d6_timestamp_before_previous_is_rejected_equal_is_accepted(chain: Chain) -> None:
    peer = build_block(
        chain,
        previous=chain.genesis_id,
        register=address_of_secret(secret_of(1)),
        timestamp_ms=G + 100,
    )
    accept(chain, peer)
    early = craft(chain, previous=peer.id, tip=chain.genesis_id, timestamp_ms=G + 99)
    refuse(chain, early, RejectedBlock, "D6")
    accept(chain, craft(chain, previous=peer.id, tip=chain.genesis_id, timestamp_ms=G + 100))


def test_d6_timestamp_before_milestone_link_is_rejected_equal_is_accepted(chain: Chain) -> None:
    peer = register(chain, 1, timestamp_ms=G + 100)
    m1 = build_block(
        chain,
        previous=chain.genesis_id,
        register=address_of_secret(secret_of(2)),
        want_milestone=True,
        timestamp_ms=G + 1000,
    )
    accept(chain, m1)
    early = craft(chain, previous=peer.id, tip=m1.id, milestone=m1.id, timestamp_ms=G + 999)
    refuse(chain, early, RejectedBlock, "D6")
    accept(chain, craft(chain, previous=peer.id, tip=m1.id, milestone=m1.id, timestamp_ms=G + 1000))


def test_d6_does_not_constrain_tip_links(chain: Chain) -> None:
    """D6 names the previous and milestone links only: tip links may be newer."""
    peer = register(chain, 1, timestamp_ms=G + 100)
    newer = register(chain, 2, timestamp_ms=G + 5000)
    accept(chain, craft(chain, previous=peer.id, tip=newer.id, timestamp_ms=G + 200))


# ----------------------------------------------------------------------- §3.3 required tests
def _mutations(block: Block, txs: Sequence[Transaction]) -> dict[str, bytes]:
    first = txs[0]
    filler = [unsigned_transfer(i) for i in range(SIM.block_capacity + 1 - len(txs))]
    return {
        "swapped-txs": make_block(block.header, block.tip_links, list(reversed(txs))).raw,
        "129-txs": make_block(block.header, block.tip_links, [*txs, *filler]).raw,
        "non-canonical-tx": block.raw.replace(first.raw, b"\x94\xcc\x01" + first.raw[2:]),
    }


@pytest.mark.parametrize("mutation", ["swapped-txs", "129-txs", "non-canonical-tx"])
def test_required_1_mutated_body_first_is_malformed_and_the_real_block_is_accepted(
    chain: Chain, peer: Block, mutation: str
) -> None:
    """§3.3 required test (1): a mutated copy must not get the real block's id cached."""
    txs = [faucet_tx(0), faucet_tx(1)]
    real = build_block(chain, previous=peer.id, txs=txs)
    raw = _mutations(real, txs)[mutation]
    assert raw != real.raw
    rule = "H1" if mutation == "non-canonical-tx" else "H7"
    assert_refused(chain, raw, MalformedBlock, rule, block_id=real.id)
    out = submit(chain, real, peer="honest")
    assert out.accepted == (real.id,)
    assert not chain.is_known_invalid(real.id)


def test_required_2_no_real_pow_costs_no_signature_check(chain: Chain, peer: Block) -> None:
    checks = chain.signature_checks
    block = craft(chain, previous=peer.id, tip=chain.genesis_id, txs=[faucet_tx(0)], real_pow=False)
    refuse(chain, block, RejectedBlock, "H4")
    assert chain.signature_checks == checks


def test_required_2_future_timestamp_costs_no_signature_check(chain: Chain, peer: Block) -> None:
    checks = chain.signature_checks
    block = craft(
        chain, previous=peer.id, tip=chain.genesis_id, txs=[faucet_tx(0)], timestamp_ms=NOW + 10**6
    )
    refuse(chain, block, NotYetValid, "H11")
    assert chain.signature_checks == checks


def test_required_2_unknown_milestone_link_is_held_raw_and_unchecked(chain: Chain) -> None:
    """Step 4: held as raw bytes, not checked further (not even PoW or the merkle root)."""
    unknown = BlockId(hashlib.blake2b(b"unknown milestone", digest_size=32).digest())
    checks = chain.signature_checks
    block = craft(
        chain,
        previous=chain.genesis_id,
        tip=chain.genesis_id,
        milestone=unknown,
        txs=[faucet_tx(0)],
        merkle_root=bytes(32),
        real_pow=False,
    )
    before = stored(chain)
    out = submit(chain, block)
    assert (out.status, out.missing) == (BlockStatus.ORPHAN, (unknown,))
    assert chain.signature_checks == checks
    assert stored(chain) == before


@pytest.mark.parametrize("missing", ["previous", "tip"])
def test_required_2_unknown_previous_or_tip_link_orphan_skips_only_signatures(
    chain: Chain, missing: str
) -> None:
    """Step 10: header and body are checked, signatures wait until the link arrives."""
    source = new_chain()
    peer = register(source, 1)
    accept(chain, peer)
    absent = register(source, 2)  # accepted by the source only
    previous, tip = (absent.id, peer.id) if missing == "previous" else (peer.id, absent.id)
    tx = faucet_tx(0)
    checks = chain.signature_checks

    # header checked: a wrong target is D4 even though a link is unknown
    bad_header = craft(
        source, previous=previous, tip=tip, txs=[tx], target=SIM.genesis_ms_target_bits
    )
    refuse(chain, bad_header, RejectedBlock, "D4")
    # body checked: a wrong merkle root is MALFORMED, a duplicate tx REJECTed
    refuse(
        chain,
        craft(source, previous=previous, tip=tip, txs=[tx], merkle_root=bytes(32)),
        MalformedBlock,
        "H7",
    )
    refuse(chain, craft(source, previous=previous, tip=tip, txs=[tx, tx]), RejectedBlock, "H8")
    # the valid one is an orphan, its signatures unchecked
    block = craft(source, previous=previous, tip=tip, txs=[tx])
    out = submit(chain, block)
    assert (out.status, out.missing) == (BlockStatus.ORPHAN, (absent.id,))
    assert chain.signature_checks == checks
    # when the link arrives, the orphan is released and its signature checked
    out = accept(chain, absent)
    assert out.accepted == (absent.id, block.id)
    assert chain.signature_checks == checks + len(absent.txs) + 1


def test_required_3_d5b_edge_block_gets_the_same_verdict_at_heights_h_and_h_plus_1() -> None:
    """§3.3 required test (3), F4: punctuality depends on the block's ancestors, not the node."""
    source = new_chain(PUNCTUAL)
    peer = register(source, 1)
    ms = mine_milestones(source, 6)
    edge = build_block(
        source, previous=peer.id, milestone=ms[3].id, tip=ms[3].id, want_milestone=False
    )
    accept(source, edge)  # height(M4) - msh(R) = 4 = punctuality - 1
    child = build_block(
        source, previous=edge.id, milestone=ms[4].id, tip=ms[4].id, want_milestone=False
    )
    accept(source, child)
    beyond = craft(source, previous=peer.id, tip=ms[4].id, milestone=ms[4].id)  # 5 - 0 = 5

    low, high = new_chain(PUNCTUAL), new_chain(PUNCTUAL)
    for node, count in ((low, 5), (high, 6)):
        for block in [peer, *ms[:count]]:
            accept(node, block)
    assert (low.best_height, high.best_height) == (5, 6)

    for node in (low, high):
        assert submit(node, edge).accepted == (edge.id,)
        assert submit(node, child).accepted == (child.id,)
        refuse(node, beyond, RejectedBlock, "D5b")

    accept(low, ms[5])
    assert low.best_id == high.best_id == source.best_id == ms[5].id
    assert low.final_id == high.final_id
    assert low.pending_blocks() == high.pending_blocks()


# ----------------------------------------------------------------------- orphan release
def test_orphan_is_released_when_its_parent_arrives(chain: Chain) -> None:
    source = new_chain()
    parent = register(source, 1)
    child = build_block(source, previous=parent.id)
    accept(source, child)
    assert submit(chain, child).status is BlockStatus.ORPHAN
    out = accept(chain, parent)
    assert out.accepted == (parent.id, child.id)
    assert chain.has_block(child.id)
    assert len(chain.orphans) == 0


def test_chain_of_orphans_is_released_transitively_parent_first(chain: Chain) -> None:
    source = new_chain()
    blocks = [register(source, 1)]
    for _ in range(3):
        block = build_block(source, previous=blocks[-1].id, want_milestone=False)
        accept(source, block)
        blocks.append(block)
    for block in reversed(blocks[1:]):
        assert submit(chain, block).status is BlockStatus.ORPHAN
    out = accept(chain, blocks[0])
    assert out.accepted == tuple(b.id for b in blocks)
    assert len(chain.orphans) == 0


def test_orphan_waiting_for_a_milestone_link_is_released_with_it(chain: Chain) -> None:
    source = new_chain()
    (m1,) = mine_milestones(source, 1)
    block = build_block(
        source, previous=chain.genesis_id, milestone=m1.id, register=address_of_secret(secret_of(3))
    )
    accept(source, block)
    out = submit(chain, block)
    assert (out.status, out.missing) == (BlockStatus.ORPHAN, (m1.id,))
    out = accept(chain, m1)
    assert out.accepted == (m1.id, block.id)
    assert out.is_milestone


def test_orphan_that_turns_out_invalid_is_reported_and_cached(chain: Chain) -> None:
    """A released orphan re-runs every check: D5a here, once its previous link is known."""
    source = new_chain()
    m1, m2 = mine_milestones(source, 2)
    peer = register(source, 1)
    a1 = build_block(source, previous=peer.id, milestone=m2.id, tip=m2.id, want_milestone=False)
    accept(source, a1)
    back = build_block(source, previous=a1.id, milestone=m1.id, tip=m1.id, want_milestone=False)
    for block in (m1, m2, peer):
        accept(chain, block)
    assert submit(chain, back).status is BlockStatus.ORPHAN
    out = accept(chain, a1)
    assert out.accepted == (a1.id,)
    assert [(bid, exc.rule) for bid, exc in out.rejected_orphans] == [(back.id, "D5a")]
    assert chain.is_known_invalid(back.id)
    assert not chain.has_block(back.id)
