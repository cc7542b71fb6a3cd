"""HD wallet keys: BIP39 mnemonics and seeds, BIP32 derivation on secp256k1, our paths.

BIP39 (word list, checksum, PBKDF2 seed) is trezor's ``mnemonic`` library. BIP32 is written out
here (about 40 lines on ``coincurve``, the library the node verifies signatures with): the
maintained ``bip32`` package pins ``coincurve<21`` and would downgrade the node's own
dependency. It is checked against BIP32's official test vector 1 (tests/wallet/test_hd.py).

Paths (docs/wallet.md, "HD wallets"): ``m/44'/COIN'/0'/0/i`` for receive addresses and
``m/44'/COIN'/0'/1/i`` for change, ``COIN`` = :data:`COIN_TYPES` of the network (mainnet
27708', not registered in SLIP-0044; testnet and devnet 1', SLIP-0044's "testnet, all coins").
A leaf's 32-byte private key is the BIP340 secret key as it is: its x-only public key (the
x coordinate of k*G, whatever the parity of y; BIP340 signing negates k when y is odd) gives
the address H(x-only key), PROTOCOL.md E8, exactly as for a one-key wallet.
"""

import hashlib
import hmac
from dataclasses import dataclass, field

from coincurve import PrivateKey, PublicKey
from mnemonic import Mnemonic

from dagchain.crypto import address_from_pubkey
from dagchain.types import Address
from wallet.coins import WalletError

__all__ = [
    "CHANGE",
    "COIN_TYPES",
    "RECEIVE",
    "Account",
    "ExtendedKey",
    "account_key",
    "account_path",
    "child_private",
    "master_key",
    "new_mnemonic",
    "normalize_mnemonic",
    "seed_of",
]

HARDENED = 0x80000000
CURVE_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
COIN_TYPES = {"mainnet": 27708, "testnet": 1, "devnet": 1}
"""BIP44 coin type per network (hardened in the path)."""
RECEIVE = 0
CHANGE = 1
"""BIP44 chains: external (addresses given to payers) and internal (change)."""
WORD_COUNTS = (12, 24)
_ENGLISH = Mnemonic("english")


# ------------------------------------------------------------------------------ BIP39


def new_mnemonic(words: int = 12) -> str:
    """A fresh BIP39 English mnemonic of 12 (128-bit) or 24 (256-bit) words."""
    if words not in WORD_COUNTS:
        raise WalletError(f"a mnemonic has 12 or 24 words, not {words}")
    return _ENGLISH.generate(strength=words * 32 // 3)


def normalize_mnemonic(text: str) -> str:
    """The mnemonic ``text`` as single-spaced lowercase words, checked.

    Raises:
        WalletError: a word count BIP39 does not allow, a word not in the English list (named
            with its position), or a checksum that does not match.
    """
    words = text.lower().split()
    if len(words) not in (12, 15, 18, 21, 24):
        raise WalletError(f"a mnemonic has 12 or 24 words; got {len(words)}")
    known = set(_ENGLISH.wordlist)
    for i, word in enumerate(words, 1):
        if word not in known:
            raise WalletError(f"word {i} {word!r} is not in the BIP39 English word list")
    phrase = " ".join(words)
    if not _ENGLISH.check(phrase):
        raise WalletError("the mnemonic's checksum does not match: a word is wrong or misplaced")
    return phrase


def seed_of(mnemonic: str, passphrase: str = "") -> bytes:
    """The 64-byte BIP39 seed (PBKDF2-HMAC-SHA512, 2048 rounds); the wallet uses no passphrase."""
    return Mnemonic.to_seed(normalize_mnemonic(mnemonic), passphrase)


# ------------------------------------------------------------------------------ BIP32


@dataclass(frozen=True, slots=True)
class ExtendedKey:
    """A BIP32 extended private key: the 32-byte key and its chain code."""

    key: bytes
    chain_code: bytes

    def public(self) -> tuple[bytes, bytes]:
        """(compressed 33-byte public key, chain code): the extended public key."""
        return PrivateKey(self.key).public_key.format(compressed=True), self.chain_code


def _hmac512(key: bytes, data: bytes) -> tuple[bytes, bytes]:
    digest = hmac.new(key, data, hashlib.sha512).digest()
    return digest[:32], digest[32:]


def master_key(seed: bytes) -> ExtendedKey:
    """BIP32 master key of a seed (HMAC-SHA512 keyed "Bitcoin seed")."""
    il, ir = _hmac512(b"Bitcoin seed", seed)
    if not 0 < int.from_bytes(il, "big") < CURVE_ORDER:  # pragma: no cover - probability 2^-127
        raise WalletError("this seed gives no valid BIP32 master key")
    return ExtendedKey(il, ir)


def child_private(parent: ExtendedKey, index: int) -> ExtendedKey:
    """BIP32 CKDpriv; ``index`` >= 2^31 is a hardened child."""
    if index >= HARDENED:
        data = b"\x00" + parent.key + index.to_bytes(4, "big")
    else:
        data = parent.public()[0] + index.to_bytes(4, "big")
    il, ir = _hmac512(parent.chain_code, data)
    tweak = int.from_bytes(il, "big")
    child = (tweak + int.from_bytes(parent.key, "big")) % CURVE_ORDER
    if tweak >= CURVE_ORDER or child == 0:  # pragma: no cover - probability 2^-127
        raise WalletError(f"BIP32 child {index} is invalid; this key cannot be used")
    return ExtendedKey(child.to_bytes(32, "big"), ir)


def child_public(key: bytes, chain_code: bytes, index: int) -> tuple[bytes, bytes]:
    """BIP32 CKDpub (non-hardened ``index`` only): (child compressed key, child chain code)."""
    il, ir = _hmac512(chain_code, key + index.to_bytes(4, "big"))
    if int.from_bytes(il, "big") >= CURVE_ORDER:  # pragma: no cover - probability 2^-127
        raise WalletError(f"BIP32 child {index} is invalid; this key cannot be used")
    return PublicKey(key).add(il).format(compressed=True), ir


def account_path(network: str) -> str:
    """``m/44'/COIN'/0'`` of ``network``."""
    return f"m/44'/{COIN_TYPES[network]}'/0'"


def account_key(seed: bytes, network: str) -> ExtendedKey:
    """The extended private key at :func:`account_path`."""
    key = master_key(seed)
    for index in (44, COIN_TYPES[network], 0):
        key = child_private(key, index + HARDENED)
    return key


@dataclass
class Account:
    """One BIP44 account: addresses from its extended public key, secrets from its private key.

    Built from the public half (``key``, ``chain_code``) it derives addresses without the seed
    (``receive``, ``address``, ``balance`` need no password); ``private`` (from
    :func:`account_key`) is needed for :meth:`secret`. Chain keys and addresses are cached.
    """

    key: bytes
    chain_code: bytes
    private: ExtendedKey | None = None
    _chains: dict[int, tuple[bytes, bytes]] = field(default_factory=dict, repr=False)
    _addresses: dict[tuple[int, int], Address] = field(default_factory=dict, repr=False)

    @classmethod
    def from_seed(cls, seed: bytes, network: str) -> "Account":
        private = account_key(seed, network)
        key, chain_code = private.public()
        return cls(key, chain_code, private)

    def _chain(self, chain: int) -> tuple[bytes, bytes]:
        if chain not in self._chains:
            self._chains[chain] = child_public(self.key, self.chain_code, chain)
        return self._chains[chain]

    def address(self, chain: int, index: int) -> Address:
        """The address at ``chain``/``index`` (``RECEIVE`` or ``CHANGE``)."""
        if (chain, index) not in self._addresses:
            key, _ = child_public(*self._chain(chain), index)
            self._addresses[chain, index] = address_from_pubkey(key[1:])  # x-only: drop parity
        return self._addresses[chain, index]

    def secret(self, chain: int, index: int) -> bytes:
        """The BIP340 secret key at ``chain``/``index``.

        Raises:
            WalletError: built without the private key.
        """
        if self.private is None:
            raise WalletError("this account was opened without its seed")
        return child_private(child_private(self.private, chain), index).key
