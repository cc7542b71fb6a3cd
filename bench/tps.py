"""Confirmed transactions per second on a live devnet (issue 7).

Usage: ``python bench/tps.py [--duration S] [--rate TPS] [--miner-rate BLOCKS_PER_S]
[--accounts N] [--max-in-flight N] [--profile]``

Starts 3 ``dagchain-node --network devnet`` processes on 127.0.0.1 (a line: node1 dials node0,
node2 dials node1), one ``dagchain-miner`` on node0, then ``dagchain-wallet --devnet-faucet load``
against node1 for ``--duration`` seconds (default 120). Prints the load generator's summary
(offered and confirmed TPS, latency percentiles, duplicate rate) and the CPU seconds and share of
one core that each process used during the load phase (from /proc/<pid>/stat). ``--profile``
records a py-spy profile of node0 and node1 during the load (needs ``py-spy`` on PATH).
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
from typing import Any

# Run as a script, this file's folder is sys.path[0]; keep it from shadowing packages.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

REPO = _HERE.parent
PY = sys.executable
TICKS = os.sysconf("SC_CLK_TCK")
PAYOUT = "ddag1qqqsyqcyq5rqwzqfpg9scrgwpugpzysnzs23v9ccrydpk8qarc0sf5hlsh"  # bytes 0..31


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its reaped children (/proc/<pid>/stat fields 14-17)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / TICKS


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process plus its live children (the miner's hashing workers)."""
    total = cpu_seconds(pid)
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            total += tree_cpu(int(child))
    return total


def wait_api(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/v1/status", timeout=2) as r:
                json.loads(r.read())
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"node at {url} did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--rate", type=float, default=1024.0)
    ap.add_argument("--miner-rate", type=float, default=12.0)
    ap.add_argument("--accounts", type=int, default=64)
    ap.add_argument("--max-in-flight", type=int, default=384)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temporary datadirs")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="dagchain-tps-"))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs: list[Any] = []
    nodes: list[tuple[int, str]] = []
    try:
        for i in range(3):
            p2p, api = free_port(), free_port()
            cmd = [
                *(PY, "-m", "node.cli", "start", "--network", "devnet"),
                *("--datadir", str(root / f"node{i}"), "--p2p-host", "127.0.0.1"),
                *("--p2p-port", str(p2p), "--api-port", str(api), "--no-discovery"),
                *("--log-level", "warning"),
            ]
            if nodes:
                cmd += ["--peer", f"127.0.0.1:{nodes[-1][0]}"]
            log = (root / f"node{i}.log").open("wb")
            logs.append(log)
            procs[f"node{i}"] = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=log)
            nodes.append((p2p, f"http://127.0.0.1:{api}"))
        for _, url in nodes:
            wait_api(url)
        time.sleep(2)  # let the peers connect
        log = (root / "miner.log").open("wb")
        logs.append(log)
        procs["miner"] = subprocess.Popen(
            [
                *(PY, "-m", "miner.cli", "--node", nodes[0][1], "--address", PAYOUT),
                *("--token-file", str(root / "node0" / "api.token")),
                *("--datadir", str(root / "miner"), "--rate", str(args.miner_rate)),
                *("--threads", "1"),
            ],
            cwd=REPO,
            stdout=log,
            stderr=log,
        )
        load_cmd = [
            *(PY, "-m", "node.wallet", "--devnet-faucet", "load", "--node", nodes[1][1]),
            *("--rate", str(args.rate), "--duration", str(args.duration)),
            *("--accounts", str(args.accounts), "--max-in-flight", str(args.max_in_flight)),
            *("--confirm-timeout", "60", "--report", str(root / "load.json")),
        ]
        print("$", " ".join(load_cmd), flush=True)
        load = subprocess.Popen(load_cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs["load"] = load
        before: dict[str, float] = {}
        spies: list[subprocess.Popen[bytes]] = []
        started = 0.0
        # The load phase starts when the generator says "funded".
        assert load.stderr is not None
        for raw in load.stderr:
            line = raw.decode(errors="replace").rstrip()
            print("  load:", line, flush=True)
            if line.startswith("funded"):
                before = {name: tree_cpu(p.pid) for name, p in procs.items()}
                started = time.monotonic()
                spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(PY).parent))
                if args.profile and spy:
                    for name in ("node0", "node1"):
                        prof = root / f"{name}.profile.txt"
                        spies.append(
                            subprocess.Popen(
                                [
                                    *(spy, "record", "-p", str(procs[name].pid)),
                                    *("-d", str(int(args.duration)), "-r", "50"),
                                    *("-f", "raw", "-o", str(prof)),
                                ],
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                            )
                        )
            if line.startswith("sent ") and before:
                after = {name: tree_cpu(p.pid) for name, p in procs.items()}
                wall = time.monotonic() - started
                print(f"CPU during the {wall:.0f} s load phase (s, share of one core):")
                for name in procs:
                    used = after[name] - before.get(name, 0.0)
                    print(f"  cpu {name:6s} {used:7.1f} s  {100 * used / wall:5.0f} %")
        summary, _ = load.communicate(timeout=args.duration + 400)
        print(summary.decode())
        for recorder in spies:
            recorder.wait(30)
        print(f"datadirs and logs: {root}")
        return load.returncode
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
            if p.poll() is None:
                p.kill()
        for f in logs:
            f.close()
        if not args.keep and not args.profile:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
