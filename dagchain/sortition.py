"""Transaction assignment to peer chains: sortition (PROTOCOL.md v2 §8.1, S1-S5).

S6 (freshness) and S7 (first child) depend on the ordering chain and live with level-set
validation; the exemption of a REGISTRATION or REDEMPTION at index 0 is also the caller's
business. Everything here depends only on a block and its ancestors, so a node may cache the
verdicts at acceptance.

Interpretation: S3 (Hr == 0 passes every tx) belongs to the ``share`` weighting; with ``uniform``
§8.1 says S2 and S3 are unused, so a zero hash rate does not open the gate there. S1 (warm-up)
applies under ``share`` weighting only (v2), also when ``params.sortition_enabled`` is False
(that switch only makes S5 pass).
"""

import hashlib
from dataclasses import dataclass

from dagchain.params import ConsensusParams

__all__ = [
    "HASH_SPACE",
    "SORTITION_TAG",
    "SortitionWindow",
    "assignment_bound",
    "compute_sortition_distance",
    "compute_window_span",
    "in_warmup",
    "is_sortition_fresh",
    "is_tx_assigned",
    "span_floor_ms",
]

SORTITION_TAG = b"dagchain-sortition"
"""Domain tag of the S4 distance hash."""
HASH_SPACE = 2**256
MS_PER_S = 1000
_ALWAYS = (0, 1)
"""A bound every distance meets: d · 0 < 1."""
_NEVER = (1, 0)
"""A bound no distance meets: d · 1 < 0 is false for d >= 0."""


@dataclass(frozen=True, slots=True)
class SortitionWindow:
    """The S2 values of one block, computed once at acceptance (the §12 ``m`` row)."""

    peer_height: int
    """m(B): 1 for a registration block, else m(prev) + 1."""
    work: int
    """W = Σ work(b_j.target) over the K previous blocks b_1..b_K; 0 while m <= K."""
    span_ms: int
    """S = max(S_floor, ts(M) - ts(milestone_link(b_K))); 0 while m <= K."""


def compute_sortition_distance(previous_link: bytes, txid: bytes) -> int:
    """S4: d(tx, B) = LE(H(tag ‖ previous_link(B) ‖ txid))."""
    digest = hashlib.blake2b(SORTITION_TAG + previous_link + txid, digest_size=32).digest()
    return int.from_bytes(digest, "little")


def span_floor_ms(params: ConsensusParams) -> int:
    """S2's floor (v2): S_floor = max(1, K · ``milestone_interval_ms`` // ``blocks_per_ms``).

    The time the whole network needs for K blocks, so ŝ cannot exceed about 1 when a chain
    mines its K blocks inside one milestone gap. Where b is not fixed (devnet: no retargeting,
    blk_target capped at max_target, PROTOCOL.md §10 "—") the floor is 1.
    """
    if not params.retarget:
        return 1
    return max(1, params.sortition_warmup * params.milestone_interval_ms // params.blocks_per_ms)


def compute_window_span(
    ms_link_timestamp_ms: int, kth_ms_link_timestamp_ms: int, params: ConsensusParams
) -> int:
    """S2: S = max(S_floor, ts(M) - ts(milestone_link(b_K))), in ms, from milestone timestamps."""
    return max(span_floor_ms(params), ms_link_timestamp_ms - kth_ms_link_timestamp_ms)


def is_sortition_fresh(ls_height: int, ms_link_height: int, params: ConsensusParams) -> bool:
    """S6: LS height(B) - height(milestone link of B) ≤ ``sortition_freshness``."""
    return ls_height - ms_link_height <= params.sortition_freshness


def in_warmup(peer_height: int, params: ConsensusParams) -> bool:
    """S1 (v2): under ``share`` weighting, a block with m ≤ K carries no VALID tx but tx[0].

    ``uniform`` weighting uses neither S2 nor S3, so it has no warm-up: a new peer chain carries
    txs from its second block on (its registration block's other txs are INVALID by R3).
    """
    return params.sortition_weighting == "share" and peer_height <= params.sortition_warmup


def assignment_bound(
    window: SortitionWindow, hash_rate: int, params: ConsensusParams
) -> tuple[int, int]:
    """The per-block part of S1-S5 as ``(factor, bound)``: a tx passes iff ``d · factor < bound``.

    - S1 (``share`` only): ``peer_height <= K`` fails every tx.
    - ``params.sortition_enabled`` False passes every tx (simulator switch).
    - ``uniform``: ``d · c_den < c_num · 2^256``.
    - ``share``: S3 (Hr == 0) passes every tx, else S5
      ``d · S · Hr · c_den < W · 1000 · c_num · 2^256`` (strict, exact integers).

    Compute it once per block; the per-tx check is then one hash, one multiply and one compare.

    Args:
        window: The block's S2 values.
        hash_rate: Hr = snapshot(M).hash_rate of the block's milestone link M (S3).
        params: The network's consensus parameters.

    Returns:
        ``(factor, bound)``.

    Raises:
        ValueError: ``params.sortition_weighting`` is neither ``share`` nor ``uniform``.
    """
    if in_warmup(window.peer_height, params):
        return _NEVER
    if not params.sortition_enabled:
        return _ALWAYS
    c_num, c_den = params.sortition_c_num, params.sortition_c_den
    weighting = params.sortition_weighting
    if weighting == "uniform":
        return (c_den, c_num * HASH_SPACE)
    if weighting != "share":
        raise ValueError(f"unknown sortition_weighting {weighting!r}")
    if hash_rate == 0:
        return _ALWAYS
    return (
        window.span_ms * hash_rate * c_den,
        window.work * MS_PER_S * c_num * HASH_SPACE,
    )


def is_tx_assigned(
    txid: bytes,
    previous_link: bytes,
    window: SortitionWindow,
    hash_rate: int,
    params: ConsensusParams,
) -> bool:
    """S1-S5: may a block with this previous link and window carry ``txid``?

    For many txs of one block, call ``assignment_bound`` once and compare each
    ``compute_sortition_distance(previous_link, txid) * factor < bound`` instead.
    """
    factor, bound = assignment_bound(window, hash_rate, params)
    if factor == 0:
        return bound > 0
    if bound <= 0:
        return False
    return compute_sortition_distance(previous_link, txid) * factor < bound
