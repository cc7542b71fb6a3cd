"""Hashing, merkle root, BIP340 signatures and bech32m addresses (PROTOCOL.md E2, E8, §2.4, T6)."""

import hashlib
from collections.abc import Sequence

from coincurve._libsecp256k1 import ffi as _ffi
from coincurve._libsecp256k1 import lib as _lib
from coincurve.context import GLOBAL_CONTEXT

from dagchain.errors import EncodingError
from dagchain.types import Address

ZERO_HASH = bytes(32)
_CTX = GLOBAL_CONTEXT.ctx


def hash32(data: bytes) -> bytes:
    """H(x): BLAKE2b with a 32-byte digest, no key, salt or personalisation (E2)."""
    h = _H.copy()
    h.update(data)
    return h.digest()


_H = hashlib.blake2b(digest_size=32)
"""The empty H state: copying it is cheaper than a fresh ``blake2b(digest_size=32)``."""
_LEAF = hashlib.blake2b(b"\x00", digest_size=32)
_NODE = hashlib.blake2b(b"\x01", digest_size=32)


def merkle_root(txids: Sequence[bytes]) -> bytes:
    """Domain-separated merkle root (§2.4): leaf H(0x00‖txid), node H(0x01‖l‖r), odd promoted."""
    if not txids:
        return ZERO_HASH
    level = []
    for t in txids:
        h = _LEAF.copy()
        h.update(t)
        level.append(h.digest())
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            h = _NODE.copy()
            h.update(level[i] + level[i + 1])
            nxt.append(h.digest())
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def address_from_pubkey(pubkey: bytes) -> Address:
    """E8: address = H(x-only public key)."""
    return Address(hash32(pubkey))


def verify_schnorr(pubkey: bytes, signature: bytes, message: bytes) -> bool:
    """T6: BIP340 verification through libsecp256k1; False for an invalid key or signature.

    Calls libsecp256k1 through coincurve's cffi binding directly (parse the x-only key, verify),
    which is what ``PublicKeyXOnly(pubkey).verify`` does, without its per-call object overhead.
    """
    if len(pubkey) != 32 or len(signature) != 64 or len(message) != 32:
        return False  # coincurve would read a longer key's first 32 bytes and ignore the rest
    key = _ffi.new("secp256k1_xonly_pubkey *")
    if not _lib.secp256k1_xonly_pubkey_parse(_CTX, key, pubkey):
        return False
    return bool(_lib.secp256k1_schnorrsig_verify(_CTX, signature, message, 32, key))


class SchnorrKey:
    """A secret key as a libsecp256k1 keypair: its x-only public key and BIP340 signatures.

    One point multiplication makes the keypair and one more each signature (then a verification,
    as coincurve's ``PrivateKey.sign_schnorr`` does, against faults). ``PrivateKey(secret)``
    computes two public keys on construction, and its ``sign_schnorr`` makes the keypair again:
    a one-input payment signed through it cost about nine point operations instead of four,
    most of the load generator's CPU (docs/benchmarks.md, "Node CPU per tx").

    Raises:
        ValueError: the secret is not a valid secp256k1 scalar (0 or at least the group order),
            or not 32 bytes.
    """

    __slots__ = ("_keypair", "_xonly", "xonly")

    def __init__(self, secret: bytes) -> None:
        if len(secret) != 32:
            raise ValueError("a secret key is 32 bytes")
        keypair = _ffi.new("secp256k1_keypair *")
        if not _lib.secp256k1_keypair_create(_CTX, keypair, secret):
            raise ValueError("the secret key is not a valid secp256k1 scalar")
        xonly = _ffi.new("secp256k1_xonly_pubkey *")
        if not _lib.secp256k1_keypair_xonly_pub(_CTX, xonly, _ffi.NULL, keypair):
            raise ValueError("no public key for this secret")  # pragma: no cover - valid keypair
        out = _ffi.new("unsigned char[32]")
        _lib.secp256k1_xonly_pubkey_serialize(_CTX, out, xonly)
        self._keypair = keypair
        self._xonly = xonly
        self.xonly = bytes(_ffi.buffer(out, 32))
        """The 32-byte x-only public key."""

    def sign(self, message: bytes, aux_rand: bytes) -> bytes:
        """BIP340 signature of a 32-byte message; ``aux_rand``: 32 fresh random bytes (T6)."""
        if len(message) != 32 or len(aux_rand) != 32:
            raise ValueError("BIP340 signs a 32-byte message with 32 bytes of aux_rand")
        sig = _ffi.new("unsigned char[64]")
        if not _lib.secp256k1_schnorrsig_sign32(_CTX, sig, message, self._keypair, aux_rand):
            raise ValueError("signing failed")  # pragma: no cover - valid keypair
        if not _lib.secp256k1_schnorrsig_verify(_CTX, sig, message, 32, self._xonly):
            raise ValueError("the signature does not verify")  # pragma: no cover - a fault
        return bytes(_ffi.buffer(sig, 64))


def sign_schnorr(secret: bytes, message: bytes, aux_rand: bytes) -> bytes:
    """BIP340 signature; callers pass 32 fresh random bytes as ``aux_rand`` (T6)."""
    return SchnorrKey(secret).sign(message, aux_rand)


def xonly_pubkey(secret: bytes) -> bytes:
    """The 32-byte x-only public key of a secret key."""
    return SchnorrKey(secret).xonly


# --- bech32m (BIP350), data = the 32 address bytes converted 8 -> 5 bits, no version (E8) ---

_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_BECH32M_CONST = 0x2BC830A3
_GEN = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)


def _polymod(values: Sequence[int]) -> int:
    chk = 1
    for v in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ v
        for i in range(5):
            chk ^= _GEN[i] if (top >> i) & 1 else 0
    return chk


def _hrp_expand(hrp: str) -> list[int]:
    return [ord(x) >> 5 for x in hrp] + [0] + [ord(x) & 31 for x in hrp]


def _convert_bits(data: bytes | Sequence[int], frm: int, to: int, pad: bool) -> list[int]:
    acc = bits = 0
    out: list[int] = []
    maxv = (1 << to) - 1
    for value in data:
        acc = (acc << frm) | value
        bits += frm
        while bits >= to:
            bits -= to
            out.append((acc >> bits) & maxv)
    if pad:
        if bits:
            out.append((acc << (to - bits)) & maxv)
    elif bits >= frm or (acc << (to - bits)) & maxv:
        raise EncodingError("non-zero padding bits in bech32m data")
    return out


def encode_address(hrp: str, address: bytes) -> str:
    """Display form of a 32-byte address: bech32m with the network HRP (E8)."""
    if len(address) != 32:
        raise EncodingError("an address is 32 bytes")
    data = _convert_bits(address, 8, 5, pad=True)
    poly = _polymod([*_hrp_expand(hrp), *data, 0, 0, 0, 0, 0, 0]) ^ _BECH32M_CONST
    checksum = [(poly >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(_CHARSET[d] for d in data + checksum)


def decode_address(hrp: str, text: str) -> Address:
    """Parse a display address (E8).

    Raises:
        EncodingError: mixed case, wrong HRP, bad characters, a bech32 (non-m) or wrong checksum,
            wrong length or non-zero padding bits.
    """
    if text.lower() != text and text.upper() != text:
        raise EncodingError("mixed-case address")
    text = text.lower()
    pos = text.rfind("1")
    if pos < 1 or pos + 7 > len(text) or len(text) > 120:
        raise EncodingError("not a bech32m string")
    if text[:pos] != hrp:
        raise EncodingError(f"address prefix {text[:pos]!r} is not this network's {hrp!r}")
    try:
        data = [_CHARSET.index(c) for c in text[pos + 1 :]]
    except ValueError:
        raise EncodingError("invalid bech32m character") from None
    if _polymod([*_hrp_expand(hrp), *data]) != _BECH32M_CONST:
        raise EncodingError("bad bech32m checksum")
    decoded = bytes(_convert_bits(data[:-6], 5, 8, pad=False))
    if len(decoded) != 32:
        raise EncodingError("an address is 32 bytes")
    return Address(decoded)


__all__ = [
    "ZERO_HASH",
    "SchnorrKey",
    "address_from_pubkey",
    "decode_address",
    "encode_address",
    "hash32",
    "merkle_root",
    "sign_schnorr",
    "verify_schnorr",
    "xonly_pubkey",
]
