"""CPU per signed one-input payment (``wallet.coins.build_payment``): the load generator's hot path.

Run: ``python bench/sign_payment.py [--count N]``. Results: docs/benchmarks.md, "Node CPU per tx".
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dagchain.params import DEVNET
from dagchain.types import TxId
from wallet.coins import Utxo, address_of, build_payment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=3000, help="payments to sign")
    args = parser.parse_args()
    secret = bytes(31) + b"\x07"
    addr = address_of(secret)
    payee = address_of(bytes(31) + b"\x09")
    started = time.process_time()
    for i in range(args.count):
        coin = Utxo(TxId(i.to_bytes(32, "big")), 0, 10_000_000, address=addr)
        build_payment(DEVNET, secret, [coin], [(payee, 1000)], 10_000_000 - 1000 - 500)
    per = (time.process_time() - started) / args.count * 1e6
    print(f"{per:.1f} CPU us per one-input payment ({args.count} signed)")


if __name__ == "__main__":
    main()
