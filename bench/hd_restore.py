"""Restore an HD wallet that made 200 payments from its mnemonic (docs/wallet.md, "Restore").

Usage: ``python bench/hd_restore.py [--payments N] [--coins K] [--gap-limit G ...]``

Starts one ``dagchain-node --network devnet`` and a ``dagchain-miner`` (``--rate 8``) under a
temporary directory, makes an HD wallet (``wallet.cli.write_hd_wallet``, the keystore ``new``
writes), funds K receive addresses (default 25) from the devnet faucet in one tx, then makes N
payments (default 200) with the wallet's own ``send_payment``: each spends a confirmed coin of
any address, pays 10^6 units and sends its change to the next fresh change address (K payments
in flight, one per free coin). When every payment is confirmed it times
``dagchain-wallet --wallet NEW restore --node URL`` (the mnemonic on standard input), once per
``--gap-limit`` given (default: the command's default, then 20), and compares the coins and
balance the restore found with the wallet's own (every address it handed out).
"""

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder is sys.path[0]; keep it from shadowing packages.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
REPO = _HERE.parent
sys.path.insert(0, str(REPO))

from apiclient import NodeApi  # noqa: E402
from dagchain.crypto import encode_address  # noqa: E402
from dagchain.genesis import FAUCET_SECRET  # noqa: E402
from dagchain.params import DEVNET  # noqa: E402
from dagchain.types import Address  # noqa: E402
from tests.functional.framework import TestNetwork, spawn, wait_until  # noqa: E402
from wallet import cli, hd  # noqa: E402
from wallet.coins import Keys, WalletError, address_of, build_spend, fetch_utxos  # noqa: E402
from wallet.coins import fetch_wallet_utxos as wallet_utxos  # noqa: E402

PASSWORD = "bench"
PAYOUT = encode_address(DEVNET.hrp, bytes(range(32)))
TO = Address(bytes(range(1, 33)))
AMOUNT = 10**6
FEE = 1000


async def fund(url: str, account: hd.Account, coins: int) -> None:
    async with NodeApi(url) as client:
        _, _, utxos = await fetch_utxos(
            client, encode_address(DEVNET.hrp, address_of(FAUCET_SECRET))
        )
        source = max(utxos, key=lambda u: u.amount)
        payments = [(account.address(hd.RECEIVE, i), 10**9) for i in range(coins)]
        change = source.amount - coins * 10**9 - FEE
        tx = build_spend(DEVNET, Keys.single(FAUCET_SECRET), [source], payments, change)
        await client.submit_tx(tx.raw)


async def pay(url: str, account: hd.Account, coins: int, payments: int) -> tuple[int, float]:
    """Make ``payments`` payments; returns (change addresses used, seconds)."""
    secrets = {account.address(hd.RECEIVE, i): account.secret(hd.RECEIVE, i) for i in range(coins)}
    spent: set[tuple[bytes, int]] = set()
    txids: list[str] = []
    start = time.monotonic()
    async with NodeApi(url, connections=24) as client:
        while len(txids) < payments:
            change = account.address(hd.CHANGE, len(txids))
            keys = Keys(secrets, change)
            try:
                tx = await cli.send_payment(
                    client, DEVNET, keys, TO, AMOUNT, FEE, exclude=frozenset(spent)
                )
            except WalletError as exc:
                if "insufficient funds" not in str(exc):
                    raise
                await asyncio.sleep(0.3)  # every free coin is in flight: wait for confirmations
                continue
            spent.update((i.txid, i.out_index) for i in tx.inputs)
            secrets[change] = account.secret(hd.CHANGE, len(txids))
            txids.append(tx.txid.hex())
            if len(txids) % 50 == 0:
                print(f"  {len(txids)} payments submitted ({time.monotonic() - start:.0f} s)")
        while True:
            states = [(await client.tx(t)).status for t in txids]
            if all(s == "confirmed" for s in states):
                break
            await asyncio.sleep(0.5)
    return len(txids), time.monotonic() - start


async def truth(url: str, account: hd.Account, coins: int, changes: int) -> tuple[int, int]:
    """(coins, balance) of the wallet's addresses; (-1, -1) while any of them has pool txs."""
    addresses = [account.address(hd.RECEIVE, i) for i in range(coins)]
    addresses += [account.address(hd.CHANGE, i) for i in range(changes)]
    async with NodeApi(url) as client:
        balance, pending, utxos = await wallet_utxos(client, DEVNET, addresses)
    return (len(utxos), balance) if balance == pending else (-1, -1)


def restore(url: str, words: str, path: Path, gap: int | None) -> tuple[float, dict[str, str]]:
    cmd = [sys.executable, "-m", "wallet.cli", "--wallet", str(path), "restore", "--node", url]
    if gap is not None:
        cmd += ["--gap-limit", str(gap)]
    env = {**os.environ, cli.PASSWORD_ENV: PASSWORD, "PYTHONPATH": str(REPO)}
    start = time.monotonic()
    done = subprocess.run(
        cmd, input=words + "\n", env=env, cwd=REPO, capture_output=True, text=True, check=False
    )
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    lines = done.stdout.strip().splitlines()[1:]
    return elapsed, dict(line.split(": ", 1) for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payments", type=int, default=200)
    parser.add_argument("--coins", type=int, default=25)
    parser.add_argument("--gap-limit", type=int, action="append", dest="gaps")
    args = parser.parse_args()
    gaps: list[int | None] = list(args.gaps) if args.gaps else [None, 20]
    with tempfile.TemporaryDirectory(prefix="hd-restore-") as tmp:
        root = Path(tmp)
        net = TestNetwork(root)
        miner = None
        try:
            (node,) = net.start(1)
            with (root / "miner.log").open("ab") as log:
                miner = spawn(
                    [
                        *(sys.executable, "-m", "miner.cli", "--node", node.url),
                        *("--address", PAYOUT, "--token-file", str(node.datadir / "api.token")),
                        *("--datadir", str(root / "miner"), "--rate", "8"),
                    ],
                    log,
                )
            words = hd.new_mnemonic()
            wallet_file = root / "wallet.json"
            cli.write_hd_wallet(wallet_file, PASSWORD, "devnet", words)
            account = hd.Account.from_seed(hd.seed_of(words), "devnet")
            print(f"funding {args.coins} receive addresses from the faucet")
            asyncio.run(fund(node.url, account, args.coins))
            wait_until(
                lambda: asyncio.run(truth(node.url, account, args.coins, 0))[0] == args.coins,
                60,
                "the funding tx to confirm",
            )
            print(f"making {args.payments} payments (change to a fresh address each)")
            changes, seconds = asyncio.run(pay(node.url, account, args.coins, args.payments))
            data = wallet_file.read_bytes()
            wallet_file.write_bytes(cli.with_indices(data, args.coins, changes))
            coins, balance = asyncio.run(truth(node.url, account, args.coins, changes))
            if coins < 0:
                raise SystemExit("the wallet still has payments in the node's pool")
            print(
                f"{changes} payments confirmed in {seconds:.1f} s; the wallet holds {coins} coins, "
                f"{balance} units, on {args.coins} receive and {changes} change addresses"
            )
            for i, gap in enumerate(gaps):
                elapsed, found = restore(node.url, words, root / f"restored{i}.json", gap)
                label = f"default ({cli.DEFAULT_GAP_LIMIT})" if gap is None else str(gap)
                complete = found["utxos"] == str(coins) and found["balance"] == str(balance)
                print(
                    f"restore --gap-limit {label}: {elapsed:.2f} s, found {found['utxos']} of "
                    f"{coins} coins, balance {found['balance']} of {balance}, "
                    f"change_addresses {found['change_addresses']}: "
                    + ("every coin" if complete else "COINS MISSED")
                )
        finally:
            if miner is not None and miner.poll() is None:
                miner.kill()
                miner.wait(5)
            net.cleanup()


if __name__ == "__main__":
    main()
