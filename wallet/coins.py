"""Coins and payments: coin selection, signed transfers, and the wallet's reads of a node.

Pure parts (``select_coins``, ``build_payment``) take plain values and are tested without a
node; ``node_network`` and ``fetch_utxos`` read the node through :class:`apiclient.NodeApi`.
Keys never leave this process: txs are signed here (BIP340 with fresh ``os.urandom`` aux
randomness) and only their canonical bytes go to the node.
"""

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from apiclient import ApiError, NodeApi, NodeUnreachable
from dagchain.crypto import address_from_pubkey, decode_address, encode_address, xonly_pubkey
from dagchain.errors import EncodingError
from dagchain.params import DEVNET, MAINNET, TESTNET, ConsensusParams
from dagchain.transactions import Transaction, TxKind, TxOut, sign_transaction
from dagchain.types import Address, TxId

__all__ = [
    "NETWORKS",
    "Keys",
    "Utxo",
    "WalletError",
    "address_of",
    "api_error",
    "as_keys",
    "build_payment",
    "build_spend",
    "fetch_utxos",
    "fetch_wallet_utxos",
    "node_network",
    "parse_address",
    "select_coins",
]

NETWORKS: dict[str, ConsensusParams] = {"mainnet": MAINNET, "testnet": TESTNET, "devnet": DEVNET}


class WalletError(Exception):
    """A failure the user can act on; the CLI prints it as one line and exits 2."""


@dataclass(frozen=True, slots=True)
class Utxo:
    """A spendable output: outpoint, amount in units and confirmations."""

    txid: TxId
    index: int
    amount: int
    confirmations: int = 1
    address: Address | None = None
    """The wallet address it pays (None: the wallet's only one)."""

    @property
    def outpoint(self) -> tuple[TxId, int]:
        """(txid, index)."""
        return self.txid, self.index


def address_of(secret: bytes) -> Address:
    """E8 address of a secret key."""
    return address_from_pubkey(xonly_pubkey(secret))


@dataclass(frozen=True, slots=True)
class Keys:
    """What a payment may spend and where its change goes.

    ``secrets`` maps every address the wallet spends from to its secret key (one entry for a
    one-key wallet, every derived address for an HD wallet); ``change`` receives the change.
    """

    secrets: Mapping[Address, bytes]
    change: Address

    @classmethod
    def single(cls, secret: bytes) -> "Keys":
        """A one-key wallet: spends from and returns change to ``address_of(secret)``."""
        address = address_of(secret)
        return cls({address: secret}, address)


def as_keys(spender: "Keys | bytes") -> Keys:
    """``spender`` as :class:`Keys` (a bare secret key is a one-key wallet)."""
    return spender if isinstance(spender, Keys) else Keys.single(spender)


def parse_address(params: ConsensusParams, text: str) -> Address:
    """A bech32m address of this network.

    Raises:
        WalletError: not a valid address of ``params``' network.
    """
    try:
        return decode_address(params.hrp, text.strip())
    except EncodingError as exc:
        raise WalletError(f"bad address {text!r}: {exc}") from None


def select_coins(
    utxos: Iterable[Utxo], target: int, max_inputs: int = 64
) -> tuple[list[Utxo], int]:
    """Largest-first coin selection: the fewest inputs whose sum reaches ``target``.

    Args:
        utxos: Candidate outputs (unconfirmed ones should be left out by the caller).
        target: Amount plus fee, in units; at least 1.
        max_inputs: At most this many inputs (``max_tx_inputs``).

    Returns:
        The chosen UTXOs (largest first; ties by outpoint, so the choice is deterministic) and
        the change, ``sum(chosen) - target`` (0 means no change output).

    Raises:
        WalletError: the candidates do not cover ``target`` within ``max_inputs`` inputs.
    """
    if target < 1:
        raise WalletError("amount plus fee must be at least 1 unit")
    ranked = sorted(utxos, key=lambda u: (-u.amount, u.txid, u.index))
    chosen: list[Utxo] = []
    total = 0
    for utxo in ranked[:max_inputs]:
        chosen.append(utxo)
        total += utxo.amount
        if total >= target:
            return chosen, total - target
    have = sum(u.amount for u in ranked)
    if have >= target:
        raise WalletError(
            f"insufficient funds in {max_inputs} inputs: the payment needs more than "
            f"{max_inputs} UTXOs; send a smaller amount first to consolidate"
        )
    raise WalletError(f"insufficient funds: have {have} units confirmed, need {target}")


def build_payment(
    params: ConsensusParams,
    secret: bytes,
    inputs: Sequence[Utxo],
    payments: Sequence[tuple[Address, int]],
    change: int,
) -> Transaction:
    """A signed TRANSFER spending ``inputs`` (all of ``secret``'s address) to ``payments``.

    A positive ``change`` goes back to the sender's address as the last output.
    """
    return build_spend(params, Keys.single(secret), inputs, payments, change)


def build_spend(
    params: ConsensusParams,
    keys: Keys,
    inputs: Sequence[Utxo],
    payments: Sequence[tuple[Address, int]],
    change: int,
) -> Transaction:
    """A signed TRANSFER spending ``inputs``, each signed by the key of the address it pays.

    A positive ``change`` goes to ``keys.change`` as the last output.

    Raises:
        WalletError: an input pays an address ``keys`` holds no key for.
    """
    outputs = [TxOut(amount, address) for address, amount in payments]
    if change > 0:
        outputs.append(TxOut(change, keys.change))
    secrets = []
    for u in inputs:
        owner = u.address if u.address is not None else next(iter(keys.secrets))
        if owner not in keys.secrets:
            raise WalletError(f"no key for the address of coin {u.txid.hex()}:{u.index}")
        secrets.append(keys.secrets[owner])
    return sign_transaction(
        TxKind.TRANSFER,
        [u.outpoint for u in inputs],
        outputs,
        secrets,
        params,
        aux_rand=os.urandom(32),
    )


def api_error(exc: ApiError) -> WalletError:
    """The one-line wallet error of a failed API call."""
    if isinstance(exc, NodeUnreachable):
        return WalletError(f"cannot reach node at {exc.url}: {exc.message.rpartition(': ')[2]}")
    return WalletError(
        f"node answered {exc.method} {exc.path} with HTTP {exc.status}: {exc.message}"
    )


async def node_network(api: NodeApi) -> ConsensusParams:
    """The node's network parameters (from ``GET /v1/status``).

    Raises:
        WalletError: unreachable node or an unknown network.
    """
    try:
        status = await api.status()
    except ApiError as exc:
        raise api_error(exc) from None
    if status.network not in NETWORKS:
        raise WalletError(f"node at {api.url} reports an unknown network {status.network!r}")
    return NETWORKS[status.network]


async def fetch_utxos(api: NodeApi, hrp_address: str) -> tuple[int, int, list[Utxo]]:
    """(balance, pending_balance, UTXOs) of an address (``GET /v1/addresses``).

    Raises:
        WalletError: unreachable node or a refusal.
    """
    try:
        body = await api.address(hrp_address)
    except ApiError as exc:
        raise api_error(exc) from None
    utxos = [
        Utxo(TxId(bytes.fromhex(u.txid)), u.index, int(u.amount), u.confirmations)
        for u in body.utxos
    ]
    return int(body.balance), int(body.pending_balance), utxos


FETCH_CONCURRENCY = 16
"""``GET /v1/addresses`` requests in flight while reading many addresses."""


async def fetch_wallet_utxos(
    api: NodeApi, params: ConsensusParams, addresses: Sequence[Address]
) -> tuple[int, int, list[Utxo]]:
    """(balance, pending_balance, UTXOs) summed over ``addresses``; each UTXO names its address.

    Raises:
        WalletError: unreachable node or a refusal.
    """
    gate = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def one(address: Address) -> tuple[int, int, list[Utxo]]:
        async with gate:
            balance, pending, utxos = await fetch_utxos(api, encode_address(params.hrp, address))
        return (
            balance,
            pending,
            [Utxo(u.txid, u.index, u.amount, u.confirmations, address) for u in utxos],
        )

    answers = await asyncio.gather(*(one(a) for a in addresses))
    return (
        sum(a[0] for a in answers),
        sum(a[1] for a in answers),
        [u for a in answers for u in a[2]],
    )
