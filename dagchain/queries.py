"""Read-only queries over a Chain's best chain for the API and wallets (no rule lives here).

They read the chain's public views and the stored address index (``o`` rows of PROTOCOL.md §12),
and never change anything.
"""

from dagchain.chain import Chain
from dagchain.ledger import Utxo
from dagchain.storage import schema as S
from dagchain.types import BlockId, TxId

__all__ = ["block_tx_reasons", "milestone_at", "utxos_of"]

_OUTPOINT_KEY_LENGTH = 1 + 32 + 32 + 4
"""``o ‖ address ‖ txid ‖ u32 BE out_index``."""


def milestone_at(chain: Chain, height: int) -> BlockId | None:
    """The best-chain milestone at ``height`` (genesis at 0), or None above the head."""
    best = chain.state.best
    if 0 <= height < len(best):
        return best[height]
    return None


def utxos_of(chain: Chain, address: bytes) -> list[tuple[TxId, int, Utxo]]:
    """Every best-chain unspent output paying ``address``, ordered by (txid, index).

    Scans the stored address index (``o`` prefix), then reads each output from the best-chain
    UTXO set, so the answer is exactly the UTXO set restricted to the address.
    """
    found: list[tuple[TxId, int, Utxo]] = []
    for key, _ in chain.store.iter_prefix(S.P_ADDRESS + address):
        if len(key) != _OUTPOINT_KEY_LENGTH:
            continue
        txid = TxId(key[33:65])
        index = int.from_bytes(key[65:], "big")
        utxo = chain.get_utxo(txid, index)
        if utxo is not None:
            found.append((txid, index, utxo))
    return found


def block_tx_reasons(chain: Chain, block_id: bytes) -> tuple[int, ...] | None:
    """Reason codes (§7.4) of a block's txs in the best-chain level set that orders it.

    None while the block is pending on the best chain (or unknown).
    """
    height = chain.ls_height(block_id)
    if height is None:
        return None
    milestone = milestone_at(chain, height)
    delta = chain.level_set(milestone) if milestone is not None else None
    if delta is None:
        return None
    offset = 0
    for bid in delta.order:
        block = chain.get_block(bid)
        count = 0 if block is None else len(block.pruned_txids or block.txs)
        if bid == block_id:
            return tuple(delta.reasons[offset : offset + count])
        offset += count
    return None
