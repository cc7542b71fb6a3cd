"""dagchain-wallet pure parts: keystore format, coin selection, payments, load statistics."""

import io
import json
import stat
from collections import Counter
from pathlib import Path

import pytest

from apiclient import ApiError
from apiclient.models import AddressResponse, TxResponse, UtxoItem
from dagchain.crypto import encode_address
from dagchain.params import DEVNET
from dagchain.transactions import (
    check_tx_signatures,
    check_tx_stateless,
    decode_transaction,
)
from dagchain.types import TxId
from wallet import cli as wallet
from wallet.coins import (
    Utxo,
    WalletError,
    address_of,
    build_payment,
    select_coins,
)
from wallet.loadgen import (
    LoadConfig,
    _Run,
    coins_needed,
    duplicate_rate,
    fanout_plan,
    percentile,
    requests_in_flight,
)

FAST = (2**4, 8, 1)  # tests only: the CLI always uses n = 2^15
SECRET = (7).to_bytes(32, "big")


def utxo(n: int, amount: int) -> Utxo:
    return Utxo(TxId(n.to_bytes(32, "big")), 0, amount)


def test_keystore_round_trip_returns_the_secret() -> None:
    data = wallet.encode_keystore(SECRET, "correct horse", "devnet", scrypt=FAST)
    assert wallet.decode_keystore(data, "correct horse") == SECRET
    header = wallet.read_keystore_header(data)
    assert (header.network, header.address) == ("devnet", address_of(SECRET))


def test_keystore_does_not_hold_the_secret_in_clear() -> None:
    data = wallet.encode_keystore(SECRET, "pw", "devnet", scrypt=FAST)
    assert SECRET.hex() not in data.decode()
    doc = json.loads(data)
    assert doc["kdf"]["name"] == "scrypt"
    assert doc["cipher"]["name"] == "chacha20-poly1305"


def test_wrong_password_is_a_clear_error() -> None:
    data = wallet.encode_keystore(SECRET, "right", "devnet", scrypt=FAST)
    with pytest.raises(WalletError, match="wrong password"):
        wallet.decode_keystore(data, "wrong")


def test_edited_address_makes_the_file_fail_to_open() -> None:
    doc = json.loads(wallet.encode_keystore(SECRET, "pw", "devnet", scrypt=FAST))
    doc["address"] = address_of((8).to_bytes(32, "big")).hex()
    with pytest.raises(WalletError, match="wrong password"):
        wallet.decode_keystore(json.dumps(doc).encode(), "pw")


def test_a_file_that_is_not_a_wallet_is_named_as_such() -> None:
    with pytest.raises(WalletError, match="not a dagchain wallet file"):
        wallet.decode_keystore(b'{"hello": 1}', "pw")


def test_default_kdf_is_memory_hard() -> None:
    doc = json.loads(wallet.encode_keystore(SECRET, "pw", "devnet"))
    assert doc["kdf"]["n"] * doc["kdf"]["r"] * 128 >= 32 * 2**20  # 32 MiB per derivation


def test_new_wallet_has_mode_0600_and_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "w.json"
    address = wallet.write_new_wallet(path, "pw", "devnet", FAST)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_bytes()
    with pytest.raises(WalletError, match="already exists"):
        wallet.write_new_wallet(path, "pw", "devnet", FAST)
    assert path.read_bytes() == before
    assert address_of(wallet.decode_keystore(before, "pw")) == address


def test_cli_new_address_and_wrong_password_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.json"
    monkeypatch.setenv(wallet.PASSWORD_ENV, "secret")
    assert wallet.main(["--wallet", str(path), "new"]) == 0
    printed, mnemonic = capsys.readouterr().out.strip().splitlines()
    assert printed.startswith("ddag1")
    assert len(mnemonic.split()) == 12
    assert wallet.main(["--wallet", str(path), "address"]) == 0
    assert capsys.readouterr().out.strip() == printed
    assert wallet.main(["--wallet", str(path), "new"]) == 2
    assert "already exists" in capsys.readouterr().err
    monkeypatch.setenv(wallet.PASSWORD_ENV, "not it")
    to = encode_address(DEVNET.hrp, address_of(SECRET))
    argv = ["--wallet", str(path), "send", "--node", "http://127.0.0.1:9", "--to", to]
    assert wallet.main([*argv, "--amount", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "wrong password" in err


def test_password_file_wins_and_its_newline_is_dropped(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("from-file\n")
    args = wallet.build_parser().parse_args(["--password-file", str(pw), "address"])
    assert wallet._password(args) == "from-file"


def test_missing_password_without_a_terminal_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(wallet.PASSWORD_ENV, raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal: no prompt
    assert wallet.main(["--wallet", str(tmp_path / "w.json"), "new"]) == 2
    assert "no password" in capsys.readouterr().err


@pytest.mark.parametrize("source", ["env", "file"])
def test_new_refuses_an_empty_password_and_writes_nothing(
    source: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An empty password would seal the key under a guessable key: refused, no file written."""
    path = tmp_path / "w.json"
    argv = ["--wallet", str(path)]
    if source == "env":
        monkeypatch.setenv(wallet.PASSWORD_ENV, "")
    else:
        monkeypatch.delenv(wallet.PASSWORD_ENV, raising=False)
        (tmp_path / "pw").write_text("\n")
        argv += ["--password-file", str(tmp_path / "pw")]
    assert wallet.main([*argv, "new"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "empty password" in err
    assert not path.exists()


def test_faucet_address_is_the_documented_devnet_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert wallet.main(["--devnet-faucet", "address"]) == 0
    assert capsys.readouterr().out.strip() == encode_address(
        DEVNET.hrp,
        bytes.fromhex("9407263be9dc3c4b5b9afbd02ebb5d5cbda687dfb57c65c1816c8cdca9b677a0"),
    )


def test_unreachable_node_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert wallet.main(["--devnet-faucet", "balance", "--node", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dagchain-wallet: error: cannot reach node")
    assert err.count("\n") == 1


def test_send_refuses_a_bad_address_or_amount_before_the_node_or_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in ``--to`` or ``--amount`` is named as such (exit 2, one line), with no request
    to the node (here unreachable: its error would hide the typo) and no password asked."""
    node = ["--node", "http://127.0.0.1:9"]
    to = encode_address(DEVNET.hrp, address_of(SECRET))
    assert wallet.main(["--devnet-faucet", "send", *node, "--to", "ddag1xyz", "--amount", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "bad address 'ddag1xyz'" in err
    for amount in ("0", "-5", "1.5"):
        with pytest.raises(SystemExit) as usage:
            wallet.main(["--devnet-faucet", "send", *node, "--to", to, "--amount", amount])
        assert usage.value.code == 2
        assert "--amount" in capsys.readouterr().err

    path = tmp_path / "w.json"
    monkeypatch.setenv(wallet.PASSWORD_ENV, "secret")
    assert wallet.main(["--wallet", str(path), "new"]) == 0
    capsys.readouterr()
    monkeypatch.delenv(wallet.PASSWORD_ENV)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # a password would be "no password"
    testnet_to = encode_address("tdag", address_of(SECRET))
    argv = ["--wallet", str(path), "send", *node, "--amount", "5", "--to"]
    assert wallet.main([*argv, testnet_to]) == 2  # a devnet wallet: a testnet address is a typo
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"bad address {testnet_to!r}" in err


# ------------------------------------------------------------------ coin selection


def test_coin_selection_takes_largest_first_and_returns_the_change() -> None:
    coins = [utxo(1, 50), utxo(2, 300), utxo(3, 120)]
    chosen, change = select_coins(coins, 400)
    assert [c.amount for c in chosen] == [300, 120]
    assert change == 20


def test_exact_amount_leaves_no_change() -> None:
    chosen, change = select_coins([utxo(1, 100), utxo(2, 7)], 107)
    assert len(chosen) == 2
    assert change == 0


def test_insufficient_funds_names_what_is_there() -> None:
    with pytest.raises(WalletError, match="insufficient funds: have 150 units confirmed, need 151"):
        select_coins([utxo(1, 100), utxo(2, 50)], 151)


def test_selection_respects_the_input_limit() -> None:
    coins = [utxo(i, 1) for i in range(10)]
    with pytest.raises(WalletError, match="more than 4 UTXOs"):
        select_coins(coins, 5, max_inputs=4)


def test_payment_pays_the_amount_returns_change_and_verifies() -> None:
    to = address_of((9).to_bytes(32, "big"))
    chosen, change = select_coins([utxo(1, 1_000), utxo(2, 500)], 1_200 + 30)
    tx = build_payment(DEVNET, SECRET, chosen, [(to, 1_200)], change)
    check_tx_stateless(tx, DEVNET)
    check_tx_signatures(tx, DEVNET)
    assert [(o.address, o.amount) for o in tx.outputs] == [(to, 1_200), (address_of(SECRET), 270)]
    assert sum(c.amount for c in chosen) - sum(o.amount for o in tx.outputs) == 30


def test_two_signatures_of_one_payment_differ_by_fresh_aux_randomness() -> None:
    to = address_of((9).to_bytes(32, "big"))
    one = build_payment(DEVNET, SECRET, [utxo(1, 10)], [(to, 9)], 0)
    two = build_payment(DEVNET, SECRET, [utxo(1, 10)], [(to, 9)], 0)
    assert one.inputs[0].signature != two.inputs[0].signature


# ------------------------------------------------------------------ load statistics


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == pytest.approx(50.5)
    assert percentile(values, 0.9) == pytest.approx(90.1)
    assert percentile([], 0.9) == 0.0
    assert percentile([3.0], 0.99) == 3.0


def test_duplicate_rate_counts_repeat_inclusions_over_all_inclusions() -> None:
    a, b, c = (TxId(bytes([i]) * 32) for i in range(3))
    assert duplicate_rate(Counter({a: 1, b: 1, c: 2})) == pytest.approx(1 / 4)
    assert duplicate_rate(Counter()) == 0.0


@pytest.mark.parametrize("coins", [1, 63, 64, 65, 4_032, 4_033, 10_000])
def test_fanout_plan_makes_exactly_the_coins_within_output_limits(coins: int) -> None:
    stage_a, stage_b = fanout_plan(coins)
    assert sum(stage_b) == coins
    assert sum(stage_a) == len(stage_b)
    assert max(stage_b) <= 64
    assert max(stage_a) <= 63  # one output left for the change


def test_funding_covers_a_short_run_and_a_recycle_window_of_a_long_one() -> None:
    assert coins_needed(10, 15, 4) >= 150
    assert coins_needed(1000, 120, 16) < 1000 * 120


class _BusyCoinNode:
    """A fake NodeApi: 409 ``conflict`` for a tx spending a coin a pool tx already spends."""

    def __init__(self, busy: set[tuple[TxId, int]]) -> None:
        self.busy = busy
        self.posted: list[list[tuple[TxId, int]]] = []

    async def submit_tx(self, raw: bytes) -> str:
        tx = decode_transaction(raw, DEVNET)
        spent = [(TxId(i.txid), i.out_index) for i in tx.inputs]
        self.posted.append(spent)
        if self.busy & set(spent):
            message = "an input is spent by a pool tx"
            raise ApiError(409, "conflict", message, None, "POST", "/v1/txs")
        return tx.txid.hex()


async def test_load_funding_sets_aside_coins_that_pool_txs_already_spend() -> None:
    coins = [utxo(n, 10**14) for n in range(1, 6)]
    busy = {coins[0].outpoint, coins[1].outpoint}  # e.g. an earlier `send` still pending
    node = _BusyCoinNode(busy)
    config = LoadConfig(rate=1, duration_s=1, accounts=1)
    run = _Run(node, DEVNET, SECRET, config, lambda line: None)  # type: ignore[arg-type]
    sent, free = await run.fund_tx(coins, [(address_of(SECRET), 1000)], 10)
    assert sent.accepted
    assert node.posted[-1] == [coins[2].outpoint]
    assert [u.outpoint for u in free] == [u.outpoint for u in coins[3:]]
    assert run.rejected == Counter({"409:conflict": 2}), "the refusals stay in the report"

    everything = _BusyCoinNode({c.outpoint for c in coins})
    run = _Run(everything, DEVNET, SECRET, config, lambda line: None)  # type: ignore[arg-type]
    with pytest.raises(WalletError, match="insufficient funds"):
        await run.fund_tx(coins, [(address_of(SECRET), 1000)], 10)
    assert len(everything.posted) == len(coins), "one attempt per coin, then a clear error"


# ------------------------------------------------------------------ tracking what was submitted


class _ForgetfulNode:
    """A fake NodeApi whose ``GET /v1/txs`` answers from ``states`` (default ``mempool``)."""

    def __init__(self, states: dict[str, str], utxos: list[Utxo] | None = None) -> None:
        self.states = states
        self.utxos = utxos or []
        self.posted: list[bytes] = []
        self.then = "mempool"
        """The state of a tx (re)submitted from now on."""
        self.refuse: tuple[int, str] | None = None
        """(HTTP status, error code) every submission is refused with from now on."""

    async def submit_tx(self, raw: bytes) -> str:
        self.posted.append(raw)
        if self.refuse is not None:
            raise ApiError(*self.refuse, "refused", None, "POST", "/v1/txs")
        txid = decode_transaction(raw, DEVNET).txid.hex()
        if self.states.get(txid, "unknown") == "unknown":
            self.states[txid] = self.then
        return txid

    async def tx(self, txid: str) -> TxResponse:
        state = self.states.get(txid, "unknown")
        return TxResponse.model_validate(
            {
                "txid": txid,
                "status": state,
                "block": None,
                "milestone_height": 7,
                "confirmations": 1 if state == "confirmed" else 0,
                "reason": None,
            }
        )

    async def address(self, address: str) -> AddressResponse:
        rows = [
            UtxoItem(txid=u.txid.hex(), index=u.index, amount=str(u.amount), confirmations=1)
            for u in self.utxos
        ]
        total = str(sum(u.amount for u in self.utxos))
        return AddressResponse(address=address, balance=total, pending_balance=total, utxos=rows)


async def _one_load_tx(node: _ForgetfulNode, lines: list[str]) -> tuple[_Run, object]:
    from wallet.loadgen import Coin

    run = _Run(node, DEVNET, SECRET, LoadConfig(rate=1, duration_s=1, accounts=2), lines.append)  # type: ignore[arg-type]
    coin = Coin(utxo(9, 10**6), 0)
    await run.send_one(coin)
    (sent,) = run.sent.values()
    assert sent.accepted
    sent.checked_at -= 60  # as if submitted a minute ago and never confirmed
    return run, coin


async def test_load_resubmits_a_tx_the_node_no_longer_knows() -> None:
    node = _ForgetfulNode({})
    lines: list[str] = []
    run, _ = await _one_load_tx(node, lines)
    (sent,) = run.sent.values()
    node.states[sent.txid.hex()] = "unknown"  # e.g. the node restarted: its pool is not kept
    await run.recheck()
    assert node.posted == [sent.raw, sent.raw], "the same tx is posted again"
    assert (run.resubmitted, sent.resubmits, sent.abandoned) == (1, 1, False)
    assert any("resubmitted 1 txs" in line for line in lines)
    await run.recheck()  # just checked: nothing is due
    assert len(node.posted) == 2
    assert "confirmed/offered=0/1" in run.status_line(1.0, 1)


async def test_load_rebroadcasts_an_invalid_tx_and_waits_while_its_parent_is_unconfirmed() -> None:
    """Issue 26's soak: a tx the node reports ``invalid`` because a stale branch's block copy of
    it was ordered INVALID(sortition) can still confirm; after a deep reorganisation the node may
    also have dropped it (its pool full). The load posts the same tx again instead of paying
    anew; a 503 or a ``missing-input`` refusal (its parent back in the pool) is asked again
    later."""
    node = _ForgetfulNode({}, utxos=[utxo(9, 10**6)])
    run, _ = await _one_load_tx(node, [])
    (sent,) = run.sent.values()
    node.states[sent.txid.hex()] = "invalid"
    for refusal in ((503, "mempool-full"), (409, "missing-input")):
        node.refuse = refusal
        sent.checked_at -= 60
        await run.recheck()
        assert (sent.abandoned, run.released, run.resubmitted) == (False, 0, 0), refusal
    node.refuse = None
    sent.checked_at -= 60
    await run.recheck()
    assert node.posted == [sent.raw] * 4, "the same tx, never a new payment"
    assert (sent.abandoned, run.released, run.resubmitted) == (False, 0, 1)


async def test_load_gives_the_coin_of_an_invalid_tx_back_when_it_is_unspent() -> None:
    node = _ForgetfulNode({}, utxos=[utxo(9, 10**6)])
    lines: list[str] = []
    run, coin = await _one_load_tx(node, lines)
    (sent,) = run.sent.values()
    node.states[sent.txid.hex()] = "invalid"
    node.refuse = (409, "conflict")  # its rebroadcast is refused: another tx spends its coin
    await run.recheck()
    assert sent.abandoned
    assert (run.released, run.lost, list(run.pool)) == (1, 0, [coin])
    assert any("released back to the pool" in line for line in lines)
    await run.wait_phase()  # an abandoned tx is not waited for


async def test_send_wait_resubmits_an_unknown_tx_and_pays_again_for_an_invalid_one() -> None:
    coins = [utxo(n, 10**9) for n in range(1, 4)]
    node = _ForgetfulNode({}, utxos=coins)
    lines: list[str] = []
    to = address_of((9).to_bytes(32, "big"))
    first = await wallet.send_payment(node, DEVNET, SECRET, to, 5000, 100)  # type: ignore[arg-type]
    node.states[first.txid.hex()] = "unknown"  # dropped from the node's pool
    node.then = "confirmed"  # the resubmitted tx confirms
    payment = (to, 5000, 100)
    done = await wallet.settle_payment(node, DEVNET, SECRET, payment, first, 10, lines.append)  # type: ignore[arg-type]
    assert done.txid == first.txid
    assert node.posted == [first.raw, first.raw]
    assert any("unknown to the node" in line and "resubmitted" in line for line in lines)

    node.states[first.txid.hex()] = "invalid"  # a conflicting spend was ordered first
    node.utxos = coins[1:]  # and spent the first tx's coin
    again = await wallet.settle_payment(node, DEVNET, SECRET, payment, first, 10, lines.append)  # type: ignore[arg-type]
    assert again.txid != first.txid
    assert node.states[again.txid.hex()] == "confirmed"
    assert {(i.txid, i.out_index) for i in again.inputs}.isdisjoint(
        {(i.txid, i.out_index) for i in first.inputs}
    )
    assert any("paid again from other coins" in line for line in lines)


def test_batches_in_flight_hold_about_max_in_flight_txs() -> None:
    """``--max-in-flight`` bounds txs, not batch requests: 384 batches of 64 in flight put
    24,576 txs against devnet's 5,000-tx pool, and the node answered in bursts."""
    assert requests_in_flight(64, 1) == 64
    assert requests_in_flight(384, 64) == 6
    assert requests_in_flight(64, 64) == 2
    assert requests_in_flight(100, 1000) == 2
