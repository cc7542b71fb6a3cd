"""Transaction assignment by sortition (PROTOCOL.md §8.1-§8.2, S1-S5) and the real-bytes vector."""

import hashlib

import pytest

from dagchain.blocks import BlockHeader, compute_merkle_root, compute_tips_root, make_block
from dagchain.genesis import genesis_block
from dagchain.params import DEVNET, MAINNET, SIM
from dagchain.pow import compute_work, decode_compact
from dagchain.sortition import (
    SORTITION_TAG,
    SortitionWindow,
    assignment_bound,
    compute_sortition_distance,
    compute_window_span,
    is_tx_assigned,
    span_floor_ms,
)
from dagchain.transactions import TxKind, TxOut, make_transaction
from dagchain.types import Address, BlockId

SPACE = 2**256
# §8.2 numeric example: K = 100 blocks of target 0x1e0ffff0 (work 2^20 each) over 125,000 ms.
W = 100 * compute_work(decode_compact(0x1E0FFFF0))
S = 125_000
HR = 8 * 2**20
WINDOW = SortitionWindow(peer_height=MAINNET.sortition_warmup + 1, work=W, span_ms=S)
# §8.2 uses mainnet parameters but weighting share with c = 1/100 (v2 mainnet: uniform, c = 1/120).
SHARE = MAINNET.replace(sortition_weighting="share", sortition_c_num=1, sortition_c_den=100)
SECTION_2_6_ADDRESS = Address(
    bytes.fromhex("26527b05c191fad66a8adcf625f3ff956fa9e8d6e29e513f4d89e578609b2989")
)
SECTION_2_6_TXID = bytes.fromhex("341e91862d3d95e6fbbe019c2adc2751d8c960e33dd0dfd78cfb98984990f0fa")


def passes(distance: int, window: SortitionWindow = WINDOW, hash_rate: int = HR) -> bool:
    factor, bound = assignment_bound(window, hash_rate, SHARE)
    return distance * factor < bound


def counted_txids(count: int) -> list[bytes]:
    """The §8.2 txids H(u32 LE i)."""
    return [hashlib.blake2b(i.to_bytes(4, "little"), digest_size=32).digest() for i in range(count)]


def registration_block_id(offset_ms: int, nonce: int) -> BlockId:
    """§8.2 (v2): the mainnet registration block with milestone and previous links = genesis,
    tips [genesis] and the §2.6 address."""
    genesis = genesis_block(MAINNET)
    tx = make_transaction(TxKind.REGISTRATION, [], [TxOut(0, SECTION_2_6_ADDRESS)])
    assert tx.txid.hex().startswith("ae28bfbe")
    assert tx.txid.hex().endswith("0174b330")
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
    block = make_block(header, [genesis.id], [tx])
    assert int.from_bytes(block.id, "little") <= decode_compact(0x1E500000)
    return block.id


# --- S5 numeric example (§8.2) --------------------------------------------------------------------


def test_s5_share_numeric_example() -> None:
    """S5 §8.2: W = 100·2^20, S = 125,000 ms, Hr = 8·2^20, c = 1/100 → A = 2^256/1000, so
    d = 0.0005·2^256 passes and d = 0.002·2^256 fails."""
    assert W == 104_857_600
    assert passes(SPACE * 5 // 10_000)
    assert not passes(SPACE * 2 // 1_000)


def test_s5_share_comparison_is_strict_at_the_bound() -> None:
    """S5: pass iff d < A, strictly, with A = 2^256/1000 (not an integer): exact integer maths."""
    assert passes(SPACE // 1000)
    assert not passes(SPACE // 1000 + 1)
    factor, bound = assignment_bound(WINDOW, HR, SHARE)
    assert (factor, bound) == (S * HR * 100, W * 1000 * 1 * SPACE)


# --- S4 + S5 required real-bytes vector (§8.2) ----------------------------------------------------


def test_s4_s5_required_vector_registration_block_p() -> None:
    """S4/S5 §8.2 required vector (v2: tips [genesis], nonce 3,013): p = 439db7e2…f7080000; the
    §2.6 txid fails (d ≈ 0.473798·2^256); of H(u32 LE i), i < 10,000, exactly {2414, 7474, 8215,
    8452, 8591, 9385} pass (i = 2414: d ≈ 0.000822·2^256), under §8.2's share weighting,
    c = 1/100."""
    assert compute_tips_root([genesis_block(MAINNET).id]).hex() == (
        "c863408583ac16aa7d61c170feb022cfe2f5bb221f9bae1d4da2d1ffe0cc414a"
    )
    p = registration_block_id(1_000, 3_013)
    assert p.hex() == "439db7e2c62a149186d39f92ecb4967c087641bf5202ed87715ba1b5f7080000"
    digest = hashlib.blake2b(SORTITION_TAG + p + SECTION_2_6_TXID, digest_size=32).digest()
    assert digest.hex() == "a507db5f3c84135d9f4029c31a65bfd7ed11a62f1366843e0ee7c25045d44a79"
    distance = compute_sortition_distance(p, SECTION_2_6_TXID)
    assert distance == int.from_bytes(digest, "little")
    assert round(distance / SPACE, 6) == 0.473798
    assert not is_tx_assigned(SECTION_2_6_TXID, p, WINDOW, HR, SHARE)
    txids = counted_txids(10_000)
    passing = [i for i, t in enumerate(txids) if is_tx_assigned(t, p, WINDOW, HR, SHARE)]
    assert passing == [2414, 7474, 8215, 8452, 8591, 9385]
    assert round(compute_sortition_distance(p, txids[2414]) / SPACE, 6) == 0.000822


def test_s4_s5_required_vector_two_real_links_give_disjoint_sets() -> None:
    """S4 §8.2 required test (v2): p' (genesis + 2,000 ms, nonce 12,623, id 2d02bd51…192a0000)
    admits exactly {1255, 3228, 6182, 6637, 9127, 9135, 9889}, none in common with p."""
    p = registration_block_id(1_000, 3_013)
    p2 = registration_block_id(2_000, 12_623)
    assert p2.hex().startswith("2d02bd51")
    assert p2.hex().endswith("192a0000")
    factor, bound = assignment_bound(WINDOW, HR, SHARE)
    txids = counted_txids(10_000)
    eligible = {
        link: {
            i for i, t in enumerate(txids) if compute_sortition_distance(link, t) * factor < bound
        }
        for link in (p, p2)
    }
    assert eligible[p] == {2414, 7474, 8215, 8452, 8591, 9385}
    assert eligible[p2] == {1255, 3228, 6182, 6637, 9127, 9135, 9889}
    assert eligible[p] & eligible[p2] == set()


# --- S1, S3, weighting, switch --------------------------------------------------------------------


@pytest.mark.parametrize("peer_height", [1, 2, MAINNET.sortition_warmup])
def test_s1_warmup_fails_every_tx_under_share(peer_height: int) -> None:
    """S1 (v2: ``share`` weighting only): while m <= K no tx passes, whatever the hash rate or
    the simulator switch."""
    window = SortitionWindow(peer_height=peer_height, work=0, span_ms=0)
    txids = counted_txids(200)
    for params in (SHARE, SHARE.replace(sortition_enabled=False)):
        for hash_rate in (0, HR):
            assert not any(is_tx_assigned(t, bytes(32), window, hash_rate, params) for t in txids)


@pytest.mark.parametrize("peer_height", [1, 2, MAINNET.sortition_warmup])
def test_s1_no_warmup_under_uniform(peer_height: int) -> None:
    """S1 (v2): ``uniform`` weighting has no warm-up, so a block with m <= K admits exactly the
    txs it would admit after K (about a fraction c), and the switch passes every tx."""
    window = SortitionWindow(peer_height=peer_height, work=0, span_ms=0)
    txids = counted_txids(2_400)
    link = hashlib.blake2b(b"warm-up link", digest_size=32).digest()
    assert MAINNET.sortition_weighting == "uniform"
    early = [t for t in txids if is_tx_assigned(t, link, window, HR, MAINNET)]
    late = [t for t in txids if is_tx_assigned(t, link, WINDOW, HR, MAINNET)]
    assert early == late
    assert 5 <= len(early) <= 40  # c = 1/120 of 2,400 is 20
    off = MAINNET.replace(sortition_enabled=False)
    assert all(is_tx_assigned(t, link, window, HR, off) for t in txids)


def test_s3_zero_hash_rate_passes_every_tx() -> None:
    """S3: with share weighting and Hr == 0 every tx passes S5 (after warm-up)."""
    assert all(is_tx_assigned(t, bytes(32), WINDOW, 0, SHARE) for t in counted_txids(500))


def test_s5_sortition_disabled_passes_every_tx() -> None:
    """S5 with the simulator switch ``sortition_enabled = false``: every tx passes after warm-up."""
    params = SIM.replace(sortition_enabled=False)
    assert all(is_tx_assigned(t, bytes(32), WINDOW, HR, params) for t in counted_txids(500))


def test_s5_uniform_weighting_passes_about_c_of_txids() -> None:
    """S5 uniform: A = c·2^256 for every block, so about a fraction c of txids pass, independent of
    W, S and Hr (S2, S3 unused: Hr = 0 does not open the gate)."""
    params = SIM.replace(sortition_weighting="uniform", sortition_c_num=1, sortition_c_den=10)
    link = hashlib.blake2b(b"some previous link", digest_size=32).digest()
    txids = counted_txids(10_000)
    tiny = SortitionWindow(peer_height=WINDOW.peer_height, work=1, span_ms=10**9)
    results = {
        (window, hash_rate): sum(is_tx_assigned(t, link, window, hash_rate, params) for t in txids)
        for window in (WINDOW, tiny)
        for hash_rate in (0, HR)
    }
    assert len(set(results.values())) == 1
    assert 850 <= results[(WINDOW, HR)] <= 1150


def test_s5_unknown_weighting_is_an_error() -> None:
    """S5: only ``share`` and ``uniform`` are defined."""
    with pytest.raises(ValueError, match="sortition_weighting"):
        assignment_bound(WINDOW, HR, MAINNET.replace(sortition_weighting="fair"))


def test_s5_per_tx_check_agrees_with_is_tx_assigned() -> None:
    """S4/S5: the precomputed (factor, bound) check equals is_tx_assigned for share weighting."""
    link = hashlib.blake2b(b"link", digest_size=32).digest()
    window = SortitionWindow(peer_height=WINDOW.peer_height, work=W * 50, span_ms=S)
    factor, bound = assignment_bound(window, HR, SHARE)
    for txid in counted_txids(2_000):
        expected = compute_sortition_distance(link, txid) * factor < bound
        assert is_tx_assigned(txid, link, window, HR, SHARE) == expected


# --- S2 span --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ms_ts", "kth_ts", "expected"),
    [(1_125_000, 1_000_000, 125_000), (1_000_000, 1_000_000, 1), (999_999, 1_000_000, 1)],
)
def test_s2_window_span_is_at_least_one_ms(ms_ts: int, kth_ts: int, expected: int) -> None:
    """S2: S = max(S_floor, ts(M) - ts(milestone_link(b_K))) in ms; S_floor = 1 where b is not
    fixed (devnet)."""
    assert span_floor_ms(DEVNET) == 1
    assert compute_window_span(ms_ts, kth_ts, DEVNET) == expected


@pytest.mark.parametrize(
    ("ms_ts", "kth_ts", "expected"),
    [
        (1_125_000, 1_000_000, 125_000),
        (1_012_501, 1_000_000, 12_501),
        (1_012_500, 1_000_000, 12_500),
        (1_012_499, 1_000_000, 12_500),
        (1_000_000, 1_000_000, 12_500),
        (999_999, 1_000_000, 12_500),
    ],
)
def test_s2_window_span_has_the_v2_floor(ms_ts: int, kth_ts: int, expected: int) -> None:
    """S2 (v2): S_floor = max(1, K · milestone_interval_ms // blocks_per_ms) = 100 · 10,000 // 80
    = 12,500 ms on mainnet, the time the network needs for K blocks."""
    assert span_floor_ms(MAINNET) == 12_500
    assert compute_window_span(ms_ts, kth_ts, MAINNET) == expected
