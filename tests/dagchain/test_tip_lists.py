"""Protocol v2 tip lists (PROTOCOL.md v2 §2.1, §2.2, §3.2, §3.3, §5, §8.2).

The §3.3 required tests (1) with the new tip mutations and (4) on tip lists, the §5 required
multi-tip vector, a real 8-tip block ordered by L2, and the §8.2 required vector with its v2
numbers (tips [genesis], nonce 3,013). Real proof of work on SIM parameters: every refused block
would pass H4, so the test reaches the rule it names. Each refusal checks the verdict class, the
rule id, that no stored byte and no best head changed, and that the id entered the invalid cache
iff the verdict is REJECT (a MALFORMED copy must never poison the real block's id, H7).
"""

import hashlib
from collections.abc import Callable, Sequence

import pytest

from dagchain.blocks import (
    Block,
    BlockHeader,
    compute_merkle_root,
    compute_tips_root,
    decode_block,
    make_block,
)
from dagchain.chain import BlockOutcome, BlockStatus, Chain
from dagchain.errors import MalformedBlock, RejectedBlock
from dagchain.genesis import FAUCET_SECRET, genesis_block
from dagchain.levelset import compute_level_set
from dagchain.mempool import Mempool
from dagchain.params import MAINNET, SIM
from dagchain.pow import decode_compact
from dagchain.sortition import SortitionWindow, assignment_bound, compute_sortition_distance
from dagchain.storage.memory import MemoryStore
from dagchain.transactions import Transaction, TxKind, TxOut, make_transaction, sign_transaction
from dagchain.types import NULL_ID, Address, BlockId, TxId
from p2p.scores import score_block_error
from p2p.service import NodeService
from tests.dagchain.builders import address_of_secret, build_block, secret_of

PARAMS = SIM
NOW = PARAMS.genesis_timestamp_ms + 10**9
Refusal = type[MalformedBlock] | type[RejectedBlock]


# ------------------------------------------------------------------------------------ helpers
def stored(chain: Chain) -> dict[bytes, bytes]:
    store = chain.store
    assert isinstance(store, MemoryStore)
    return store.snapshot()


def accept(chain: Chain, block: Block, peer: str = "local") -> BlockOutcome:
    out = chain.on_block(block.raw, NOW, peer)
    assert out.status is BlockStatus.ACCEPTED, out
    return out


def assert_refused(chain: Chain, raw: bytes, verdict: Refusal, rule: str, block_id: bytes) -> None:
    """The verdict and rule; nothing stored, best head unchanged; cached iff REJECT."""
    before = stored(chain)
    best = chain.best_id
    with pytest.raises(verdict) as info:
        chain.on_block(raw, NOW, "mutator")
    assert type(info.value) is verdict
    assert info.value.rule == rule, info.value
    assert stored(chain) == before
    assert chain.best_id == best
    assert len(chain.orphans) == 0
    assert not chain.has_block(block_id)
    assert chain.is_known_invalid(block_id) is (verdict is RejectedBlock)


def faucet_tx(index: int) -> Transaction:
    """A correctly signed spend of faucet output ``index``."""
    return sign_transaction(
        TxKind.TRANSFER,
        [(TxId(genesis_block(PARAMS).id), index)],
        [TxOut(10**14 - 10_000, Address(address_of_secret(secret_of(100 + index))))],
        [FAUCET_SECRET],
        PARAMS,
    )


def register(chain: Chain, n: int, milestone: bytes | None = None) -> Block:
    """An ordinary registration block of key ``n`` linking ``milestone`` (default: best head)."""
    block = build_block(
        chain,
        previous=chain.genesis_id,
        milestone=milestone,
        register=address_of_secret(secret_of(n)),
        want_milestone=False,
    )
    accept(chain, block)
    return block


@pytest.fixture
def chain() -> Chain:
    return Chain(PARAMS, MemoryStore())


@pytest.fixture
def peers(chain: Chain) -> list[Block]:
    """Nine registered peer chains: accepted blocks a tip list can name."""
    return [register(chain, i) for i in range(1, 10)]


def body_with_tips(block: Block, tips: Sequence[bytes]) -> bytes:
    """The same header (so the same id) over another tip list: a mutated body."""
    return make_block(block.header, tips, block.txs).raw


def non_canonical_first_tx(block: Block) -> bytes:
    first = block.txs[0]
    assert first.raw.startswith(b"\x94\x01")
    return block.raw.replace(first.raw, b"\x94\xcc\x01" + first.raw[2:])


# ----------------------------------------------------------------- §3.3 required test (1), v2
MUTATIONS: dict[str, tuple[Callable[[Block, Chain], bytes], str]] = {
    "tips-replaced-by-genesis": (lambda b, c: body_with_tips(b, [c.genesis_id]), "H7"),
    "tips-replaced-by-tips-root": (lambda b, c: body_with_tips(b, [b.header.tips_root]), "H7"),
    "tips-dropped": (lambda b, c: body_with_tips(b, []), "H7"),
    "tip-added": (lambda b, c: body_with_tips(b, sorted([*b.tip_links, c.genesis_id])), "H7"),
    "swapped-txs": (lambda b, c: make_block(b.header, b.tip_links, b.txs[::-1]).raw, "H7"),
    "non-canonical-tx": (lambda b, c: non_canonical_first_tx(b), "H1"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_required_1_v2_mutated_body_first_is_malformed_and_the_real_block_is_accepted(
    chain: Chain, peers: list[Block], mutation: str
) -> None:
    """§3.3 required test (1), v2 (H7, H1): a copy of a real block whose tips are replaced by
    [genesis] or by [tips_root] (or dropped, or extended), whose txs are swapped, or whose tx is
    non-canonical, sent first, is MALFORMED and its id is not cached; the real block sent second
    is accepted. H5 (tip list) is read only after tips_root passed H7 (§3.3 step 3)."""
    txs = [faucet_tx(0), faucet_tx(1)]
    tips = sorted([peers[1].id, peers[2].id])
    real = build_block(chain, previous=peers[0].id, tips=tips, txs=txs)
    make, rule = MUTATIONS[mutation]
    raw = make(real, chain)
    assert raw != real.raw
    assert_refused(chain, raw, MalformedBlock, rule, real.id)
    out = chain.on_block(real.raw, NOW, "honest")
    assert out.status is BlockStatus.ACCEPTED
    assert out.accepted == (real.id,)
    assert not chain.is_known_invalid(real.id)
    assert chain.get_block(real.id) == real


# ----------------------------------------------------------------- §3.3 required test (4)
def _tip_cases(chain: Chain, peers: list[Block]) -> dict[str, tuple[bytes, Sequence[bytes]]]:
    """name -> (previous link, tip list) for every tip list H5 REJECTs."""
    a, b = sorted([peers[1].id, peers[2].id])
    nine = sorted(p.id for p in peers)
    own = peers[0].id
    return {
        "nine-tips": (own, nine),
        "descending": (own, [b, a]),
        "repeated": (own, [a, a]),
        "repeated-in-a-longer-list": (own, [a, a, b]),
        "tip-is-previous": (own, [own]),
        "tip-is-previous-among-others": (own, sorted([own, a, b])),
        "null-tip": (own, [NULL_ID, a]),
        "genesis-previous-with-genesis-and-more": (chain.genesis_id, sorted([chain.genesis_id, a])),
    }


CASES = [
    "nine-tips",
    "descending",
    "repeated",
    "repeated-in-a-longer-list",
    "tip-is-previous",
    "tip-is-previous-among-others",
    "null-tip",
    "genesis-previous-with-genesis-and-more",
]


@pytest.mark.parametrize("case", CASES)
def test_required_4_bad_tip_list_with_matching_tips_root_is_rejected(
    chain: Chain, peers: list[Block], case: str
) -> None:
    """§3.3 required test (4), H5 (tip list): 9 tips, tips out of order or repeated, a tip equal
    to the previous link, a null tip: REJECT (cached), although tips_root matches the body, so
    H7 passes and the tip list is a body the header commits to. Only [genesis] alone may equal a
    genesis previous link."""
    previous, tips = _tip_cases(chain, peers)[case]
    register_key = address_of_secret(secret_of(77)) if previous == chain.genesis_id else None
    block = build_block(chain, previous=previous, tips=tips, register=register_key)
    assert block.header.tips_root == compute_tips_root(tips)
    assert_refused(chain, block.raw, RejectedBlock, "H5", block.id)
    # REJECT is remembered: the same bytes again hit the invalid cache (D1)
    with pytest.raises(RejectedBlock) as info:
        chain.on_block(block.raw, NOW, "again")
    assert info.value.rule == "D1"


def test_required_4_zero_tips_is_rejected_by_the_header_part_of_h5(
    chain: Chain, peers: list[Block]
) -> None:
    """§3.3 required test (4), H5: a block with 0 tips. §2.1 over an empty list is the null id
    (genesis only), so its header carries a null tips_root: REJECT by H5's header part, cached
    (every body under that header is invalid)."""
    block = build_block(chain, previous=peers[0].id, tips=[])
    assert block.header.tips_root == NULL_ID
    assert_refused(chain, block.raw, RejectedBlock, "H5", block.id)


def test_required_4_eight_tips_is_the_upper_bound(chain: Chain, peers: list[Block]) -> None:
    """H5: exactly max_tip_links (8) ascending tips is accepted (the 9-tip case is REJECTed)."""
    assert PARAMS.max_tip_links == 8
    tips = sorted(p.id for p in peers[1:])
    block = build_block(chain, previous=peers[0].id, tips=tips)
    accept(chain, block)
    stored_block = chain.get_block(block.id)
    assert stored_block is not None
    assert stored_block.tip_links == tuple(tips)


def test_h5_registration_may_tip_link_exactly_genesis(chain: Chain) -> None:
    """H5: previous link genesis with tips exactly [genesis] is the one allowed equality."""
    block = build_block(
        chain,
        previous=chain.genesis_id,
        tips=[chain.genesis_id],
        register=address_of_secret(secret_of(5)),
    )
    accept(chain, block)


@pytest.mark.parametrize(
    "body", ["other-tips", "subset", "nine-tips", "descending", "300-tips", "null-tip"]
)
def test_required_4_body_not_matching_tips_root_is_malformed_then_real_is_accepted(
    chain: Chain, peers: list[Block], body: str
) -> None:
    """§3.3 required test (4), H7 (tips_root): a body whose tips do not match tips_root is
    MALFORMED (not cached), even when that tip list would also break H5 (H7 comes first, §3.3
    step 3); the real block, sent second, is accepted."""
    tips = sorted([peers[1].id, peers[2].id, peers[3].id])
    real = build_block(chain, previous=peers[0].id, tips=tips, txs=[faucet_tx(2)])
    fake_ids = sorted(
        hashlib.blake2b(i.to_bytes(2, "big"), digest_size=32).digest() for i in range(300)
    )
    bodies: dict[str, Sequence[bytes]] = {
        "other-tips": sorted([peers[4].id, peers[5].id]),
        "subset": tips[:2],
        "nine-tips": sorted(p.id for p in peers),
        "descending": tips[::-1],
        "300-tips": fake_ids,
        "null-tip": [NULL_ID, *tips[1:]],
    }
    assert_refused(chain, body_with_tips(real, bodies[body]), MalformedBlock, "H7", real.id)
    accept(chain, real)
    assert not chain.is_known_invalid(real.id)


def test_required_4_eight_tip_block_orders_tips_ascending(chain: Chain) -> None:
    """§3.3 required test (4), L2 (§5 multi-tip vector): a real block with 8 tip links, each a
    block whose own links are all in earlier level sets, is ordered with its tips in ascending
    byte order, then the block, then the milestone. Visiting the tips in descending (or body)
    order would give another level set."""
    # M1: a first milestone; everything below is then in earlier level sets.
    miner = build_block(
        chain,
        previous=chain.genesis_id,
        register=address_of_secret(secret_of(50)),
        want_milestone=True,
    )
    accept(chain, miner)
    m1 = miner.id
    assert chain.best_id == m1
    leaves = [register(chain, 60 + i, milestone=m1) for i in range(8)]
    # each leaf links M1 (milestone and tip) and genesis (previous): LS(M1) or earlier
    for leaf in leaves:
        assert set(leaf.links) <= {m1, chain.genesis_id}
    tips = sorted(leaf.id for leaf in leaves)
    eight = build_block(chain, previous=m1, milestone=m1, tips=tips)
    accept(chain, eight)
    closing = build_block(
        chain, previous=eight.id, milestone=m1, tips=[tips[0]], want_milestone=True
    )
    out = accept(chain, closing)
    assert out.is_milestone
    assert chain.best_id == closing.id
    delta = chain.level_set(closing.id)
    assert delta is not None
    assert list(delta.order) == [*tips, eight.id, closing.id]
    assert list(delta.order) != [*tips[::-1], eight.id, closing.id]


# ----------------------------------------------------------------- §5 multi-tip vector
def bid(name: int | str) -> BlockId:
    """A readable 32-byte id for a test block name (labels sort like their bytes)."""
    return BlockId(str(name).encode().rjust(32, b"."))


def names(ids: Sequence[BlockId]) -> list[str]:
    return [i.lstrip(b".").decode() for i in ids]


_OUTSIDE = (bid("x-ms"), bid("x-prev"), bid("x-tip"))
"""Targets of "every other link": blocks outside 0..9, in an earlier level set."""
_MILESTONE = {0: 2, 1: 5, 2: 5, 3: 8, 5: 8, 7: 5, 9: 5}
_PREVIOUS = {0: 1, 1: 7, 2: 4, 3: 5, 7: 4, 9: 1}
_SINGLE_TIP: dict[int, tuple[int, ...]] = {0: (3,), 1: (6,), 2: (6,), 3: (6,), 7: (8,), 9: (3,)}
_MULTI_TIP = {**_SINGLE_TIP, 0: (3, 9), 7: (6, 8), 9: (2, 3)}
_TEN = frozenset(bid(i) for i in range(10))


def vector_links(
    tips: dict[int, tuple[int, ...]], descending: bool = False
) -> dict[BlockId, tuple[BlockId, ...]]:
    """(milestone, previous, *tips) per block; tips ascending by label unless ``descending``."""
    table: dict[BlockId, tuple[BlockId, ...]] = {}
    for i in range(10):
        ms = bid(_MILESTONE[i]) if i in _MILESTONE else _OUTSIDE[0]
        prev = bid(_PREVIOUS[i]) if i in _PREVIOUS else _OUTSIDE[1]
        tip_ids = (
            sorted((bid(t) for t in tips[i]), reverse=descending) if i in tips else [_OUTSIDE[2]]
        )
        table[bid(i)] = (ms, prev, *tip_ids)
    return table


@pytest.mark.parametrize(
    ("pivot", "expected", "pending"),
    [
        (0, ["8", "5", "4", "6", "2", "7", "1", "3", "9", "0"], set()),
        (9, ["8", "5", "4", "6", "7", "1", "2", "3", "9"], {"0"}),
    ],
)
def test_l2_required_multi_tip_vector(pivot: int, expected: list[str], pending: set[str]) -> None:
    """L1/L2 §5 required multi-tip vector: blocks 0 (tips 3, 9), 7 (6, 8) and 9 (2, 3) carry two
    tip links each, visited milestone → previous → tips ascending. Pivot 9 would end
    "..., 3, 2, 9" if tips were visited in descending order."""
    table = vector_links(_MULTI_TIP)
    order = compute_level_set(bid(pivot), table.__getitem__, lambda b: b not in _TEN)
    assert names(order) == expected
    assert set(names(sorted(_TEN))) - set(names(order)) == pending


def test_l2_multi_tip_vector_fails_for_descending_tip_visits() -> None:
    """L2: the multi-tip vector separates the orders: visiting tips in descending order gives
    a different LS(9) ending 3, 2, 9, so a DFS that reversed the tips fails the vector."""
    table = vector_links(_MULTI_TIP, descending=True)
    order = names(compute_level_set(bid(9), table.__getitem__, lambda b: b not in _TEN))
    assert order[-3:] == ["3", "2", "9"]
    assert order != ["8", "5", "4", "6", "7", "1", "2", "3", "9"]


@pytest.mark.parametrize(
    ("pivot", "expected", "pending"),
    [
        (0, ["8", "5", "4", "6", "2", "7", "1", "3", "0"], {"9"}),
        (9, ["8", "5", "4", "7", "6", "1", "3", "9"], {"0", "2"}),
    ],
)
def test_l2_single_tip_vector_is_unchanged_with_tuple_links(
    pivot: int, expected: list[str], pending: set[str]
) -> None:
    """L1/L2 §5 required v1 vector, run through the same variable-length link tuples."""
    table = vector_links(_SINGLE_TIP)
    order = compute_level_set(bid(pivot), table.__getitem__, lambda b: b not in _TEN)
    assert names(order) == expected
    assert set(names(sorted(_TEN))) - set(names(order)) == pending


# ----------------------------------------------------------------- §8.2 required vector (v2)
SECTION_2_6_ADDRESS = Address(
    bytes.fromhex("26527b05c191fad66a8adcf625f3ff956fa9e8d6e29e513f4d89e578609b2989")
)
SECTION_2_6_TXID = bytes.fromhex("341e91862d3d95e6fbbe019c2adc2751d8c960e33dd0dfd78cfb98984990f0fa")
SHARE = MAINNET.replace(sortition_weighting="share", sortition_c_num=1, sortition_c_den=100)
"""§8.2: mainnet parameters with weighting share, K = 100, c = 1/100."""
WINDOW = SortitionWindow(peer_height=101, work=100 * 2**20, span_ms=125_000)
HASH_RATE = 8 * 2**20


def mainnet_registration(offset_ms: int, nonce: int) -> Block:
    """§8.2 (v2): milestone and previous links genesis, tips [genesis], the §2.6 address."""
    genesis = genesis_block(MAINNET)
    tx = make_transaction(TxKind.REGISTRATION, [], [TxOut(0, SECTION_2_6_ADDRESS)])
    header = BlockHeader(
        version=1,
        milestone_link=genesis.id,
        previous_link=genesis.id,
        tips_root=compute_tips_root([genesis.id]),
        merkle_root=compute_merkle_root([tx]),
        timestamp_ms=MAINNET.genesis_timestamp_ms + offset_ms,
        target=0x1E500000,
        nonce=nonce,
    )
    return make_block(header, [genesis.id], [tx])


def passing(p: bytes, count: int = 10_000) -> list[int]:
    factor, bound = assignment_bound(WINDOW, HASH_RATE, SHARE)
    out = []
    for i in range(count):
        txid = hashlib.blake2b(i.to_bytes(4, "little"), digest_size=32).digest()
        if compute_sortition_distance(p, txid) * factor < bound:
            out.append(i)
    return out


def test_s4_s5_required_vector_v2_numbers() -> None:
    """S4/S5 §8.2 required vector, v2: tips_root of [genesis] = c8634085…ffe0cc414a; nonce 3,013
    gives p = 439db7e2…f7080000, a real mainnet PoW block the chain accepts; the §2.6 txid fails
    (d ≈ 0.473798·2^256); of H(u32 LE i), i < 10,000, exactly {2414, 7474, 8215, 8452, 8591,
    9385} pass; for p' (genesis + 2,000 ms, nonce 12,623, 2d02bd51…192a0000) exactly {1255,
    3228, 6182, 6637, 9127, 9135, 9889}: none in common."""
    genesis = genesis_block(MAINNET)
    assert compute_tips_root([genesis.id]).hex() == (
        "c863408583ac16aa7d61c170feb022cfe2f5bb221f9bae1d4da2d1ffe0cc414a"
    )
    assert (
        compute_tips_root([genesis.id])
        == hashlib.blake2b(b"dagchain-tips" + b"\x01" + genesis.id, digest_size=32).digest()
    )
    block = mainnet_registration(1_000, 3_013)
    p = block.id
    assert p.hex() == "439db7e2c62a149186d39f92ecb4967c087641bf5202ed87715ba1b5f7080000"
    assert block.txs[0].txid.hex().startswith("ae28bfbe")
    assert block.txs[0].txid.hex().endswith("0174b330")
    assert int.from_bytes(p, "little") <= decode_compact(0x1E500000)
    assert decode_block(block.raw, MAINNET) == block
    mainnet = Chain(MAINNET, MemoryStore())
    out = mainnet.on_block(block.raw, MAINNET.genesis_timestamp_ms + 10_000)
    assert out.status is BlockStatus.ACCEPTED
    digest = hashlib.blake2b(b"dagchain-sortition" + p + SECTION_2_6_TXID, digest_size=32)
    assert digest.hexdigest() == "a507db5f3c84135d9f4029c31a65bfd7ed11a62f1366843e0ee7c25045d44a79"
    assert 0.4737 < compute_sortition_distance(p, SECTION_2_6_TXID) / 2**256 < 0.4739
    assert passing(p) == [2414, 7474, 8215, 8452, 8591, 9385]
    p2 = mainnet_registration(2_000, 12_623).id
    assert p2.hex().startswith("2d02bd51")
    assert p2.hex().endswith("192a0000")
    assert int.from_bytes(p2, "little") <= decode_compact(0x1E500000)
    assert passing(p2) == [1255, 3228, 6182, 6637, 9127, 9135, 9889]


def test_required_1_v2_through_the_node_service_the_honest_relayer_is_not_scored(
    peers: list[Block], chain: Chain
) -> None:
    """§3.3 required test (1), H7, §11.7: on the node's service layer the mutated copy (tips
    replaced by [genesis]) raises MALFORMED, which the gossip layer scores +100 against its
    sender; the real block from another peer is accepted (nothing raised, nothing to score) and
    is not in the invalid cache."""
    service = NodeService(PARAMS, chain, Mempool(PARAMS), lambda: NOW)
    real = build_block(chain, previous=peers[0].id, tips=sorted([peers[1].id, peers[2].id]))
    with pytest.raises(MalformedBlock) as info:
        service.submit_block(body_with_tips(real, [chain.genesis_id]), "mutator")
    assert score_block_error(info.value) == 100
    assert service.rejected["block:H7"] == 1
    out = service.submit_block(real.raw, "honest")
    assert out.status is BlockStatus.ACCEPTED
    assert not chain.is_known_invalid(real.id)
