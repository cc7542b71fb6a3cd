"""Milestone snapshots: chainwork, targets and the hash-rate EMA (PROTOCOL.md §4.1, §6, F1, G0-G6).

Interpretations of §6 made here (integer maths throughout, no floats):

- G0 replaces P's window start by ``t - τ`` for *every* use while deriving M from genesis: the G2
  elapsed time, the G4 window length (only when I = 1), and the value M inherits under G3.
  Genesis' own stored snapshot keeps ``win_start_ms`` = genesis timestamp (§10 Genesis).
- G2 always runs, whether or not M closes a window; k >= 1 always holds because
  ``P.win_start_height <= height(P) < h``. The floor ``k·τ // 4`` is positive for τ >= 4, so
  elapsed > 0 on every preset; for a (non-preset) τ < 4 elapsed is additionally floored at 1 ms so
  that no parameter choice divides by zero. The floor at 1 never binds for τ >= 4.
- G3/G6: with ``retarget`` off, targets are always inherited; at h mod I == 0 only the window is
  reset (G6). With ``retarget`` on, G4, G5 and G6 run exactly at h mod I == 0.
- G4's clamp factor is ``params.retarget_clamp`` (4 on every preset):
  actual ∈ [I·τ // clamp, clamp·I·τ].
"""

from dataclasses import dataclass

from dagchain.params import ConsensusParams, genesis_blk_target
from dagchain.pow import compute_work, normalize_target

__all__ = ["Snapshot", "compute_snapshot", "genesis_snapshot"]

EMA_OLD_WEIGHT = 4
"""G2: the new hash rate is (4 · old + sample) // 5."""
EMA_DENOMINATOR = 5
ELAPSED_FLOOR_DIVISOR = 4
"""G2: elapsed is floored at k·τ // 4, which caps one sample at 4x nominal."""
MS_PER_S = 1000


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Per-milestone state (§4.1, the §12 ``s`` row); targets are expanded and normalized."""

    height: int
    chainwork: int
    ms_target: int
    blk_target: int
    hash_rate: int
    """Work per second (G2 EMA); 0 at genesis."""
    win_start_ms: int
    win_start_height: int


def genesis_snapshot(params: ConsensusParams) -> Snapshot:
    """The snapshot of genesis (§10 Genesis, F1).

    Height 0, chainwork 0, the network's genesis ms_target, blk_target = min(max_target,
    ms_target · b), hash_rate 0, and the window starting at genesis (G0 applies to its children).
    """
    return Snapshot(
        height=0,
        chainwork=0,
        ms_target=normalize_target(params.genesis_ms_target),
        blk_target=genesis_blk_target(params),
        hash_rate=0,
        win_start_ms=params.genesis_timestamp_ms,
        win_start_height=0,
    )


def compute_snapshot(
    parent: Snapshot, parent_is_genesis: bool, timestamp_ms: int, params: ConsensusParams
) -> Snapshot:
    """Snapshot of a new milestone M from its parent milestone's snapshot and M's timestamp (§6).

    Applies G0 (genesis parent: window start t - τ), G1/F1 (chainwork), G2 (hash-rate EMA), G3
    (inheritance off the window boundary or with retarget off), G4 (clamped Bitcoin retarget),
    G5 (block target = ms_target · b) and G6 (window reset). See the module docstring for the
    interpretations made.

    Args:
        parent: snapshot(P), P being M's milestone link.
        parent_is_genesis: P is the genesis block (G0).
        timestamp_ms: t, M's header timestamp.
        params: The network's consensus parameters.

    Returns:
        snapshot(M).
    """
    tau = params.milestone_interval_ms
    window = params.retarget_window
    height = parent.height + 1
    win_start_ms = timestamp_ms - tau if parent_is_genesis else parent.win_start_ms
    parent_work = compute_work(parent.ms_target, params.max_target)
    chainwork = parent.chainwork + parent_work
    hash_rate = _compute_hash_rate(parent, height, timestamp_ms, win_start_ms, parent_work, tau)
    ms_target, blk_target = parent.ms_target, parent.blk_target
    if height % window != 0:
        return Snapshot(
            height,
            chainwork,
            ms_target,
            blk_target,
            hash_rate,
            win_start_ms,
            parent.win_start_height,
        )
    if params.retarget:
        ms_target = _compute_ms_target(parent.ms_target, timestamp_ms - win_start_ms, params)
        blk_target = normalize_target(min(params.max_target, ms_target * params.blocks_per_ms))
    return Snapshot(height, chainwork, ms_target, blk_target, hash_rate, timestamp_ms, height)


def _compute_hash_rate(
    parent: Snapshot, height: int, timestamp_ms: int, win_start_ms: int, parent_work: int, tau: int
) -> int:
    """G2: EMA of work per second over the current window, one sample per milestone."""
    k = height - parent.win_start_height
    elapsed = max(timestamp_ms - win_start_ms, k * tau // ELAPSED_FLOOR_DIVISOR, 1)
    sample = k * parent_work * MS_PER_S // elapsed
    return (EMA_OLD_WEIGHT * parent.hash_rate + sample) // EMA_DENOMINATOR


def _compute_ms_target(parent_ms_target: int, window_ms: int, params: ConsensusParams) -> int:
    """G4: scale P's milestone target by the clamped window length over its nominal I·τ."""
    nominal = params.retarget_window * params.milestone_interval_ms
    clamp = params.retarget_clamp
    actual = min(max(window_ms, nominal // clamp), clamp * nominal)
    return normalize_target(max(1, min(params.max_target, parent_ms_target * actual // nominal)))
