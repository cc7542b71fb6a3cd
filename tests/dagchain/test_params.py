"""Network presets and genesis blocks (PROTOCOL.md §10)."""

from fractions import Fraction
from pathlib import Path

import pytest

from dagchain.blocks import decode_block
from dagchain.crypto import hash32
from dagchain.genesis import FAUCET_ADDRESS, genesis_block
from dagchain.params import (
    COIN,
    DEVNET,
    MAINNET,
    PRESETS,
    SIM,
    TESTNET,
    ConsensusParams,
    genesis_blk_target,
    get_params,
)
from dagchain.pow import MAX_TARGET, decode_compact, encode_compact
from dagchain.types import NULL_ID

NETWORKS = [
    pytest.param(MAINNET, id="mainnet"),
    pytest.param(TESTNET, id="testnet"),
    pytest.param(DEVNET, id="devnet"),
    pytest.param(SIM, id="sim"),
]

GENESIS_IDS = {
    "dagchain-mainnet": "f7cf204671b9479c866a36fd4a7cdd248e5d76b52d400668d62840255e349308",
    "dagchain-testnet": "ecc98a6fbb81b698a88e0098e671836defc74a44acef26acf2c2b9d46d22a332",
    "dagchain-devnet": "d5475c0b8b110e9dcc2f71742e6d4e72454f32eee3b4fb4a5cc669063bc5d5ee",
    "dagchain-sim": "928880b24b449456040826080270a8e42bc535acf598708a346919b7d6ff91f1",
}


# --- genesis ----------------------------------------------------------------------------------


@pytest.mark.parametrize("params", NETWORKS)
def test_genesis_id_matches_section_10(params: ConsensusParams) -> None:
    """Nodes that disagree on genesis cannot handshake or share a single block."""
    assert genesis_block(params).id.hex() == GENESIS_IDS[params.network_id]


@pytest.mark.parametrize("params", NETWORKS)
def test_genesis_header_fields(params: ConsensusParams) -> None:
    header = genesis_block(params).header
    assert header.version == 1
    assert header.milestone_link == NULL_ID == bytes(32)
    assert header.previous_link == NULL_ID
    assert header.tips_root == NULL_ID
    assert header.merkle_root == bytes(32)
    assert header.timestamp_ms == params.genesis_timestamp_ms
    assert header.target == params.genesis_ms_target_bits
    assert header.nonce == 0


@pytest.mark.parametrize("params", NETWORKS)
def test_genesis_has_no_transactions_and_is_an_empty_155_byte_block(
    params: ConsensusParams,
) -> None:
    """§2.2 (v2): genesis = [header, [], []]: no tips, no txs, 1 + 2 + 150 + 1 + 1 = 155 bytes."""
    genesis = genesis_block(params)
    assert genesis.txs == ()
    assert genesis.tip_links == ()
    assert len(genesis.raw) == 155
    assert decode_block(genesis.raw, params) == genesis
    assert genesis.id == hash32(genesis.header.encode())


def test_genesis_ids_are_distinct_per_network() -> None:
    assert len({genesis_block(p).id for p in PRESETS.values()}) == len(PRESETS)


@pytest.mark.parametrize(
    ("params", "timestamp_ms", "ms_bits", "ms_target", "blk_bits"),
    [
        pytest.param(MAINNET, 1_793_491_200_000, 0x1E010000, 1 << 232, 0x1E500000, id="mainnet"),
        pytest.param(TESTNET, 1_790_812_800_000, 0x1E100000, 1 << 236, 0x1F050000, id="testnet"),
        pytest.param(DEVNET, 1_767_225_600_000, 0x20400000, 1 << 254, 0x2100FFFF, id="devnet"),
        pytest.param(SIM, 1_767_312_000_000, 0x1F080000, 1 << 243, 0x20028000, id="sim"),
    ],
)
def test_genesis_targets_and_timestamp(
    params: ConsensusParams, timestamp_ms: int, ms_bits: int, ms_target: int, blk_bits: int
) -> None:
    """blk_target = min(max_target, ms_target * b); devnet's product exceeds max_target."""
    assert params.genesis_timestamp_ms == timestamp_ms
    assert params.genesis_ms_target_bits == ms_bits
    assert params.genesis_ms_target == ms_target == decode_compact(ms_bits)
    assert encode_compact(genesis_blk_target(params)) == blk_bits


def test_genesis_timestamps_are_the_documented_dates() -> None:
    day_ms = 86_400_000
    # 2026-01-01T00:00:00Z is 20,454 days after the epoch.
    assert DEVNET.genesis_timestamp_ms == 20_454 * day_ms
    assert SIM.genesis_timestamp_ms == 20_455 * day_ms
    assert TESTNET.genesis_timestamp_ms == (20_454 + 273) * day_ms  # 2026-10-01
    assert MAINNET.genesis_timestamp_ms == (20_454 + 304) * day_ms  # 2026-11-01


# --- presets ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "network_id", "hrp", "p2p", "rpc"),
    [
        pytest.param(MAINNET, "dagchain-mainnet", "dag", 7707, 7708, id="mainnet"),
        pytest.param(TESTNET, "dagchain-testnet", "tdag", 17707, 17708, id="testnet"),
        pytest.param(DEVNET, "dagchain-devnet", "ddag", 27707, 27708, id="devnet"),
        pytest.param(SIM, "dagchain-sim", "sdag", 37707, 37708, id="sim"),
    ],
)
def test_preset_identity_and_ports(
    params: ConsensusParams, network_id: str, hrp: str, p2p: int, rpc: int
) -> None:
    assert (params.network_id, params.hrp, params.p2p_port, params.rpc_port) == (
        network_id,
        hrp,
        p2p,
        rpc,
    )


@pytest.mark.parametrize(
    ("name", "params"),
    [("mainnet", MAINNET), ("testnet", TESTNET), ("devnet", DEVNET), ("sim", SIM)],
)
def test_get_params_by_name(name: str, params: ConsensusParams) -> None:
    assert get_params(name) is params
    assert PRESETS[name] is params


def test_get_params_unknown_name_lists_the_choices() -> None:
    with pytest.raises(KeyError, match="mainnet"):
        get_params("regtest")


@pytest.mark.parametrize(
    ("params", "k", "c", "sortition_fresh", "reward_fresh", "punctuality", "confirm", "drift_ms"),
    [
        pytest.param(MAINNET, 100, (1, 120), 3, 10, 100, 6, 15_000, id="mainnet"),
        pytest.param(TESTNET, 100, (1, 120), 3, 10, 100, 6, 15_000, id="testnet"),
        pytest.param(DEVNET, 4, (1, 16), 20, 20, 20, 1, 5_000, id="devnet"),
        pytest.param(SIM, 100, (1, 120), 3, 10, 100, 6, 2_000, id="sim"),
    ],
)
def test_preset_sortition_freshness_finality_and_drift(
    params: ConsensusParams,
    k: int,
    c: tuple[int, int],
    sortition_fresh: int,
    reward_fresh: int,
    punctuality: int,
    confirm: int,
    drift_ms: int,
) -> None:
    """§10 (v2.1): uniform weighting by default, c = 1/120 (devnet 1/16), up to 8 tip links."""
    assert params.sortition_warmup == k
    assert (params.sortition_c_num, params.sortition_c_den) == c
    assert params.sortition_weighting == "uniform"
    assert params.max_tip_links == 8
    assert params.sortition_freshness == sortition_fresh
    assert params.reward_freshness == reward_fresh
    assert params.punctuality == punctuality
    assert params.confirm_depth == confirm
    assert params.max_future_drift_ms == drift_ms


SORTITION_ROW = (
    "| 100; 1/120; uniform | 100; 1/120; uniform | 4; 1/16; uniform (v2.1) | 100; 1/120; uniform |"
)
"""PROTOCOL.md v2.1 §10, row "K (`sortition_warmup`); c (`c_num/c_den`); `sortition_weighting`"
(mainnet, testnet, devnet, sim), copied so the check runs from a clone without ``../shared``."""
SPEC = Path(__file__).resolve().parents[3] / "shared" / "PROTOCOL.md"


def _sortition_row(row: str) -> list[tuple[int, Fraction, str]]:
    """The row's cells as (K, c, weighting), a trailing "(v2.1)" note dropped."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    out = []
    for cell in cells:
        k, c, weighting = (part.strip() for part in cell.split(";"))
        out.append((int(k), Fraction(c), weighting.split()[0]))
    return out


def test_devnet_sortition_is_v2_1s_k_4_c_1_16_uniform() -> None:
    """§10 (v2.1): devnet's c is 1/16, not v2's 1/1 (which assigned every tx to every block and
    turned S5 off); K = 4 and ``uniform`` weighting are unchanged."""
    assert DEVNET.sortition_warmup == 4
    assert (DEVNET.sortition_c_num, DEVNET.sortition_c_den) == (1, 16)
    assert DEVNET.sortition_weighting == "uniform"
    assert DEVNET.sortition_enabled
    presets = (MAINNET, TESTNET, DEVNET, SIM)
    assert _sortition_row(SORTITION_ROW) == [
        (p.sortition_warmup, Fraction(p.sortition_c_num, p.sortition_c_den), p.sortition_weighting)
        for p in presets
    ]


def test_sortition_row_matches_the_specification_when_it_is_there() -> None:
    """The copied §10 row is the one in ``../shared/PROTOCOL.md`` (skipped without it)."""
    if not SPEC.is_file():
        pytest.skip(f"{SPEC} is not there")
    rows = [
        line
        for line in SPEC.read_text(encoding="utf-8").splitlines()
        if line.startswith("| K (`sortition_warmup`)")
    ]
    assert len(rows) == 1
    assert _sortition_row(rows[0].split("|", 2)[2]) == _sortition_row(SORTITION_ROW)


@pytest.mark.parametrize(
    ("params", "base", "step", "coefficient"),
    [
        pytest.param(MAINNET, 12_500_000, 12_614_400, 50, id="mainnet"),
        pytest.param(TESTNET, 12_500_000, 12_614_400, 50, id="testnet"),
        pytest.param(DEVNET, 100_000_000, 100, 1, id="devnet"),
        pytest.param(SIM, 12_500_000, 12_614_400, 50, id="sim"),
    ],
)
def test_preset_rewards(params: ConsensusParams, base: int, step: int, coefficient: int) -> None:
    assert params.base_reward == base
    assert params.reward_step == step
    assert params.ms_reward_coefficient == coefficient


def test_mainnet_pays_an_eighth_of_a_coin_per_block() -> None:
    assert COIN == 10**8
    assert MAINNET.base_reward * 8 == COIN


@pytest.mark.parametrize(
    ("params", "interval_ms", "retarget", "window"),
    [
        pytest.param(MAINNET, 10_000, True, 360, id="mainnet"),
        pytest.param(TESTNET, 10_000, True, 60, id="testnet"),
        pytest.param(DEVNET, 1_000, False, 10, id="devnet"),
        pytest.param(SIM, 10_000, True, 60, id="sim"),
    ],
)
def test_preset_milestone_interval_and_retarget(
    params: ConsensusParams, interval_ms: int, retarget: bool, window: int
) -> None:
    assert params.milestone_interval_ms == interval_ms
    assert params.retarget is retarget
    assert params.retarget_window == window
    assert params.retarget_clamp == 4


@pytest.mark.parametrize("params", [MAINNET, TESTNET, SIM], ids=["mainnet", "testnet", "sim"])
def test_eighty_blocks_per_milestone_outside_devnet(params: ConsensusParams) -> None:
    assert params.blocks_per_ms == 80


@pytest.mark.parametrize("params", NETWORKS)
def test_preset_shared_limits(params: ConsensusParams) -> None:
    """Rows of §10 that are equal on every network."""
    assert params.max_target == MAX_TARGET == decode_compact(0x2100FFFF)
    assert (params.block_version, params.tx_version, params.protocol_version) == (1, 1, 1)
    assert params.block_capacity == 128
    assert params.max_block_bytes == 262_144
    assert params.max_tx_bytes == 16_384
    assert params.max_tx_inputs == params.max_tx_outputs == 64
    assert params.max_money == 10**18


@pytest.mark.parametrize(
    ("params", "txs", "mib", "expiry_ms"),
    [
        pytest.param(MAINNET, 50_000, 64, 3_600_000, id="mainnet"),
        pytest.param(TESTNET, 50_000, 64, 3_600_000, id="testnet"),
        pytest.param(DEVNET, 5_000, 8, 600_000, id="devnet"),
        pytest.param(SIM, 50_000, 64, 3_600_000, id="sim"),
    ],
)
def test_preset_mempool_limits(params: ConsensusParams, txs: int, mib: int, expiry_ms: int) -> None:
    assert params.mempool_max_txs == txs
    assert params.mempool_max_bytes == mib * 1024 * 1024
    assert params.mempool_expiry_ms == expiry_ms


@pytest.mark.parametrize("params", NETWORKS)
def test_preset_orphan_pool_limits(params: ConsensusParams) -> None:
    assert (params.orphan_max_blocks, params.orphan_max_bytes) == (1024, 32 * 1024 * 1024)
    assert (params.orphan_peer_max_blocks, params.orphan_peer_max_bytes) == (256, 8 * 1024 * 1024)
    assert params.orphan_expiry_ms == 600_000


@pytest.mark.parametrize(
    ("params", "faucet"), [(MAINNET, False), (TESTNET, False), (DEVNET, True), (SIM, True)]
)
def test_faucet_exists_only_on_devnet_and_sim(params: ConsensusParams, faucet: bool) -> None:
    """§10: the public faucet key must never hold coins on mainnet or testnet."""
    assert params.faucet is faucet
    assert params.faucet_outputs == 64
    assert params.faucet_amount == 10**14


def test_faucet_address_is_hash_of_generator_x() -> None:
    assert (
        FAUCET_ADDRESS.hex() == "9407263be9dc3c4b5b9afbd02ebb5d5cbda687dfb57c65c1816c8cdca9b677a0"
    )


def test_replace_returns_a_modified_copy() -> None:
    changed = SIM.replace(blocks_per_ms=40)
    assert changed.blocks_per_ms == 40
    assert SIM.blocks_per_ms == 80
    assert changed.network_id == SIM.network_id
