"""Encoding rules E1-E6 and the header layout (PROTOCOL.md §2, §2.1, §2.2).

Every node must read the same bytes as the same object and refuse everything else, or two nodes
disagree on a txid or a block id. The non-canonical inputs below are hand-assembled msgpack so that
each test names the exact header or type it smuggles in.
"""

import hashlib
import struct
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagchain.blocks import (
    HEADER_SIZE,
    NONCE_OFFSET,
    Block,
    BlockHeader,
    compute_block_id,
    compute_tips_root,
    decode_block,
    decode_header,
    make_block,
)
from dagchain.crypto import hash32
from dagchain.encoding import U32, U64
from dagchain.errors import EncodingError, InvalidTransaction
from dagchain.params import MAINNET, ConsensusParams
from dagchain.pow import hash_value, meets_target
from dagchain.transactions import (
    Transaction,
    TxIn,
    TxKind,
    TxOut,
    check_tx_stateless,
    decode_transaction,
    make_transaction,
)
from dagchain.types import Address, BlockId, TxId
from tests.dagchain import strategies

PARAMS = MAINNET
TXID = TxId(hash32(b"funding tx"))
PUBKEY = bytes(range(32))
SIGNATURE = bytes(range(64))
ADDRESS = Address(hash32(b"payee"))

TIP = BlockId(bytes([0x33]) * 32)
TIPS = (TIP,)
HEADER = BlockHeader(
    version=0x0102,
    milestone_link=BlockId(bytes([0x11]) * 32),
    previous_link=BlockId(bytes([0x22]) * 32),
    tips_root=compute_tips_root(TIPS),
    merkle_root=bytes([0x44]) * 32,
    timestamp_ms=0x0102030405060708,
    target=0x1E010000,
    nonce=0x1112131415161718,
)

# The base transaction [1, 0, [[TXID, 5, PUBKEY, SIGNATURE]], [[1000, ADDRESS]]] as msgpack pieces;
# a test replaces one piece with a differently encoded (or differently typed) value.
_TX_PIECES: dict[str, bytes] = {
    "tx": b"\x94",
    "version": b"\x01",
    "kind": b"\x00",
    "inputs": b"\x91",
    "input": b"\x94",
    "txid": b"\xc4\x20" + TXID,
    "out_index": b"\x05",
    "pubkey": b"\xc4\x20" + PUBKEY,
    "signature": b"\xc4\x40" + SIGNATURE,
    "outputs": b"\x91",
    "output": b"\x92",
    "amount": b"\xcd\x03\xe8",
    "address": b"\xc4\x20" + ADDRESS,
}


def base_tx() -> Transaction:
    return make_transaction(
        TxKind.TRANSFER, [TxIn(TXID, 5, PUBKEY, SIGNATURE)], [TxOut(1000, ADDRESS)]
    )


def tx_bytes(**pieces: bytes) -> bytes:
    """The base transaction with some msgpack pieces replaced."""
    unknown = set(pieces) - set(_TX_PIECES)
    assert not unknown, unknown
    return b"".join(pieces.get(name, default) for name, default in _TX_PIECES.items())


TIPS_BYTES = b"\x91\xc4\x20" + TIP
"""The canonical one-tip list ``[bin(32)]`` of HEADER (§2.2)."""


def block_bytes(*txs: bytes, header: bytes | None = None, tips: bytes = TIPS_BYTES) -> bytes:
    """``[bin(150), [bin(32)...], [tx...]]`` with canonical array and bin headers (§2.2, v2)."""
    assert len(txs) < 16
    head = b"\xc4\x96" + HEADER.encode() if header is None else header
    return b"\x93" + head + tips + bytes([0x90 | len(txs)]) + b"".join(txs)


def test_hand_assembled_base_tx_is_the_canonical_encoding() -> None:
    """Sanity for the tests below: with no piece replaced, the bytes decode (E3)."""
    assert tx_bytes() == base_tx().raw
    assert decode_transaction(tx_bytes(), PARAMS) == base_tx()
    assert decode_block(block_bytes(tx_bytes()), PARAMS).txs == (base_tx(),)


# --- E1 numbers -------------------------------------------------------------------------------


def test_e1_header_integers_are_little_endian() -> None:
    raw = HEADER.encode()
    assert raw[0:2] == bytes([0x02, 0x01])
    assert raw[130:138] == bytes([8, 7, 6, 5, 4, 3, 2, 1])
    assert raw[138:142] == bytes([0x00, 0x00, 0x01, 0x1E])
    assert raw[142:150] == bytes([0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11])


def test_e1_hash_as_number_is_little_endian() -> None:
    assert hash_value(b"\x01" + bytes(31)) == 1
    assert hash_value(bytes(31) + b"\x01") == 1 << 248
    assert not meets_target(bytes(31) + b"\x01", (1 << 248) - 1)
    assert meets_target(b"\xff" * 31 + b"\x00", (1 << 248) - 1)


def test_e1_pow_satisfying_id_ends_in_zero_bytes() -> None:
    """Displayed hex is stored order, so a hash below 2^240 shows its zero bytes at the end."""
    target = (1 << 240) - 1
    nonce = 0
    while True:
        header = BlockHeader(**{**_header_fields(HEADER), "nonce": nonce})
        block_id = compute_block_id(header.encode())
        if meets_target(block_id, target):
            break
        nonce += 1
    assert block_id.hex().endswith("0000")
    assert not block_id.hex().startswith("0000")  # no reversal (one chance in 2^16 to be wrong)


def _header_fields(header: BlockHeader) -> dict[str, Any]:
    return {name: getattr(header, name) for name in BlockHeader.__slots__}


# --- E2 hash ----------------------------------------------------------------------------------


def test_e2_hash_is_unkeyed_blake2b_256() -> None:
    assert hash32(b"").hex() == "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8"
    assert hash32(b"abc").hex() == (
        "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319"
    )


def test_e2_hash_is_not_truncated_blake2b_512() -> None:
    """digest_size=32 is a different function from the first half of BLAKE2b-512."""
    assert hash32(b"abc") != hashlib.blake2b(b"abc").digest()[:32]


def test_e2_txid_and_block_id_are_hashes_of_the_canonical_bytes() -> None:
    tx = base_tx()
    block = make_block(HEADER, TIPS, [tx])
    assert tx.txid == hash32(tx.raw)
    assert block.id == hash32(HEADER.encode())


# --- §2.1 header layout -----------------------------------------------------------------------


def test_header_is_150_bytes_with_fields_at_the_section_2_1_offsets() -> None:
    raw = HEADER.encode()
    assert len(raw) == HEADER_SIZE == 150
    assert raw[2:34] == HEADER.milestone_link
    assert raw[34:66] == HEADER.previous_link
    assert raw[66:98] == HEADER.tips_root == compute_tips_root(TIPS)
    assert raw[98:130] == HEADER.merkle_root
    assert int.from_bytes(raw[130:138], "little") == HEADER.timestamp_ms
    assert int.from_bytes(raw[138:142], "little") == HEADER.target
    assert int.from_bytes(raw[142:150], "little") == HEADER.nonce


def test_nonce_is_last_at_offset_142() -> None:
    """A miner hashes bytes 0..141 once and varies only the tail (§2.1)."""
    assert NONCE_OFFSET == 142
    other = BlockHeader(**{**_header_fields(HEADER), "nonce": 0})
    assert HEADER.encode()[:NONCE_OFFSET] == other.encode()[:NONCE_OFFSET]


@pytest.mark.parametrize("length", [0, 149, 151])
def test_header_of_wrong_length_is_rejected(length: int) -> None:
    with pytest.raises(EncodingError):
        decode_header(bytes(length))


def test_one_tip_empty_block_is_189_bytes() -> None:
    """§2.2 (v2): 0x93, bin8 header (c4 96), 150 header bytes, the tip list 0x91 c4 20 + 32 bytes,
    empty tx array 0x90: "one tip, no txs = 189 bytes"."""
    block = make_block(HEADER, TIPS, [])
    assert len(block.raw) == 189
    assert block.raw == b"\x93\xc4\x96" + HEADER.encode() + TIPS_BYTES + b"\x90"
    assert block.tip_links == TIPS
    assert block.header_bytes == HEADER.encode()
    assert decode_block(block.raw, PARAMS) == block


def test_block_header_bytes_are_the_hashed_header() -> None:
    """Regression: ``Block.header_bytes`` sliced ``raw[4:154]``, one byte past the header.

    The block starts 0x93 (array of 3, v2), c4 96 (bin8 of 150), so the header is
    ``raw[3:153]``; anyone re-hashing or relaying ``header_bytes`` got a different id than
    ``block.id``.
    """
    block = decode_block(make_block(HEADER, TIPS, [base_tx()]).raw, PARAMS)
    assert block.header_bytes == HEADER.encode()
    assert compute_block_id(block.header_bytes) == block.id


# --- E3 canonical msgpack: shortest headers ---------------------------------------------------

NON_SHORTEST_TX_PIECES = [
    pytest.param({"version": b"\xcc\x01"}, id="version-uint8"),
    pytest.param({"version": b"\xcd\x00\x01"}, id="version-uint16"),
    pytest.param({"version": b"\xce\x00\x00\x00\x01"}, id="version-uint32"),
    pytest.param({"version": b"\xcf" + (1).to_bytes(8, "big")}, id="version-uint64"),
    pytest.param({"version": b"\xd0\x01"}, id="version-int8"),
    pytest.param({"out_index": b"\xcc\x05"}, id="out_index-uint8"),
    pytest.param({"amount": b"\xce\x00\x00\x03\xe8"}, id="amount-uint32"),
    pytest.param({"amount": b"\xd1\x03\xe8"}, id="amount-int16"),
    pytest.param({"txid": b"\xc5\x00\x20" + TXID}, id="txid-bin16"),
    pytest.param({"txid": b"\xc6\x00\x00\x00\x20" + TXID}, id="txid-bin32"),
    pytest.param({"signature": b"\xc5\x00\x40" + SIGNATURE}, id="signature-bin16"),
    pytest.param({"tx": b"\xdc\x00\x04"}, id="tx-array16"),
    pytest.param({"tx": b"\xdd\x00\x00\x00\x04"}, id="tx-array32"),
    pytest.param({"inputs": b"\xdc\x00\x01"}, id="inputs-array16"),
    pytest.param({"output": b"\xdc\x00\x02"}, id="output-array16"),
]


@pytest.mark.parametrize("pieces", NON_SHORTEST_TX_PIECES)
def test_e3_non_shortest_header_in_tx_is_rejected(pieces: dict[str, bytes]) -> None:
    """The same object re-encodes shorter, so these bytes would give the tx a second txid."""
    with pytest.raises(EncodingError):
        decode_transaction(tx_bytes(**pieces), PARAMS)


@pytest.mark.parametrize("pieces", NON_SHORTEST_TX_PIECES)
def test_e3_non_shortest_header_in_block_tx_is_rejected(pieces: dict[str, bytes]) -> None:
    with pytest.raises(EncodingError):
        decode_block(block_bytes(tx_bytes(**pieces)), PARAMS)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            b"\xdc\x00\x03\xc4\x96" + HEADER.encode() + TIPS_BYTES + b"\x90", id="block-array16"
        ),
        pytest.param(
            b"\x93\xc5\x00\x96" + HEADER.encode() + TIPS_BYTES + b"\x90", id="header-bin16"
        ),
        pytest.param(
            b"\x93\xc4\x96" + HEADER.encode() + TIPS_BYTES + b"\xdc\x00\x00", id="txs-array16"
        ),
        pytest.param(
            b"\x93\xc4\x96" + HEADER.encode() + TIPS_BYTES + b"\xdd\x00\x00\x00\x00",
            id="txs-array32",
        ),
        pytest.param(block_bytes(tips=b"\xdc\x00\x01\xc4\x20" + TIP), id="tips-array16"),
        pytest.param(block_bytes(tips=b"\x91\xc5\x00\x20" + TIP), id="tip-bin16"),
        pytest.param(b"\x92\xc4\x96" + HEADER.encode() + b"\x90", id="v1-two-entries-no-tips"),
    ],
)
def test_e3_non_shortest_header_in_block_is_rejected(data: bytes) -> None:
    """Only the header is hashed into the id: a re-encoded body must not pass as the same block."""
    with pytest.raises(EncodingError):
        decode_block(data, PARAMS)


# --- E3 canonical msgpack: only non-negative ints, bin and arrays ------------------------------

FORBIDDEN_TYPE_TX_PIECES = [
    pytest.param({"txid": b"\xd9\x20" + b"a" * 32}, id="str-txid"),
    pytest.param({"kind": b"\xa1" + b"0"}, id="str-kind"),
    pytest.param({"amount": b"\x80"}, id="map-amount"),
    pytest.param(
        {"output": b"\x82", "amount": b"\xc4\x01a\x01", "address": b"\xc4\x01b\x02"},
        id="map-output",
    ),
    pytest.param({"out_index": b"\xc0"}, id="nil-out_index"),
    pytest.param({"version": b"\xc3"}, id="true-version"),
    pytest.param({"kind": b"\xc2"}, id="false-kind"),
    pytest.param({"version": b"\xcb" + struct.pack(">d", 1.0)}, id="float64-version"),
    pytest.param({"version": b"\xca" + struct.pack(">f", 1.0)}, id="float32-version"),
    pytest.param({"amount": b"\xff"}, id="negative-fixint-amount"),
    pytest.param({"amount": b"\xd0\x80"}, id="negative-int8-amount"),
    pytest.param(
        {"out_index": b"\xd3" + (-1).to_bytes(8, "big", signed=True)}, id="negative-int64-out_index"
    ),
    pytest.param({"signature": b"\xd4\x01\x00"}, id="ext-signature"),
    pytest.param({"signature": b"\xd6\xff\x00\x00\x00\x00"}, id="timestamp-ext-signature"),
]


@pytest.mark.parametrize("pieces", FORBIDDEN_TYPE_TX_PIECES)
def test_e3_forbidden_msgpack_type_in_tx_is_rejected(pieces: dict[str, bytes]) -> None:
    """str, map, nil, bool, float, negative ints and ext never appear in consensus data (§2.2)."""
    with pytest.raises(EncodingError):
        decode_transaction(tx_bytes(**pieces), PARAMS)


@pytest.mark.parametrize("pieces", FORBIDDEN_TYPE_TX_PIECES)
def test_e3_forbidden_msgpack_type_in_block_tx_is_rejected(pieces: dict[str, bytes]) -> None:
    with pytest.raises(EncodingError):
        decode_block(block_bytes(tx_bytes(**pieces)), PARAMS)


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param("x" * 150, id="str-header"),
        pytest.param({b"h": b"\x00"}, id="map-block"),
        pytest.param(None, id="nil-block"),
        pytest.param([HEADER.encode(), None], id="nil-txs"),
        pytest.param([HEADER.encode(), [None]], id="nil-tx"),
        pytest.param([HEADER.encode(), [True]], id="bool-tx"),
        pytest.param([HEADER.encode(), [1.5]], id="float-tx"),
        pytest.param([HEADER.encode(), [-1]], id="negative-tx"),
        pytest.param([HEADER.encode(), msgpack.ExtType(1, b"")], id="ext-txs"),
        pytest.param([HEADER.encode(), [], b""], id="three-entries"),
        pytest.param([HEADER.encode()], id="one-entry"),
    ],
)
def test_e3_forbidden_type_or_shape_in_block_is_rejected(obj: object) -> None:
    data = msgpack.packb(obj, use_bin_type=True)
    with pytest.raises(EncodingError):
        decode_block(data, PARAMS)


# --- E4 trailing bytes ------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [b"\x00", b"\x90", b"\xc0", b"\x00" * 10])
def test_e4_trailing_bytes_after_tx_are_rejected(extra: bytes) -> None:
    with pytest.raises(EncodingError):
        decode_transaction(base_tx().raw + extra, PARAMS)


def test_e4_two_concatenated_txs_are_rejected() -> None:
    with pytest.raises(EncodingError):
        decode_transaction(base_tx().raw * 2, PARAMS)


@pytest.mark.parametrize("extra", [b"\x00", b"\x90", base_tx().raw])
def test_e4_trailing_bytes_after_block_are_rejected(extra: bytes) -> None:
    block = make_block(HEADER, TIPS, [base_tx()])
    with pytest.raises(EncodingError):
        decode_block(block.raw + extra, PARAMS)


# --- E5 field widths and exact lengths --------------------------------------------------------


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param({"txid": b"\xc4\x1f" + TXID[:31]}, id="txid-31"),
        pytest.param({"txid": b"\xc4\x21" + TXID + b"\x00"}, id="txid-33"),
        pytest.param({"pubkey": b"\xc4\x1f" + PUBKEY[:31]}, id="pubkey-31"),
        pytest.param({"pubkey": b"\xc4\x21" + PUBKEY + b"\x00"}, id="pubkey-33"),
        pytest.param({"signature": b"\xc4\x3f" + SIGNATURE[:63]}, id="signature-63"),
        pytest.param({"signature": b"\xc4\x41" + SIGNATURE + b"\x00"}, id="signature-65"),
        pytest.param({"address": b"\xc4\x1f" + ADDRESS[:31]}, id="address-31"),
        pytest.param({"address": b"\xc4\x21" + ADDRESS + b"\x00"}, id="address-33"),
        pytest.param({"out_index": b"\xcf" + (U32 + 1).to_bytes(8, "big")}, id="out_index-2^32"),
        pytest.param({"out_index": b"\xcf" + U64.to_bytes(8, "big")}, id="out_index-u64max"),
        pytest.param({"input": b"\x93", "signature": b""}, id="input-3-entries"),
        pytest.param(
            {"output": b"\x93", "address": b"\xc4\x20" + ADDRESS + b"\x00"}, id="output-3-entries"
        ),
        pytest.param(
            {"tx": b"\x93", "outputs": b"", "output": b"", "amount": b"", "address": b""},
            id="tx-3-entries",
        ),
    ],
)
def test_e5_wrong_width_or_length_is_rejected(pieces: dict[str, bytes]) -> None:
    data = tx_bytes(**pieces)
    with pytest.raises(EncodingError):
        decode_transaction(data, PARAMS)
    with pytest.raises(EncodingError):
        decode_block(block_bytes(data), PARAMS)


def test_e5_u32_out_index_maximum_fits() -> None:
    tx = decode_transaction(tx_bytes(out_index=b"\xce\xff\xff\xff\xff"), PARAMS)
    assert tx.inputs[0].out_index == U32


def test_e5_u64_amount_maximum_fits_the_codec_and_t3_bounds_it() -> None:
    """2^64-1 is a well-formed amount field; it is T3, not the decoder, that limits it."""
    tx = decode_transaction(tx_bytes(amount=b"\xcf" + U64.to_bytes(8, "big")), PARAMS)
    assert tx.outputs[0].amount == U64
    with pytest.raises(InvalidTransaction) as excinfo:
        check_tx_stateless(tx, PARAMS)
    assert excinfo.value.rule == "T3"


def test_e5_amount_beyond_u64_cannot_be_encoded() -> None:
    """msgpack has no wider unsigned integer, so no bytes carry a u64 overflow."""
    with pytest.raises(OverflowError):
        make_transaction(TxKind.TRANSFER, [], [TxOut(U64 + 1, ADDRESS)])


@pytest.mark.parametrize("length", [149, 151])
def test_e5_block_header_bin_of_wrong_length_is_rejected(length: int) -> None:
    header = msgpack.packb(bytes(length), use_bin_type=True)
    with pytest.raises(EncodingError):
        decode_block(block_bytes(header=header), PARAMS)


# --- E6 size bound before unpacking -----------------------------------------------------------


def _forbid_unpacking(monkeypatch: pytest.MonkeyPatch) -> None:
    def unpackb(*args: object, **kwargs: object) -> object:
        raise AssertionError("E6: input was unpacked before its size was checked")

    monkeypatch.setattr(msgpack, "unpackb", unpackb)


def test_e6_tx_at_max_tx_bytes_is_accepted_one_byte_over_is_not() -> None:
    tx = base_tx()
    at_limit = PARAMS.replace(max_tx_bytes=len(tx.raw))
    below = PARAMS.replace(max_tx_bytes=len(tx.raw) - 1)
    assert decode_transaction(tx.raw, at_limit) == tx
    with pytest.raises(EncodingError):
        decode_transaction(tx.raw, below)


def test_e6_oversized_tx_is_refused_before_unpacking(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"\xc6" + (PARAMS.max_tx_bytes).to_bytes(4, "big") + bytes(PARAMS.max_tx_bytes)
    assert len(data) > PARAMS.max_tx_bytes
    _forbid_unpacking(monkeypatch)
    with pytest.raises(EncodingError):
        decode_transaction(data, PARAMS)


def test_e6_block_at_max_block_bytes_is_accepted_one_byte_over_is_not() -> None:
    block = make_block(HEADER, TIPS, [base_tx(), base_tx()])
    at_limit = PARAMS.replace(max_block_bytes=len(block.raw))
    below = PARAMS.replace(max_block_bytes=len(block.raw) - 1)
    assert decode_block(block.raw, at_limit) == block
    with pytest.raises(EncodingError):
        decode_block(block.raw, below)


def test_e6_oversized_block_is_refused_before_unpacking(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"\x93\xc4\x96" + HEADER.encode() + TIPS_BYTES + b"\x90" + bytes(PARAMS.max_block_bytes)
    _forbid_unpacking(monkeypatch)
    with pytest.raises(EncodingError):
        decode_block(data, PARAMS)


# --- properties -------------------------------------------------------------------------------


@pytest.mark.property
@given(tx=strategies.transactions())
def test_e3_transaction_bytes_round_trip(tx: Transaction) -> None:
    decoded = decode_transaction(tx.raw, PARAMS)
    assert decoded == tx
    assert decoded.raw == tx.raw
    assert decoded.txid == tx.txid


@pytest.mark.property
@given(block=strategies.blocks())
def test_e3_block_bytes_round_trip(block: Block) -> None:
    decoded = decode_block(block.raw, PARAMS)
    assert decoded == block
    assert decoded.id == block.id
    assert decoded.header_bytes == block.header.encode()
    assert [t.raw for t in decoded.txs] == [t.raw for t in block.txs]


@pytest.mark.property
@given(header=strategies.block_headers())
def test_e1_header_round_trip(header: BlockHeader) -> None:
    raw = header.encode()
    assert len(raw) == HEADER_SIZE
    assert decode_header(raw) == header


Decoder = Callable[[bytes, ConsensusParams], object]
DECODERS: list[Any] = [
    pytest.param(strategies.transactions(), decode_transaction, id="tx"),
    pytest.param(strategies.blocks(), decode_block, id="block"),
]


@pytest.mark.property
@pytest.mark.parametrize(("objects", "decode"), DECODERS)
@given(data=st.data(), extra=st.binary(min_size=1, max_size=40))
def test_e4_any_trailing_bytes_are_rejected(
    objects: st.SearchStrategy[Transaction | Block],
    decode: Decoder,
    data: st.DataObject,
    extra: bytes,
) -> None:
    obj = data.draw(objects)
    with pytest.raises(EncodingError):
        decode(obj.raw + extra, PARAMS)


@pytest.mark.property
@pytest.mark.parametrize(("objects", "decode"), DECODERS)
@given(data=st.data())
def test_e4_any_strict_truncation_is_rejected(
    objects: st.SearchStrategy[Transaction | Block], decode: Decoder, data: st.DataObject
) -> None:
    obj = data.draw(objects)
    cut = data.draw(st.integers(0, len(obj.raw) - 1))
    with pytest.raises(EncodingError):
        decode(obj.raw[:cut], PARAMS)
