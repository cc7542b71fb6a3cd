"""Milestone snapshots: chainwork and retargeting (PROTOCOL.md §4.1, §6, §10, F1, G0-G6).

The §2.5 compact-target vectors are tested with dagchain/pow.py, not here.
"""

import pytest

from dagchain.params import DEVNET, MAINNET, SIM, TESTNET, ConsensusParams
from dagchain.pow import (
    MAX_TARGET,
    compute_work,
    decode_compact,
    encode_compact,
    normalize_target,
)
from dagchain.retarget import Snapshot, compute_snapshot, genesis_snapshot

T0 = 1_800_000_000_000
"""A window start well after every genesis timestamp."""
MAINNET_MS_TARGET = 2**232
MAINNET_MS_WORK = 16_776_960
"""work(2^232) (§2.5 table)."""


def parent_at(
    height: int,
    *,
    ms_target: int = MAINNET_MS_TARGET,
    hash_rate: int = 1_600_000,
    win_start_ms: int = T0,
    win_start_height: int | None = None,
    chainwork: int = 0,
    params: ConsensusParams = MAINNET,
) -> Snapshot:
    """A non-genesis parent snapshot; the window started at ``win_start_height`` (default 0)."""
    blk_target = min(params.max_target, ms_target * params.blocks_per_ms)
    return Snapshot(
        height=height,
        chainwork=chainwork,
        ms_target=ms_target,
        blk_target=blk_target,
        hash_rate=hash_rate,
        win_start_ms=win_start_ms,
        win_start_height=0 if win_start_height is None else win_start_height,
    )


# --- §10 genesis snapshots ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "ms_bits", "blk_bits"),
    [
        (MAINNET, 0x1E010000, 0x1E500000),
        (TESTNET, 0x1E100000, 0x1F050000),
        (DEVNET, 0x20400000, 0x2100FFFF),
        (SIM, 0x1F080000, 0x20028000),
    ],
    ids=["mainnet", "testnet", "devnet", "sim"],
)
def test_genesis_snapshot_matches_section_10(
    params: ConsensusParams, ms_bits: int, blk_bits: int
) -> None:
    """§10 Genesis: height 0, chainwork 0 (F1), both targets of the table, hash_rate 0, window at
    the genesis timestamp."""
    snap = genesis_snapshot(params)
    assert (encode_compact(snap.ms_target), encode_compact(snap.blk_target)) == (ms_bits, blk_bits)
    assert snap.ms_target == decode_compact(ms_bits)
    assert snap.blk_target == decode_compact(blk_bits)
    assert (snap.height, snap.chainwork, snap.hash_rate) == (0, 0, 0)
    assert (snap.win_start_ms, snap.win_start_height) == (params.genesis_timestamp_ms, 0)


# --- F1 / G1 chainwork ----------------------------------------------------------------------------


def test_f1_chainwork_adds_the_parents_milestone_work() -> None:
    """F1/G1: chainwork(M) = chainwork(P) + work(P.ms_target); the first mainnet milestone has
    work(2^232) = 16,776,960."""
    genesis = genesis_snapshot(MAINNET)
    first = compute_snapshot(genesis, True, MAINNET.genesis_timestamp_ms + 10_000, MAINNET)
    assert first.chainwork == MAINNET_MS_WORK
    parent = parent_at(41, ms_target=5 * 2**230, chainwork=123_456)
    child = compute_snapshot(parent, False, T0 + 20_000, MAINNET)
    assert child.chainwork == 123_456 + compute_work(5 * 2**230)
    assert child.height == 42


# --- G0 -------------------------------------------------------------------------------------------


def test_g0_child_of_genesis_starts_window_one_interval_back() -> None:
    """G0: a genesis parent's window start is t - τ and M inherits it, so an old genesis timestamp
    does not distort the first EMA sample (elapsed = τ, k = 1)."""
    genesis = genesis_snapshot(MAINNET)
    t = MAINNET.genesis_timestamp_ms + 86_400_000  # mined a day after the genesis timestamp
    snap = compute_snapshot(genesis, True, t, MAINNET)
    assert (snap.win_start_ms, snap.win_start_height) == (t - 10_000, 0)
    assert snap.hash_rate == (MAINNET_MS_WORK * 1000 // 10_000) // 5
    assert (snap.ms_target, snap.blk_target) == (genesis.ms_target, genesis.blk_target)


# --- G2 EMA ---------------------------------------------------------------------------------------


def test_g2_ema_mid_window_example() -> None:
    """G2 §6 example: P.hash_rate 1,600,000, k = 3, elapsed 31,000 ms → sample 1,623,576,
    hash_rate 1,604,715."""
    parent = parent_at(102, win_start_height=100, win_start_ms=T0)
    snap = compute_snapshot(parent, False, T0 + 31_000, MAINNET)
    assert 3 * MAINNET_MS_WORK * 1000 // 31_000 == 1_623_576
    assert snap.hash_rate == 1_604_715


def test_g2_ema_first_of_window_with_parents_timestamp() -> None:
    """G2 §6 example: k = 1 stamped with the parent's time: elapsed = max(0, 2,500) → sample
    6,710,784, hash_rate 2,622,156."""
    parent = parent_at(360, win_start_height=360, win_start_ms=T0)
    snap = compute_snapshot(parent, False, T0, MAINNET)
    assert snap.hash_rate == 2_622_156


@pytest.mark.parametrize("params", [MAINNET, TESTNET, DEVNET, SIM], ids=lambda p: p.network_id)
def test_g2_one_same_time_milestone_moves_steady_rate_at_most_1_6x(
    params: ConsensusParams,
) -> None:
    """G2 required test: a k = 1 milestone whose timestamp equals its parent's moves a steady
    hash_rate by at most 1.6x (plus one unit of rounding)."""
    tau = params.milestone_interval_ms
    ms_target = genesis_snapshot(params).ms_target
    steady = compute_work(ms_target) * 1000 // tau
    parent = parent_at(
        params.retarget_window + 5,
        ms_target=ms_target,
        hash_rate=steady,
        win_start_height=params.retarget_window + 5,
        win_start_ms=T0,
        params=params,
    )
    snap = compute_snapshot(parent, False, T0, params)
    assert snap.hash_rate > steady
    assert snap.hash_rate <= steady * 8 // 5 + 1


def test_g2_no_upper_clamp_on_slow_samples() -> None:
    """G2: a very slow milestone lowers the EMA without a floor (elapsed has no upper clamp)."""
    parent = parent_at(100, win_start_height=100, win_start_ms=T0, hash_rate=1_000_000)  # k = 1
    snap = compute_snapshot(parent, False, T0 + 10**9, MAINNET)
    assert snap.hash_rate == (4 * 1_000_000 + MAINNET_MS_WORK * 1000 // 10**9) // 5


# --- G3 inheritance -------------------------------------------------------------------------------


def test_g3_mid_window_milestone_inherits_targets_and_window() -> None:
    """G3: h mod I ≠ 0 → ms_target, blk_target, win_start_ms and win_start_height are inherited."""
    parent = parent_at(718, win_start_height=360, win_start_ms=T0)
    snap = compute_snapshot(parent, False, T0 + 10**8, MAINNET)
    assert snap.height == 719
    assert (snap.ms_target, snap.blk_target) == (parent.ms_target, parent.blk_target)
    assert (snap.win_start_ms, snap.win_start_height) == (T0, 360)


# --- G4 / G5 / G6 retarget ------------------------------------------------------------------------


def test_g4_g5_mainnet_example() -> None:
    """G4/G5 §6 example: P.ms_target 2^232, the 360-milestone window took 4,500,000 ms →
    ms_target 5·2^230 (0x1e014000), blk_target 400·2^230 (0x1e640000); G6 resets the window."""
    parent = parent_at(359, win_start_height=0, win_start_ms=T0)
    snap = compute_snapshot(parent, False, T0 + 4_500_000, MAINNET)
    assert snap.ms_target == 5 * 2**230
    assert encode_compact(snap.ms_target) == 0x1E014000
    assert snap.blk_target == 400 * 2**230
    assert encode_compact(snap.blk_target) == 0x1E640000
    assert (snap.win_start_ms, snap.win_start_height) == (T0 + 4_500_000, 360)


@pytest.mark.parametrize(
    ("window_ms", "expected"),
    [
        (100 * 3_600_000, MAINNET_MS_TARGET * 4),
        (3_600_000 // 100, MAINNET_MS_TARGET // 4),
        (0, MAINNET_MS_TARGET // 4),
    ],
    ids=["100x-slow", "100x-fast", "zero-length"],
)
def test_g4_window_is_clamped_at_4x(window_ms: int, expected: int) -> None:
    """G4: a window 100x too slow or too fast moves ms_target by exactly the clamp factor 4."""
    parent = parent_at(359, win_start_ms=T0)
    snap = compute_snapshot(parent, False, T0 + window_ms, MAINNET)
    assert snap.ms_target == expected
    assert snap.blk_target == expected * MAINNET.blocks_per_ms


def test_g4_g5_ms_target_never_exceeds_max_target() -> None:
    """G4/G5: a slow window at max_target stays at max_target, and blk_target is capped too."""
    parent = parent_at(359, ms_target=MAX_TARGET, win_start_ms=T0)
    snap = compute_snapshot(parent, False, T0 + 100 * 3_600_000, MAINNET)
    assert snap.ms_target == MAX_TARGET
    assert snap.blk_target == MAX_TARGET


def test_g4_ms_target_never_below_one() -> None:
    """G4: a fast window at ms_target 1 stays at 1 (max(1, 1 · actual // (I·τ)))."""
    parent = parent_at(359, ms_target=1, win_start_ms=T0)
    snap = compute_snapshot(parent, False, T0 + 1, MAINNET)
    assert snap.ms_target == 1
    assert snap.blk_target == MAINNET.blocks_per_ms


def test_g4_result_is_normalized() -> None:
    """G4/G5 and §2.5: stored targets are normalized (encode then decode is the identity)."""
    parent = parent_at(359, ms_target=0x123456 * 2**200, win_start_ms=T0)
    snap = compute_snapshot(parent, False, T0 + 3_600_001, MAINNET)
    for target in (snap.ms_target, snap.blk_target):
        assert decode_compact(encode_compact(target)) == target
    assert snap.ms_target != 0x123456 * 2**200 * 3_600_001 // 3_600_000


def test_g3_g6_devnet_never_retargets_but_resets_its_window() -> None:
    """G3/G6: with retarget off (devnet) targets never change; every I = 10 milestones only the
    window is reset."""
    genesis = genesis_snapshot(DEVNET)
    snap, t = genesis, DEVNET.genesis_timestamp_ms
    for step in range(1, 61):
        t += 1 if step % 3 else 50_000  # far too fast, with the odd slow milestone
        snap = compute_snapshot(snap, step == 1, t, DEVNET)
        assert (snap.ms_target, snap.blk_target) == (genesis.ms_target, genesis.blk_target)
        if step % DEVNET.retarget_window == 0:
            assert (snap.win_start_ms, snap.win_start_height) == (t, step)
        else:
            assert snap.win_start_height == step - step % DEVNET.retarget_window
    assert snap.height == 60


def test_g4_retargets_only_on_window_boundary() -> None:
    """G3/G4: along a fast sim chain the target changes at h = 60 and not before."""
    params = SIM
    genesis = genesis_snapshot(params)
    snap, t = genesis, params.genesis_timestamp_ms
    for step in range(1, 61):
        t += 5_000  # twice the nominal rate
        snap = compute_snapshot(snap, step == 1, t, params)
        if step < 60:
            assert snap.ms_target == genesis.ms_target
    # G0: the window started at t1 - τ, so it lasted 60 · 5,000 + 5,000 ms of a nominal 600,000.
    assert snap.ms_target == normalize_target(genesis.ms_target * 305_000 // 600_000)
    assert snap.ms_target < genesis.ms_target
    assert snap.blk_target == normalize_target(snap.ms_target * params.blocks_per_ms)
    assert (snap.win_start_ms, snap.win_start_height) == (t, 60)
