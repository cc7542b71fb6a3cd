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
    "TIPS_TAG",
    "Block",
    "BlockHeader",
    "compute_block_id",
    "compute_merkle_root",
    "compute_tips_root",
    "decode_block",
    "decode_header",
    "make_block",
]
