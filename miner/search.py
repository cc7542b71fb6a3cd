"""The nonce search over a 150-byte header (PROTOCOL.md §2.1, STYLE.md rule 12): pure, picklable.

``search_nonce(prefix, target, start, count)`` is the one entry point (the simulator and the miner
call it). The nonce is the header's last 8 bytes, so the 142 bytes before it are absorbed once and
the hash state is reused per nonce. Two implementations give the same answers:

- ``search_nonce_python``: hashlib's BLAKE2b, midstate copied per nonce. Always available; hashlib
  holds the GIL for inputs this small, so parallel workers must be processes.
- ``search_nonce_native``: ``miner._kernel``, a C BLAKE2b-256 that compresses the first 128 bytes
  once and only the final block per nonce, with the GIL released (threads hash in parallel). It
  hashes 8 nonces at once with AVX-512 or 4 with AVX2 when the CPU has them (checked at import),
  else one. Built by setup.py when a C compiler is present; otherwise absent.

``KERNEL`` names the active one ("c" or "python"), ``LANES`` the C kernel's lane variant.
"""

import hashlib
from collections.abc import Callable
from typing import Final

from dagchain.blocks import HEADER_SIZE, NONCE_OFFSET

NONCE_SPACE: Final = 2**64
"""The nonce is a u64 (§2.1)."""
_HASH_MAX: Final = 2**256 - 1

SearchFunction = Callable[[bytes, int, int, int], int | None]
_NativeSearch = Callable[[bytes, bytes, int, int], int | None]
_NativeHash = Callable[[bytes], bytes]


def _load_kernel() -> tuple[_NativeSearch, _NativeHash, str] | None:
    try:
        from miner._kernel import LANES, hash_header, search
    except ImportError:  # built without a C compiler: the pure-Python search is used
        return None
    return search, hash_header, LANES


_NATIVE: Final = _load_kernel()


def _bounded(start: int, count: int) -> int:
    """``count`` cut so that the last nonce tried is below 2**64."""
    if not 0 <= start < NONCE_SPACE or count < 0:
        raise ValueError(f"bad nonce range start={start} count={count}")
    return min(count, NONCE_SPACE - start)


def _check_prefix(prefix: bytes) -> None:
    if len(prefix) != NONCE_OFFSET:
        raise ValueError(f"the prefix is the {NONCE_OFFSET} header bytes before the nonce")


def search_nonce_python(prefix: bytes, target: int, start: int, count: int) -> int | None:
    """The first nonce in [start, start + count) with LE(H(prefix ‖ nonce)) <= target, or None."""
    _check_prefix(prefix)
    count = _bounded(start, count)
    base = hashlib.blake2b(prefix, digest_size=32)
    from_bytes = int.from_bytes
    for nonce in range(start, start + count):
        h = base.copy()
        h.update(nonce.to_bytes(8, "little"))
        if from_bytes(h.digest(), "little") <= target:
            return nonce
    return None


def search_nonce_native(prefix: bytes, target: int, start: int, count: int) -> int | None:
    """``search_nonce_python`` computed by the C kernel with the GIL released.

    Raises:
        RuntimeError: the kernel was not built.
    """
    if _NATIVE is None:
        raise RuntimeError("miner._kernel was not built (no C compiler at install time)")
    _check_prefix(prefix)
    count = _bounded(start, count)
    if target < 0 or count == 0:
        return None
    clamped = min(target, _HASH_MAX).to_bytes(32, "little")
    return _NATIVE[0](prefix, clamped, start, count)


def search_nonce(prefix: bytes, target: int, start: int, count: int) -> int | None:
    """The first nonce in [start, start + count) with LE(H(prefix ‖ nonce)) <= target, or None.

    ``prefix`` is the 142-byte header without its nonce. The C kernel when built, else the
    pure-Python search; both give the same answer.
    """
    if _NATIVE is None:
        return search_nonce_python(prefix, target, start, count)
    return search_nonce_native(prefix, target, start, count)


def hash_header(header: bytes) -> bytes:
    """H(header) through the active kernel (equals ``hashlib.blake2b(header, digest_size=32)``)."""
    if len(header) != HEADER_SIZE:
        raise ValueError(f"a header is {HEADER_SIZE} bytes, got {len(header)}")
    if _NATIVE is None:
        return hashlib.blake2b(header, digest_size=32).digest()
    return _NATIVE[1](header)


KERNEL: Final = "python" if _NATIVE is None else "c"
"""The active search implementation."""
LANES: Final = "none" if _NATIVE is None else _NATIVE[2]
"""The C kernel's variant on this CPU: ``scalar``, ``avx2x4`` or ``avx512x8`` (or ``none``)."""
RELEASES_GIL: Final = _NATIVE is not None
"""True when ``search_nonce`` lets other threads run, so workers may be threads."""

__all__ = [
    "KERNEL",
    "LANES",
    "NONCE_SPACE",
    "RELEASES_GIL",
    "SearchFunction",
    "hash_header",
    "search_nonce",
    "search_nonce_native",
    "search_nonce_python",
]
