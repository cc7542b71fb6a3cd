"""``dagchain-wallet``: an encrypted keystore (HD or one-key), balances, payments, a load generator.

Keystore (INTERFACES.md, docs/wallet.md): one JSON file, mode 0600. An HD wallet (version 2,
``new`` and ``restore``) seals its 64-byte BIP39 seed; a one-key wallet (version 1, the files of
earlier releases) seals a 32-byte secret key. Either is sealed with ChaCha20-Poly1305 under a
key derived from the password by scrypt (memory-hard; n = 2^15, r = 8, p = 1: 32 MiB and about
0.1 s). The network, the first address and (HD) the account's extended public key are stored in
clear, so ``address``, ``receive`` and ``balance`` need no password, and they are the AEAD's
associated data, so editing them makes the file fail to open. An HD file also holds in clear
the next unused receive and change indices; ``receive`` and ``send`` rewrite it atomically
(a new file renamed over the old) to advance them. ``new`` and ``restore`` never overwrite a
file. This is the only module that imports ``cryptography`` (an import-linter contract).

``--devnet-faucet`` uses the documented devnet genesis key (secret key 1, PROTOCOL.md §10) as the
wallet and refuses any node whose ``/v1/status`` network is not devnet.
"""

import argparse
import asyncio
import getpass
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apiclient import ApiError, NodeApi, NodeUnreachable
from apiclient.models import TX_BATCH_MAX
from dagchain.crypto import encode_address
from dagchain.genesis import FAUCET_SECRET
from dagchain.params import ConsensusParams
from dagchain.transactions import Transaction
from dagchain.types import Address
from wallet import fees, hd, loadgen
from wallet.coins import (
    FETCH_CONCURRENCY,
    NETWORKS,
    Keys,
    Utxo,
    WalletError,
    address_of,
    api_error,
    as_keys,
    build_spend,
    fetch_utxos,
    fetch_wallet_utxos,
    node_network,
    parse_address,
    select_coins,
)

__all__ = [
    "Keystore",
    "decode_keystore",
    "encode_hd_keystore",
    "encode_keystore",
    "main",
    "read_keystore_header",
    "send_payment",
    "settle_payment",
    "write_hd_wallet",
    "write_new_wallet",
]

PASSWORD_ENV = "DAGCHAIN_WALLET_PASSWORD"
KEYSTORE_VERSION = 1
"""A one-key wallet: one sealed secret key."""
HD_KEYSTORE_VERSION = 2
"""An HD wallet: the sealed BIP39 seed and the account's extended public key."""
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
_AAD_TAG = b"dagchain-wallet-v1"
_HD_AAD_TAG = b"dagchain-wallet-v2"
DEFAULT_GAP_LIMIT = 1000
"""``restore``: stop scanning a chain after this many addresses in a row without coins. The
node's ``GET /v1/addresses`` shows unspent outputs only, so a spent address looks unused, and a
wallet that made P payments from one coin has about P spent change addresses before its change
(docs/wallet.md, "Restore")."""
SEND_ATTEMPTS = 8
"""A shared wallet (the faucet) may lose a race for a UTXO: retry with other coins (bounded)."""
TRACK_POLL_S = 0.5
"""``send --wait``: how often ``GET /v1/txs/{txid}`` is asked."""
REPAY_ATTEMPTS = 4
"""``send --wait``: at most this many replacement payments for txs that became invalid."""


# ------------------------------------------------------------------------------ keystore


class _Kdf(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["scrypt"]
    n: int = Field(ge=2, le=2**20)
    r: int = Field(ge=1, le=32)
    p: int = Field(ge=1, le=16)
    salt: str = Field(pattern=r"^[0-9a-f]{32,128}$")


class _Cipher(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["chacha20-poly1305"]
    nonce: str = Field(pattern=r"^[0-9a-f]{24}$")


class _KeystoreFile(BaseModel):
    """The file format (an edge: validated with pydantic, STYLE.md rule 13)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dagchain_wallet: Literal[1]
    network: Literal["mainnet", "testnet", "devnet"]
    address: str = Field(pattern=r"^[0-9a-f]{64}$")
    kdf: _Kdf
    cipher: _Cipher
    ciphertext: str = Field(pattern=r"^[0-9a-f]{96}$")  # 32-byte key + 16-byte tag


class _Xpub(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    key: str = Field(pattern=r"^0[23][0-9a-f]{64}$")
    chain_code: str = Field(pattern=r"^[0-9a-f]{64}$")


class _HdKeystoreFile(BaseModel):
    """An HD wallet file (version 2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dagchain_wallet: Literal[2]
    network: Literal["mainnet", "testnet", "devnet"]
    address: str = Field(pattern=r"^[0-9a-f]{64}$")  # the first receive address
    path: str
    xpub: _Xpub
    next_receive: int = Field(ge=1, lt=2**31)
    next_change: int = Field(ge=0, lt=2**31)
    kdf: _Kdf
    cipher: _Cipher
    ciphertext: str = Field(pattern=r"^[0-9a-f]{160}$")  # 64-byte seed + 16-byte tag


@dataclass(frozen=True, slots=True)
class Keystore:
    """What a keystore file says in clear: network, first address and (HD) its account."""

    network: str
    address: Address
    account: hd.Account | None = None
    """None for a one-key wallet."""
    next_receive: int = 1
    next_change: int = 0

    @property
    def is_hd(self) -> bool:
        """An HD wallet (else a one-key wallet)."""
        return self.account is not None

    def addresses(self) -> list[Address]:
        """Every address handed out: receive 0..next_receive-1, change 0..next_change-1."""
        if self.account is None:
            return [self.address]
        return [
            *(self.account.address(hd.RECEIVE, i) for i in range(self.next_receive)),
            *(self.account.address(hd.CHANGE, i) for i in range(self.next_change)),
        ]


def _derive(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(password.encode("utf-8"))


def _aad(network: str, address: bytes) -> bytes:
    return _AAD_TAG + bytes([len(network)]) + network.encode("ascii") + address


def encode_keystore(
    secret: bytes,
    password: str,
    network: str,
    *,
    scrypt: tuple[int, int, int] = (SCRYPT_N, SCRYPT_R, SCRYPT_P),
    salt: bytes | None = None,
    nonce: bytes | None = None,
) -> bytes:
    """The keystore file bytes for ``secret`` (fresh random salt and nonce unless given).

    ``scrypt`` is (n, r, p); tests pass a cheap one, the CLI always uses the default.
    """
    n, r, p = scrypt
    if len(secret) != 32:
        raise ValueError("a secret key is 32 bytes")
    salt = os.urandom(16) if salt is None else salt
    nonce = os.urandom(12) if nonce is None else nonce
    address = address_of(secret)
    sealed = ChaCha20Poly1305(_derive(password, salt, n, r, p)).encrypt(
        nonce, secret, _aad(network, address)
    )
    doc = {
        "dagchain_wallet": KEYSTORE_VERSION,
        "network": network,
        "address": address.hex(),
        "kdf": {"name": "scrypt", "n": n, "r": r, "p": p, "salt": salt.hex()},
        "cipher": {"name": "chacha20-poly1305", "nonce": nonce.hex()},
        "ciphertext": sealed.hex(),
    }
    return (json.dumps(doc, indent=2) + "\n").encode()


def _hd_aad(network: str, key: bytes, chain_code: bytes) -> bytes:
    return _HD_AAD_TAG + bytes([len(network)]) + network.encode("ascii") + key + chain_code


def encode_hd_keystore(
    seed: bytes,
    password: str,
    network: str,
    *,
    next_receive: int = 1,
    next_change: int = 0,
    scrypt: tuple[int, int, int] = (SCRYPT_N, SCRYPT_R, SCRYPT_P),
    salt: bytes | None = None,
    nonce: bytes | None = None,
) -> bytes:
    """The HD keystore file bytes for a 64-byte BIP39 ``seed`` (as :func:`encode_keystore`)."""
    n, r, p = scrypt
    if len(seed) != 64:
        raise ValueError("a BIP39 seed is 64 bytes")
    salt = os.urandom(16) if salt is None else salt
    nonce = os.urandom(12) if nonce is None else nonce
    account = hd.Account.from_seed(seed, network)
    sealed = ChaCha20Poly1305(_derive(password, salt, n, r, p)).encrypt(
        nonce, seed, _hd_aad(network, account.key, account.chain_code)
    )
    doc = {
        "dagchain_wallet": HD_KEYSTORE_VERSION,
        "network": network,
        "address": account.address(hd.RECEIVE, 0).hex(),
        "path": hd.account_path(network),
        "xpub": {"key": account.key.hex(), "chain_code": account.chain_code.hex()},
        "next_receive": next_receive,
        "next_change": next_change,
        "kdf": {"name": "scrypt", "n": n, "r": r, "p": p, "salt": salt.hex()},
        "cipher": {"name": "chacha20-poly1305", "nonce": nonce.hex()},
        "ciphertext": sealed.hex(),
    }
    return (json.dumps(doc, indent=2) + "\n").encode()


def read_keystore_header(data: bytes) -> Keystore:
    """Network, first address and (HD) account of a keystore, without the password.

    Raises:
        WalletError: not a dagchain wallet file, or an HD file whose address and extended public
            key differ.
    """
    doc = _parse(data)
    address = Address(bytes.fromhex(doc.address))
    if isinstance(doc, _KeystoreFile):
        return Keystore(doc.network, address)
    if doc.path != hd.account_path(doc.network):
        raise WalletError(f"wallet file is damaged: path {doc.path!r} is not this network's")
    account = hd.Account(bytes.fromhex(doc.xpub.key), bytes.fromhex(doc.xpub.chain_code))
    try:
        first = account.address(hd.RECEIVE, 0)
    except ValueError:
        raise WalletError("wallet file is damaged: xpub.key is not a public key") from None
    if first != address:
        raise WalletError("wallet file is damaged: address and xpub differ")
    return Keystore(doc.network, address, account, doc.next_receive, doc.next_change)


def _parse(data: bytes) -> _KeystoreFile | _HdKeystoreFile:
    try:
        version = json.loads(data).get("dagchain_wallet")
    except (ValueError, AttributeError):
        version = None
    model: type[_KeystoreFile] | type[_HdKeystoreFile]
    model = _HdKeystoreFile if version == HD_KEYSTORE_VERSION else _KeystoreFile
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "file"
        raise WalletError(f"not a dagchain wallet file ({where}: {first['msg']})") from None


def decode_keystore(data: bytes, password: str) -> bytes:
    """What a keystore file seals: the secret key (one-key) or the 64-byte BIP39 seed (HD).

    Raises:
        WalletError: not a wallet file, a wrong password, or a tampered file.
    """
    header = read_keystore_header(data)
    doc = _parse(data)
    key = _derive(password, bytes.fromhex(doc.kdf.salt), doc.kdf.n, doc.kdf.r, doc.kdf.p)
    if header.account is None:
        aad = _aad(doc.network, header.address)
    else:
        aad = _hd_aad(doc.network, header.account.key, header.account.chain_code)
    try:
        sealed = ChaCha20Poly1305(key).decrypt(
            bytes.fromhex(doc.cipher.nonce), bytes.fromhex(doc.ciphertext), aad
        )
    except InvalidTag:
        raise WalletError("wrong password (or a damaged wallet file)") from None
    if header.account is None and address_of(sealed) != header.address:  # pragma: no cover
        raise WalletError("wallet file is damaged: key and address differ")
    if header.account is not None:
        opened = hd.Account.from_seed(sealed, doc.network)
        if opened.key != header.account.key:  # pragma: no cover
            raise WalletError("wallet file is damaged: seed and xpub differ")
    return sealed


def with_indices(data: bytes, next_receive: int, next_change: int) -> bytes:
    """An HD keystore's bytes with new next-unused indices (they are not sealed)."""
    doc = json.loads(data)
    doc["next_receive"], doc["next_change"] = next_receive, next_change
    return (json.dumps(doc, indent=2) + "\n").encode()


def write_new_wallet(
    path: Path,
    password: str,
    network: str,
    scrypt: tuple[int, int, int] = (SCRYPT_N, SCRYPT_R, SCRYPT_P),
) -> Address:
    """Create a one-key wallet with a fresh random key at ``path`` (mode 0600); never
    overwrites. ``new`` makes HD wallets (:func:`write_hd_wallet`); this stays for tests and
    tools that want a single key.

    Raises:
        WalletError: the file exists or cannot be written.
    """
    secret = os.urandom(32)
    _create(path, encode_keystore(secret, password, network, scrypt=scrypt))
    return address_of(secret)


def write_hd_wallet(
    path: Path,
    password: str,
    network: str,
    mnemonic: str,
    *,
    next_receive: int = 1,
    next_change: int = 0,
    scrypt: tuple[int, int, int] = (SCRYPT_N, SCRYPT_R, SCRYPT_P),
) -> Keystore:
    """Create an HD wallet for ``mnemonic`` at ``path`` (mode 0600); never overwrites.

    Raises:
        WalletError: a bad mnemonic, or the file exists or cannot be written.
    """
    seed = hd.seed_of(mnemonic)
    data = encode_hd_keystore(
        seed, password, network, next_receive=next_receive, next_change=next_change, scrypt=scrypt
    )
    _create(path, data)
    return read_keystore_header(data)


def _create(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise WalletError(f"wallet {path} already exists; refusing to overwrite it") from None
    except OSError as exc:
        raise WalletError(f"cannot create wallet {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def replace_wallet(path: Path, data: bytes) -> None:
    """Write ``data`` over the wallet at ``path`` atomically: a new file (mode 0600), synced,
    renamed over the old one; the directory is synced too.

    Raises:
        WalletError: the file cannot be written.
    """
    tmp = path.with_name(f".{path.name}.new")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dirfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
    except OSError as exc:
        raise WalletError(f"cannot update wallet {path}: {exc.strerror}") from None


# ------------------------------------------------------------------------------ CLI plumbing


def default_wallet_path() -> Path:
    """``~/.dagchain/wallet.json``."""
    return Path.home() / ".dagchain" / "wallet.json"


def _password(args: argparse.Namespace, confirm: bool = False) -> str:
    if args.password_file is not None:
        try:
            text = Path(args.password_file).read_text(encoding="utf-8")
        except OSError as exc:
            msg = f"cannot read password file {args.password_file}: {exc.strerror}"
            raise WalletError(msg) from None
        return text.rstrip("\r\n")
    env = os.environ.get(PASSWORD_ENV)
    if env is not None:
        return env
    if not sys.stdin.isatty():
        raise WalletError(f"no password: use --password-file FILE or set {PASSWORD_ENV}")
    first = getpass.getpass("Wallet password: ")
    if confirm and getpass.getpass("Repeat password: ") != first:
        raise WalletError("the two passwords differ")
    return first


def _read_wallet(args: argparse.Namespace) -> bytes:
    path = Path(args.wallet)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise WalletError(f"no wallet at {path}; create one with 'dagchain-wallet new'") from None
    except OSError as exc:
        raise WalletError(f"cannot read wallet {path}: {exc.strerror}") from None


def _secret(args: argparse.Namespace) -> tuple[bytes, str]:
    """The one key ``load`` spends from (the faucet's, a one-key wallet's, or an HD wallet's
    first receive key) and the wallet's network."""
    if args.devnet_faucet:
        return FAUCET_SECRET, "devnet"
    data = _read_wallet(args)
    header = read_keystore_header(data)
    sealed = decode_keystore(data, _password(args))
    if header.account is None:
        return sealed, header.network
    return hd.Account.from_seed(sealed, header.network).secret(hd.RECEIVE, 0), header.network


async def _node_params(client: NodeApi, args: argparse.Namespace, network: str) -> ConsensusParams:
    """The node's network parameters; refused when they are not the wallet's ``network``."""
    params = await node_network(client)
    if args.devnet_faucet and params.network_id != NETWORKS["devnet"].network_id:
        raise WalletError(
            f"--devnet-faucet refused: node at {client.url} runs {params.network_id}, not devnet"
        )
    if params is not NETWORKS[network]:
        raise WalletError(
            f"wallet {args.wallet} is for {network}, but the node at {client.url} runs "
            f"{_network_name(params)}"
        )
    return params


def _network_name(params: ConsensusParams) -> str:
    """The name ``NETWORKS`` knows ``params`` by (as ``GET /v1/status`` reports it)."""
    return next(name for name, p in NETWORKS.items() if p is params)


def _amount(text: str) -> int:
    """``--amount``: a whole number of units, at least 1 (an argparse type: a bad value is a
    usage error, exit 2, before any request)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of units, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("an amount is at least 1 unit")
    return value


def _hrp(network: str, address: Address) -> str:
    return encode_address(NETWORKS[network].hrp, address)


# ------------------------------------------------------------------------------ commands


def _refuse_faucet(args: argparse.Namespace, command: str) -> None:
    if args.devnet_faucet:
        raise WalletError(f"'{command}' works on a wallet file; drop --devnet-faucet")


def _refuse_existing(path: Path) -> None:
    if path.exists():
        raise WalletError(f"wallet {path} already exists; refusing to overwrite it")


def cmd_new(args: argparse.Namespace) -> int:
    _refuse_faucet(args, "new")
    path = Path(args.wallet)
    _refuse_existing(path)
    password = _password(args, confirm=True)
    if not password:
        raise WalletError("empty password refused: the key would be sealed under a guessable key")
    mnemonic = hd.new_mnemonic(args.words)
    keystore = write_hd_wallet(path, password, args.network, mnemonic)
    print(_hrp(args.network, keystore.address))
    print(mnemonic, flush=True)
    _progress(
        f"the line above is the wallet's {args.words}-word recovery phrase, shown only this "
        "once: write it down; 'dagchain-wallet restore' rebuilds the wallet from it"
    )
    return 0


def _read_mnemonic() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("Mnemonic (12 or 24 words): ")
    return sys.stdin.readline()


async def scan_chain(
    client: NodeApi,
    params: ConsensusParams,
    account: hd.Account,
    chain: int,
    gap_limit: int,
) -> tuple[int, list[Utxo]]:
    """Find the used addresses of one chain: ask ``GET /v1/addresses`` for indices 0, 1, ...
    (``FETCH_CONCURRENCY`` requests in flight) until ``gap_limit`` in a row hold no coins.

    An address is used when the node shows a coin for it, confirmed or in its pool (the
    endpoint shows no spent outputs, so an address whose coins were all spent looks unused).

    Returns:
        The next unused index (one past the last used one) and the coins found.

    Raises:
        WalletError: unreachable node or a refusal.
    """
    gate = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def one(address: Address) -> tuple[int, int, list[Utxo]]:
        async with gate:
            return await fetch_utxos(client, encode_address(params.hrp, address))

    next_unused = 0
    scanned = 0
    found: list[Utxo] = []
    while scanned < next_unused + gap_limit:
        batch = [account.address(chain, i) for i in range(scanned, next_unused + gap_limit)]
        answers = await asyncio.gather(*(one(address) for address in batch))
        for offset, (address, (_, pending, utxos)) in enumerate(zip(batch, answers, strict=True)):
            if utxos or pending:
                next_unused = scanned + offset + 1
            found += [Utxo(u.txid, u.index, u.amount, u.confirmations, address) for u in utxos]
        scanned += len(batch)
    return next_unused, found


def cmd_restore(args: argparse.Namespace) -> int:
    _refuse_faucet(args, "restore")
    if args.gap_limit < 1:
        raise WalletError("--gap-limit must be at least 1")
    path = Path(args.wallet)
    _refuse_existing(path)
    mnemonic = hd.normalize_mnemonic(_read_mnemonic())
    password = _password(args, confirm=True)
    if not password:
        raise WalletError("empty password refused: the key would be sealed under a guessable key")
    seed = hd.seed_of(mnemonic)
    network = args.network or "devnet"
    next_receive, next_change = 1, 0
    coins: list[Utxo] = []
    if args.node is not None:
        network, next_receive, next_change, coins = asyncio.run(_restore_scan(args, seed))
    keystore = write_hd_wallet(
        path, password, network, mnemonic, next_receive=next_receive, next_change=next_change
    )
    print(_hrp(network, keystore.address))
    if args.node is not None:
        print(f"receive_addresses: {next_receive}")
        print(f"change_addresses: {next_change}")
        print(f"utxos: {len(coins)}")
        print(f"balance: {sum(u.amount for u in coins if u.confirmations >= 1)}")
    return 0


async def _restore_scan(args: argparse.Namespace, seed: bytes) -> tuple[str, int, int, list[Utxo]]:
    async with NodeApi(args.node, connections=FETCH_CONCURRENCY + 2) as client:
        params = await node_network(client)
        network = _network_name(params)
        if args.network is not None and args.network != network:
            raise WalletError(
                f"--network {args.network}, but the node at {args.node} runs {network}"
            )
        account = hd.Account.from_seed(seed, network)
        used_receive, receive = await scan_chain(
            client, params, account, hd.RECEIVE, args.gap_limit
        )
        used_change, change = await scan_chain(client, params, account, hd.CHANGE, args.gap_limit)
    return network, max(1, used_receive), used_change, receive + change


def cmd_receive(args: argparse.Namespace) -> int:
    _refuse_faucet(args, "receive")
    data = _read_wallet(args)
    header = read_keystore_header(data)
    if header.account is None:
        raise WalletError(
            "a one-key wallet has one address ('dagchain-wallet address'); "
            "make an HD wallet with 'dagchain-wallet new' for fresh addresses"
        )
    index = header.next_receive
    address = header.account.address(hd.RECEIVE, index)
    replace_wallet(Path(args.wallet), with_indices(data, index + 1, header.next_change))
    print(_hrp(header.network, address))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    if args.devnet_faucet:
        print("wallet: devnet faucet (one-key wallet)")
        print(f"address: {_hrp('devnet', address_of(FAUCET_SECRET))}")
        return 0
    header = read_keystore_header(_read_wallet(args))
    if header.account is None:
        print("wallet: one-key wallet")
    else:
        print("wallet: hd")
        print(f"path: {hd.account_path(header.network)}")
        print(f"next_receive: {header.next_receive}")
        print(f"next_change: {header.next_change}")
    print(f"network: {header.network}")
    print(f"address: {_hrp(header.network, header.address)}")
    return 0


def cmd_address(args: argparse.Namespace) -> int:
    if args.devnet_faucet:
        print(encode_address(NETWORKS["devnet"].hrp, address_of(FAUCET_SECRET)))
        return 0
    header = read_keystore_header(_read_wallet(args))
    network = args.network or header.network
    print(encode_address(NETWORKS[network].hrp, header.address))
    return 0


async def _balance(args: argparse.Namespace, keystore: Keystore, kind: str) -> None:
    async with NodeApi(args.node) as client:
        params = await _node_params(client, args, keystore.network)
        addresses = keystore.addresses()
        balance, pending, utxos = await fetch_wallet_utxos(client, params, addresses)
    print(f"wallet: {kind}")
    print(f"address: {encode_address(params.hrp, keystore.address)}")
    print(f"balance: {balance}")
    print(f"pending_balance: {pending}")
    print(f"utxos: {len(utxos)}")
    print(f"addresses: {len(addresses)}")


def cmd_balance(args: argparse.Namespace) -> int:
    if args.devnet_faucet:
        keystore, kind = Keystore("devnet", address_of(FAUCET_SECRET)), "one-key wallet"
    else:
        keystore = read_keystore_header(_read_wallet(args))
        kind = "hd" if keystore.is_hd else "one-key wallet"
    asyncio.run(_balance(args, keystore, kind))
    return 0


async def send_payment(
    client: NodeApi,
    params: ConsensusParams,
    spender: Keys | bytes,
    to: Address,
    amount: int,
    fee: int,
    exclude: frozenset[tuple[bytes, int]] = frozenset(),
) -> Transaction:
    """Select coins (none of ``exclude``) from every address of ``spender`` (a bare secret key:
    a one-key wallet), sign each input with its address's key, submit; returns the accepted tx.
    The change goes to ``spender.change``.

    A 409 ``conflict`` (another spender of the same wallet won a coin) retries with other coins,
    at most ``SEND_ATTEMPTS`` times.

    Raises:
        WalletError: insufficient funds, an unreachable node, or a refusal (400/409/503).
    """
    if amount < 1 or fee < 0:
        raise WalletError("--amount must be at least 1 and --fee at least 0")
    keys = as_keys(spender)
    _, _, utxos = await fetch_wallet_utxos(client, params, list(keys.secrets))
    busy: set[tuple[bytes, int]] = set(exclude)
    for _ in range(SEND_ATTEMPTS):
        free = [u for u in utxos if u.outpoint not in busy]
        chosen, change = select_coins(free, amount + fee, params.max_tx_inputs)
        tx = build_spend(params, keys, chosen, [(to, amount)], change)
        try:
            await client.submit_tx(tx.raw)
        except NodeUnreachable as exc:
            raise api_error(exc) from None
        except ApiError as exc:
            if exc.status == 409 and exc.code == "conflict":
                busy.update(u.outpoint for u in chosen)
                continue
            raise WalletError(_refusal(exc.status, exc.code, exc.message)) from None
        return tx
    raise WalletError(f"every coin tried is already being spent by pending txs ({len(busy)})")


async def settle_payment(
    client: NodeApi,
    params: ConsensusParams,
    spender: Keys | bytes,
    payment: tuple[Address, int, int],
    tx: Transaction,
    timeout_s: float,
    say: Callable[[str], None],
) -> Transaction:
    """Follow a submitted payment (``GET /v1/txs/{txid}``) until it is confirmed.

    A tx the node no longer knows (``unknown``: dropped from its pool, e.g. by a restart) is
    resubmitted as it is; if its inputs are no longer spendable (409), or it became ``invalid``
    (a conflicting spend was ordered first), the payment is made again from other coins, at most
    ``REPAY_ATTEMPTS`` times. Each step is one line through ``say``. An unreachable node (a
    restart) is asked again until the deadline.

    Returns:
        The tx that confirmed (``tx`` or its replacement).

    Raises:
        WalletError: no confirmation within ``timeout_s``, or a refusal of a replacement.
    """
    to, amount, fee = payment
    deadline = time.monotonic() + timeout_s
    spent: set[tuple[bytes, int]] = set()
    repaid = 0
    state = "unsent"
    while time.monotonic() < deadline:
        txid = tx.txid.hex()
        try:
            answer = await client.tx(txid)
            state, reason = answer.status, answer.reason
            if state == "confirmed":
                say(f"tx {txid} confirmed at milestone height {answer.milestone_height}")
                return tx
            lost = state == "invalid"
            if state == "unknown":
                try:
                    await client.submit_tx(tx.raw)
                    say(f"tx {txid} is unknown to the node (dropped from its pool): resubmitted")
                except NodeUnreachable:
                    raise
                except ApiError as exc:
                    if exc.status != 409:
                        raise WalletError(_refusal(exc.status, exc.code, exc.message)) from None
                    if (await client.tx(txid)).status == "confirmed":
                        continue  # it confirmed between the two calls
                    lost, reason = True, f"409 {exc.code}"
            if lost:
                if repaid >= REPAY_ATTEMPTS:
                    raise WalletError(f"tx {txid} {state}; gave up after {repaid} replacements")
                repaid += 1
                spent.update((i.txid, i.out_index) for i in tx.inputs)
                tx = await send_payment(
                    client, params, spender, to, amount, fee, exclude=frozenset(spent)
                )
                say(
                    f"tx {txid} can no longer confirm ({reason}): its coins were spent; "
                    f"paid again from other coins as tx {tx.txid.hex()}"
                )
        except NodeUnreachable as exc:
            if state != "unreachable":  # one line per outage
                say(f"node unreachable ({exc.message}); asking again until it answers")
            state = "unreachable"
        await asyncio.sleep(min(TRACK_POLL_S, max(0.0, deadline - time.monotonic())))
    raise WalletError(
        f"tx {tx.txid.hex()} not confirmed within {timeout_s:g} s (last status: {state})"
    )


def _refusal(status: int, code: str, message: str) -> str:
    if status == 409:
        return f"node refused the transaction (409 {code}): {message}"
    if status == 503:
        return f"node's mempool is full (503): {message}; retry later or raise --fee"
    return f"node refused the transaction ({status} {code}): {message}"


async def _send(args: argparse.Namespace, keys: Keys, network: str) -> Transaction:
    async with NodeApi(args.node) as client:
        params = await _node_params(client, args, network)
        to = parse_address(params, args.to)
        fee = args.fee
        if fee == fees.AUTO:
            fee = await fees.auto_fee(client, params, keys, to, args.amount, _progress)
        tx = await send_payment(client, params, keys, to, args.amount, fee)
        if args.wait is None:
            return tx
        _progress(f"submitted tx {tx.txid.hex()}; waiting up to {args.wait:g} s to confirm")
        payment = (to, args.amount, fee)
        return await settle_payment(client, params, keys, payment, tx, args.wait, _progress)


def _hd_keys(keystore: Keystore, seed: bytes) -> Keys:
    """Every handed-out address's key, and the next unused change address for the change."""
    account = hd.Account.from_seed(seed, keystore.network)
    secrets = {
        account.address(chain, i): account.secret(chain, i)
        for chain, count in ((hd.RECEIVE, keystore.next_receive), (hd.CHANGE, keystore.next_change))
        for i in range(count)
    }
    return Keys(secrets, account.address(hd.CHANGE, keystore.next_change))


def cmd_send(args: argparse.Namespace) -> int:
    if args.wait is not None and args.wait <= 0:
        raise WalletError("--wait must be positive")
    # ``--to`` is read against the wallet's own network first: a typo is named before the
    # node is asked (an unreachable one would hide it) and before the password is.
    if args.devnet_faucet:
        parse_address(NETWORKS["devnet"], args.to)
        print(asyncio.run(_send(args, Keys.single(FAUCET_SECRET), "devnet")).txid.hex())
        return 0
    data = _read_wallet(args)
    keystore = read_keystore_header(data)
    parse_address(NETWORKS[keystore.network], args.to)
    sealed = decode_keystore(data, _password(args))
    if keystore.account is None:
        print(asyncio.run(_send(args, Keys.single(sealed), keystore.network)).txid.hex())
        return 0
    keys = _hd_keys(keystore, sealed)
    tx = asyncio.run(_send(args, keys, keystore.network))
    if any(out.address == keys.change for out in tx.outputs):  # the change address is used now
        bumped = with_indices(data, keystore.next_receive, keystore.next_change + 1)
        replace_wallet(Path(args.wallet), bumped)
    print(tx.txid.hex())
    return 0


async def _load(args: argparse.Namespace, secret: bytes, network: str) -> loadgen.LoadReport:
    config = loadgen.LoadConfig(
        rate=args.rate,
        duration_s=args.duration,
        accounts=args.accounts,
        max_in_flight=args.max_in_flight,
        batch=args.batch,
        fee=args.fee if args.fee is not None else loadgen.DEFAULT_LOAD_FEE,
        confirm_timeout_s=args.confirm_timeout,
    )
    async with NodeApi(args.node, connections=args.max_in_flight + 8) as client:
        params = await _node_params(client, args, network)
        return await loadgen.run_load(client, params, secret, config, _progress)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_load(args: argparse.Namespace) -> int:
    if args.rate <= 0 or args.duration <= 0 or args.accounts < 1 or args.max_in_flight < 1:
        raise WalletError("--rate, --duration, --accounts and --max-in-flight must be positive")
    if not 1 <= args.batch <= TX_BATCH_MAX:
        raise WalletError(f"--batch must be 1..{TX_BATCH_MAX} (POST /v1/txs/batch takes that many)")
    secret, network = _secret(args)
    report = asyncio.run(_load(args, secret, network))
    if args.report is not None:
        Path(args.report).write_text(json.dumps(report.to_json(), indent=1) + "\n")
    for line in report.summary_lines():
        print(line)
    return 0


# ------------------------------------------------------------------------------ argparse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dagchain-wallet", description="dagchain wallet: keys, balances, payments, load."
    )
    parser.add_argument("--wallet", default=str(default_wallet_path()), help="keystore file")
    parser.add_argument("--password-file", help=f"file holding the password (or {PASSWORD_ENV})")
    parser.add_argument(
        "--devnet-faucet",
        action="store_true",
        help="use the documented devnet genesis key (secret key 1) as the wallet; devnet only",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    new = sub.add_parser(
        "new", help="create an encrypted HD wallet; print its first address and, once, its mnemonic"
    )
    new.add_argument("--network", choices=sorted(NETWORKS), default="devnet")
    new.add_argument(
        "--words", type=int, choices=hd.WORD_COUNTS, default=12, help="mnemonic length"
    )
    new.set_defaults(run=cmd_new)
    restore = sub.add_parser(
        "restore", help="rebuild an HD wallet from its mnemonic (read from standard input)"
    )
    restore.add_argument(
        "--node", help="find the used addresses and their coins through this node's API"
    )
    restore.add_argument(
        "--network",
        choices=sorted(NETWORKS),
        help="the wallet's network (default: the node's, or devnet without --node)",
    )
    restore.add_argument(
        "--gap-limit",
        type=int,
        default=DEFAULT_GAP_LIMIT,
        help="stop scanning a chain after N addresses in a row without coins "
        f"(default {DEFAULT_GAP_LIMIT}; a spent address looks unused to the node)",
    )
    restore.set_defaults(run=cmd_restore)
    receive = sub.add_parser("receive", help="print a fresh receive address (HD wallets)")
    receive.set_defaults(run=cmd_receive)
    addr = sub.add_parser("address", help="print the wallet's first address")
    addr.add_argument("--network", choices=sorted(NETWORKS), help="display for this network")
    addr.set_defaults(run=cmd_address)
    info = sub.add_parser("info", help="the wallet's kind (HD or one-key), network and indices")
    info.set_defaults(run=cmd_info)
    bal = sub.add_parser("balance", help="confirmed and pending balance of every address")
    bal.add_argument("--node", required=True, help="node API URL, e.g. http://127.0.0.1:27708")
    bal.set_defaults(run=cmd_balance)
    send = sub.add_parser("send", help="pay ADDR; prints the txid")
    send.add_argument("--node", required=True)
    send.add_argument("--to", required=True, help="bech32m address")
    send.add_argument("--amount", type=_amount, required=True, help="units, at least 1")
    send.add_argument(
        "--fee",
        type=fees.parse_fee,
        default=fees.AUTO,
        help="units, or 'auto' (default): the node's fee per byte for 3 milestones (GET /v1/fees) "
        "x the tx's size",
    )
    send.add_argument(
        "--wait",
        type=float,
        metavar="S",
        help="follow the tx until it is confirmed (at most S seconds): resubmit it if the node "
        "drops it, pay again from other coins if it can no longer confirm; print the final txid",
    )
    send.set_defaults(run=cmd_send)
    load = sub.add_parser("load", help="fund N accounts, send at RATE tx/s, report TPS")
    load.add_argument("--node", required=True)
    load.add_argument("--rate", type=float, required=True, help="offered txs per second")
    load.add_argument("--duration", type=float, required=True, help="seconds of sending")
    load.add_argument("--accounts", type=int, default=16)
    load.add_argument(
        "--max-in-flight",
        type=int,
        default=64,
        help="concurrent POST /v1/txs; with --batch B, about this many txs: "
        "max(2, ceil(N / B)) batch requests",
    )
    load.add_argument(
        "--batch",
        type=int,
        default=loadgen.DEFAULT_BATCH,
        help="txs per request: 1 posts each to /v1/txs, more uses POST /v1/txs/batch (1..1000; "
        f"default {loadgen.DEFAULT_BATCH})",
    )
    load.add_argument("--fee", type=int, help=f"units per tx (default {loadgen.DEFAULT_LOAD_FEE})")
    load.add_argument(
        "--confirm-timeout", type=float, default=60.0, help="seconds to wait for confirmations"
    )
    load.add_argument("--report", help="write every tx and count as JSON to this file")
    load.set_defaults(run=cmd_load)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: exit 0 on success, 2 with one line on stderr on a user error."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except WalletError as exc:
        print(f"dagchain-wallet: error: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"dagchain-wallet: error: {api_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dagchain-wallet: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
