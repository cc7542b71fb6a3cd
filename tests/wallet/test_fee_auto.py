"""``dagchain-wallet send --fee auto`` (INTERFACES.md): the node's 3-milestone fee per byte times
the payment's size (wallet/fees.py), with clear errors when the node cannot say."""

import pytest

from apiclient import ApiError
from apiclient.models import AddressResponse, FeeRates, FeeSample, FeesResponse, UtxoItem
from dagchain.crypto import encode_address
from dagchain.fees import rate_of
from dagchain.params import DEVNET
from tests.wallet.test_wallet import SECRET, utxo
from wallet import cli as wallet
from wallet import fees
from wallet.coins import Utxo, WalletError, address_of, build_payment, select_coins

TO = address_of((9).to_bytes(32, "big"))
AMOUNT = 5_000


class _FeeNode:
    """A fake NodeApi answering ``GET /v1/fees`` and the wallet's address."""

    url = "http://node"

    def __init__(self, rates: dict[str, float | None], utxos: list[Utxo]) -> None:
        self.rates = rates
        self.utxos = utxos

    async def fees(self) -> FeesResponse:
        return FeesResponse(
            fee_per_byte=FeeRates.model_validate(self.rates),
            floor=0.0,
            likelihood=0.9,
            sample=FeeSample(txs=50, milestones=100, window=100),
        )

    async def address(self, address: str) -> AddressResponse:
        rows = [
            UtxoItem(txid=u.txid.hex(), index=u.index, amount=str(u.amount), confirmations=1)
            for u in self.utxos
        ]
        total = str(sum(u.amount for u in self.utxos))
        return AddressResponse(address=address, balance=total, pending_balance=total, utxos=rows)


class _OldNode(_FeeNode):
    async def fees(self) -> FeesResponse:
        raise ApiError(404, "not-found", "no such path", None, "GET", "/v1/fees")


def paid_rate(fee: int, coins: list[Utxo]) -> int:
    """Milli-units per byte that the payment the wallet builds with ``fee`` pays."""
    chosen, change = select_coins(coins, AMOUNT + fee, DEVNET.max_tx_inputs)
    return rate_of(fee, len(build_payment(DEVNET, SECRET, chosen, [(TO, AMOUNT)], change).raw))


async def test_auto_pays_the_three_milestone_rate_times_the_size() -> None:
    coins = [utxo(1, 10**9), utxo(2, 10**6)]
    node = _FeeNode({"1": 9.0, "3": 2.5, "10": 0.4}, coins)
    lines: list[str] = []
    fee = await fees.auto_fee(node, DEVNET, SECRET, TO, AMOUNT, lines.append)  # type: ignore[arg-type]
    assert 2_500 <= paid_rate(fee, coins) < 2_500 + 1_000 // 100, "the rate, not ten times it"
    assert paid_rate(fee - 1, coins) < 2_500, "the least fee that pays the rate"
    assert lines == [f"fee: {fee} units (2.5 per byte for 3 milestones x {fee * 10 // 25} bytes)"]


async def test_auto_falls_back_to_ten_milestones_and_says_so() -> None:
    coins = [utxo(1, 10**9)]
    node = _FeeNode({"1": None, "3": None, "10": 0.75}, coins)
    lines: list[str] = []
    fee = await fees.auto_fee(node, DEVNET, SECRET, TO, AMOUNT, lines.append)  # type: ignore[arg-type]
    assert 750 <= paid_rate(fee, coins) < 760
    assert "no fee rate for 3 milestones" in lines[0]
    assert "0.75 per byte for 10 milestones" in lines[1]


async def test_auto_without_any_estimate_asks_for_a_fee() -> None:
    node = _FeeNode({"1": None, "3": None, "10": None}, [utxo(1, 10**9)])
    with pytest.raises(WalletError, match="pass --fee N"):
        await fees.auto_fee(node, DEVNET, SECRET, TO, AMOUNT, print)  # type: ignore[arg-type]


async def test_a_node_without_fee_estimates_is_a_clear_error() -> None:
    node = _OldNode({}, [utxo(1, 10**9)])
    with pytest.raises(WalletError, match=r"gives no fee estimates \(GET /v1/fees: 404\)"):
        await fees.auto_fee(node, DEVNET, SECRET, TO, AMOUNT, print)  # type: ignore[arg-type]


def test_auto_send_to_an_unreachable_node_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    to = encode_address(DEVNET.hrp, TO)
    argv = ["--devnet-faucet", "send", "--node", "http://127.0.0.1:9", "--to", to, "--amount", "5"]
    assert wallet.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dagchain-wallet: error: cannot reach node")
    assert err.count("\n") == 1


def test_fee_is_auto_by_default_and_a_number_still_works() -> None:
    parse = wallet.build_parser().parse_args
    base = ["send", "--node", "u", "--to", "a", "--amount", "5"]
    assert parse(base).fee == "auto"
    assert parse([*base, "--fee", "auto"]).fee == "auto"
    assert parse([*base, "--fee", "700"]).fee == 700


@pytest.mark.parametrize("bad", ["-1", "1.5", "cheap"])
def test_a_bad_fee_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        wallet.build_parser().parse_args(
            ["send", "--node", "u", "--to", "a", "--amount", "5", "--fee", bad]
        )
    assert exc.value.code == 2
    assert "--fee" in capsys.readouterr().err
