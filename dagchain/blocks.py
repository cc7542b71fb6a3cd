"""Block headers and blocks: the 150-byte header and the canonical block codec (§2.1, §2.2, H1)."""

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
NONCE_OFFSET = 142
"""The nonce is last, so a miner absorbs bytes 0..141 once (§2.1)."""


@dataclass(frozen=True, slots=True)
class BlockHeader:
    """The fixed 150-byte header (§2.1)."""

    version: int
    milestone_link: BlockId
    previous_link: BlockId
    tip_link: BlockId
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
            self.tip_link,
            self.merkle_root,
            self.timestamp_ms,
            self.target,
            self.nonce,
        )

    @property
    def links(self) -> tuple[BlockId, BlockId, BlockId]:
        """(milestone, previous, tip): the L2 descent order."""
        return (self.milestone_link, self.previous_link, self.tip_link)


def decode_header(data: bytes) -> BlockHeader:
    """Parse 150 header bytes.

    Raises:
        EncodingError: wrong length.
    """
    if len(data) != HEADER_SIZE:
        raise EncodingError(f"a header is {HEADER_SIZE} bytes, got {len(data)}")
    v, ms, prev, tip, root, ts, target, nonce = _HEADER.unpack(data)
    return BlockHeader(v, BlockId(ms), BlockId(prev), BlockId(tip), root, ts, target, nonce)


def compute_block_id(header_bytes: bytes) -> BlockId:
    """id(B) = H(header) (§1)."""
    return BlockId(hashlib.blake2b(header_bytes, digest_size=32).digest())


@dataclass(frozen=True, slots=True)
class Block:
    """A decoded block with its canonical bytes and id (build with ``make_block``)."""

    header: BlockHeader
    txs: tuple[Transaction, ...]
    raw: bytes = field(repr=False, compare=False)
    id: BlockId = field(compare=False)

    @property
    def header_bytes(self) -> bytes:
        """The 150 header bytes: ``raw`` after 0x92 (array of 2) and c4 96 (bin8 of 150)."""
        return self.raw[3 : 3 + HEADER_SIZE]


def make_block(header: BlockHeader, txs: Sequence[Transaction]) -> Block:
    """Assemble a block from a header and txs (the header's merkle root is taken as given)."""
    hb = header.encode()
    raw = pack([hb, [t.to_obj() for t in txs]])
    return Block(header, tuple(txs), raw, compute_block_id(hb))


def compute_merkle_root(txs: Sequence[Transaction]) -> bytes:
    """§2.4 over the txids of ``txs`` in block order."""
    return merkle_root([t.txid for t in txs])


def decode_block(data: bytes, params: ConsensusParams) -> Block:
    """H1: canonical ``[bin(150), [tx...]]`` of at most ``max_block_bytes`` (E3-E6).

    Raises:
        EncodingError: any decoding failure (the caller's verdict is MALFORMED).
    """
    obj = unpack_canonical(data, params.max_block_bytes, tuples=True)
    header_bin, tx_objs = expect_list(obj, "block", 2)
    header = decode_header(expect_bin(header_bin, "header", HEADER_SIZE))
    tx_list = expect_list(tx_objs, "block txs")
    data = bytes(data)
    raws = _tx_slices(data, len(tx_list))
    txs = tuple([tx_from_obj(t, r) for t, r in zip(tx_list, raws, strict=True)])
    return Block(header, txs, data, compute_block_id(header_bin))


def _tx_slices(data: bytes, count: int) -> list[bytes]:
    """The canonical bytes of each tx: slices of the (already canonical) block encoding."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(data))
    unpacker.feed(data)
    unpacker.read_array_header()
    unpacker.skip()
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
    "HEADER_SIZE",
    "NONCE_OFFSET",
    "Block",
    "BlockHeader",
    "compute_block_id",
    "compute_merkle_root",
    "decode_block",
    "decode_header",
    "make_block",
]
