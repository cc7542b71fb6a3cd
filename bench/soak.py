"""A soak with faults (issue 26, item 3): 5 devnet nodes, 3 miners, a payment load, and a seeded
schedule of faults, bounded in time; checks at checkpoints and at the end, and a report.

Run: ``python bench/soak.py [--minutes 30] [--seed 1] [--tps 200] [--out DIR]``; the short
form ``tests/functional/test_soak.py`` runs it for about 3 minutes in ``make test``.

The network: 5 nodes on 127.0.0.1, each dialing every other node once (10 links), every link
through a TCP proxy this process runs (:class:`LinkProxy`), so it can partition the network;
``dagchain-miner`` on nodes 0, 2 and 4 at ``--miner-rate`` blocks/s each; ``dagchain-wallet
load`` paying at ``--tps`` to node 0 for ``--minutes`` (its send window) with ``--report``.

The faults, one at a time, in seeded rounds (each round every kind once, in a seeded order;
the first round always runs whole, later ones while they fit in the send window), a seeded quiet
gap after each:

- ``kill``: SIGKILL a node, restart it on its datadir ``--down`` seconds later;
- ``stop``: SIGSTOP a node for ``--stop`` seconds (30), then SIGCONT;
- ``partition``: a seeded 2 of the 5 nodes cut off from the other 3 for ``--partition``
  seconds (60): the proxies of the links across the cut stop forwarding (nothing is dropped:
  what was read waits, and new connections wait before their upstream is dialled), then heal;
- ``skew``: a node stopped (SIGTERM) and started again with its clock shifted by a seeded
  +-50..80 % of ``max_future_drift`` (``DAGCHAIN_TEST_CLOCK_OFFSET_MS``, a test-only variable of
  the node); it keeps the skew for the rest of the run;
- ``hostile``: the P2P tests' ``FakePeer`` (written from PROTOCOL.md) connects to a node and
  misbehaves, four times: malformed frames, a block with bad proof of work (linking the node's
  best milestone: P14 would drop one linking genesis unexamined), unsolicited answers, an inv
  flood; each time it must be closed and then refused as banned.

Node 0 (the load's node) is never killed, stopped or skewed: a ``202`` is acknowledged in memory
only (docs/node.md, "Mempool policy"), so "every acknowledged payment confirmed once" is checked
where it is promised. It does take part in partitions and hostile attacks.

Reconvergence after a fault: from the heal (restart answered, SIGCONT, partition healed, attack
over) until every node's best height is at least the highest best height any node had at the
heal and all nodes hold the same milestone at the lowest of their best heights (polled every
0.5 s, at most ``--converge-timeout`` s). Each such moment is a checkpoint: RSS and open files
(``/proc/PID``) of every process, each node's orphan pool (``dagchain_orphans``) and mempool.

At the end (faults healed, the load finished, miners stopped): one best milestone on all nodes;
identical ledgers (a digest of every best-chain milestone and level set, and the balances of the
faucet, the load's accounts and the miners' payouts, through the API); every tx the load had
answered ``202`` VALID exactly once (the load's report, from node 0's best chain, and a sample
checked on every node); no unbounded growth (open files at most 64 above the first sample, RSS
at most 3x the first sample plus 300 MB). The report is ``DIR/soak.json`` and ``DIR/soak.txt``:
the fault timeline, the longest reconvergence per kind, tx latency p50/p99 of txs whose life
(sent to confirmed) overlaps a fault (its start to its reconvergence) and of the others, and
RSS at start and end of each process.
"""

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apiclient import ApiError
from dagchain.blocks import NONCE_OFFSET, Block, make_block
from dagchain.crypto import address_from_pubkey, encode_address, xonly_pubkey
from dagchain.genesis import FAUCET_ADDRESS
from dagchain.params import DEVNET
from dagchain.rules import final_height
from dagchain.types import BlockId
from node.daemon import CLOCK_OFFSET_ENV
from p2p import wire
from tests.dagchain.builders import address_of_secret, build_block, secret_of
from tests.functional.framework import (
    BlockFactory,
    FakePeer,
    NodeProcess,
    free_port,
    spawn,
    wait_until,
)

FAULT_KINDS = ("kill", "stop", "partition", "skew", "hostile")
LOAD_NODE = 0
MINER_NODES = (0, 2, 4)
MINER_SECRET_BASE = 40  # miner i is paid to the key of secret 40 + i (public, devnet only)
POLL_S = 0.5
FD_SLACK = 64
RSS_FACTOR, RSS_SLACK_KIB = 3, 300 * 1024
BAN_LINE = re.compile(r"banned \(node:([0-9a-f]{64})\)")
CHECK_SAMPLE = 50
"""Accepted txs looked up on every node at the end (the rest is covered by the ledger digest)."""


@dataclass(slots=True)
class SoakConfig:
    """Options of one soak (the module docstring)."""

    minutes: float = 30.0
    seed: int = 1
    nodes: int = 5
    tps: float = 200.0
    miner_rate: float = 2.0
    stop_s: float = 30.0
    partition_s: float = 60.0
    down_s: float = 5.0
    gap_s: tuple[float, float] = (15.0, 40.0)
    converge_timeout_s: float = 120.0
    confirm_timeout_s: float = 120.0
    final_timeout_s: float = 180.0
    kinds: tuple[str, ...] = FAULT_KINDS
    """The fault kinds scheduled (each round: every one of them, in a seeded order)."""
    out: Path = Path("out/soak")


@dataclass(slots=True)
class Fault:
    """One fault of the schedule and what happened."""

    kind: str
    targets: list[int]
    param: float = 0.0
    """Seconds of the stop or partition, or the clock offset in ms of a skew."""
    start_s: float = 0.0
    heal_s: float = 0.0
    reconverged_after_s: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


def plan_faults(rng: random.Random, config: SoakConfig, rounds: int) -> list[Fault]:
    """``rounds`` rounds of every fault kind in a seeded order, with seeded targets."""
    faulty = list(range(1, config.nodes))  # never the load's node 0 (module docstring)
    drift = DEVNET.max_future_drift_ms
    out: list[Fault] = []
    for _ in range(rounds):
        for kind in rng.sample(config.kinds, len(config.kinds)):
            if kind == "partition":
                fault = Fault(kind, sorted(rng.sample(range(config.nodes), 2)), config.partition_s)
            elif kind == "hostile":
                fault = Fault(kind, [rng.randrange(config.nodes)])
            elif kind == "skew":
                offset = rng.choice((-1, 1)) * rng.randint(drift // 2, drift * 4 // 5)
                fault = Fault(kind, [rng.choice(faulty)], float(offset))
            else:
                fault = Fault(kind, [rng.choice(faulty)], config.stop_s if kind == "stop" else 0)
            out.append(fault)
    return out


def expected_s(fault: Fault, config: SoakConfig) -> float:
    """A fault's own duration plus a reconvergence allowance (does it fit the window?)."""
    own = {"stop": config.stop_s, "partition": config.partition_s, "kill": config.down_s + 10}
    return own.get(fault.kind, 10.0) + 20.0


# ------------------------------------------------------------------------------ the proxy


class LinkProxy:
    """A TCP proxy on 127.0.0.1 for one node-to-node link; ``forwarding`` cleared stalls it."""

    def __init__(self, name: str, target_port: int, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.port = free_port()
        self.target_port = target_port
        self.loop = loop
        self.forwarding = asyncio.Event()
        self.forwarding.set()
        self.bytes = 0
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    def set_forwarding(self, on: bool) -> None:
        """Heal (True) or cut (False), from any thread."""
        self.loop.call_soon_threadsafe(self.forwarding.set if on else self.forwarding.clear)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self.forwarding.wait()  # a new connection during a cut waits, as SYNs would
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.forwarding.wait()  # cut: hold what was read, read no more
                writer.write(data)
                self.bytes += len(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


class ProxyNet:
    """Every link's proxy, on one event loop in a thread of this process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="proxies", daemon=True)
        self.thread.start()
        self.links: dict[tuple[int, int], LinkProxy] = {}

    def add(self, dialer: int, listener: int, target_port: int) -> LinkProxy:
        proxy = LinkProxy(f"{dialer}->{listener}", target_port, self.loop)
        asyncio.run_coroutine_threadsafe(proxy.start(), self.loop).result(10)
        self.links[(dialer, listener)] = proxy
        return proxy

    def cut(self, side: Sequence[int], on: bool) -> int:
        """Stall (``on``) or heal every link with one end in ``side``; returns how many."""
        crossing = [p for (a, b), p in self.links.items() if (a in side) != (b in side)]
        for proxy in crossing:
            proxy.set_forwarding(not on)
        return len(crossing)

    def close(self) -> None:
        """Close the listeners and every forwarded connection, then the loop."""

        async def stop() -> None:
            for proxy in self.links.values():
                if proxy.server is not None:
                    proxy.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


# ------------------------------------------------------------------------------ processes


def proc_sample(pid: int) -> tuple[int, int] | None:
    """(RSS KiB, open files) of a live process, or None."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss = next((int(line.split()[1]) for line in status.splitlines() if line[:6] == "VmRSS:"), 0)
    return rss, fds


def miner_payout(index: int) -> str:
    secret = (MINER_SECRET_BASE + index).to_bytes(32, "big")
    return encode_address(DEVNET.hrp, address_from_pubkey(xonly_pubkey(secret)))


def percentiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0, "p50": 0.0, "p99": 0.0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"n": len(ordered), "p50": at(0.5), "p99": at(0.99)}


class Soak:
    """One soak run: the network, the schedule, the checks and the report."""

    def __init__(self, config: SoakConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.root = config.out
        self.t0 = time.monotonic()
        self.proxies = ProxyNet()
        self.nodes: list[NodeProcess] = []
        self.miners: list[subprocess.Popen[bytes]] = []
        self.load: subprocess.Popen[bytes] | None = None
        self.faults: list[Fault] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.processes: dict[str, dict[str, Any]] = {}
        self.failures: list[str] = []
        self.stopped: set[int] = set()
        self.honest_ids: set[str] = set()
        """Node ids of every node instance of the run (a new one at each start)."""
        self.send_started = 0.0

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def say(self, text: str) -> None:
        print(f"[soak {self.now():7.1f}s] {text}", flush=True)

    # -------------------------------------------------------------- setup

    def start_network(self) -> None:
        """5 nodes, each dialing every other node once, every link through a proxy."""
        n = self.config.nodes
        # ports a restart binds again: outside the ephemeral range
        self.nodes = [NodeProcess(i, self.root / f"node{i}" / "data") for i in range(n)]
        for i in range(n):
            for j in range(i + 1, n):  # i dials j: one connection per pair
                proxy = self.proxies.add(i, j, self.nodes[j].p2p_port)
                self.nodes[i].peers.append(f"127.0.0.1:{proxy.port}")
        for node in self.nodes:
            node.start(wait=False)
        for node in self.nodes:
            wait_until(node.is_up, 90, f"{node.name} to answer /v1/status")
            self.honest_ids.add(node.status().node_id)
        for node in self.nodes:
            node.wait(lambda x: x.peer_count() >= n - 1, 90, f"to have {n - 1} peers")
        self.say(f"{n} nodes up, fully meshed through {len(self.proxies.links)} proxies")

    def start_miners(self) -> None:
        for i, index in enumerate(MINER_NODES[: len(self.nodes)]):
            node = self.nodes[index]
            cmd = [
                *(sys.executable, "-m", "miner.cli", "--node", node.url),
                *("--address", miner_payout(i), "--token-file", str(node.datadir / "api.token")),
                *("--datadir", str(self.root / f"miner{i}")),
                *("--rate", str(self.config.miner_rate), "--status-interval", "10"),
            ]
            with (self.root / f"miner{i}.log").open("ab") as log:
                self.miners.append(spawn(cmd, log))
        self.say(f"{len(self.miners)} miners at {self.config.miner_rate} blocks/s each")

    def start_load(self) -> None:
        node = self.nodes[LOAD_NODE]
        seconds = self.config.minutes * 60
        cmd = [
            *(sys.executable, "-m", "wallet.cli", "--devnet-faucet", "load", "--node", node.url),
            *("--rate", str(self.config.tps), "--duration", str(seconds)),
            *("--confirm-timeout", str(self.config.confirm_timeout_s)),
            *("--report", str(self.root / "load.json")),
        ]
        self.load_log = self.root / "load.log"
        with self.load_log.open("ab") as log:
            self.load = spawn(cmd, log)
        wait_until(
            lambda: (
                "funded; sending" in self.load_log.read_text(errors="replace")
                or self._load_exited()
            ),
            300,
            "the load to fund its accounts",
        )
        if self._load_exited():
            raise AssertionError(f"the load exited:\n{self.load_log.read_text()[-2000:]}")
        self.send_started = time.monotonic()
        self.say(f"load sending {self.config.tps:g} tx/s to node{LOAD_NODE} for {seconds:.0f} s")

    def _load_exited(self) -> bool:
        return self.load is not None and self.load.poll() is not None

    # -------------------------------------------------------------- observation

    def pids(self) -> dict[str, int]:
        """Every live process of the run, by name."""
        out = {n.name: n.process.pid for n in self.nodes if n.process and n.process.poll() is None}
        out.update({f"miner{i}": m.pid for i, m in enumerate(self.miners) if m.poll() is None})
        if self.load is not None and self.load.poll() is None:
            out["load"] = self.load.pid
        return out

    def checkpoint(self, label: str) -> dict[str, Any]:
        """RSS and open files of every process; orphans and mempool of every running node."""
        row: dict[str, Any] = {"t": self.now(), "label": label, "processes": {}, "nodes": {}}
        for name, pid in self.pids().items():
            sample = proc_sample(pid)
            if sample is None:
                continue
            row["processes"][name] = {"pid": pid, "rss_kib": sample[0], "fds": sample[1]}
            entry = self.processes.setdefault(f"{name}@{pid}", {"name": name, "pid": pid})
            entry.setdefault("start", {"t": self.now(), "rss_kib": sample[0], "fds": sample[1]})
            entry["end"] = {"t": self.now(), "rss_kib": sample[0], "fds": sample[1]}
        for node in self.running_nodes():
            with contextlib.suppress(ApiError, OSError):
                status = node.status()
                row["nodes"][node.name] = {
                    "orphans": int(node.metric("dagchain_orphans")),
                    "mempool": status.mempool.size,
                    "peers": status.peers,
                }
        self.checkpoints.append(row)
        return row

    def running_nodes(self) -> list[NodeProcess]:
        return [n for n in self.nodes if n.index not in self.stopped]

    def converged(self, floor: int) -> bool:
        """Every node at or above ``floor``, all holding one milestone at the lowest best."""
        heights = [n.best()[1] for n in self.nodes]
        low = min(heights)
        if low < floor:
            return False
        return len({n.api.milestones(low, 1)[0].hash for n in self.nodes}) == 1

    def max_height(self, nodes: Sequence[NodeProcess]) -> int:
        heights = []
        for node in nodes:
            with contextlib.suppress(ApiError, OSError):
                heights.append(node.best()[1])
        return max(heights, default=0)

    def healed(self, fault: Fault) -> None:
        """Mark the end of the fault: SIGCONT sent, links healed, restart launched, attack over."""
        fault.heal_s = self.now()

    def wait_converged(self, fault: Fault) -> None:
        """Record the time from the heal to reconvergence (or fail after the timeout).

        The floor is the highest best height of the nodes the fault did not touch (all nodes
        for a partition or an attack), read right after the heal."""
        heal = self.t0 + fault.heal_s
        if fault.kind in ("kill", "stop", "skew"):
            floor = self.max_height([n for n in self.nodes if n.index not in fault.targets])
        else:
            floor = self.max_height(self.nodes)
        try:
            wait_until(
                lambda: self.converged(floor),
                self.config.converge_timeout_s,
                f"one chain at height {floor} or above",
            )
        except AssertionError as exc:
            self.failures.append(f"{fault.kind} {fault.targets} at {fault.start_s:.0f}s: {exc}")
            self.say(f"NOT reconverged: {exc}")
            return
        fault.reconverged_after_s = round(time.monotonic() - heal, 2)
        self.say(f"reconverged {fault.reconverged_after_s:.1f} s after the heal (floor {floor})")

    # -------------------------------------------------------------- faults

    def run_faults(self) -> None:
        """Rounds of faults while they fit the load's send window (the first round whole)."""
        window_end = self.send_started + self.config.minutes * 60
        plan = plan_faults(self.rng, self.config, rounds=1 + int(self.config.minutes))
        for i, fault in enumerate(plan):
            first_round = i < len(self.config.kinds)
            if not first_round and time.monotonic() + expected_s(fault, self.config) > window_end:
                break
            self.run_fault(fault)
            self.faults.append(fault)
            self.checkpoint(f"after {fault.kind}")
            gap = self.rng.uniform(*self.config.gap_s)
            time.sleep(max(0.0, min(gap, window_end - time.monotonic())))

    def run_fault(self, fault: Fault) -> None:
        fault.start_s = self.now()
        names = ", ".join(f"node{t}" for t in fault.targets)
        self.say(f"fault {fault.kind} on {names}" + (f" ({fault.param:g})" if fault.param else ""))
        action: Callable[[Fault], None] = getattr(self, f"fault_{fault.kind}")
        try:
            action(fault)
        except AssertionError as exc:  # a node that does not come back, an attack not refused
            self.failures.append(f"{fault.kind} {fault.targets} at {fault.start_s:.0f}s: {exc}")
            self.say(f"FAILED: {exc}")
            self.heal_everything()
            self.healed(fault)
        self.wait_converged(fault)

    def fault_kill(self, fault: Fault) -> None:
        node = self.nodes[fault.targets[0]]
        node.kill()
        time.sleep(self.config.down_s)
        self.healed(fault)
        self.restart(node)

    def restart(self, node: NodeProcess) -> None:
        started = time.monotonic()
        node.start(wait=False)
        wait_until(node.is_up, 90, f"{node.name} to answer /v1/status after its restart")
        self.honest_ids.add(node.status().node_id)
        self.say(f"{node.name} answers again ({time.monotonic() - started:.1f} s to start)")

    def fault_stop(self, fault: Fault) -> None:
        node = self.nodes[fault.targets[0]]
        assert node.process is not None
        self.stopped.add(node.index)
        os.kill(node.process.pid, signal.SIGSTOP)
        time.sleep(fault.param)
        os.kill(node.process.pid, signal.SIGCONT)
        self.healed(fault)
        self.stopped.discard(node.index)

    def fault_partition(self, fault: Fault) -> None:
        links = self.proxies.cut(fault.targets, True)
        fault.details["links_cut"] = links
        time.sleep(fault.param)
        fault.details["heights_before_heal"] = {n.name: n.best()[1] for n in self.nodes}
        self.proxies.cut(fault.targets, False)
        self.healed(fault)
        fault.details["operator_healing"] = self.heal_long_partition(fault.targets)

    def heal_long_partition(self, side: Sequence[int]) -> dict[str, Any] | None:
        """PROTOCOL.md F5/F8: a branch forked below the finality point Φ (``punctuality``
        milestones under the head) never becomes best by itself; "a partition longer than
        punctuality heals by invalidating, on the lighter side, the first milestone after the
        fork". Do that, as an operator would, when the lighter side's fork is below its Φ."""
        halves = [
            [n for n in self.nodes if n.index in side],
            [n for n in self.nodes if n.index not in side],
        ]
        # each side's chain and its work from one moment of one node: read apart, a light
        # side that synced the heavy chain by itself in between looked heavy, and the heavy
        # side was invalidated (a make-test soak stalled so: every miner's peer chain then
        # linked a milestone above its node's best, D5a)
        views = self.side_views([h[0] for h in halves])
        if views is None:
            return None  # the fork choice healed it: one best milestone everywhere
        chains = [chain for chain, _ in views]
        works = [work for _, work in views]
        fork = next(
            (i for i, (a, b) in enumerate(zip(*chains, strict=False)) if a != b),
            min(map(len, chains)),
        )
        light = 0 if (works[0], chains[0][-1]) < (works[1], chains[1][-1]) else 1
        head = len(chains[light]) - 1
        if fork >= len(chains[light]) or fork - 1 >= final_height(head, DEVNET):
            return None  # no fork, or above Φ: the fork choice heals it
        milestone = chains[light][fork]
        for node in halves[light]:
            node.request("POST", f"/v1/admin/invalidate/{milestone}", auth=True)
        names = [n.name for n in halves[light]]
        self.say(f"F8: invalidated milestone {fork} {milestone[:16]} on {names} (lighter side)")
        return {"invalidated": milestone, "height": fork, "nodes": names, "light_head": head}

    def side_views(
        self, nodes: Sequence[NodeProcess], limit_s: float = 120.0
    ) -> list[tuple[list[str], int]] | None:
        """Each node's best-chain milestones and the chainwork of their head, each read
        consistently (its best milestone the same before and after the list, and the list's
        last); None as soon as every node of the network is on one best milestone. A node
        still syncing (its best moving) is waited for, at most ``limit_s``."""
        deadline = time.monotonic() + limit_s
        while True:
            if len({n.best()[0] for n in self.nodes}) == 1:
                return None
            views = []
            for node in nodes:
                before = node.status().best_milestone
                chain = node.milestones()
                after = node.status().best_milestone
                if before.hash == after.hash == chain[-1]:
                    views.append((chain, int(after.chainwork)))
            if len(views) == len(nodes):
                return views
            if time.monotonic() > deadline:
                raise AssertionError(f"no consistent view of {[n.name for n in nodes]} in time")
            time.sleep(0.5)

    def fault_skew(self, fault: Fault) -> None:
        node = self.nodes[fault.targets[0]]
        node.stop()
        node.env[CLOCK_OFFSET_ENV] = str(int(fault.param))
        self.healed(fault)
        self.restart(node)

    def fault_hostile(self, fault: Fault) -> None:
        node = self.nodes[fault.targets[0]]
        fault.details["attacks"] = [self.attack(node, name) for name in HOSTILE_ATTACKS]
        self.healed(fault)

    def attack(self, node: NodeProcess, name: str) -> dict[str, Any]:
        """Connect a FakePeer, misbehave, and require a close and then a ban."""
        peer = FakePeer(node)
        try:
            peer.connect()
            HOSTILE_ATTACKS[name](peer)
            peer.closed.wait(15)
            code = peer.close_code
            again = FakePeer(node, node_id=peer.node_id)
            try:
                again.connect()
                again.closed.wait(10)
                banned = again.close_code == wire.CLOSE_BANNED
            finally:
                again.close()
        finally:
            peer.close()
        if code not in (wire.CLOSE_MISBEHAVING, 1006) or not banned:
            raise AssertionError(f"hostile {name}: closed with {code}, banned after: {banned}")
        return {"attack": name, "close_code": code, "banned_on_reconnect": banned}

    def heal_everything(self) -> None:
        """No cut link, no stopped node, every node running."""
        for proxy in self.proxies.links.values():
            proxy.set_forwarding(True)
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                os.kill(node.process.pid, signal.SIGCONT)
            else:
                self.restart(node)
        self.stopped.clear()

    # -------------------------------------------------------------- the end

    def finish(self) -> None:
        """Wait for the load, stop the miners, and let the nodes agree on one best milestone."""
        assert self.load is not None
        limit = self.config.minutes * 60 + self.config.confirm_timeout_s + 120
        left = max(30.0, self.send_started + limit - time.monotonic())
        try:
            self.load.wait(left)
        except subprocess.TimeoutExpired:
            self.failures.append(f"the load did not finish within {limit:.0f} s of sending")
            self.load.kill()
            self.load.wait(10)
        self.checkpoint("load done")
        # Two miners' last milestones can tie (equal chainwork, F: each node keeps the one it
        # saw first) and only a later milestone settles it: the first miner mines on until the
        # nodes agree; a last milestone of its own ties with nothing.
        self.stop_miners(self.miners[1:])
        self.say("miners but one stopped; waiting for one best milestone")
        agree = self.wait_one_best("with one miner left")
        self.stop_miners(self.miners[:1])
        self.say("miners stopped; waiting for one best milestone")
        if agree:
            self.wait_one_best("on every node")
        self.checkpoint("end")

    def stop_miners(self, miners: Sequence[subprocess.Popen[bytes]]) -> None:
        for miner in miners:
            miner.send_signal(signal.SIGTERM)
        for miner in miners:
            try:
                miner.wait(15)
            except subprocess.TimeoutExpired:
                miner.kill()

    def wait_one_best(self, what: str) -> bool:
        """Wait for every node on one best milestone; a failure is recorded and returns False."""
        try:
            wait_until(
                lambda: len({n.best()[0] for n in self.nodes}) == 1,
                self.config.final_timeout_s,
                f"one best milestone {what}",
            )
        except AssertionError as exc:
            self.failures.append(str(exc))
            return False
        return True

    def check_ledgers(self) -> dict[str, Any]:
        """One best milestone; identical digests and balances on every node."""
        addresses = [FAUCET_ADDRESS.hex()] + [miner_payout(i) for i in range(len(self.miners))]
        report = self.load_report()
        addresses += report.get("accounts", [])

        def ledger(node: NodeProcess) -> tuple[str, str, list[tuple[str, str]]]:
            balances = [(a, str(node.api.address(a).balance)) for a in addresses]
            return node.best()[0], node.ledger_digest(), balances

        with ThreadPoolExecutor(len(self.nodes)) as pool:
            ledgers = list(pool.map(ledger, self.nodes))
        best = {b for b, _, _ in ledgers}
        digests = {d for _, d, _ in ledgers}
        same_balances = all(bal == ledgers[0][2] for _, _, bal in ledgers)
        if len(best) != 1:
            self.failures.append(f"best milestones differ at the end: {sorted(best)}")
        if len(digests) != 1 or not same_balances:
            self.failures.append(
                f"ledgers differ: {len(digests)} digests, balances {same_balances}"
            )
        return {
            "best_milestones": sorted(best),
            "height": self.nodes[0].best()[1],
            "ledger_digests": sorted(digests),
            "balances_identical": same_balances,
            "addresses_compared": len(addresses),
        }

    def load_report(self) -> dict[str, Any]:
        path = self.root / "load.json"
        if not path.exists():
            return {}
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def check_payments(self) -> dict[str, Any]:
        """Every tx the load had answered 202 for: VALID exactly once (and a sample everywhere)."""
        report = self.load_report()
        if not report:
            self.failures.append("the load wrote no report")
            return {}
        accepted = [t for t in report["txs"] if t["accepted"]]
        counts = [t["valid_inclusions"] for t in accepted]
        unconfirmed = sum(1 for c in counts if c == 0)
        repeated = sum(1 for c in counts if c > 1)
        if unconfirmed or repeated:
            self.failures.append(
                f"of {len(accepted)} acknowledged txs, {unconfirmed} unconfirmed and "
                f"{repeated} VALID more than once"
            )
        sample = random.Random(self.config.seed).sample(accepted, min(CHECK_SAMPLE, len(accepted)))
        missing = [
            (node.name, t["txid"])
            for node in self.nodes
            for t in sample
            if node.api.tx(t["txid"]).status != "confirmed"
        ]
        if missing:
            self.failures.append(f"sampled acknowledged txs not confirmed: {missing[:5]}")
        return {
            "acknowledged": len(accepted),
            "exactly_once": sum(1 for c in counts if c == 1),
            "unconfirmed": unconfirmed,
            "valid_more_than_once": repeated,
            "sampled_on_every_node": len(sample),
            "sample_missing": len(missing),
            "load_summary": {k: v for k, v in report.items() if k not in ("txs", "accounts")},
        }

    def latencies(self) -> dict[str, Any]:
        """p50/p99 of confirmed load txs whose life (sent to confirmed) overlaps a fault (its
        start to its reconvergence), and of those whose life overlaps none."""
        report = self.load_report()
        windows = [
            (
                self.t0 + f.start_s,
                self.t0 + f.heal_s + (f.reconverged_after_s or self.config.converge_timeout_s),
            )
            for f in self.faults
        ]
        during: list[float] = []
        between: list[float] = []
        for tx in report.get("txs", []):
            if tx["kind"] != "load" or tx.get("confirmed_at") is None:
                continue
            sent, confirmed = tx["sent_at"], tx["confirmed_at"]
            hit = any(sent <= b and a <= confirmed for a, b in windows)
            (during if hit else between).append(confirmed - sent)
        return {"during_faults": percentiles(during), "between_faults": percentiles(between)}

    def check_growth(self) -> dict[str, Any]:
        """Open files and RSS of every process instance: first sample against last."""
        grew = []
        for key, entry in self.processes.items():
            start, end = entry["start"], entry["end"]
            if end["fds"] > start["fds"] + FD_SLACK:
                grew.append(f"{key} open files {start['fds']} -> {end['fds']}")
            if end["rss_kib"] > RSS_FACTOR * start["rss_kib"] + RSS_SLACK_KIB:
                grew.append(f"{key} RSS {start['rss_kib']} -> {end['rss_kib']} KiB")
        self.failures += [f"growth: {g}" for g in grew]
        orphans = {name: row["orphans"] for name, row in self.checkpoints[-1]["nodes"].items()}
        return {"growth": grew, "orphans_at_end": orphans}

    def honest_bans(self) -> list[str]:
        """Bans of one of the run's own nodes, from the node logs (hostile peers are others)."""
        out = []
        for node in self.nodes:
            for line in node.log_path.read_text(errors="replace").splitlines():
                match = BAN_LINE.search(line)
                if match and match.group(1) in self.honest_ids:
                    out.append(f"{node.name} {line[:23]} banned {match.group(1)[:16]}")
        if out:
            self.failures.append(f"honest peers banned {len(out)} times, first: {out[0]}")
        return out

    def guarded(self, what: str, check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """One end check; a node that does not answer fails it, not the whole report."""
        try:
            return check()
        except (ApiError, OSError) as exc:
            self.failures.append(f"{what} check: {exc}")
            return {"error": str(exc)}

    def report(self) -> dict[str, Any]:
        kinds: dict[str, list[float]] = {}
        for f in self.faults:
            if f.reconverged_after_s is not None:
                kinds.setdefault(f.kind, []).append(f.reconverged_after_s)
        config = asdict(self.config)
        out: dict[str, Any] = {
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in config.items()},
            "wall_s": self.now(),
            "faults_by_kind": {k: sum(1 for f in self.faults if f.kind == k) for k in FAULT_KINDS},
            "longest_reconvergence_s": {k: max(v) for k, v in sorted(kinds.items())},
            "faults": [asdict(f) for f in self.faults],
        }
        out["ledgers"] = self.guarded("ledgers", self.check_ledgers)
        out["payments"] = self.guarded("payments", self.check_payments)
        out["latency_s"] = self.guarded("latencies", self.latencies)
        out["resources"] = self.guarded("resources", self.check_growth)
        out["honest_bans"] = self.honest_bans()
        out["processes"] = self.processes
        out["checkpoints"] = self.checkpoints
        out["proxy_bytes"] = {p.name: p.bytes for p in self.proxies.links.values()}
        out["failures"] = self.failures
        out["passed"] = not self.failures
        return out

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.heal_everything_quietly()
        for proc in [*self.miners, *([self.load] if self.load else [])]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for node in self.nodes:
            node.stop(timeout=10)
        self.proxies.close()

    def heal_everything_quietly(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                os.kill(node.process.pid, signal.SIGCONT)


def _malformed(peer: FakePeer) -> None:
    for _ in range(3):
        peer.send_raw(b"\xc1\xc1")
        peer.send_text("not binary")


def bad_pow_block(milestone: BlockId) -> Block:
    """A block whose id exceeds the devnet block target, linking ``milestone``: the node's
    recent best milestone, since P14 drops (no penalty, before the proof of work is checked)
    a relayed block whose milestone link is ``punctuality`` or more below the best height."""
    factory = BlockFactory(miners=1)
    chain = factory.chain
    good = build_block(chain, previous=chain.genesis_id, register=address_of_secret(secret_of(9)))
    limit = chain.best_snapshot.blk_target
    header = dataclasses.replace(good.header, milestone_link=milestone)
    prefix = header.encode()[:NONCE_OFFSET]
    nonce = 0
    while True:
        h = hashlib.blake2b(prefix + nonce.to_bytes(8, "little"), digest_size=32).digest()
        if int.from_bytes(h, "little") > limit:
            break
        nonce += 1
    return make_block(dataclasses.replace(header, nonce=nonce), good.tip_links, good.txs)


def _bad_pow(peer: FakePeer) -> None:
    best = BlockId(bytes.fromhex(peer.node.best()[0]))
    peer.send(wire.BlockMsg(bad_pow_block(best).raw))


def _unsolicited(peer: FakePeer) -> None:
    for _ in range(12):
        peer.send(wire.Milestones(()))
        peer.send(wire.Pending(()))


def _inv_flood(peer: FakePeer) -> None:
    peer.send_many([wire.encode_message(wire.Inv(((1, b"\x07" * 32),)))] * 6_000)


HOSTILE_ATTACKS: dict[str, Callable[[FakePeer], None]] = {
    "malformed frames": _malformed,
    "bad proof of work": _bad_pow,
    "unsolicited answers": _unsolicited,
    "inv flood": _inv_flood,
}


def summary(report: dict[str, Any]) -> str:
    """The human summary of a report."""
    none = percentiles([])
    lat = {"during_faults": none, "between_faults": none, **report["latency_s"]}
    pay = report["payments"]
    ledgers = {"height": "?", "ledger_digests": [], "balances_identical": "?", **report["ledgers"]}
    lines = [
        f"soak: {report['config']['minutes']} min, seed {report['config']['seed']}, "
        f"{report['config']['tps']} tx/s offered, {report['wall_s']:.0f} s wall",
        "faults: " + ", ".join(f"{k} {v}" for k, v in report["faults_by_kind"].items()),
        "longest reconvergence (s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in report["longest_reconvergence_s"].items()),
        "timeline:",
    ]
    for f in report["faults"]:
        took = f["reconverged_after_s"]
        lines.append(
            f"  {f['start_s']:7.1f}s {f['kind']:9} nodes {f['targets']} param {f['param']:g}"
            f" heal {f['heal_s']:.1f}s reconverged "
            + (f"+{took:.1f}s" if took is not None else "NEVER")
        )
    load = pay.get("load_summary", {})
    lines += [
        f"payments: {pay.get('acknowledged', 0)} acknowledged, {pay.get('exactly_once', 0)} "
        f"VALID exactly once, {pay.get('unconfirmed', 0)} unconfirmed, "
        f"{pay.get('valid_more_than_once', 0)} repeated; confirmed_tps "
        f"{load.get('confirmed_tps', 0):.1f} of offered {load.get('offered_tps', 0):.1f}",
        f"latency (s): during faults p50 {lat['during_faults']['p50']} p99 "
        f"{lat['during_faults']['p99']} (n {lat['during_faults']['n']}); between p50 "
        f"{lat['between_faults']['p50']} p99 {lat['between_faults']['p99']} "
        f"(n {lat['between_faults']['n']})",
        f"ledgers: height {ledgers['height']}, "
        f"{len(ledgers['ledger_digests'])} digest(s), balances identical "
        f"{ledgers['balances_identical']}",
        f"orphans at end: {report['resources'].get('orphans_at_end')}",
        f"honest peers banned: {len(report['honest_bans'])}",
        "RSS MiB start -> end (open files):",
    ]
    for key, p in sorted(report["processes"].items()):
        s, e = p["start"], p["end"]
        lines.append(
            f"  {key:18} {s['rss_kib'] / 1024:6.1f} -> {e['rss_kib'] / 1024:6.1f}"
            f" ({s['fds']} -> {e['fds']})"
        )
    lines.append("failures: " + ("none" if not report["failures"] else ""))
    lines += [f"  {f}" for f in report["failures"]]
    lines.append(f"passed: {report['passed']}")
    return "\n".join(lines)


def run_soak(config: SoakConfig) -> dict[str, Any]:
    """Run one soak; writes ``soak.json`` and ``soak.txt`` in ``config.out`` and returns the
    report (``report["passed"]``, ``report["failures"]``)."""
    config.out.mkdir(parents=True, exist_ok=True)
    soak = Soak(config)
    try:
        soak.start_network()
        soak.start_miners()
        wait_until(lambda: soak.nodes[0].best()[1] >= 2, 120, "node0 to reach milestone 2")
        soak.start_load()
        soak.checkpoint("start")
        soak.run_faults()
        soak.heal_everything()
        soak.finish()
        report = soak.report()
    finally:
        soak.cleanup()
    (config.out / "soak.json").write_text(json.dumps(report, indent=1))
    text = summary(report)
    (config.out / "soak.txt").write_text(text + "\n")
    print(text, flush=True)
    return report


def parse_args(argv: Sequence[str] | None = None) -> SoakConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="send window (default 30)")
    parser.add_argument("--seed", type=int, default=1, help="fault schedule seed (default 1)")
    parser.add_argument("--tps", type=float, default=200.0, help="payments per s (default 200)")
    parser.add_argument("--miner-rate", type=float, default=2.0, help="blocks/s per miner")
    parser.add_argument("--stop", type=float, default=30.0, help="SIGSTOP seconds (default 30)")
    parser.add_argument("--partition", type=float, default=60.0, help="partition seconds (60)")
    parser.add_argument(
        "--kinds",
        default=",".join(FAULT_KINDS),
        help=f"fault kinds, comma-separated (default {','.join(FAULT_KINDS)})",
    )
    parser.add_argument("--out", type=Path, default=None, help="report and datadirs")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        parser.error(f"--kinds: unknown {unknown}, choose from {','.join(FAULT_KINDS)}")
    out = args.out or Path("out") / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    return SoakConfig(
        minutes=args.minutes,
        seed=args.seed,
        tps=args.tps,
        miner_rate=args.miner_rate,
        stop_s=args.stop,
        partition_s=args.partition,
        kinds=kinds,
        out=out,
    )


def main(argv: Sequence[str] | None = None) -> int:
    report = run_soak(parse_args(argv))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
