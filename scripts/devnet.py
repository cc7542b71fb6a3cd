"""``make run``: a local devnet of 3 nodes, 3 miners and a small transaction load on 127.0.0.1.

Starts ``dagchain-node start --network devnet`` three times (node i dials node i-1 with
``--peer``), one ``dagchain-miner`` per node (``--miners``, default 3: three peer chains knitting
together in the explorer), and a transaction load against node1 once the nodes are linked; prints
the explorer URL, then a live summary (a refreshing table on a terminal, plain lines otherwise).
Ctrl-C (SIGINT) or SIGTERM stops everything: SIGTERM to every child's process group, at most
10 s of grace, then SIGKILL, so no process is left behind and the nodes close their databases.
A node or miner killed by a signal (``kill -9`` to try crash recovery) is started again on its
data directory, at most 3 times each; one that exits with an error stops the devnet.

The transaction load is ``dagchain-wallet --devnet-faucet load`` when the wallet is installed;
otherwise a built-in faucet load (below) signs transfers of the documented devnet faucet key
with ``dagchain.transactions.sign_transaction`` and POSTs them to ``/v1/txs``.

Usage: ``python scripts/devnet.py [--datadir DIR] [--ports fixed|free] [--tps N] [--keep]``.
"""

import argparse
import contextlib
import ctypes
import importlib.util
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout: import dagchain from it
    sys.path.insert(0, str(REPO_ROOT))

from apiclient import ApiError, SyncNodeApi  # noqa: E402
from dagchain.crypto import address_from_pubkey, encode_address, xonly_pubkey  # noqa: E402
from dagchain.genesis import FAUCET_ADDRESS, FAUCET_SECRET  # noqa: E402
from dagchain.params import DEVNET  # noqa: E402
from dagchain.transactions import TxKind, TxOut, sign_transaction  # noqa: E402
from dagchain.types import TxId  # noqa: E402

NODES = 3
BASE_PORT = DEVNET.p2p_port  # node i: p2p BASE_PORT + 10 i, API BASE_PORT + 10 i + 1
STOP_GRACE_S = 10.0
STARTUP_TIMEOUT_S = 30.0
MAX_RESTARTS = 3
"""A node or miner killed by a signal is started again at most this many times."""
MARKER = ".dagchain-devnet"  # a datadir holding this file was made here and may be wiped
MINER_SECRET_BASE = 2  # miner i is paid to the key of secret 2 + i (public, devnet only)
RECIPIENTS = [address_from_pubkey(xonly_pubkey((100 + i).to_bytes(32, "big"))) for i in range(8)]
TPS_WINDOW_S = 10.0
HASHRATE_RE = re.compile(r"hashrate_hs=(\d+)")


def log(message: str) -> None:
    say(f"devnet: {message}")


def say(text: str) -> None:
    """Print; a closed stdout (``| head``) must not stop the shutdown."""
    with contextlib.suppress(OSError):
        print(text, flush=True)


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the node binds: TIME_WAIT ok
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pick_port(preferred: int | None) -> int:
    """``preferred`` if it is free on 127.0.0.1, else any free port."""
    if preferred is not None and port_free(preferred):
        return preferred
    return free_port()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if devnet.py dies (Linux PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


@dataclass
class Child:
    """One child process in its own process group (its own session), output to a log file."""

    name: str
    cmd: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    _log: Any = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"===== {' '.join(self.cmd)}\n".encode())
        self._log.flush()
        self.popen = subprocess.Popen(
            self.cmd,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: Ctrl-C reaches devnet.py only
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen is not None else -1

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])


def stop_children(
    children: Sequence[Child], grace_s: float = STOP_GRACE_S
) -> dict[str, int | None]:
    """SIGTERM every process group, wait at most ``grace_s`` in all, then SIGKILL what is left.

    Returns each child's exit status (negative: killed by that signal)."""
    for child in children:
        if child.running():
            child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        if child.popen is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.popen.wait(max(0.0, deadline - time.monotonic()))
    for child in children:
        if child.popen is None:
            continue
        if child.popen.poll() is None:
            log(f"{child.name} did not stop within {grace_s:.0f} s: SIGKILL")
        child.signal_group(signal.SIGKILL)  # also any grandchild left in the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.popen.wait(5)
        child.close_log()
    return {c.name: (c.popen.returncode if c.popen is not None else None) for c in children}


# ---------------------------------------------------------------------- built-in faucet load


class FaucetLoad:
    """Spends the devnet faucet's confirmed UTXOs at ``tps``: a small payment, change back.

    Only confirmed outputs are spent (POST /v1/txs accepts no unconfirmed parents), each at most
    once; the change becomes spendable again when its level set is applied.
    """

    def __init__(self, node_url: str, tps: float, stop: threading.Event) -> None:
        self.node_url = node_url
        self.api = SyncNodeApi(node_url, timeout_s=2.0)
        self.tps = tps
        self.stop = stop
        self.sent = 0
        self.rejected = 0
        self.used: set[tuple[str, int]] = set()
        self.used_order: deque[tuple[str, int]] = deque()
        self.rng = random.Random()
        self.thread = threading.Thread(target=self.run, name="faucet-load", daemon=True)
        self.faucet_hex = FAUCET_ADDRESS.hex()

    def spendable(self) -> list[tuple[str, int, int]]:
        try:
            body = self.api.address(self.faucet_hex)
        except ApiError:
            return []
        out = []
        for u in body.utxos:
            key = (u.txid, u.index)
            if key not in self.used and u.confirmations >= 1:
                out.append((u.txid, u.index, int(u.amount)))
        return out

    def send_one(self, txid: str, index: int, amount: int) -> bool:
        pay = self.rng.randrange(1_000, 100_000)
        fee = 200
        if amount <= pay + fee:
            return False
        outputs = [
            TxOut(pay, self.rng.choice(RECIPIENTS)),
            TxOut(amount - pay - fee, FAUCET_ADDRESS),
        ]
        tx = sign_transaction(
            TxKind.TRANSFER,
            [(TxId(bytes.fromhex(txid)), index)],
            outputs,
            [FAUCET_SECRET],
            DEVNET,
            aux_rand=self.rng.randbytes(32),
        )
        try:
            self.api.submit_tx(tx.raw)
        except ApiError as exc:
            if exc.status == 0:
                raise
            return False
        return True

    def run(self) -> None:
        interval = 1.0 / self.tps
        queue: list[tuple[str, int, int]] = []
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                if not queue:
                    queue = self.spendable()
                if queue:
                    txid, index, amount = queue.pop()
                    self._mark_used((txid, index))
                    if self.send_one(txid, index, amount):
                        self.sent += 1
                    else:
                        self.rejected += 1
            except (ApiError, ValueError, KeyError):
                queue = []  # the node is busy or restarting: try again next tick
            self.stop.wait(max(0.05, interval - (time.monotonic() - started)))

    def _mark_used(self, key: tuple[str, int]) -> None:
        self.used.add(key)
        self.used_order.append(key)
        while len(self.used_order) > 100_000:  # bounded memory on long runs
            self.used.discard(self.used_order.popleft())


# ---------------------------------------------------------------------- the devnet


@dataclass
class NodeInfo:
    index: int
    datadir: Path
    p2p_port: int
    api_port: int
    child: Child

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"


@dataclass
class Sample:
    """What the summary shows of one node."""

    height: int | None = None
    blocks: int | None = None
    peers: int | None = None
    mempool: int | None = None
    tps: float | None = None
    hashrate: float | None = None
    confirmed: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=64))


def confirmed_rate(
    window: deque[tuple[float, float]], now: float, confirmed: float
) -> float | None:
    """Confirmed tx/s over about the last TPS_WINDOW_S seconds, from counter samples.

    Appends (now, confirmed) and keeps the newest sample at least TPS_WINDOW_S old as the base,
    so the rate exists whatever the polling interval (with ``--interval`` 10 or more, dropping
    every sample older than the window left nothing to compare with). None until two samples
    are at least 1 s apart. A counter lower than the last sample is a node restarted from 0
    (devnet restarts one stopped by SIGKILL): the window starts again from it, not a negative
    rate.
    """
    if window and confirmed < window[-1][1]:
        window.clear()
    window.append((now, confirmed))
    while len(window) > 2 and now - window[1][0] >= TPS_WINDOW_S:
        window.popleft()
    first_t, first_n = window[0]
    if now - first_t < 1.0:
        return None
    return (confirmed - first_n) / (now - first_t)


def _metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            with contextlib.suppress(ValueError, IndexError):
                return float(line.rsplit(" ", 1)[1])
    return None


def _last_hashrate(path: Path) -> float | None:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    found = HASHRATE_RE.findall(tail)
    return float(found[-1]) if found else None


REPEAT_WINDOW = 900
"""Level sets the duplicate rate covers (devnet: 3 miners at 4 blocks/s, a quarter of them
milestones, make about 3 level sets a second, so about the last 5 minutes)."""
REPEAT_REREAD = 10
"""Newest level sets read again at every poll (a reorganisation replaces them)."""
REPEAT_MAX_FETCHES = 300
"""Raw blocks fetched per poll at most (the rest at the next poll)."""


def repeat_share(carried: Iterable[Sequence[str]]) -> tuple[int, int]:
    """``(repeats, inclusions)`` of the transfer txids each block carries: an inclusion is a
    repeat when another block of the same level sets carries the same txid (the tx's first
    inclusion is not one), as ``wallet/loadgen.py``'s duplicate rate."""
    counts = Counter(txid for txids in carried for txid in txids)
    inclusions = sum(counts.values())
    return inclusions - len(counts), inclusions


class RepeatCounter:
    """The summary's duplicate rate, from one node's API: ``GET /v1/dag`` for the blocks of its
    newest ``REPEAT_WINDOW`` best-chain level sets, ``GET /v1/blocks/{hash}/raw`` once per
    block with txs for its TRANSFER txids (registrations and redemptions, at index 0, are
    never relayed and never repeat, so they are left out of the count)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.level_sets: dict[int, list[str]] = {}  # height -> its blocks that carry txs
        self.transfers: dict[str, tuple[str, ...]] = {}  # block hash -> its transfer txids
        self.next_height = 0  # the first level set not read yet (0: none read)

    def update(self, best: int) -> None:
        """Read the level sets up to ``best`` (and the newest few again), then the raw bytes
        of their new blocks; keep only the last ``REPEAT_WINDOW``. Raises ApiError or
        OSError when the node does not answer."""
        floor = max(1, best - REPEAT_WINDOW + 1)
        start = max(floor, self.next_height - REPEAT_REREAD)
        api = SyncNodeApi(self.url, timeout_s=2.0)
        while start <= best:
            limit = min(100, best - start + 1)
            view = api.dag(start, limit)
            found: dict[int, list[str]] = {h: [] for h in range(start, start + limit)}
            for block in view.blocks:
                height = block.level_set_height
                if height is not None and height in found and block.txs > 0:
                    found[height].append(block.hash)
            self.level_sets.update(found)
            self.next_height = start + limit
            start += limit
        for height in [h for h in self.level_sets if h < floor]:
            del self.level_sets[height]
        wanted = {b for blocks in self.level_sets.values() for b in blocks}
        for block_hash in [b for b in self.transfers if b not in wanted]:
            del self.transfers[block_hash]
        missing = sorted(wanted - self.transfers.keys())[:REPEAT_MAX_FETCHES]
        for block_hash in missing:
            self.transfers[block_hash] = self._transfer_txids(block_hash)

    def _transfer_txids(self, block_hash: str) -> tuple[str, ...]:
        from dagchain.blocks import decode_block

        raw = SyncNodeApi(self.url, timeout_s=2.0).block_raw(block_hash)
        block = decode_block(raw, DEVNET)
        return tuple(tx.txid.hex() for tx in block.txs if tx.kind == TxKind.TRANSFER)

    def share(self) -> tuple[int, int]:
        """``(repeats, inclusions)`` over the blocks read so far."""
        return repeat_share(
            self.transfers[b]
            for blocks in self.level_sets.values()
            for b in blocks
            if b in self.transfers
        )

    def text(self) -> str:
        repeats, inclusions = self.share()
        if not inclusions:
            return "duplicates: - (no transfer in the last level sets yet)"
        return (
            f"duplicates: {100 * repeats / inclusions:.1f} % of {inclusions} transfer "
            f"inclusions are repeats ({repeats}; node0, last {len(self.level_sets)} level sets)"
        )


class Devnet:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root: Path = args.datadir.resolve()
        self.stop = threading.Event()
        self.nodes: list[NodeInfo] = []
        self.miners: list[tuple[int, Child]] = []  # (node index, miner)
        self.wallet_load: Child | None = None
        self.faucet_load: FaucetLoad | None = None
        self.samples: list[Sample] = []
        self.restarts: Counter[str] = Counter()
        """Children started again after a signal killed them (at most ``MAX_RESTARTS`` each)."""

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def children(self) -> list[Child]:
        """Every child, in stop order: load, miner, then the nodes."""
        out = [self.wallet_load] if self.wallet_load is not None else []
        out += [m for _, m in self.miners]
        return out + [n.child for n in self.nodes]

    def prepare_datadir(self) -> None:
        if self.root.exists() and any(self.root.iterdir()) and not self.args.keep:
            if not (self.root / MARKER).exists():
                raise SystemExit(
                    f"devnet: {self.root} exists and was not made by devnet.py; "
                    "pick another --datadir or remove it"
                )
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / MARKER).write_text("made by scripts/devnet.py; removed at the next run\n")

    def start(self) -> None:
        self.prepare_datadir()
        for i in range(NODES):
            fixed = self.args.ports == "fixed"
            p2p = pick_port(BASE_PORT + 10 * i if fixed else None)
            api = pick_port(BASE_PORT + 10 * i + 1 if fixed else None)
            datadir = self.root / f"node{i}"
            cmd = [
                sys.executable, "-m", "node.cli", "start", "--network", "devnet",
                "--datadir", str(datadir), "--p2p-host", "127.0.0.1", "--p2p-port", str(p2p),
                "--api-port", str(api), "--no-discovery", "--log-level", self.args.log_level,
            ]  # fmt: skip
            if i > 0:
                cmd += ["--peer", f"127.0.0.1:{self.nodes[i - 1].p2p_port}"]
            node = NodeInfo(
                i, datadir, p2p, api, Child(f"node{i}", cmd, self.root / f"node{i}.log")
            )
            self.nodes.append(node)
            self.samples.append(Sample())
            node.child.start()
            log(f"started node{i} pid {node.child.pid} api {node.url} p2p 127.0.0.1:{p2p}")
        for node in self.nodes:
            self.wait_up(node)
        self.wait_linked()
        self.start_miners()
        self.start_load()

    def wait_up(self, node: NodeInfo) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and not self.stop.is_set():
            if not node.child.running():
                raise ChildFailed(node.child)
            with contextlib.suppress(ApiError):
                SyncNodeApi(node.url).status(timeout_s=1.0)
                return
            self.stop.wait(0.2)
        if not self.stop.is_set():
            raise ChildFailed(node.child, f"did not answer within {STARTUP_TIMEOUT_S:.0f} s")

    def wait_linked(self) -> None:
        """Until every node has its peers (node1: two), at most STARTUP_TIMEOUT_S: the load
        then starts on a connected network (a node also announces its pool on each new link)."""
        want = [1] + [2] * (len(self.nodes) - 2) + [1] if len(self.nodes) > 1 else [0]
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and not self.stop.is_set():
            counts = []
            for node in self.nodes:
                with contextlib.suppress(ApiError, ValueError, KeyError, TypeError):
                    counts.append(SyncNodeApi(node.url).status(timeout_s=1.0).peers)
            if len(counts) == len(want) and all(c >= w for c, w in zip(counts, want, strict=True)):
                return
            self.stop.wait(0.2)
        if not self.stop.is_set():
            log("the nodes are not all linked yet; starting anyway")

    def start_miners(self) -> None:
        """``--miners`` miners (default 3), miner i on node i mod 3, each its own peer chain."""
        for i in range(self.args.miners):
            node = self.nodes[i % len(self.nodes)]
            name = "miner" if self.args.miners == 1 else f"miner{i}"
            secret = (MINER_SECRET_BASE + i).to_bytes(32, "big")
            payout = encode_address(DEVNET.hrp, address_from_pubkey(xonly_pubkey(secret)))
            cmd = [
                sys.executable, "-m", "miner.cli", "--node", node.url, "--address", payout,
                "--token-file", str(node.datadir / "api.token"),
                "--datadir", str(self.root / name), "--rate", str(self.args.block_rate),
                "--status-interval", "2",
            ]  # fmt: skip
            miner = Child(name, cmd, self.root / f"{name}.log")
            self.miners.append((node.index, miner))
            miner.start()
            log(
                f"started {name} pid {miner.pid} on node{node.index}, "
                f"{self.args.block_rate} blocks/s at most"
            )

    def start_load(self) -> None:
        if self.args.tps <= 0:
            return
        node = self.nodes[1 % len(self.nodes)]
        use_wallet = self.args.load == "wallet" or (
            self.args.load == "auto" and importlib.util.find_spec("wallet.cli") is not None
        )
        if use_wallet:
            cmd = [
                sys.executable, "-m", "wallet.cli", "--devnet-faucet", "load", "--node", node.url,
                "--rate", str(self.args.tps), "--duration", "86400",
            ]  # fmt: skip
            self.wallet_load = Child("load", cmd, self.root / "load.log")
            self.wallet_load.start()
            log(f"started dagchain-wallet load pid {self.wallet_load.pid}: {self.args.tps} tx/s")
        else:
            self.start_faucet_load(node)

    def start_faucet_load(self, node: NodeInfo) -> None:
        self.faucet_load = FaucetLoad(node.url, self.args.tps, self.stop)
        self.faucet_load.thread.start()
        log(f"started the built-in faucet load on node{node.index}: {self.args.tps} tx/s")

    def shutdown(self) -> int:
        self.stop.set()
        log("stopping: SIGTERM to every child, SIGKILL after 10 s")
        if self.faucet_load is not None:
            self.faucet_load.thread.join(5)
        codes = stop_children(self.children)
        failed = False
        for name, code in codes.items():
            how = (
                f"stopped by {signal.Signals(-code).name}" if code is not None and code < 0 else ""
            )
            log(f"{name} {how or f'exited {code}'}")
            failed |= name.startswith("node") and code != 0
        log("stopped; data and logs in " + str(self.root))
        return 1 if failed else 0

    def check_children(self) -> None:
        for child in self.children:
            if child.running():
                continue
            if child is self.wallet_load:  # the wallet's load ended: carry on with ours
                log(f"the wallet load exited ({child.popen and child.popen.returncode}):")
                say(child.log_tail(5))
                self.wallet_load = None
                child.close_log()
                self.start_faucet_load(self.nodes[1 % len(self.nodes)])
                continue
            code = child.popen.returncode if child.popen is not None else None
            if code is not None and code < 0 and self.restarts[child.name] < MAX_RESTARTS:
                # killed by a signal (a user's kill -9, the OOM killer): start it again on its
                # data directory, as an operator's supervisor would; an exit with an error
                # status is a failure and stops the devnet with its log
                self.restarts[child.name] += 1
                child.close_log()
                child.start()
                log(
                    f"started {child.name} pid {child.pid} again: it was stopped by "
                    f"{signal.Signals(-code).name} (restart {self.restarts[child.name]} of at "
                    f"most {MAX_RESTARTS})"
                )
                continue
            raise ChildFailed(child)

    # ---- summary -----------------------------------------------------------------------------

    def poll(self) -> None:
        now = time.monotonic()
        for node, sample in zip(self.nodes, self.samples, strict=True):
            try:
                api = SyncNodeApi(node.url, timeout_s=1.0)
                s = api.status()
                sample.height = s.best_milestone.height
                sample.blocks = s.blocks
                sample.peers = s.peers
                sample.mempool = s.mempool.size
                confirmed = _metric(api.text("/metrics"), "dagchain_txs_confirmed_total")
            except (ApiError, ValueError, KeyError, TypeError):
                continue
            if confirmed is not None:
                rate = confirmed_rate(sample.confirmed, now, confirmed)
                if rate is not None:
                    sample.tps = rate
        rates: dict[int, float] = {}
        for index, miner in self.miners:
            rate = _last_hashrate(miner.log_path)
            if rate is not None:
                rates[index] = rates.get(index, 0.0) + rate
        for index, sample in enumerate(self.samples):
            sample.hashrate = rates.get(index)
        self.poll_repeats()

    repeats: RepeatCounter | None = None
    """The duplicate rate (node0's view), created at the first poll."""

    def poll_repeats(self) -> None:
        best = self.samples[0].height if self.samples else None
        if best is None:
            return
        if self.repeats is None:
            self.repeats = RepeatCounter(self.nodes[0].url)
        with contextlib.suppress(ApiError, OSError, ValueError, KeyError, TypeError):
            self.repeats.update(best)

    def repeats_text(self) -> str:
        return self.repeats.text() if self.repeats is not None else "duplicates: -"

    def rows(self) -> list[list[str]]:
        def fmt(v: float | None, spec: str = "d") -> str:
            if v is None:
                return "-"
            return format(int(v), spec) if spec == "d" else format(v, spec)

        out = []
        for node, s in zip(self.nodes, self.samples, strict=True):
            out.append(
                [
                    f"node{node.index}",
                    f":{node.api_port}",
                    fmt(s.height),
                    fmt(s.blocks),
                    fmt(s.peers),
                    fmt(s.mempool),
                    fmt(s.tps, ".1f"),
                    _hashrate_text(s.hashrate),
                ]
            )
        return out

    def load_text(self) -> str:
        if self.faucet_load is not None:
            load = self.faucet_load
            return f"faucet load: {load.sent} txs sent, {load.rejected} refused"
        if self.wallet_load is not None:
            return "load: dagchain-wallet --devnet-faucet load (log: load.log)"
        return "load: off"

    def run_summary(self, out: TextIO) -> None:
        if out.isatty() and not self.args.plain:
            self._run_live()
        else:
            self._run_plain()

    def _run_plain(self) -> None:
        last = 0.0
        while not self.stop.is_set():
            self.check_children()
            if time.monotonic() - last >= self.args.interval:
                last = time.monotonic()
                self.poll()
                for row in self.rows():
                    say(
                        f"{row[0]}: height {row[2]} blocks {row[3]} peers {row[4]} "
                        f"mempool {row[5]} tps {row[6]} hashrate {row[7]}"
                    )
                say(self.load_text())
                say(self.repeats_text())
            self.stop.wait(0.5)

    def _run_live(self) -> None:
        from rich.console import Group
        from rich.live import Live
        from rich.table import Table
        from rich.text import Text

        def render() -> Group:
            table = Table(title="dagchain devnet", title_justify="left")
            table.add_column("node")
            table.add_column("api")
            for col in ("height", "blocks", "peers", "mempool", "tps", "hash rate"):
                table.add_column(col, justify="right")
            for row in self.rows():
                table.add_row(*row)
            footer = Text(
                "height: best milestone; tps: confirmed tx/s over 10 s; hash rate: of its miners\n"
                f"{self.load_text()}\n{self.repeats_text()}\nexplorer: {self.nodes[0].url}/   "
                f"logs: {self.root}   Ctrl-C stops everything",
                style="dim",
            )
            return Group(table, footer)

        with Live(render(), refresh_per_second=2, transient=False) as live:
            while not self.stop.is_set():
                self.check_children()
                self.poll()
                live.update(render())
                self.stop.wait(1.0)


def _hashrate_text(rate: float | None) -> str:
    if rate is None:
        return "-"
    for unit, scale in (("MH/s", 1e6), ("kH/s", 1e3)):
        if rate >= scale:
            return f"{rate / scale:.1f} {unit}"
    return f"{rate:.0f} H/s"


class ChildFailed(Exception):
    def __init__(self, child: Child, why: str = "") -> None:
        code = child.popen.returncode if child.popen is not None else None
        super().__init__(f"{child.name} {why or f'exited with status {code}'}")
        self.child = child


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/devnet.py", description=__doc__.split("\n")[0])
    p.add_argument(
        "--datadir", type=Path, default=Path("devnet-data"), help="default ./devnet-data"
    )
    p.add_argument(
        "--keep", action="store_true", help="reuse the datadir's chain instead of wiping"
    )
    p.add_argument(
        "--ports",
        choices=["fixed", "free"],
        default="fixed",
        help=f"fixed: node i on {BASE_PORT}+10i (p2p) and +1 (API) when free; free: any free port",
    )
    p.add_argument(
        "--tps", type=float, default=2.0, help="offered transactions per second (0: off)"
    )
    p.add_argument("--load", choices=["auto", "wallet", "builtin"], default="auto")
    p.add_argument(
        "--miners", type=int, default=NODES, help="miners (peer chains), on node i mod 3"
    )
    p.add_argument("--block-rate", type=float, default=4.0, help="miner --rate (blocks per second)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between plain lines")
    p.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    devnet = Devnet(args)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        devnet.stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    status = 0
    try:
        devnet.start()
        if not devnet.stop.is_set():
            url = devnet.nodes[0].url + "/"
            others = ", ".join(n.url + "/" for n in devnet.nodes[1:])
            log(f"explorer: {url}  (also {others})")
            log("Ctrl-C stops everything")
            devnet.run_summary(sys.stdout)
    except ChildFailed as exc:
        log(f"error: {exc}; its log ({exc.child.log_path}) ends with:")
        say(exc.child.log_tail())
        status = 1
    finally:
        status = devnet.shutdown() or status
    return status


if __name__ == "__main__":
    sys.exit(main())
