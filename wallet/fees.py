"""``dagchain-wallet send --fee auto``: the node's fee estimate times the payment's size.

The rate is ``GET /v1/fees``'s ``fee_per_byte["3"]``: to be VALID within 3 milestones with 90 %
likelihood (docs/node.md, "Fee estimates"). When the node has no 3-milestone rate (no fee it saw
got there), the 10-milestone one is used and the wallet says so; with neither, it stops and asks
for ``--fee N``.
"""

import argparse
from collections.abc import Callable

from apiclient import ApiError, NodeApi
from dagchain.fees import MILLI, fee_for
from dagchain.params import ConsensusParams
from dagchain.types import Address
from wallet.coins import (
    Keys,
    WalletError,
    api_error,
    as_keys,
    build_spend,
    fetch_wallet_utxos,
    select_coins,
)

__all__ = ["AUTO", "AUTO_TARGET", "auto_fee", "parse_fee"]

AUTO = "auto"
AUTO_TARGET = "3"
"""The milestones ``--fee auto`` pays for; ``FALLBACK_TARGET`` when the node has no such rate."""
FALLBACK_TARGET = "10"
_SIZE_ROUNDS = 4
"""Coin selection depends on the fee and the fee on the size: a few rounds settle both."""


def parse_fee(text: str) -> int | str:
    """``--fee``: ``auto`` or a whole number of units (an argparse type: a bad value is a usage
    error, exit 2)."""
    if text == AUTO:
        return AUTO
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'auto' or a whole number of units, not {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError("a fee is at least 0 units")
    return value


async def fee_rate(client: NodeApi, say: Callable[[str], None]) -> tuple[int, str]:
    """The node's rate for ``AUTO_TARGET`` milestones (or ``FALLBACK_TARGET``), in milli-units
    per byte, and the target it is for.

    Raises:
        WalletError: unreachable node, a node without ``GET /v1/fees``, or no rate at all.
    """
    try:
        answer = await client.fees()
    except ApiError as exc:
        if exc.status == 404:
            raise WalletError(
                f"node at {client.url} gives no fee estimates (GET /v1/fees: 404); pass --fee N"
            ) from None
        raise api_error(exc) from None
    rates = answer.fee_per_byte
    if rates.within_3 is not None:
        return round(rates.within_3 * MILLI), AUTO_TARGET
    if rates.within_10 is None:
        raise WalletError(
            f"node has no fee estimate within {FALLBACK_TARGET} milestones; pass --fee N"
        )
    say(
        f"node has no fee rate for {AUTO_TARGET} milestones (no fee it saw got there); "
        f"paying its {FALLBACK_TARGET}-milestone rate"
    )
    return round(rates.within_10 * MILLI), FALLBACK_TARGET


async def auto_fee(
    client: NodeApi,
    params: ConsensusParams,
    spender: Keys | bytes,
    to: Address,
    amount: int,
    say: Callable[[str], None],
) -> int:
    """``--fee auto``: the node's 3-milestone rate times the size of this payment.

    The size is that of the payment the wallet would build now (its coins and change), so the
    fee covers the rate for the tx ``send`` then signs (a later coin choice may differ only if
    another spender takes the coins first).

    Raises:
        WalletError: as :func:`fee_rate`, or insufficient funds.
    """
    keys = as_keys(spender)
    rate, target = await fee_rate(client, say)
    _, _, utxos = await fetch_wallet_utxos(client, params, list(keys.secrets))
    fee = 0
    size = 0
    for _ in range(_SIZE_ROUNDS):
        chosen, change = select_coins(utxos, amount + fee, params.max_tx_inputs)
        size = len(build_spend(params, keys, chosen, [(to, amount)], change).raw)
        needed = fee_for(rate, size)
        if needed <= fee:
            break
        fee = needed
    say(f"fee: {fee} units ({rate / MILLI:g} per byte for {target} milestones x {size} bytes)")
    return fee
