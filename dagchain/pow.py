"""Compact targets, work and proof-of-work checks (PROTOCOL.md §2.5, §3.1, E9, H4)."""

from dagchain.errors import EncodingError

MAX_TARGET_BITS = 0x2100FFFF


def decode_compact(bits: int) -> int:
    """Expand a Bitcoin-style compact target (§2.5).

    Raises:
        EncodingError: the sign bit is set with a non-zero mantissa ("negative").
    """
    exponent = bits >> 24
    mantissa = bits & 0x007FFFFF
    if bits & 0x00800000 and mantissa:
        raise EncodingError(f"compact target {bits:#010x} is negative")
    if exponent <= 3:
        return mantissa >> (8 * (3 - exponent))
    return mantissa << (8 * (exponent - 3))


def encode_compact(value: int) -> int:
    """Compact form of a non-negative target, truncating to three significant bytes (§2.5)."""
    size = (value.bit_length() + 7) // 8
    compact = value << (8 * (3 - size)) if size <= 3 else value >> (8 * (size - 3))
    if compact & 0x00800000:
        compact >>= 8
        size += 1
    return (size << 24) | compact


def normalize_target(value: int) -> int:
    """``decode(encode(v))``: every target stored in a snapshot is normalized (§2.5)."""
    return decode_compact(encode_compact(value))


MAX_TARGET = decode_compact(MAX_TARGET_BITS)


def is_valid_compact_target(bits: int, max_target: int = MAX_TARGET) -> bool:
    """E9: decodes, lies in (0, max_target] and is the canonical compact form."""
    if not 0 <= bits <= 0xFFFFFFFF:
        return False
    try:
        value = decode_compact(bits)
    except EncodingError:
        return False
    return 0 < value <= max_target and encode_compact(value) == bits


def compute_work(target: int, max_target: int = MAX_TARGET) -> int:
    """Work of a target: ``max_target // target`` (§2.5, used by F1, G2, S2)."""
    return max_target // target


def hash_value(block_id: bytes) -> int:
    """A 32-byte hash read as a number, little-endian (E1)."""
    return int.from_bytes(block_id, "little")


def meets_target(block_id: bytes, target: int) -> bool:
    """H4 / §3.1: LE(id) <= target."""
    return int.from_bytes(block_id, "little") <= target


__all__ = [
    "MAX_TARGET",
    "MAX_TARGET_BITS",
    "compute_work",
    "decode_compact",
    "encode_compact",
    "hash_value",
    "is_valid_compact_target",
    "meets_target",
    "normalize_target",
]
