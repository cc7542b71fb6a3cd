"""The wallet's side of the HTTP API: a small node client, coin selection and payments.

Pure parts (``select_coins``, ``build_payment``) take plain values and are tested without a
node; :class:`NodeClient` wraps the ``/v1`` endpoints of INTERFACES.md that the wallet and the
load generator use. Keys never leave this process: txs are signed here (BIP340 with fresh
``os.urandom`` aux randomness) and only their canonical bytes go to the node.
"""

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, final

import aiohttp

from dagchain.crypto import address_from_pubkey, decode_address, xonly_pubkey
from dagchain.errors import EncodingError
from dagchain.params import DEVNET, MAINNET, TESTNET, ConsensusParams
from dagchain.transactions import Transaction, TxKind, TxOut, sign_transaction
from dagchain.types import Address, TxId

__all__ = [
    "NETWORKS",
    "ApiAnswer",
    "NodeClient",
    "Utxo",
    "WalletError",
    "address_of",
    "build_payment",
    "parse_address",
    "select_coins",
]

NETWORKS: dict[str, ConsensusParams] = {"mainnet": MAINNET, "testnet": TESTNET, "devnet": DEVNET}
REQUEST_TIMEOUT_S = 15.0


class WalletError(Exception):
    """A failure the user can act on; the CLI prints it as one line and exits 2."""


@dataclass(frozen=True, slots=True)
class Utxo:
    """A spendable output: outpoint, amount in units and confirmations."""

    txid: TxId
    index: int
    amount: int
    confirmations: int = 1

    @property
    def outpoint(self) -> tuple[TxId, int]:
        """(txid, index)."""
        return self.txid, self.index


def address_of(secret: bytes) -> Address:
    """E8 address of a secret key."""
    return address_from_pubkey(xonly_pubkey(secret))


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
    outputs = [TxOut(amount, address) for address, amount in payments]
    if change > 0:
        outputs.append(TxOut(change, address_of(secret)))
    return sign_transaction(
        TxKind.TRANSFER,
        [u.outpoint for u in inputs],
        outputs,
        [secret] * len(inputs),
        params,
        aux_rand=os.urandom(32),
    )


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    """An HTTP status and its decoded JSON body."""

    status: int
    body: Any

    @property
    def error_code(self) -> str:
        """``error.code`` of an error answer, else ''."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("code", ""))
        return ""

    @property
    def error_message(self) -> str:
        """``error.message`` of an error answer, else the body as text."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("message", ""))
        return str(self.body)


@final
class NodeClient:
    """An aiohttp session on one node's ``/v1`` API (use as an async context manager)."""

    def __init__(self, url: str, connections: int = 64) -> None:
        self.url = url.rstrip("/")
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._connections),
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()

    async def call(self, method: str, path: str, body: Any = None) -> ApiAnswer:
        """One request.

        Raises:
            WalletError: the node cannot be reached or answers with something that is not JSON.
        """
        if self._session is None:
            raise RuntimeError("NodeClient used outside 'async with'")
        try:
            async with self._session.request(method, self.url + path, json=body) as resp:
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    raise WalletError(
                        f"node at {self.url} answered {path} with non-JSON (HTTP {resp.status})"
                    ) from None
                return ApiAnswer(resp.status, data)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            raise WalletError(f"cannot reach node at {self.url}: {reason}") from None

    async def get(self, path: str) -> Any:
        """GET returning the JSON body of a 2xx answer.

        Raises:
            WalletError: unreachable node or a non-2xx answer.
        """
        answer = await self.call("GET", path)
        if answer.status >= 300:
            raise WalletError(
                f"node answered GET {path} with HTTP {answer.status}: {answer.error_message}"
            )
        return answer.body

    async def network(self) -> ConsensusParams:
        """The node's network parameters (from ``GET /v1/status``).

        Raises:
            WalletError: unreachable node or an unknown network.
        """
        status = await self.get("/v1/status")
        name = status.get("network") if isinstance(status, dict) else None
        if name not in NETWORKS:
            raise WalletError(f"node at {self.url} reports an unknown network {name!r}")
        return NETWORKS[str(name)]

    async def utxos(self, hrp_address: str) -> tuple[int, int, list[Utxo]]:
        """(balance, pending_balance, UTXOs) of an address (``GET /v1/addresses``)."""
        body = await self.get(f"/v1/addresses/{hrp_address}")
        utxos = [
            Utxo(
                TxId(bytes.fromhex(u["txid"])),
                int(u["index"]),
                int(u["amount"]),
                int(u["confirmations"]),
            )
            for u in body["utxos"]
        ]
        return int(body["balance"]), int(body["pending_balance"]), utxos

    async def submit(self, raw: bytes) -> ApiAnswer:
        """``POST /v1/txs``: 202 accepted, 400 invalid, 409 conflict or spent, 503 pool full."""
        return await self.call("POST", "/v1/txs", {"raw": raw.hex()})
