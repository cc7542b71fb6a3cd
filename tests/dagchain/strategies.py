"""Hypothesis strategies for consensus objects (PROTOCOL.md §2.1, §2.2).

The objects are well-typed (every field fits its width, every byte string has its exact length) but
not necessarily valid under T1-T6: they exercise the codec, not the stateless rules.
"""

from hypothesis import strategies as st

from dagchain.blocks import Block, BlockHeader, make_block
from dagchain.encoding import U16, U32, U64
from dagchain.transactions import Transaction, TxIn, TxKind, TxOut, make_transaction
from dagchain.types import Address, BlockId, TxId

MAX_INPUTS = 6
MAX_OUTPUTS = 6
MAX_BLOCK_TXS = 4
MAX_TIP_LINKS = 9
"""One past ``max_tip_links``: the codec does not bound the tip list (H5 does, after H7)."""


def hashes() -> st.SearchStrategy[bytes]:
    """32 arbitrary bytes (a txid, block id, address or merkle root)."""
    return st.binary(min_size=32, max_size=32)


def u32s() -> st.SearchStrategy[int]:
    """A u32, with the edges of each msgpack integer header likely."""
    return st.one_of(
        st.sampled_from([0, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, U32]), st.integers(0, U32)
    )


def u64s() -> st.SearchStrategy[int]:
    """A u64, with the edges of each msgpack integer header likely."""
    return st.one_of(st.sampled_from([0, 1, 0x7F, 0x80, U32, U32 + 1, U64]), st.integers(0, U64))


def tx_inputs() -> st.SearchStrategy[TxIn]:
    """An input with any outpoint, key and signature bytes (not necessarily a valid signature)."""
    return st.builds(
        TxIn,
        txid=hashes().map(TxId),
        out_index=u32s(),
        pubkey=hashes(),
        signature=st.binary(min_size=64, max_size=64),
    )


def tx_outputs() -> st.SearchStrategy[TxOut]:
    """An output with any u64 amount and address."""
    return st.builds(TxOut, amount=u64s(), address=hashes().map(Address))


def transactions() -> st.SearchStrategy[Transaction]:
    """A transaction of any kind and shape small enough for ``max_tx_bytes``.

    The version and kind are usually valid, sometimes any u64 (the codec must still round-trip).
    """
    return st.builds(
        make_transaction,
        kind=st.one_of(st.sampled_from(list(TxKind)).map(int), u64s()),
        inputs=st.lists(tx_inputs(), max_size=MAX_INPUTS),
        outputs=st.lists(tx_outputs(), max_size=MAX_OUTPUTS),
        version=st.one_of(st.just(1), u64s()),
    )


def block_headers() -> st.SearchStrategy[BlockHeader]:
    """A header with arbitrary field values of the right widths (§2.1)."""
    return st.builds(
        BlockHeader,
        version=st.integers(0, U16),
        milestone_link=hashes().map(BlockId),
        previous_link=hashes().map(BlockId),
        tips_root=hashes(),
        merkle_root=hashes(),
        timestamp_ms=u64s(),
        target=u32s(),
        nonce=u64s(),
    )


def blocks() -> st.SearchStrategy[Block]:
    """A block of 0..MAX_TIP_LINKS tip links and 0..MAX_BLOCK_TXS arbitrary transactions (the codec
    checks neither root: H7 is the chain's, §3.3 step 3)."""
    return st.builds(
        make_block,
        header=block_headers(),
        tip_links=st.lists(hashes(), max_size=MAX_TIP_LINKS),
        txs=st.lists(transactions(), max_size=MAX_BLOCK_TXS),
    )


__all__ = [
    "block_headers",
    "blocks",
    "hashes",
    "transactions",
    "tx_inputs",
    "tx_outputs",
    "u32s",
    "u64s",
]
