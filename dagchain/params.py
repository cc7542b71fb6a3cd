"""Network parameter presets: the one home of every protocol number (PROTOCOL.md §10)."""

import dataclasses
from dataclasses import dataclass

from dagchain.pow import MAX_TARGET, decode_compact, normalize_target

COIN = 100_000_000
"""Units per coin (R1)."""


@dataclass(frozen=True, slots=True)
class ConsensusParams:
    """Consensus and policy parameters of one network (§10); rules receive this explicitly."""

    network_id: str
    hrp: str
    p2p_port: int
    rpc_port: int
    genesis_timestamp_ms: int
    genesis_ms_target_bits: int
    blocks_per_ms: int
    """b: solutions per milestone; blk_target = min(max_target, ms_target * b) (G5)."""
    milestone_interval_ms: int
    retarget: bool
    retarget_window: int
    sortition_warmup: int
    """K (S1, S2): under ``share`` weighting, blocks of a peer chain up to height K carry no valid
    transactions (v2: no warm-up under ``uniform``); the S2 window length."""
    sortition_c_num: int
    sortition_c_den: int
    sortition_weighting: str
    """``share`` or ``uniform`` (S5)."""
    sortition_freshness: int
    reward_freshness: int
    punctuality: int
    confirm_depth: int
    max_future_drift_ms: int
    base_reward: int
    reward_step: int
    ms_reward_coefficient: int
    faucet: bool
    """Devnet and sim: genesis holds 64 faucet UTXOs of the public key 1 (§10 Genesis)."""
    sortition_enabled: bool = True
    """Simulator switch ``chain.sortition = false``: S5 passes every tx (not a network value)."""
    block_version: int = 1
    tx_version: int = 1
    protocol_version: int = 1
    max_target: int = MAX_TARGET
    block_capacity: int = 128
    max_tip_links: int = 8
    """H5 and §3.4 (v2): a block carries 1..``max_tip_links`` tip links."""
    max_block_bytes: int = 262_144
    max_tx_bytes: int = 16_384
    max_tx_inputs: int = 64
    max_tx_outputs: int = 64
    max_money: int = 10**18
    retarget_clamp: int = 4
    mempool_max_txs: int = 50_000
    mempool_max_bytes: int = 64 * 1024 * 1024
    mempool_expiry_ms: int = 3_600_000
    orphan_max_blocks: int = 1024
    orphan_max_bytes: int = 32 * 1024 * 1024
    orphan_peer_max_blocks: int = 256
    orphan_peer_max_bytes: int = 8 * 1024 * 1024
    orphan_expiry_ms: int = 600_000
    faucet_outputs: int = 64
    faucet_amount: int = 10**14

    @property
    def genesis_ms_target(self) -> int:
        """Genesis milestone target, expanded (§10)."""
        return decode_compact(self.genesis_ms_target_bits)

    def replace(self, **changes: object) -> "ConsensusParams":
        """A copy with some fields changed (simulator scenarios, tests)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


MAINNET = ConsensusParams(
    network_id="dagchain-mainnet",
    hrp="dag",
    p2p_port=7707,
    rpc_port=7708,
    genesis_timestamp_ms=1_793_491_200_000,
    genesis_ms_target_bits=0x1E010000,
    blocks_per_ms=80,
    milestone_interval_ms=10_000,
    retarget=True,
    retarget_window=360,
    sortition_warmup=100,
    sortition_c_num=1,
    sortition_c_den=120,
    sortition_weighting="uniform",
    sortition_freshness=3,
    reward_freshness=10,
    punctuality=100,
    confirm_depth=6,
    max_future_drift_ms=15_000,
    base_reward=12_500_000,
    reward_step=12_614_400,
    ms_reward_coefficient=50,
    faucet=False,
)

TESTNET = dataclasses.replace(
    MAINNET,
    network_id="dagchain-testnet",
    hrp="tdag",
    p2p_port=17707,
    rpc_port=17708,
    genesis_timestamp_ms=1_790_812_800_000,
    genesis_ms_target_bits=0x1E100000,
    retarget_window=60,
)

DEVNET = dataclasses.replace(
    MAINNET,
    network_id="dagchain-devnet",
    hrp="ddag",
    p2p_port=27707,
    rpc_port=27708,
    genesis_timestamp_ms=1_767_225_600_000,
    genesis_ms_target_bits=0x20400000,
    # ms_target * 4 = 2^256 exceeds max_target, so blk_target = max_target (PROTOCOL.md §10 "—").
    blocks_per_ms=4,
    milestone_interval_ms=1_000,
    retarget=False,
    retarget_window=10,
    sortition_warmup=4,
    # v2.1: c = 1/16 (v2's 1/1 turned assignment off; 32-42 % of inclusions were repeats).
    sortition_c_num=1,
    sortition_c_den=16,
    sortition_freshness=20,
    reward_freshness=20,
    punctuality=20,
    confirm_depth=1,
    max_future_drift_ms=5_000,
    base_reward=100_000_000,
    reward_step=100,
    ms_reward_coefficient=1,
    faucet=True,
    mempool_max_txs=5_000,
    mempool_max_bytes=8 * 1024 * 1024,
    mempool_expiry_ms=600_000,
)

SIM = dataclasses.replace(
    MAINNET,
    network_id="dagchain-sim",
    hrp="sdag",
    p2p_port=37707,
    rpc_port=37708,
    genesis_timestamp_ms=1_767_312_000_000,
    genesis_ms_target_bits=0x1F080000,
    retarget_window=60,
    max_future_drift_ms=2_000,
    faucet=True,
)

PRESETS: dict[str, ConsensusParams] = {
    "mainnet": MAINNET,
    "testnet": TESTNET,
    "devnet": DEVNET,
    "sim": SIM,
}


def get_params(name: str) -> ConsensusParams:
    """The preset called ``name`` (mainnet, testnet, devnet, sim).

    Raises:
        KeyError: with the list of known names.
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown network {name!r}; choose one of {', '.join(PRESETS)}") from None


def genesis_blk_target(params: ConsensusParams) -> int:
    """Genesis block target: ``min(max_target, ms_target * b)`` (§10 Genesis, G5)."""
    return normalize_target(min(params.max_target, params.genesis_ms_target * params.blocks_per_ms))


__all__ = [
    "COIN",
    "DEVNET",
    "MAINNET",
    "PRESETS",
    "SIM",
    "TESTNET",
    "ConsensusParams",
    "genesis_blk_target",
    "get_params",
]
