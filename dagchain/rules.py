"""Header and link rules: the one home of H2-H5, H7 (tips), H11, D4-D6 and msh(L) (PROTOCOL.md v2).

Every function is flat, pure and importable: ``Chain`` (§3.3 acceptance), the node's milestone
sync (P8 header check), the block template (§3.4) and the relay filter (P14) call these and never
re-derive a rule. A check raises the verdict's exception (``RejectedBlock``, ``MalformedBlock`` or
``NotYetValid``) naming the rule id; a predicate returns a bool for policy code that steers by a
rule without enforcing it (templates choose links that will pass D5a/D5b).
"""

import itertools
from collections.abc import Sequence

from dagchain.blocks import BlockHeader, compute_tips_root
from dagchain.errors import MalformedBlock, NotYetValid, RejectedBlock
from dagchain.params import ConsensusParams
from dagchain.pow import encode_compact, is_valid_compact_target
from dagchain.types import NULL_ID

__all__ = [
    "MAX_ENCODABLE_TIPS",
    "catch_up_height",
    "check_block_target",
    "check_header_fields",
    "check_milestone_link_order",
    "check_not_future",
    "check_pow",
    "check_timestamp_order",
    "check_tip_list",
    "check_tips_root",
    "final_height",
    "is_head_too_new",
    "is_monotonic_milestone_link",
    "is_punctual",
    "is_recent_tip_candidate",
    "is_stale_relay",
    "milestone_height_of_link",
]

MAX_ENCODABLE_TIPS = 255
"""``tips_root`` hashes k as one byte (§2.1): a longer list can never match it (H7)."""


def check_header_fields(header: BlockHeader, block_id: bytes, params: ConsensusParams) -> None:
    """H2 (version), H3 (E9 compact target) and H5's header part (no null link): REJECT.

    These need the header alone, so P8 applies them to synced milestone headers as well.
    """
    if header.version != params.block_version:
        raise RejectedBlock(
            "H2", f"block version {header.version} is not {params.block_version}", block_id
        )
    if not is_valid_compact_target(header.target, params.max_target):
        raise RejectedBlock(
            "H3", f"target {header.target:#010x} is not a valid compact target", block_id
        )
    if NULL_ID in (header.milestone_link, header.previous_link, header.tips_root):
        raise RejectedBlock(
            "H5", "a header link (milestone, previous, tips_root) is null", block_id
        )


def check_tips_root(header: BlockHeader, tips: Sequence[bytes], block_id: bytes) -> None:
    """H7 for ``tips_root``: the body's tip list is the one the header commits to (MALFORMED).

    §3.3 step 3: nothing reads a tip link before this passed, so a mutated body can never put a
    real block's id into the invalid cache.
    """
    if len(tips) > MAX_ENCODABLE_TIPS or compute_tips_root(tips) != header.tips_root:
        raise MalformedBlock("H7", "tip links do not match tips_root", block_id)


def check_tip_list(
    header: BlockHeader,
    tips: Sequence[bytes],
    block_id: bytes,
    genesis_id: bytes,
    params: ConsensusParams,
) -> None:
    """H5's tip-list part (after :func:`check_tips_root`): REJECT.

    1 ≤ k ≤ ``max_tip_links``, none the null id, strictly ascending byte order, none equal to
    ``previous_link`` unless ``previous_link`` is genesis and the tips are exactly [genesis].
    """
    k = len(tips)
    if not 1 <= k <= params.max_tip_links:
        raise RejectedBlock("H5", f"{k} tip links, not 1..{params.max_tip_links}", block_id)
    if NULL_ID in tips:
        raise RejectedBlock("H5", "a tip link is the null id", block_id)
    for a, b in itertools.pairwise(tips):
        if not a < b:
            raise RejectedBlock("H5", "tip links are not in strictly ascending order", block_id)
    prev = header.previous_link
    if prev in tips and not (prev == genesis_id and k == 1):
        raise RejectedBlock("H5", "a tip link equals the previous link", block_id)


def check_block_target(header: BlockHeader, blk_target: int, block_id: bytes) -> None:
    """D4: ``target == encode(snapshot(milestone_link).blk_target)`` (exact u32 match): REJECT."""
    if header.target != encode_compact(blk_target):
        raise RejectedBlock("D4", "target is not the milestone link's block target", block_id)


def check_pow(block_id: bytes, target: int, what: str = "the target") -> int:
    """H4: LE(id) ≤ ``target``; returns LE(id) so the caller can classify a milestone (§3.1)."""
    value = int.from_bytes(block_id, "little")
    if value > target:
        raise RejectedBlock("H4", f"proof of work does not meet {what}", block_id)
    return value


def check_not_future(header: BlockHeader, now_ms: int, params: ConsensusParams) -> None:
    """H11: ``timestamp_ms ≤ now_ms + max_future_drift``, else DROP (retry later)."""
    if header.timestamp_ms > now_ms + params.max_future_drift_ms:
        raise NotYetValid("H11", "timestamp is too far in the future")


def check_timestamp_order(
    header: BlockHeader, link_timestamp_ms: int, which: str, block_id: bytes
) -> None:
    """D6: the block's timestamp is ≥ that of its ``which`` link (milestone or previous): REJECT."""
    if header.timestamp_ms < link_timestamp_ms:
        raise RejectedBlock("D6", f"timestamp before the {which} link's", block_id)


def milestone_height_of_link(is_milestone: bool, own_height: int, ms_link_height: int) -> int:
    """msh(L): height(L) if L is a milestone block (genesis: 0), else height(milestone_link(L)).

    ``own_height`` is the height of L's snapshot (used only when ``is_milestone``).
    """
    return own_height if is_milestone else ms_link_height


def is_monotonic_milestone_link(ms_height: int, previous_ms_link_height: int) -> bool:
    """D5a: height(milestone_link(B)) ≥ height(milestone_link(prev(B)))."""
    return ms_height >= previous_ms_link_height


def check_milestone_link_order(
    ms_height: int, previous_ms_link_height: int, block_id: bytes
) -> None:
    """D5a as a check: REJECT a peer chain stepping back to an older milestone."""
    if not is_monotonic_milestone_link(ms_height, previous_ms_link_height):
        raise RejectedBlock("D5a", "milestone link lower than the previous block's", block_id)


def is_punctual(ms_height: int, link_msh: int, params: ConsensusParams) -> bool:
    """D5b for one link L: height(milestone_link(B)) - msh(L) < ``punctuality``."""
    return ms_height - link_msh < params.punctuality


def catch_up_height(previous_msh: int, params: ConsensusParams) -> int:
    """§3.4: the milestone height a catch-up block links so that its previous link passes D5b."""
    return previous_msh + params.punctuality - 1


def is_recent_tip_candidate(best_height: int, ms_link_height: int, params: ConsensusParams) -> bool:
    """§3.4 (policy): a tip candidate's milestone link is within ``punctuality/2`` of the head."""
    return best_height - ms_link_height <= params.punctuality // 2


def is_head_too_new(head_timestamp_ms: int, now_ms: int, params: ConsensusParams) -> bool:
    """§3.4 (policy): is ts(head) beyond now + ``max_future_drift``/2 (do not link it yet)?

    Waiting so keeps slower receivers from DROPping the new block under H11.
    """
    return head_timestamp_ms > now_ms + params.max_future_drift_ms // 2


def final_height(best_height: int, params: ConsensusParams) -> int:
    """F6: the height Φ reaches with a best chain of ``best_height`` (below 0: genesis)."""
    return best_height - params.punctuality


def is_stale_relay(ms_link_height: int, best_height: int, params: ConsensusParams) -> bool:
    """P14 (policy): a relayed block whose milestone link is ≥ ``punctuality`` below our best.

    The node MAY DROP such a block (no penalty, not remembered); never one fetched for an orphan
    or in sync.
    """
    return best_height - ms_link_height >= params.punctuality
