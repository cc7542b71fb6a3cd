"""Canonical msgpack (PROTOCOL.md §2.2, E3-E6): the only way consensus bytes are read."""

from collections.abc import Callable
from typing import Any

import msgpack

from dagchain.errors import EncodingError

U16 = 0xFFFF
U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF


def pack(obj: Any) -> bytes:
    """Canonical encoding of an object built from ints, bytes and lists (or tuples) (E3)."""
    return msgpack.Packer(use_bin_type=True).pack(obj)  # type: ignore[no-any-return]


def packer() -> Callable[[Any], bytes]:
    """A reusable canonical encoder, the same bytes as ``pack`` but cheaper per call.

    It keeps one buffer between calls, so it must have one owner (a ``ChainState``, a loop in
    one function): never share it between threads.
    """
    return msgpack.Packer(use_bin_type=True).pack  # type: ignore[no-any-return]


def unpack_canonical(data: bytes, max_bytes: int, *, tuples: bool = False) -> Any:
    """Unpack one top-level object and require canonical bytes (E3, E4, E6).

    Only msgpack arrays, bins and non-negative ints may appear; callers type-check the shape.
    Arrays come back as lists, or as tuples with ``tuples=True``: the block and tx decoders use
    tuples because a tuple holding only ints and bytes leaves the garbage collector's scans
    after its first one (a list never does), which makes decoding markedly cheaper in GC time
    (docs/benchmarks.md, "Core").

    Raises:
        EncodingError: oversized input, trailing bytes, undecodable or non-canonical bytes.
    """
    if len(data) > max_bytes:
        raise EncodingError(f"{len(data)} bytes exceed the limit of {max_bytes}")
    try:
        obj = msgpack.unpackb(data, use_list=not tuples, raw=False, strict_map_key=True)
    except msgpack.ExtraData:
        raise EncodingError("trailing bytes after the top-level object") from None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise EncodingError(f"undecodable msgpack: {exc}") from None
    try:
        again = pack(obj)
    except (ValueError, TypeError, OverflowError) as exc:
        raise EncodingError(f"unencodable value: {exc}") from None
    if again != data:
        raise EncodingError("non-canonical msgpack encoding")
    return obj


def expect_list(obj: Any, what: str, length: int | None = None) -> list[Any] | tuple[Any, ...]:
    """Type check: a msgpack array (a list, or a tuple), of an exact length when given."""
    if type(obj) is not list and type(obj) is not tuple:
        raise EncodingError(f"{what}: expected an array")
    if length is not None and len(obj) != length:
        raise EncodingError(f"{what}: expected {length} entries, got {len(obj)}")
    return obj


def expect_int(obj: Any, what: str, maximum: int) -> int:
    """Type check: a non-negative int fitting its field (E5); bools are not ints here."""
    if type(obj) is not int or not 0 <= obj <= maximum:
        raise EncodingError(f"{what}: expected an integer in 0..{maximum}")
    return obj


def expect_bin(obj: Any, what: str, length: int | None = None) -> bytes:
    """Type check: a msgpack bin of the exact stated length (E5)."""
    if type(obj) is not bytes:
        raise EncodingError(f"{what}: expected bin")
    if length is not None and len(obj) != length:
        raise EncodingError(f"{what}: expected {length} bytes, got {len(obj)}")
    return obj


__all__ = [
    "U16",
    "U32",
    "U64",
    "expect_bin",
    "expect_int",
    "expect_list",
    "pack",
    "packer",
    "unpack_canonical",
]
