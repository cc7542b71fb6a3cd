"""Confirmed transactions per second on a live devnet (docs/benchmarks.md, "Transactions").

Usage: ``python bench/tps.py [--duration S] [--rate TPS] [--miner-rate BLOCKS_PER_S]
[--nodes M] [--miners N] [--accounts N] [--max-in-flight N] [--batch N] [--profile]
[--blocks-json PATH]``

Starts ``--nodes`` (default 3) ``dagchain-node --network devnet`` processes on 127.0.0.1 (a line:
node i dials node i-1), ``--miners`` (default 1) ``dagchain-miner`` processes, miner i on node
i mod M with its own datadir and payout address, then ``dagchain-wallet --devnet-faucet load``
against node1 (node0 if M = 1) for ``--duration`` seconds (default 120). ``--miner-rate`` is the
TOTAL block rate cap: each of the N miners runs with ``--rate miner_rate / N``, so the network's
block rate does not change with N. The block rate the miners reached during the load phase is
printed beside it (``block rate reached``). ``--miner-rate 8,16,32`` is a sweep: one run per rate
(each a fresh devnet, this script again with that rate), then a table of the block rate reached,
confirmed tx/s, latency p50/p90 and the duplicate rate per rate: the devnet's capacity curve.

Prints the CPU seconds and share of one core that each process used during the load phase (from
/proc/<pid>/stat); then, from a walk of the load node's best chain over the run (every level set
after the start, every block's ``tx_status``): the tx labels of the load's txs (``valid`` and
``invalid:<reason>``, so duplicates show as their INVALID reason) and, per miner, its accepted
blocks (``state.json``) and its blocks in those level sets with their VALID and INVALID txs, and
where the repeat inclusions came from (miner pairs on one node or two, the timestamp gap between
the blocks of the VALID copy and the repeat); then the load generator's summary (offered and
confirmed TPS, latency percentiles, duplicate rate) and the datadir line, as before.
``--profile`` records a py-spy profile of node0, node1 and the load generator during the load
(needs ``py-spy`` on PATH); ``--blocks-json`` writes the walked blocks for offline analysis.

A paced miner (``--rate``) mines at a fixed period, not as a Poisson process, so two miners keep the
relative phase their start gave them: miners in phase on nodes that receive the same relay batch
build their templates within milliseconds of each other, and most repeat inclusions come from
such pairs (docs/benchmarks.md, "Several miners"). The duplicate rate of one run therefore
depends on the start phases; compare several runs.
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
from collections import Counter
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


def get_json(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def payout_address(i: int) -> str:
    """Miner 0 keeps the historical PAYOUT (bytes 0..31); miner i > 0 pays to 32 bytes of i."""
    if i == 0:
        return PAYOUT
    from dagchain.crypto import encode_address

    return encode_address("ddag", bytes([i]) * 32)


def best_height(url: str) -> int:
    return int(get_json(url + "/v1/status")["best_milestone"]["height"])


def walk_level_sets(url: str, start: int, timeout: float = 300) -> list[dict[str, Any]]:
    """Every block of the best chain's level sets at heights start+1 .. best (bounded)."""
    deadline = time.monotonic() + timeout
    best = best_height(url)
    blocks: list[dict[str, Any]] = []
    for height in range(start + 1, min(best, start + 200_000) + 1):
        if time.monotonic() > deadline:
            print(f"  level-set walk stopped at height {height} (time limit)", flush=True)
            break
        ids = get_json(f"{url}/v1/milestones/{height}/level-set")
        blocks.extend(get_json(f"{url}/v1/blocks/{h}") for h in ids)
    return blocks


def miner_blocks(datadir: Path) -> int:
    try:
        return int(json.loads((datadir / "state.json").read_text()).get("blocks", 0))
    except (OSError, ValueError):
        return 0


def report_chain(
    url: str,
    start: int,
    load_json: Path,
    miners: list[tuple[str, int, Path]],
    before: dict[str, int],
    dump: Path | None = None,
) -> None:
    """Print tx labels of the load txs and blocks per miner from the best chain's level sets."""
    try:
        load_txids = {
            t["txid"] for t in json.loads(load_json.read_text())["txs"] if t["kind"] == "load"
        }
    except (OSError, ValueError, KeyError):
        load_txids = set()
    blocks = walk_level_sets(url, start)
    if dump is not None:
        dump.write_text(json.dumps(blocks))
    labels: Counter[str] = Counter()
    every: Counter[str] = Counter()
    by_hash = {b["hash"]: b for b in blocks}
    for block in blocks:
        for txid, label in zip(block["txids"], block["tx_status"], strict=True):
            every[label] += 1
            if txid in load_txids:
                labels[label] += 1
    inclusions = sum(labels.values())
    print(f"best-chain walk of node at {url}: {len(blocks)} blocks in heights {start + 1}..")
    print(
        f"load tx labels: {inclusions} inclusions: "
        + (", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none")
    )
    for what, counter in (("load txs", labels), ("all txs", every)):
        invalid = {k.split(":", 1)[1]: v for k, v in counter.items() if k.startswith("invalid:")}
        print(
            f"invalid_by_reason ({what}): "
            + (", ".join(f"{k}={v}" for k, v in sorted(invalid.items())) or "none")
        )
    children = {b["previous_link"]: b for b in blocks}  # one child per link: no forks per root
    owner: dict[str, tuple[str, int]] = {}  # block hash -> (miner, node index)
    for name, node_index, datadir in miners:
        try:
            link = str(json.loads((datadir / "state.json").read_text()).get("root") or "")
        except (OSError, ValueError):
            link = ""
        counts: Counter[str] = Counter()
        ordered = 0
        if link in by_hash:  # the registration block itself
            ordered, counts["valid"] = 1, len(by_hash[link]["txids"])
            owner[link] = (name, node_index)
        while link in children and ordered <= len(blocks):  # forward along this peer chain
            block = children[link]
            ordered += 1
            for label in block["tx_status"]:
                counts["valid" if label == "valid" else "invalid"] += 1
            link = block["hash"]
            owner[link] = (name, node_index)
        accepted = miner_blocks(datadir)
        print(
            f"miner {name} on node{node_index}: accepted {accepted} blocks "
            f"({accepted - before.get(name, 0)} after funding), {ordered} in the walked "
            f"level sets with {counts['valid']} valid / {counts['invalid']} invalid txs"
        )
    report_duplicates(blocks, load_txids, owner)


def report_duplicates(
    blocks: list[dict[str, Any]], load_txids: set[str], owner: dict[str, tuple[str, int]]
) -> None:
    """Where the repeat inclusions came from: miner pairs on one node or two, and the gap
    between the block timestamps of the VALID copy and each repeat (blocks in total order)."""
    copies: dict[str, list[dict[str, Any]]] = {}
    for block in blocks:
        for txid in block["txids"]:
            if txid in load_txids:
                copies.setdefault(txid, []).append(block)
    pairs: Counter[str] = Counter()
    gaps: list[int] = []
    for found in copies.values():
        first = found[0]
        for repeat in found[1:]:
            a, b = owner.get(first["hash"]), owner.get(repeat["hash"])
            if a is None or b is None:
                pairs["unknown miner"] += 1
            elif a[0] == b[0]:
                pairs["same miner"] += 1
            else:
                pairs["same node" if a[1] == b[1] else "other node"] += 1
            gaps.append(int(repeat["timestamp_ms"]) - int(first["timestamp_ms"]))
    if not gaps:
        print("repeat inclusions: none")
        return
    gaps.sort()
    mags = sorted(abs(g) for g in gaps)
    print(
        f"repeat inclusions: {len(gaps)} ("
        + ", ".join(f"{k} {v}" for k, v in sorted(pairs.items()))
        + f"); repeat block mined before the VALID copy's: {sum(g < 0 for g in gaps)}; "
        f"|timestamp gap| p50 {mags[len(mags) // 2]} ms, p90 {mags[len(mags) * 9 // 10]} ms"
    )


def rates(text: str) -> list[float]:
    """``--miner-rate``: one positive block rate, or a comma-separated list (a sweep)."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or a list of numbers: {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError("block rates must be positive")
    return values


SWEEP_FIELDS = {
    "block rate reached": "block rate reached: ",
    "confirmed_tps": "confirmed_tps: ",
    "latency_s": "latency_s: ",
    "duplicate_rate": "duplicate_rate: ",
}


def sweep(miner_rates: list[float]) -> int:
    """One run of this script per block rate, then the capacity curve as a table."""
    argv = sys.argv[1:]
    at = next(i for i, a in enumerate(argv) if a.startswith("--miner-rate"))
    rest = argv[:at] + argv[at + (1 if "=" in argv[at] else 2) :]
    rows: list[tuple[float, dict[str, str]]] = []
    for rate in miner_rates:
        print(f"=== --miner-rate {rate:g}", flush=True)
        run = subprocess.run(
            [PY, __file__, *rest, "--miner-rate", str(rate)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        print(run.stdout, end="", flush=True)
        found = {
            name: line[len(prefix) :].split(" (")[0].strip()
            for line in run.stdout.splitlines()
            for name, prefix in SWEEP_FIELDS.items()
            if line.startswith(prefix)
        }
        if run.returncode != 0:
            print(run.stderr[-2000:], file=sys.stderr)
        rows.append((rate, found))
    print("\ncapacity curve (miner rate asked -> reached, confirmed tx/s, latency, duplicates)")
    print(f"{'asked':>6} | {'reached':>30} | {'confirmed tx/s':>14} | latency | duplicates")
    for rate, found in rows:
        cells = [found.get(name, "-") for name in SWEEP_FIELDS]
        print(f"{rate:6g} | {cells[0]:>30} | {cells[1]:>14} | {cells[2]} | {cells[3]}")
    return 0 if all(len(found) == len(SWEEP_FIELDS) for _, found in rows) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--rate", type=float, default=1024.0)
    ap.add_argument(
        "--miner-rate",
        type=rates,
        default=[12.0],
        help="total blocks/s, split over the miners; a comma-separated list is a sweep",
    )
    ap.add_argument("--nodes", type=int, default=3, help="devnet nodes in a line (>= 1)")
    ap.add_argument("--miners", type=int, default=1, help="miners; miner i on node i mod M")
    ap.add_argument("--accounts", type=int, default=64)
    ap.add_argument("--max-in-flight", type=int, default=384)
    ap.add_argument("--batch", type=int, default=64, help="the load's txs per request (--batch)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--blocks-json", type=Path, help="write the walked level-set blocks (JSON list) here"
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary datadirs")
    args = ap.parse_args()
    # SIGTERM to the bench runs the cleanup below, like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not 1 <= args.nodes <= 16 or not 1 <= args.miners <= 32:
        ap.error("--nodes must be 1..16 and --miners 1..32")
    if len(args.miner_rate) > 1:
        return sweep(args.miner_rate)
    args.miner_rate = args.miner_rate[0]

    root = Path(tempfile.mkdtemp(prefix="dagchain-tps-"))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs: list[Any] = []
    nodes: list[tuple[int, str]] = []
    try:
        for i in range(args.nodes):
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
            procs[f"node{i}"] = subprocess.Popen(
                cmd, cwd=REPO, stdout=log, stderr=log, start_new_session=True
            )
            nodes.append((p2p, f"http://127.0.0.1:{api}"))
        for _, url in nodes:
            wait_api(url)
        time.sleep(2)  # let the peers connect
        load_url = nodes[1 if args.nodes > 1 else 0][1]
        start_height = best_height(load_url)  # before any miner: the walk sees all their blocks
        miners: list[tuple[str, int, Path]] = []
        for i in range(args.miners):
            name = "miner" if args.miners == 1 else f"miner{i}"
            node_index = i % args.nodes
            datadir = root / name
            miners.append((name, node_index, datadir))
            log = (root / f"{name}.log").open("wb")
            logs.append(log)
            procs[name] = subprocess.Popen(
                [
                    *(PY, "-m", "miner.cli", "--node", nodes[node_index][1]),
                    *("--address", payout_address(i)),
                    *("--token-file", str(root / f"node{node_index}" / "api.token")),
                    *("--datadir", str(datadir), "--rate", str(args.miner_rate / args.miners)),
                    *("--threads", "1"),
                ],
                cwd=REPO,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        print(
            f"devnet: {args.nodes} nodes, {args.miners} miners at "
            f"{args.miner_rate / args.miners:g} blocks/s each; load against {load_url}",
            flush=True,
        )
        load_cmd = [
            *(PY, "-m", "wallet.cli", "--devnet-faucet", "load", "--node", load_url),
            *("--rate", str(args.rate), "--duration", str(args.duration)),
            *("--accounts", str(args.accounts), "--max-in-flight", str(args.max_in_flight)),
            *("--batch", str(args.batch)),
            *("--confirm-timeout", "60", "--report", str(root / "load.json")),
        ]
        print("$", " ".join(load_cmd), flush=True)
        blocks_before: dict[str, int] = {}
        load = subprocess.Popen(
            load_cmd,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
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
                blocks_before = {name: miner_blocks(d) for name, _, d in miners}
                started = time.monotonic()
                spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(PY).parent))
                if args.profile and spy:
                    for name in (*("node0", "node1")[: args.nodes], "load"):
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
                mined = sum(miner_blocks(d) - blocks_before.get(n, 0) for n, _, d in miners)
                print(
                    f"block rate reached: {mined / wall:.2f} blocks/s "
                    f"(asked {args.miner_rate:g}; {mined} blocks in the load phase)",
                    flush=True,
                )
        summary, _ = load.communicate(timeout=args.duration + 400)
        try:
            report_chain(
                load_url, start_height, root / "load.json", miners, blocks_before, args.blocks_json
            )
        except (OSError, ValueError, KeyError) as exc:
            print(f"best-chain walk failed: {exc!r}")
        print(summary.decode())
        for recorder in spies:
            recorder.wait(30)
        print(f"datadirs and logs: {root}")
        return load.returncode
    finally:
        # Each child leads its own process group (a node's signature workers included):
        # SIGTERM every group, wait up to 10 s each, then SIGKILL the group of a leader still alive.
        for p in procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)
        for f in logs:
            f.close()
        if not args.keep and not args.profile:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
