"""``dagchain-wallet``: an encrypted single-key keystore, balances, payments and a load generator.

Keystore (INTERFACES.md, docs/wallet.md): one JSON file, mode 0600, never overwritten. The
32-byte secret key is sealed with ChaCha20-Poly1305 under a key derived from the password by
scrypt (memory-hard; n = 2^15, r = 8, p = 1: 32 MiB and about 0.1 s). The address and network
are stored in clear so ``address`` needs no password, and they are the AEAD's associated data, so
editing them makes the file fail to open. This is the only module that imports ``cryptography``
(an import-linter contract).

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
from wallet import fees, loadgen
from wallet.coins import (
    NETWORKS,
    WalletError,
    address_of,
    api_error,
    build_payment,
    fetch_utxos,
    node_network,
    parse_address,
    select_coins,
)

__all__ = [
    "Keystore",
    "decode_keystore",
    "encode_keystore",
    "main",
    "read_keystore_header",
    "send_payment",
    "settle_payment",
    "write_new_wallet",
]

PASSWORD_ENV = "DAGCHAIN_WALLET_PASSWORD"
KEYSTORE_VERSION = 1
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
_AAD_TAG = b"dagchain-wallet-v1"
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


@dataclass(frozen=True, slots=True)
class Keystore:
    """What a keystore file says in clear: network and address."""

    network: str
    address: Address


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


def read_keystore_header(data: bytes) -> Keystore:
    """Network and address of a keystore, without the password.

    Raises:
        WalletError: not a dagchain wallet file.
    """
    doc = _parse(data)
    return Keystore(doc.network, Address(bytes.fromhex(doc.address)))


def _parse(data: bytes) -> _KeystoreFile:
    try:
        return _KeystoreFile.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "file"
        raise WalletError(f"not a dagchain wallet file ({where}: {first['msg']})") from None


def decode_keystore(data: bytes, password: str) -> bytes:
    """The secret key sealed in a keystore file.

    Raises:
        WalletError: not a wallet file, a wrong password, or a tampered file.
    """
    doc = _parse(data)
    key = _derive(password, bytes.fromhex(doc.kdf.salt), doc.kdf.n, doc.kdf.r, doc.kdf.p)
    address = bytes.fromhex(doc.address)
    try:
        secret = ChaCha20Poly1305(key).decrypt(
            bytes.fromhex(doc.cipher.nonce),
            bytes.fromhex(doc.ciphertext),
            _aad(doc.network, address),
        )
    except InvalidTag:
        raise WalletError("wrong password (or a damaged wallet file)") from None
    if address_of(secret) != address:  # pragma: no cover - the AEAD already binds the address
        raise WalletError("wallet file is damaged: key and address differ")
    return secret


def write_new_wallet(
    path: Path,
    password: str,
    network: str,
    scrypt: tuple[int, int, int] = (SCRYPT_N, SCRYPT_R, SCRYPT_P),
) -> Address:
    """Create a wallet with a fresh random key at ``path`` (mode 0600); never overwrites.

    Raises:
        WalletError: the file exists or cannot be written.
    """
    secret = os.urandom(32)
    data = encode_keystore(secret, password, network, scrypt=scrypt)
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
    return address_of(secret)


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


def _secret(args: argparse.Namespace) -> bytes:
    if args.devnet_faucet:
        return FAUCET_SECRET
    return decode_keystore(_read_wallet(args), _password(args))


async def _node_params(client: NodeApi, args: argparse.Namespace) -> ConsensusParams:
    params = await node_network(client)
    if args.devnet_faucet and params.network_id != NETWORKS["devnet"].network_id:
        raise WalletError(
            f"--devnet-faucet refused: node at {client.url} runs {params.network_id}, not devnet"
        )
    return params


# ------------------------------------------------------------------------------ commands


def cmd_new(args: argparse.Namespace) -> int:
    if args.devnet_faucet:
        raise WalletError("'new' makes a wallet file; drop --devnet-faucet")
    params = NETWORKS[args.network]
    password = _password(args, confirm=True)
    if not password:
        raise WalletError("empty password refused: the key would be sealed under a guessable key")
    address = write_new_wallet(Path(args.wallet), password, args.network)
    print(encode_address(params.hrp, address))
    return 0


def cmd_address(args: argparse.Namespace) -> int:
    if args.devnet_faucet:
        print(encode_address(NETWORKS["devnet"].hrp, address_of(FAUCET_SECRET)))
        return 0
    header = read_keystore_header(_read_wallet(args))
    network = args.network or header.network
    print(encode_address(NETWORKS[network].hrp, header.address))
    return 0


async def _balance(args: argparse.Namespace, address: Address) -> None:
    async with NodeApi(args.node) as client:
        params = await _node_params(client, args)
        text = encode_address(params.hrp, address)
        balance, pending, utxos = await fetch_utxos(client, text)
    print(f"address: {text}")
    print(f"balance: {balance}")
    print(f"pending_balance: {pending}")
    print(f"utxos: {len(utxos)}")


def cmd_balance(args: argparse.Namespace) -> int:
    if args.devnet_faucet:
        address = address_of(FAUCET_SECRET)
    else:
        address = read_keystore_header(_read_wallet(args)).address
    asyncio.run(_balance(args, address))
    return 0


async def send_payment(
    client: NodeApi,
    params: ConsensusParams,
    secret: bytes,
    to: Address,
    amount: int,
    fee: int,
    exclude: frozenset[tuple[bytes, int]] = frozenset(),
) -> Transaction:
    """Select coins (none of ``exclude``), sign, submit; returns the accepted tx.

    A 409 ``conflict`` (another spender of the same wallet won a coin) retries with other coins,
    at most ``SEND_ATTEMPTS`` times.

    Raises:
        WalletError: insufficient funds, an unreachable node, or a refusal (400/409/503).
    """
    if amount < 1 or fee < 0:
        raise WalletError("--amount must be at least 1 and --fee at least 0")
    _, _, utxos = await fetch_utxos(client, encode_address(params.hrp, address_of(secret)))
    busy: set[tuple[bytes, int]] = set(exclude)
    for _ in range(SEND_ATTEMPTS):
        free = [u for u in utxos if u.outpoint not in busy]
        chosen, change = select_coins(free, amount + fee, params.max_tx_inputs)
        tx = build_payment(params, secret, chosen, [(to, amount)], change)
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
    secret: bytes,
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
                    client, params, secret, to, amount, fee, exclude=frozenset(spent)
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


async def _send(args: argparse.Namespace, secret: bytes) -> str:
    async with NodeApi(args.node) as client:
        params = await _node_params(client, args)
        to = parse_address(params, args.to)
        fee = args.fee
        if fee == fees.AUTO:
            fee = await fees.auto_fee(client, params, secret, to, args.amount, _progress)
        tx = await send_payment(client, params, secret, to, args.amount, fee)
        if args.wait is None:
            return tx.txid.hex()
        _progress(f"submitted tx {tx.txid.hex()}; waiting up to {args.wait:g} s to confirm")
        payment = (to, args.amount, fee)
        tx = await settle_payment(client, params, secret, payment, tx, args.wait, _progress)
        return tx.txid.hex()


def cmd_send(args: argparse.Namespace) -> int:
    if args.wait is not None and args.wait <= 0:
        raise WalletError("--wait must be positive")
    secret = _secret(args)
    print(asyncio.run(_send(args, secret)))
    return 0


async def _load(args: argparse.Namespace, secret: bytes) -> loadgen.LoadReport:
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
        params = await _node_params(client, args)
        return await loadgen.run_load(client, params, secret, config, _progress)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_load(args: argparse.Namespace) -> int:
    if args.rate <= 0 or args.duration <= 0 or args.accounts < 1 or args.max_in_flight < 1:
        raise WalletError("--rate, --duration, --accounts and --max-in-flight must be positive")
    if not 1 <= args.batch <= TX_BATCH_MAX:
        raise WalletError(f"--batch must be 1..{TX_BATCH_MAX} (POST /v1/txs/batch takes that many)")
    secret = _secret(args)
    report = asyncio.run(_load(args, secret))
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
    new = sub.add_parser("new", help="create an encrypted wallet and print its address")
    new.add_argument("--network", choices=sorted(NETWORKS), default="devnet")
    new.set_defaults(run=cmd_new)
    addr = sub.add_parser("address", help="print the wallet's address")
    addr.add_argument("--network", choices=sorted(NETWORKS), help="display for this network")
    addr.set_defaults(run=cmd_address)
    bal = sub.add_parser("balance", help="confirmed and pending balance from a node")
    bal.add_argument("--node", required=True, help="node API URL, e.g. http://127.0.0.1:27708")
    bal.set_defaults(run=cmd_balance)
    send = sub.add_parser("send", help="pay ADDR; prints the txid")
    send.add_argument("--node", required=True)
    send.add_argument("--to", required=True, help="bech32m address")
    send.add_argument("--amount", type=int, required=True, help="units")
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
    load.add_argument("--max-in-flight", type=int, default=64, help="concurrent POST /v1/txs")
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
