"""Reward schedule and milestone bonus (PROTOCOL.md §9 R1, R2, R7)."""

from dagchain.params import ConsensusParams


def compute_block_reward(height: int, params: ConsensusParams) -> int:
    """R1: R(0) = 0; R(h) = base_reward // (1 + (h - 1) // reward_step) for h >= 1."""
    if height < 1:
        return 0
    return params.base_reward // (1 + (height - 1) // params.reward_step)


def is_reward_fresh(ls_height: int, milestone_link_height: int, params: ConsensusParams) -> bool:
    """R2 freshness: LS height(B) - height(milestone_link(B)) <= reward_freshness."""
    return ls_height - milestone_link_height <= params.reward_freshness


def compute_milestone_bonus(height: int, level_set_size: int, params: ConsensusParams) -> int:
    """R7: (R(h) * (|LS(M)| - 1)) // ms_reward_coefficient, paid to root(M) after LS(M)."""
    return (
        compute_block_reward(height, params) * (level_set_size - 1) // params.ms_reward_coefficient
    )


__all__ = ["compute_block_reward", "compute_milestone_bonus", "is_reward_fresh"]
