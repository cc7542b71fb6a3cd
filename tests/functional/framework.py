"""Functional test framework: real ``dagchain-node`` processes on 127.0.0.1 (STYLE.md §6).

- :class:`TestNetwork` starts N devnet nodes (``python -m node.cli start``) with temporary
  datadirs and free ports, wires them with ``--peer``, and kills every process at cleanup. On a
  failing test the fixture prints each node's log.
- :class:`NodeProcess` is one daemon plus its API client, ``node.api``: an
  :class:`apiclient.SyncNodeApi` (bearer token read from ``<datadir>/api.token``, re-read after
  a restart), so tests call the node through the same typed client as the wallet and the miner:
  every answer is its pydantic model of :mod:`apiclient.models` (``request`` is the untyped
  escape hatch, for tests of the JSON itself).
- :class:`BlockFactory` builds real-PoW devnet blocks against its own local ``Chain`` replica
  (devnet: nearly every hash is a block), so tests submit valid blocks without a miner.
- :class:`FakePeer` speaks the wire protocol from a background thread, for hostile-peer tests.
- :func:`wait_until` is the only way to wait: a predicate, a timeout and what we waited for.
"""

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from apiclient import ApiError, NodeUnreachable, SyncNodeApi, endpoints
from apiclient.models import PeerInfo, StatusResponse, SubmitBlockResponse
from dagchain.blocks import Block
from dagchain.chain import BlockStatus, Chain
from dagchain.genesis import FAUCET_ADDRESS
from dagchain.params import DEVNET
from dagchain.storage.memory import MemoryStore
from dagchain.transactions import Transaction
from p2p import wire
from tests.dagchain.builders import address_of_secret, build_block, secret_of

log = logging.getLogger("functional")

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 20.0
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn`` of every process a test starts: the kernel SIGKILLs the child when the
    test process dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``), so an interrupted run
    leaves no daemon behind; ``start_new_session`` keeps the terminal's signals off it. The
    signal follows the *thread* that forked: start processes from a thread that outlives them
    (the test's own)."""
    import ctypes  # in the child, between fork and exec

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:  # pragma: no cover - Linux only
        return
    if os.getppid() == 1:  # pragma: no cover - the parent died before prctl took effect
        os._exit(1)


def spawn(
    cmd: Sequence[str], log: Any, env: dict[str, str] | None = None
) -> "subprocess.Popen[bytes]":
    """Start a program of the repo (cwd ``REPO_ROOT``) with stdout and stderr into ``log`` (an
    open binary file), in its own session, killed by the kernel if this process dies; ``env``
    adds variables to this process's environment."""
    return subprocess.Popen(
        list(cmd),
        cwd=REPO_ROOT,
        env={**os.environ, **env} if env else None,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    """Poll ``predicate`` until it is truthy; raise AssertionError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
            last_error = None
        except (OSError, NodeUnreachable, ValueError, KeyError) as exc:
            last_error = exc
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    suffix = f" (last error: {last_error})" if last_error is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or predicate}{suffix}")


LISTEN_PORTS = (20_000, 32_000)
"""Where test listeners' ports come from: below Linux's ephemeral range (32768-60999). A port the
kernel gave out for ``bind(0)`` sits in that range, and between our closing it and the node
binding it, any outgoing connection on the machine (another node dialing a peer, a miner, the
load) can be handed the same port as its source port: a CI run failed once on exactly that
("address already in use" at a node's start)."""

_TAKEN: set[int] = set()
_PORT_RNG = random.Random()


def free_port() -> int:
    """A port in ``LISTEN_PORTS`` that binds on 127.0.0.1 now and this process did not hand out
    before (so a restarted node can bind its ports again)."""
    for _ in range(1000):
        port = _PORT_RNG.randrange(*LISTEN_PORTS)
        if port in _TAKEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _TAKEN.add(port)
        return port
    raise RuntimeError(f"no free port in {LISTEN_PORTS}")


class NodeProcess:
    """One ``dagchain-node start --network devnet`` process and its API."""

    def __init__(
        self,
        index: int,
        datadir: Path,
        extra_args: Sequence[str] = (),
        discovery: bool = False,
        ports: tuple[int, int] | None = None,
    ) -> None:
        """``ports``: (P2P, API) to listen on, else two ports free a moment ago."""
        self.index = index
        self.name = f"node{index}"
        self.datadir = datadir
        self.p2p_port, self.api_port = ports if ports is not None else (free_port(), free_port())
        self.peers: list[str] = []
        self.extra_args = list(extra_args)
        self.discovery = discovery
        """Address gossip (P12) on; off by default, so a test's topology is what it wired."""
        self.env: dict[str, str] = {}
        """Variables added to the daemon's environment (e.g. ``DAGCHAIN_TEST_CLOCK_OFFSET_MS``)."""
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = datadir.parent / f"{self.name}.log"
        self._log_file: Any = None
        self.api = SyncNodeApi(self.url, token_file=datadir / "api.token", timeout_s=10.0)
        """The typed API client (apiclient); ``request`` is its untyped escape hatch."""

    @property
    def p2p_address(self) -> str:
        """``127.0.0.1:PORT`` of the P2P listener."""
        return f"127.0.0.1:{self.p2p_port}"

    @property
    def url(self) -> str:
        """Base URL of the API."""
        return f"http://127.0.0.1:{self.api_port}"

    def command(self) -> list[str]:
        """The command line of this node."""
        cmd = [
            sys.executable,
            "-m",
            "node.cli",
            "start",
            "--network",
            "devnet",
            "--datadir",
            str(self.datadir),
            "--p2p-host",
            "127.0.0.1",
            "--p2p-port",
            str(self.p2p_port),
            "--api-port",
            str(self.api_port),
            "--log-level",
            "debug" if os.environ.get("DAGCHAIN_TEST_DEBUG") else "info",
        ]
        if not self.discovery:
            cmd.append("--no-discovery")
        for peer in self.peers:
            cmd += ["--peer", peer]
        return cmd + self.extra_args

    def start(self, wait: bool = True) -> None:
        """Start the process (appending to its log) and wait until the API answers."""
        self.datadir.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log_path.open("ab")
        self._log_file.write(f"\n===== start {' '.join(self.command())}\n".encode())
        self._log_file.flush()
        self.process = spawn(self.command(), self._log_file, self.env)
        if wait:
            wait_until(self.is_up, STARTUP_TIMEOUT_S, f"{self.name} to answer /v1/status")

    def is_up(self) -> bool:
        """True if the process runs and /v1/status answers."""
        if self.process is None or self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited:\n{self.log_tail()}")
        try:
            self.status()
        except ApiError:
            return False
        return True

    def wait(self, predicate: Callable[["NodeProcess"], object], timeout: float, what: str) -> None:
        """``wait_until(predicate(self))``, naming this node in the failure."""
        wait_until(functools.partial(predicate, self), timeout, f"{self.name} {what}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._close_log()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; returns the exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._close_log()
        return self.process.returncode

    def restart(self) -> None:
        """Start again on the same datadir and ports."""
        self.kill()
        self.start()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, lines: int = 60) -> str:
        """The end of this node's log."""
        if not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    # ------------------------------------------------------------------ API client
    @property
    def token(self) -> str:
        """The bearer token the node wrote at start."""
        return (self.datadir / "api.token").read_text().strip()

    def request(
        self, method: str, path: str, body: Any = None, auth: bool = False, timeout: float = 10.0
    ) -> Any:
        """One JSON API call; raises ApiError on a non-2xx status (NodeUnreachable: no answer)."""
        return self.api.run(endpoints.raw(method, path, body, auth), timeout)

    def status(self) -> StatusResponse:
        """GET /v1/status."""
        return self.api.status(timeout_s=3.0)

    def best(self) -> tuple[str, int]:
        """(best milestone hash, height)."""
        best = self.status().best_milestone
        return best.hash, best.height

    def has_block(self, block_id: bytes) -> bool:
        """True if GET /v1/blocks/{hash} finds it."""
        try:
            self.request("GET", f"/v1/blocks/{block_id.hex()}")
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def submit_block(self, block: Block) -> SubmitBlockResponse:
        """POST /v1/mining/submit: ``status`` accepted or duplicate (200), orphan (202)."""
        return self.api.submit_block(block.raw)

    def peer_count(self) -> int:
        """Connected peers."""
        return len(self.api.peers())

    def peer_rows(self) -> list[PeerInfo]:
        """GET /v1/peers: one row per connected peer."""
        return self.api.peers()

    def metric(self, name: str, **labels: str) -> float:
        """One sample of GET /metrics (0.0 if absent), e.g. ``metric("dagchain_rejected_total",
        kind="block", reason="P14")``."""
        text = self.api.text("/metrics")
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        sample = f"{name}{{{want}}}" if labels else name
        for line in text.splitlines():
            key, _, value = line.rpartition(" ")
            if key == sample or (labels and _sorted_labels(key) == sample):
                return float(value)
        return 0.0

    def level_set(self, height: int) -> list[str]:
        """Block hashes of a best-chain level set in total order."""
        return self.api.level_set(height)

    def milestones(self) -> list[str]:
        """Every best-chain milestone hash from genesis."""
        out: list[str] = []
        start = 0
        while True:
            rows = self.api.milestones(start, 1000)
            out += [r.hash for r in rows]
            if len(rows) < 1000:
                return out
            start += len(rows)

    def ledger_digest(self) -> str:
        """BLAKE2b over every best-chain milestone, its level set and the faucet's UTXOs."""
        h = hashlib.blake2b(digest_size=32)
        for height, ms in enumerate(self.milestones()):
            h.update(ms.encode())
            h.update(",".join(self.level_set(height)).encode())
        addr = self.api.address(FAUCET_ADDRESS.hex())
        h.update(addr.model_dump_json().encode())
        return h.hexdigest()


def _sorted_labels(sample: str) -> str:
    """``name{b="2",a="1"}`` → ``name{a="1",b="2"}`` (label order of the exposition varies)."""
    name, _, rest = sample.partition("{")
    labels = sorted(rest.rstrip("}").split(",")) if rest else []
    return f"{name}{{{','.join(labels)}}}" if labels else name


class TestNetwork:
    """N real devnet nodes on 127.0.0.1; every process is killed at cleanup."""

    __test__ = False  # not a pytest test class

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nodes: list[NodeProcess] = []

    def add_node(
        self, peers: Sequence[NodeProcess] = (), start: bool = True, discovery: bool = False
    ) -> NodeProcess:
        """A new node dialing ``peers`` (one direction only, so no duplicate connections);
        ``discovery`` drops ``--no-discovery`` (P12 address gossip on)."""
        index = len(self.nodes)
        node = NodeProcess(index, self.root / f"node{index}" / "data", discovery=discovery)
        node.peers = [p.p2p_address for p in peers]
        self.nodes.append(node)
        if start:
            node.start()
        return node

    def start(self, count: int, topology: str = "line") -> list[NodeProcess]:
        """``count`` nodes: ``line`` (each dials the previous one) or ``star`` (all dial node 0)."""
        out: list[NodeProcess] = []
        for i in range(count):
            if i == 0:
                peers: list[NodeProcess] = []
            elif topology == "star":
                peers = [out[0]]
            else:
                peers = [out[i - 1]]
            out.append(self.add_node(peers, start=False))
        for node in out:
            node.start(wait=False)
        for node in out:
            wait_until(node.is_up, STARTUP_TIMEOUT_S, f"{node.name} to answer /v1/status")
        return out

    def wait_connected(self, nodes: Sequence[NodeProcess], minimum: int = 1) -> None:
        """Every node has at least ``minimum`` ready peers."""
        for node in nodes:
            node.wait(lambda n: n.peer_count() >= minimum, 20, "to have peers")

    def wait_same_best(self, nodes: Sequence[NodeProcess], want: str, timeout: float = 60) -> None:
        """Every node's best milestone is ``want``."""
        for node in nodes:
            node.wait(lambda n: n.best()[0] == want, timeout, f"to reach milestone {want[:16]}")

    def cleanup(self) -> None:
        """Kill every process (SIGKILL after a short SIGTERM grace)."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                if node.process is not None:
                    node.process.wait(5)
            node.kill()

    def dump_logs(self) -> str:
        """Every node's log tail, for a failing test."""
        return "\n".join(f"----- {n.name} ({n.log_path})\n{n.log_tail(80)}" for n in self.nodes)


class BlockFactory:
    """Real-PoW devnet blocks built against a local Chain replica (no rule re-implemented).

    Each miner key owns one peer chain; ``mine`` extends them round-robin, each block linking
    the replica's best milestone and, as its tip, the newest block of another peer chain.
    """

    def __init__(self, miners: int = 3, first_key: int = 100) -> None:
        self.params = DEVNET
        self.chain = Chain(DEVNET, MemoryStore())
        self.keys = [address_of_secret(secret_of(first_key + i)) for i in range(miners)]
        self.heads: dict[int, bytes] = {}
        self.blocks: list[Block] = []
        self._turn = 0

    def fork(self, first_key: int) -> "BlockFactory":
        """A second factory holding the same blocks (for partitions), with its own miners."""
        other = BlockFactory(len(self.keys), first_key)
        for block in self.blocks:
            other.chain.on_block(block.raw, _now_ms())
        other.blocks = list(self.blocks)
        return other

    def tx_status(self, txid: bytes) -> str:
        """Replica's view: ``valid``/``invalid:<reason>`` in the best chain, or ``pending``."""
        for block_id in self.chain.blocks_with_tx(txid):
            height = self.chain.ls_height(block_id)
            if height is None:
                continue
            delta = self.chain.level_set(self.chain.best_chain()[height])
            if delta is None:
                continue
            for tx, reason in self.chain.level_set_txs(delta):
                if tx.txid == txid:
                    return "valid" if reason == 0 else f"invalid:{reason}"
        return "pending"

    def add(self, block: Block) -> None:
        """Accept a block built elsewhere into the replica."""
        out = self.chain.on_block(block.raw, _now_ms())
        if out.status is BlockStatus.ACCEPTED:
            self.blocks.append(block)

    def mine(
        self, count: int, want_milestone: bool | None = None, txs: Sequence[Transaction] = ()
    ) -> list[Block]:
        """``count`` new blocks, accepted by the replica, in a valid delivery order.

        ``txs`` go into the first of them.
        """
        out = []
        for i in range(count):
            miner = self._turn % len(self.keys)
            self._turn += 1
            out.append(self._mine_one(miner, want_milestone, txs if i == 0 else ()))
        return out

    def mine_milestones(self, count: int) -> list[Block]:
        """Blocks until ``count`` of them are milestones (all returned, in order)."""
        out: list[Block] = []
        found = 0
        while found < count:
            block = self.mine(1)[0]
            out.append(block)
            meta = self.chain.get_meta(block.id)
            found += 1 if meta is not None and meta.is_milestone else 0
        return out

    def next_previous(self) -> bytes:
        """The previous link of the block the next ``mine`` builds first: S5 hashes it with
        each txid (devnet c = 1/16), so a test signs the txs it wants VALID there for it
        (``tests.dagchain.chainkit.transfer(..., assigned_to=[...])``)."""
        return self._previous(self._turn % len(self.keys))

    def _previous(self, miner: int) -> bytes:
        head = self.heads.get(miner)
        return head if head is not None and self.chain.has_block(head) else self.chain.genesis_id

    def _mine_one(
        self, miner: int, want_milestone: bool | None, txs: Sequence[Transaction] = ()
    ) -> Block:
        chain = self.chain
        previous = self._previous(miner)
        head = previous if previous != chain.genesis_id else None
        tip = self._tip(previous)
        ms_block = chain.get_block(chain.best_id)
        prev_block = chain.get_block(previous)
        assert ms_block is not None
        assert prev_block is not None
        ts = max(_now_ms() - 2_000, ms_block.header.timestamp_ms, prev_block.header.timestamp_ms)
        block = build_block(
            chain,
            previous=previous,
            tip=tip,
            timestamp_ms=ts,
            register=self.keys[miner] if head is None else None,
            txs=txs,
            want_milestone=want_milestone,
            nonce_start=int.from_bytes(os.urandom(6), "little"),
        )
        outcome = chain.on_block(block.raw, _now_ms())
        assert outcome.status is BlockStatus.ACCEPTED, outcome
        self.heads[miner] = block.id
        self.blocks.append(block)
        return block

    def _tip(self, previous: bytes) -> bytes | None:
        """The newest block of another peer chain (or None: the builder's default)."""
        for block in reversed(self.blocks[-8:]):
            if block.id != previous:
                return block.id
        return None


def _now_ms() -> int:
    return int(time.time() * 1000)


class FakePeer:
    """A scripted peer speaking the wire protocol from its own thread and event loop."""

    def __init__(self, node: NodeProcess, node_id: bytes | None = None) -> None:
        self.node = node
        self.node_id = node_id if node_id is not None else os.urandom(32)
        self.received: list[wire.Message] = []
        self.close_code: int | None = None
        self.closed = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._session: aiohttp.ClientSession | None = None
        self._reader: asyncio.Future[None] | None = None

    def _call(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def connect(self, hello: bool = True) -> None:
        """Open the WebSocket (and send a matching hello)."""
        self._call(self._connect())
        if hello:
            genesis = _devnet_genesis()
            self.send(
                wire.Hello(
                    proto=1,
                    network=DEVNET.network_id,
                    genesis=genesis,
                    node=self.node_id,
                    best=genesis,
                    height=0,
                    work=bytes(32),
                    port=0,
                    agent="fakepeer",
                    time=_now_ms(),
                )
            )
            wait_until(
                lambda: any(isinstance(m, wire.Hello) for m in self.received) or self.is_closed(),
                10,
                "the node's hello",
            )

    async def _connect(self) -> None:
        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(
            f"http://127.0.0.1:{self.node.p2p_port}{wire.PROTOCOL_PATH}",
            max_msg_size=0,
            autoping=True,
        )
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self._ws is not None
        async for msg in self._ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                with contextlib.suppress(wire.RemoteProtocolError):
                    self.received.append(wire.decode_frame(bytes(msg.data)))
        self.close_code = self._ws.close_code
        self.closed.set()

    def is_closed(self) -> bool:
        """True once the node closed the connection."""
        return self.closed.is_set()

    def barrier(self, timeout: float = 10.0) -> None:
        """Ping and wait for the pong: the node has handled every message sent before it
        (one reader per connection, in order)."""
        nonce = int.from_bytes(os.urandom(7), "little") + 1
        self.send(wire.Ping(nonce))
        wait_until(
            lambda: any(isinstance(m, wire.Pong) and m.nonce == nonce for m in self.received),
            timeout,
            "the node's pong",
        )

    def wait_for(
        self, predicate: Callable[[wire.Message], bool], timeout: float, what: str
    ) -> None:
        """Wait until the node sent a message matching ``predicate``."""
        wait_until(lambda: any(predicate(m) for m in list(self.received)), timeout, what)

    def send(self, msg: wire.Message) -> None:
        """Send one encoded message."""
        self.send_raw(wire.encode_message(msg))

    def send_raw(self, data: bytes) -> None:
        """Send raw bytes as one binary frame (may be malformed or oversized)."""
        self._call(self._send(data))

    def send_many(self, frames: Sequence[bytes]) -> None:
        """Send many binary frames from one coroutine (a flood, not paced by thread hops)."""
        self._call(self._send_many(frames), timeout=60)

    async def _send_many(self, frames: Sequence[bytes]) -> None:
        for data in frames:
            await self._send(data)

    def send_text(self, text: str) -> None:
        """Send a text frame."""
        self._call(self._send_text(text))

    async def _send(self, data: bytes) -> None:
        if self._ws is not None and not self._ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._ws.send_bytes(data)

    async def _send_text(self, text: str) -> None:
        if self._ws is not None and not self._ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._ws.send_str(text)

    def close(self) -> None:
        """Close the socket and stop the thread."""
        with contextlib.suppress(Exception):
            self._call(self._close(), 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    async def _close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()


def _devnet_genesis() -> bytes:
    return Chain(DEVNET, MemoryStore()).genesis_id


@contextlib.contextmanager
def network_context(root: Path) -> Iterator[TestNetwork]:
    """A TestNetwork whose processes die with the context (logs printed on failure)."""
    net = TestNetwork(root)
    try:
        yield net
    except BaseException:
        print(net.dump_logs())
        raise
    finally:
        net.cleanup()


__all__ = [
    "ApiError",
    "BlockFactory",
    "FakePeer",
    "NodeProcess",
    "TestNetwork",
    "free_port",
    "network_context",
    "wait_until",
]
