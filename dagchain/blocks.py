"""Block headers and blocks: the 150-byte header, the tip list and the canonical block codec.

PROTOCOL.md v2 §2.1, §2.2, H1: a block is
``[header: bin(150), tips: [bin(32), ...], txs: [tx, ...]]`` and header offset 66 holds
``tips_root`` = H(``b"dagchain-tips"`` ‖ u8 k ‖ t_1 ‖ … ‖ t_k).
"""

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgpack

from dagchain.crypto import merkle_root
from dagchain.encoding import expect_bin, expect_list, pack, unpack_canonical
from dagchain.errors import EncodingError
from dagchain.params import ConsensusParams
from dagchain.transactions import Transaction, tx_from_obj
from dagchain.types import BlockId

HEADER_SIZE = 150
_HEADER = struct.Struct("<H32s32s32s32sQIQ")
TIPS_TAG = b"dagchain-tips"
"""Domain tag of ``tips_root`` (§2.1)."""
BLOCK_PREFIX = b"\x93\xc4\x96"
"""The first bytes of every canonical block (§2.2): array of 3, then bin8 of 150 (the header)."""
NONCE_OFFSET = 142
"""The nonce is last, so a miner absorbs bytes 0..141 once (§2.1)."""


@dataclass(frozen=True, slots=True)
class BlockHeader:
    """The fixed 150-byte header (§2.1)."""

    version: int
    milestone_link: BlockId
    previous_link: BlockId
    tips_root: bytes
    """Commits to the block's tip links (§2.1; genesis: the null id)."""
    merkle_root: bytes
    timestamp_ms: int
    target: int
    nonce: int

    def encode(self) -> bytes:
        """The 150 header bytes, little-endian integers (E1)."""
        return _HEADER.pack(
            self.version,
            self.milestone_link,
            self.previous_link,
            self.tips_root,
            self.merkle_root,
            self.timestamp_ms,
            self.target,
            self.nonce,
        )


def decode_header(data: bytes) -> BlockHeader:
    """Parse 150 header bytes.

    Raises:
        EncodingError: wrong length.
    """
    if len(data) != HEADER_SIZE:
        raise EncodingError(f"a header is {HEADER_SIZE} bytes, got {len(data)}")
    v, ms, prev, tips_root, root, ts, target, nonce = _HEADER.unpack(data)
    return BlockHeader(v, BlockId(ms), BlockId(prev), tips_root, root, ts, target, nonce)


def compute_tips_root(tips: Sequence[bytes]) -> bytes:
    """§2.1: H(``b"dagchain-tips"`` ‖ u8 k ‖ t_1 ‖ … ‖ t_k) for k >= 1 tips; the null id for none.

    Only genesis has no tips; H5 bounds k of every other block to 1..``max_tip_links`` (<= 255).
    """
    if not tips:
        return bytes(32)
    return hashlib.blake2b(
        TIPS_TAG + bytes((len(tips) & 0xFF,)) + b"".join(tips), digest_size=32
    ).digest()


def compute_block_id(header_bytes: bytes) -> BlockId:
    """id(B) = H(header) (§1)."""
    return BlockId(hashlib.blake2b(header_bytes, digest_size=32).digest())


@dataclass(frozen=True, slots=True)
class Block:
    """A decoded block with its canonical bytes and id (build with ``make_block``)."""

    header: BlockHeader
    tip_links: tuple[BlockId, ...]
    """The tip links as carried in the body (§2.2); H7 ties them to ``header.tips_root``."""
    txs: tuple[Transaction, ...]
    raw: bytes = field(repr=False, compare=False)
    id: BlockId = field(compare=False)
    pruned_txids: tuple[bytes, ...] | None = field(default=None, repr=False, compare=False)
    """Set on a pruned block (``--prune-depth``): its body is gone, ``txs`` is empty, ``raw``
    is the stored stub (never sent), and these are the txids it held, in block order."""

    @property
    def pruned(self) -> bool:
        """True if only the header, tip links and txids of this block are stored."""
        return self.pruned_txids is not None

    @property
    def txids(self) -> tuple[bytes, ...]:
        """The txids of the block in block order (also of a pruned block)."""
        if self.pruned_txids is not None:
            return self.pruned_txids
        return tuple(tx.txid for tx in self.txs)

    @property
    def header_bytes(self) -> bytes:
        """The 150 header bytes: ``raw`` after ``BLOCK_PREFIX``."""
        return self.raw[3 : 3 + HEADER_SIZE]

    @property
    def links(self) -> tuple[BlockId, ...]:
        """(milestone, previous, tip_1, …, tip_k): the L2 descent order (§5)."""
        h = self.header
        return (h.milestone_link, h.previous_link, *self.tip_links)


def make_block(
    header: BlockHeader, tip_links: Sequence[bytes], txs: Sequence[Transaction]
) -> Block:
    """Assemble a block from a header, its tip links and txs (both roots are taken as given)."""
    hb = header.encode()
    tips = tuple(BlockId(bytes(t)) for t in tip_links)
    raw = pack([hb, list(tips), [t.to_obj() for t in txs]])
    return Block(header, tips, tuple(txs), raw, compute_block_id(hb))


def compute_merkle_root(txs: Sequence[Transaction]) -> bytes:
    """§2.4 over the txids of ``txs`` in block order."""
    return merkle_root([t.txid for t in txs])


def decode_block(data: bytes, params: ConsensusParams) -> Block:
    """H1: canonical ``[bin(150), [bin(32)...], [tx...]]`` of at most ``max_block_bytes`` (E3-E6).

    The number of tips is not bounded here: H5 reads the tip list only after H7 tied it to
    ``tips_root`` (§3.3 step 3), so a mutated list is MALFORMED, not REJECTed.

    Raises:
        EncodingError: any decoding failure (the caller's verdict is MALFORMED).
    """
    obj = unpack_canonical(data, params.max_block_bytes, tuples=True)
    header_bin, tip_objs, tx_objs = expect_list(obj, "block", 3)
    header = decode_header(expect_bin(header_bin, "header", HEADER_SIZE))
    tips = tuple(BlockId(expect_bin(t, "tip link", 32)) for t in expect_list(tip_objs, "tips"))
    tx_list = expect_list(tx_objs, "block txs")
    data = bytes(data)
    raws = _tx_slices(data, len(tx_list))
    txs = tuple([tx_from_obj(t, r) for t, r in zip(tx_list, raws, strict=True)])
    return Block(header, tips, txs, data, compute_block_id(header_bin))


PRUNED_PREFIX = b"\x94\xc4\x96"
"""The first bytes of a pruned block's stored stub: array of 4, then bin8 of 150 (the header)."""


def encode_pruned_block(block: Block) -> bytes:
    """The stored stub of a pruned block: ``[header, [tip...], [txid...], 1]``.

    Not a block encoding (an array of 4, not 3), so it can never be mistaken for one; the node
    keeps it in the block's ``b`` row once the body is pruned (docs/node.md, "Pruning").
    """
    return pack([block.header_bytes, list(block.tip_links), list(block.txids), 1])


def decode_stored_block(data: bytes, params: ConsensusParams) -> Block:
    """A stored ``b`` row: a canonical block (H1), or a pruned block's stub.

    Raises:
        EncodingError: neither a block nor a stub.
    """
    if not data.startswith(PRUNED_PREFIX):
        return decode_block(data, params)
    obj = unpack_canonical(data, params.max_block_bytes, tuples=True)
    header_bin, tip_objs, txid_objs, _ = expect_list(obj, "pruned block", 4)
    header = decode_header(expect_bin(header_bin, "header", HEADER_SIZE))
    tips = tuple(BlockId(expect_bin(t, "tip link", 32)) for t in expect_list(tip_objs, "tips"))
    txids = tuple(expect_bin(t, "txid", 32) for t in expect_list(txid_objs, "txids"))
    return Block(header, tips, (), bytes(data), compute_block_id(header_bin), txids)


def _tx_slices(data: bytes, count: int) -> list[bytes]:
    """The canonical bytes of each tx: slices of the (already canonical) block encoding."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(data))
    unpacker.feed(data)
    unpacker.read_array_header()
    unpacker.skip()  # header
    unpacker.skip()  # tips
    unpacker.read_array_header()
    start = unpacker.tell()
    out = []
    for _ in range(count):
        unpacker.skip()
        end = unpacker.tell()
        out.append(data[start:end])
        start = end
    return out


__all__ = [
    "BLOCK_PREFIX",
    "HEADER_SIZE",
    "NONCE_OFFSET",
    "PRUNED_PREFIX",
    "TIPS_TAG",
    "Block",
    "BlockHeader",
    "compute_block_id",
    "compute_merkle_root",
    "compute_tips_root",
    "decode_block",
    "decode_header",
    "decode_stored_block",
    "encode_pruned_block",
    "make_block",
]
