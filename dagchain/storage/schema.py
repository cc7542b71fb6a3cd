"""Key layout and row codecs of PROTOCOL.md §12: the only module that knows the key prefixes.

Values are canonical msgpack arrays (E3) with fields in the order of the §12 table; ``u256``
values are bin(32) little-endian; heights and out_index in keys are big-endian.
"""

from typing import Any

from dagchain.encoding import pack, unpack_canonical
from dagchain.errors import StorageError

SCHEMA_VERSION = 2
"""v2 (PROTOCOL.md v2 §12): v2 block bytes, the S7 ``c`` rows and their field in ``d``."""
MAX_ROW = 1 << 26

META_SCHEMA = b"\x00schema"
META_NETWORK = b"\x00network"
META_GENESIS = b"\x00genesis"
META_SEQ = b"\x00seq"
META_SORTITION = b"\x00sortition"
"""[K u32, c_num u32, c_den u32, weighting bin]: the S1-S5 parameters the stored verdicts were
computed with (docs/protocol.md decision 31; not in PROTOCOL.md §12). A store written under
other values is refused; a devnet store without the row was written by v2 (c = 1/1)."""
META_PRUNE = b"\x00prune"
"""[prune depth u32, lowest best-chain milestone height whose level set keeps its bodies u64]:
written by a pruned node (``--prune-depth``, docs/node.md "Pruning"; not in PROTOCOL.md §12).
Below that height the ``b`` rows of best-chain level sets hold stubs (header, tips, txids) and
the ``d`` rows are deleted; its presence refuses ``reindex``."""
HEAD = b"Hhead"

P_BLOCK = b"b"
P_META = b"m"
P_SNAPSHOT = b"s"
P_PEER_HEAD = b"r"
P_TX_INDEX = b"t"
P_PENDING = b"p"
P_LEVEL_SET = b"l"
P_DELTA = b"d"
P_HEIGHT = b"h"
P_LS_HEIGHT = b"x"
P_UTXO = b"u"
P_SPENT = b"k"
P_ADDRESS = b"o"
P_ROOT = b"a"
P_REDEEMED = b"q"
P_INVALIDATED = b"i"
P_FIRST_CHILD = b"c"

PUT_ONLY_WHEN_ABSENT = (P_PENDING,)
"""Prefixes whose rows the core puts only when the key is absent: a ``p`` row at A1 (a new
block, D1) and at an undo (a block whose ``p`` row its level set's A3 deleted). A write group
drops such a row put and deleted inside it (storage.group)."""


def u256(value: int) -> bytes:
    """A non-negative integer as bin(32) little-endian (§12)."""
    return value.to_bytes(32, "little")


def from_u256(data: bytes) -> int:
    """Inverse of :func:`u256`."""
    return int.from_bytes(data, "little")


def height_key(prefix: bytes, height: int) -> bytes:
    """``prefix ‖ u64 BE height``."""
    return prefix + height.to_bytes(8, "big")


def outpoint_key(prefix: bytes, txid: bytes, index: int) -> bytes:
    """``prefix ‖ txid ‖ u32 BE out_index``."""
    return prefix + txid + index.to_bytes(4, "big")


def address_key(address: bytes, txid: bytes, index: int) -> bytes:
    """``o ‖ address ‖ txid ‖ u32 BE out_index`` (unspent outpoints by address)."""
    return P_ADDRESS + address + txid + index.to_bytes(4, "big")


EMPTY_ROW = pack([])
"""The value of index rows that carry no data (t, p, o, i)."""


def encode_row(fields: list[Any]) -> bytes:
    """A row value: a canonical msgpack array."""
    return pack(fields)


def decode_row(data: bytes, key: bytes) -> list[Any]:
    """Decode a row, turning a damaged value into a StorageError naming the key.

    Raises:
        StorageError: the value is not a canonical msgpack array.
    """
    try:
        obj = unpack_canonical(data, MAX_ROW)
    except Exception as exc:
        raise StorageError(f"corrupted row {key[:1]!r}{key[1:].hex()}: {exc}") from None
    if type(obj) is not list:
        raise StorageError(f"corrupted row {key[:1]!r}{key[1:].hex()}: not an array")
    return obj


__all__ = [
    "EMPTY_ROW",
    "HEAD",
    "META_GENESIS",
    "META_NETWORK",
    "META_PRUNE",
    "META_SCHEMA",
    "META_SEQ",
    "META_SORTITION",
    "PUT_ONLY_WHEN_ABSENT",
    "P_ADDRESS",
    "P_BLOCK",
    "P_DELTA",
    "P_FIRST_CHILD",
    "P_HEIGHT",
    "P_INVALIDATED",
    "P_LEVEL_SET",
    "P_LS_HEIGHT",
    "P_META",
    "P_PEER_HEAD",
    "P_PENDING",
    "P_REDEEMED",
    "P_ROOT",
    "P_SNAPSHOT",
    "P_SPENT",
    "P_TX_INDEX",
    "P_UTXO",
    "SCHEMA_VERSION",
    "address_key",
    "decode_row",
    "encode_row",
    "from_u256",
    "height_key",
    "outpoint_key",
    "u256",
]
