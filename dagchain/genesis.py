"""The fixed genesis block of each network and its faucet outputs (PROTOCOL.md §10 Genesis)."""

from dagchain.blocks import Block, BlockHeader, make_block
from dagchain.crypto import address_from_pubkey
from dagchain.params import ConsensusParams
from dagchain.types import NULL_ID, Address

FAUCET_SECRET = (1).to_bytes(32, "big")
"""The documented, public devnet/sim faucet key: secret key 1 (never on other networks)."""
FAUCET_PUBKEY = bytes.fromhex("79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798")
FAUCET_ADDRESS: Address = address_from_pubkey(FAUCET_PUBKEY)


def genesis_block(params: ConsensusParams) -> Block:
    """Genesis (§10): null links, ``tips_root`` and merkle root, no tips, no txs, nonce 0."""
    header = BlockHeader(
        version=params.block_version,
        milestone_link=NULL_ID,
        previous_link=NULL_ID,
        tips_root=NULL_ID,
        merkle_root=bytes(32),
        timestamp_ms=params.genesis_timestamp_ms,
        target=params.genesis_ms_target_bits,
        nonce=0,
    )
    return make_block(header, (), ())


__all__ = ["FAUCET_ADDRESS", "FAUCET_PUBKEY", "FAUCET_SECRET", "genesis_block"]
