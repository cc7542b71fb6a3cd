"""The block rate one ``dagchain-miner`` reaches against one devnet node, with no tx load.

Usage: ``python bench/miner_rate.py [--rates 8,16,32,48] [--seconds 15] [--warmup 3]
[--profile]``

For each rate: a fresh devnet node (``node.cli start --network devnet``) and one miner
(``miner.cli --rate R --threads 1``); after ``--warmup`` seconds the miner's ``state.json`` block
count is read, again ``--seconds`` later, and ``rate R: reached X blocks/s`` is printed with the
CPU share of the node and of the miner over that window. ``--profile`` runs py-spy on the miner
over the window (collapsed stacks with idle time, kept with the logs in the folder printed).
Both processes run this checkout's code (``-m``, cwd = the repository root).
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

REPO = _HERE.parent
PY = sys.executable
TICKS = os.sysconf("SC_CLK_TCK")
PAYOUT = "ddag1qqqsyqcyq5rqwzqfpg9scrgwpugpzysnzs23v9ccrydpk8qarc0sf5hlsh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its threads."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_api(url: str, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url + "/v1/status", timeout=2).read()
            return
        time.sleep(0.1)
    raise SystemExit(f"node at {url} did not answer within {timeout:g} s")


def blocks(datadir: Path) -> int:
    try:
        return int(json.loads((datadir / "state.json").read_text())["blocks"])
    except (OSError, ValueError, KeyError):
        return 0


def stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(5)


def run_one(rate: float, seconds: float, warmup: float, root: Path, profile: bool) -> float:
    """One fresh node and miner at ``rate``; the accepted blocks per second reached."""
    api = free_port()
    datadir, mdir = root / f"node-{rate:g}", root / f"miner-{rate:g}"
    node_log = (root / f"node-{rate:g}.log").open("wb")
    miner_log = (root / f"miner-{rate:g}.log").open("wb")
    node = subprocess.Popen(
        [
            *(PY, "-m", "node.cli", "start", "--network", "devnet", "--datadir", str(datadir)),
            *("--p2p-host", "127.0.0.1", "--p2p-port", str(free_port())),
            *("--api-port", str(api), "--no-discovery", "--log-level", "warning"),
        ],
        cwd=REPO,
        stdout=node_log,
        stderr=node_log,
        start_new_session=True,
    )
    miner = None
    try:
        url = f"http://127.0.0.1:{api}"
        wait_api(url)
        miner = subprocess.Popen(
            [
                *(PY, "-m", "miner.cli", "--node", url, "--address", PAYOUT),
                *("--token-file", str(datadir / "api.token"), "--datadir", str(mdir)),
                *("--rate", str(rate), "--threads", "1", "--log-level", "warning"),
            ],
            cwd=REPO,
            stdout=miner_log,
            stderr=miner_log,
            start_new_session=True,
        )
        time.sleep(warmup)
        b0, t0 = blocks(mdir), time.monotonic()
        c0 = (cpu_seconds(node.pid), cpu_seconds(miner.pid))
        spy = None
        if profile:
            exe = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(PY).parent))
            if exe:
                spy = subprocess.Popen(
                    [
                        *(exe, "record", "-p", str(miner.pid), "-d", str(int(seconds))),
                        *("-r", "200", "--idle", "-f", "raw"),
                        *("-o", str(root / f"miner-{rate:g}.txt")),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
        time.sleep(seconds)
        b1, t1 = blocks(mdir), time.monotonic()
        c1 = (cpu_seconds(node.pid), cpu_seconds(miner.pid))
        if spy is not None:
            spy.wait(60)
        wall = t1 - t0
        reached = (b1 - b0) / wall
        node_cpu, miner_cpu = ((c1[i] - c0[i]) / wall for i in (0, 1))
        print(
            f"rate {rate:g}: reached {reached:.2f} blocks/s ({b1 - b0} blocks in {wall:.1f} s); "
            f"cpu node {100 * node_cpu:.0f} % miner {100 * miner_cpu:.0f} %",
            flush=True,
        )
        return reached
    finally:
        if miner is not None:
            stop(miner)
        stop(node)
        node_log.close()
        miner_log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="8,16,32,48", help="comma-separated blocks/s to ask for")
    ap.add_argument("--seconds", type=float, default=15.0, help="measuring window per rate")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    ap.add_argument("--profile", action="store_true", help="py-spy the miner (keeps the logs)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dagchain-miner-rate-"))
    try:
        for rate in (float(r) for r in args.rates.split(",")):
            run_one(rate, args.seconds, args.warmup, root, args.profile)
    finally:
        if args.profile:
            print(f"logs and profiles: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
