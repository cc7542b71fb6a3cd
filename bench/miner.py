"""Miner hash rate: ``dagchain-miner benchmark`` with 1 and 2 workers vs plain hashlib.

Results and their reading: docs/benchmarks.md, section "Miner".

Usage: ``python bench/miner.py [--seconds S] [--rounds R]``

Each round runs, one after the other on an otherwise idle machine: the plain hashlib loop (one
full ``hashlib.blake2b(header, digest_size=32)`` per nonce, the baseline), then
``dagchain-miner benchmark --threads 1`` and ``--threads 2`` with the active (C) kernel, then the
pure-Python fallback with 1 and 2 worker processes. Rounds interleave the configurations so that
load from other processes hits all of them alike; the table shows the median and the best round,
and the 2/1 ratio is taken within each round.
"""

import argparse
import hashlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Run as a script, this file's folder is sys.path[0] and its name would shadow the miner package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

MINER = Path(sys.executable).parent / "dagchain-miner"
CONFIGS = [
    ("C kernel, --threads 1", ["--threads", "1"]),
    ("C kernel, --threads 2", ["--threads", "2"]),
    ("Python fallback, 1 process", ["--kernel", "python", "--threads", "1"]),
    ("Python fallback, 2 processes", ["--kernel", "python", "--threads", "2"]),
]


def plain_hashlib_loop(seconds: float) -> float:
    """Headers per second: build the 150 bytes and hash them whole, one nonce after another."""
    prefix = bytes(range(142))
    blake2b = hashlib.blake2b
    n, batch = 0, 20_000
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        for nonce in range(n, n + batch):
            blake2b(prefix + nonce.to_bytes(8, "little"), digest_size=32).digest()
        n += batch
    return n / (time.perf_counter() - t0)


def lane_variants(seconds: float) -> dict[str, float]:
    """One thread calling the C kernel directly with each vector width this CPU supports."""
    try:
        from miner import _kernel
    except ImportError:
        return {}
    prefix, target = bytes(range(142)), bytes(32)
    out = {}
    for kind, name in enumerate(["scalar", "avx2x4", "avx512x8"][: _kernel.ACTIVE + 1]):
        n, chunk = 0, 1 << 20
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            _kernel.search(prefix, target, n, chunk, kind)
            n += chunk
        out[f"C kernel {name}, direct call"] = n / (time.perf_counter() - t0)
    return out


def miner_benchmark(args: list[str], seconds: float) -> float:
    out = subprocess.run(
        [str(MINER), "benchmark", "--seconds", str(seconds), *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    last = out.strip().splitlines()[-1]
    key, value = last.split(":")
    assert key == "hashrate_hs", last
    return float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = ["plain hashlib loop (baseline)"] + [name for name, _ in CONFIGS]
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        rates[names[0]].append(plain_hashlib_loop(args.seconds))
        for name, extra in CONFIGS:
            rates[name].append(miner_benchmark(extra, args.seconds))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    base = statistics.median(rates[names[0]])
    print(f"{'configuration':34} {'median H/s':>12} {'best H/s':>12} {'x baseline':>10}")
    for name in names:
        med = statistics.median(rates[name])
        print(f"{name:34} {med:12,.0f} {max(rates[name]):12,.0f} {med / base:10.2f}")
    for name, rate in lane_variants(args.seconds).items():
        print(f"{name:34} {rate:12,.0f} {'':>12} {rate / base:10.2f}")
    for one, two in ((CONFIGS[0][0], CONFIGS[1][0]), (CONFIGS[2][0], CONFIGS[3][0])):
        ratios = [b / a for a, b in zip(rates[one], rates[two], strict=True)]
        print(
            f"2 workers / 1 worker ({one.split(',')[0]}): median {statistics.median(ratios):.2f}, "
            f"rounds {', '.join(f'{x:.2f}' for x in ratios)}"
        )


if __name__ == "__main__":
    main()
