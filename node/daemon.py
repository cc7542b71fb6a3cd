"""The composition root: builds every object of a node, runs it, and shuts it down in order.

Clock -> store -> Chain -> Mempool -> NodeService -> metrics -> PeerManager (p2p) -> HTTP API.
One ``asyncio.TaskGroup`` holds the long-running tasks: maintenance, and the peer manager's
:meth:`~node.net.manager.PeerManager.run`, whose own TaskGroup holds its timers and dials.
SIGINT/SIGTERM set the stop event, which ends them; then the node stops accepting (API and P2P
listeners), closes its peers with close frames, and closes the database last, well within 10 s.
"""

import asyncio
import importlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager, suppress

from aiohttp import web

from dagchain.chain import Chain
from dagchain.errors import StorageError
from dagchain.mempool import Mempool
from dagchain.pruning import Pruner
from dagchain.storage import KVStore
from dagchain.storage.memory import MemoryStore
from node.api import ApiContext, create_app
from node.config import NodeConfig
from node.failstop import FailStopStore, exit_on_write_error
from node.metrics import NodeMetrics
from node.net.manager import PeerManager
from p2p import wire
from p2p.serveholds import prune_step
from p2p.service import NodeEvent, NodeService

__all__ = [
    "CLOCK_OFFSET_ENV",
    "StartupError",
    "node_clock",
    "prune_once",
    "run_node",
    "wall_clock_ms",
]

log = logging.getLogger("dagchain.node")
MAINTENANCE_INTERVAL_S = 5.0
PRUNE_INTERVAL_S = 1.0
"""How often the pruner looks for level sets that fell below the prune depth."""
PRUNE_STEP_BLOCKS = 64
"""Blocks per pruning step: one synced batch, which holds the event loop for about 80 ms with
blocks of 128 txs (pruning cost 1.25 ms a block in bench/storage.py --prune-depth)."""
SHUTDOWN_STEP_S = 2.5
"""Each shutdown step (API listener, P2P listener, peers) gets at most this long: under 10 s."""
CHAIN_DIR = "chain"
CLOCK_OFFSET_ENV = "DAGCHAIN_TEST_CLOCK_OFFSET_MS"
"""For tests only: milliseconds added to the node's clock (bench/soak.py starts a node with a
skewed clock this way; docs/node.md, "Durability"). Unset, the node runs on the wall clock."""


class StartupError(Exception):
    """The node cannot start for a reason the user can fix (one line)."""


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch: the node's one clock."""
    return time.time_ns() // 1_000_000


def node_clock() -> Callable[[], int]:
    """The wall clock, shifted by ``DAGCHAIN_TEST_CLOCK_OFFSET_MS`` when a test sets it.

    Raises:
        StartupError: the variable is set but not an integer.
    """
    raw = os.environ.get(CLOCK_OFFSET_ENV, "").strip()
    if not raw:
        return wall_clock_ms
    try:
        offset = int(raw)
    except ValueError:
        raise StartupError(f"{CLOCK_OFFSET_ENV}={raw!r} is not a whole number of ms") from None
    log.warning("test clock: %+d ms from the wall clock (%s)", offset, CLOCK_OFFSET_ENV)
    return lambda: wall_clock_ms() + offset


def open_store(config: NodeConfig) -> KVStore:
    """LevelDB in ``<datadir>/chain``, or memory with ``--in-memory`` (never silently).

    Raises:
        StartupError: the LevelDB backend is not available, or ``chain`` is not a directory.
        StorageError: the database is damaged, locked or of another network.
    """
    if config.in_memory:
        log.warning("--in-memory: the chain is kept in memory and lost at exit")
        return MemoryStore()
    try:
        leveldb = importlib.import_module("dagchain.storage.leveldb")
    except ImportError as exc:
        raise StartupError(f"LevelDB backend unavailable ({exc}); use --in-memory") from None
    path = config.data_path / CHAIN_DIR
    if path.exists() and not path.is_dir():
        raise StartupError(f"{path} is not a directory: move it away or use another --datadir")
    store: KVStore = leveldb.LevelDBStore(path)
    return store


async def _start_site(runner: web.AppRunner, host: str, port: int, what: str) -> None:
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        raise StartupError(f"cannot listen for {what} on {host}:{port}: {exc.strerror}") from None


@asynccontextmanager
async def _listening(app: web.Application, host: str, port: int, what: str) -> AsyncIterator[None]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await _start_site(runner, host, port, what)
        log.info("%s listening on http://%s:%d", what, host, port)
        yield
    finally:
        try:
            await asyncio.wait_for(runner.cleanup(), SHUTDOWN_STEP_S)
        except TimeoutError:
            log.warning("%s listener did not close within %.1f s", what, SHUTDOWN_STEP_S)


def _log_events(event: NodeEvent) -> None:
    if event.kind == "milestone":
        log.info(
            "milestone %d %s level set %d blocks, %d txs",
            event.data["height"],
            event.data["hash"][:16],
            event.data["level_set_size"],
            event.data["txs"],
        )
    elif event.kind == "reorg":
        log.warning(
            "reorganisation: undid %d, applied %d milestones",
            len(event.data["undone"]),
            len(event.data["applied"]),
        )


async def _maintenance(service: NodeService, stop: asyncio.Event) -> None:
    """Mempool expiry and orphan expiry every few seconds until the stop event."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), MAINTENANCE_INTERVAL_S)
        except TimeoutError:
            txs, orphans = service.expire()
            if txs or orphans:
                log.info("expired %d mempool txs, %d orphans", txs, orphans)


def prune_once(
    pruner: Pruner, service: NodeService, close_peer: Callable[[str], None] | None
) -> int:
    """One pruning step below every syncing peer's hold; a peer too far behind is closed
    (decision 40). Returns the level sets pruned."""
    done, lagging = prune_step(pruner, service.serve_holds, int(service.clock()), PRUNE_STEP_BLOCKS)
    for key in lagging:
        log.info(
            "closing peer %s: its sync from us fell %d milestones behind pruning", key, pruner.depth
        )
        if close_peer is not None:
            close_peer(key)
    return done


async def _prune(
    pruner: Pruner,
    stop: asyncio.Event,
    service: NodeService,
    close_peer: Callable[[str], None] | None,
) -> None:
    """Delete old bodies in bounded steps (one synced batch each), yielding between steps;
    never a level set listed to a peer still fetching it (decision 40)."""
    while not stop.is_set():
        steps = 0
        while not stop.is_set() and prune_once(pruner, service, close_peer):
            steps += 1
            await asyncio.sleep(0)  # let peers and the API in between two batches
        if steps:
            log.info(
                "pruned: block bodies kept from milestone %d up (%d blocks pruned since start)",
                pruner.next_height,
                pruner.blocks_pruned,
            )
        with suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PRUNE_INTERVAL_S)


def _pruner(config: NodeConfig, chain: Chain) -> Pruner | None:
    """The pruner of ``--prune-depth``; a datadir pruned before but not now is said so."""
    below = chain.state.pruned_below()
    if config.prune_depth is None:
        if below > 1:
            log.warning(
                "this datadir was pruned: block bodies below milestone %d are gone "
                "(--prune-depth is off now, so no more are deleted)",
                below,
            )
        return None
    log.info(
        "pruning: keeping block bodies of the last %d milestones (from height %d now)",
        config.prune_depth,
        max(1, below),
    )
    return Pruner(chain, config.prune_depth)


def _install_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def run_node(config: NodeConfig, token: str, version: str) -> None:
    """Run a node until SIGINT/SIGTERM (or until ``stop`` is set by a test).

    Raises:
        StartupError: a listener cannot bind, or no storage backend.
        StorageError: the database cannot be opened (other network, damaged, locked).
    """
    config = config.resolved()
    stop = asyncio.Event()
    _install_signals(stop)
    params = config.params
    node_id = os.urandom(32)
    async with AsyncExitStack() as stack:
        store = open_store(config)
        stack.callback(_close_store, store)
        started = time.monotonic()
        try:
            # a failed write stops the process with one line (node/failstop.py)
            chain = Chain(params, FailStopStore(store, exit_on_write_error))
        except StorageError as exc:  # one line naming the directory (§12: v1 is refused)
            raise StorageError(f"data directory {config.data_path}: {exc}") from None
        log.info(
            "%s: best milestone %d %s, %d blocks (opened in %.1f s)",
            params.network_id,
            chain.best_height,
            chain.best_id.hex()[:16],
            chain.state.block_count,
            time.monotonic() - started,
        )
        pruner = _pruner(config, chain)
        service = NodeService(params, chain, Mempool(params), node_clock())
        service.subscribe(_log_events)
        peers = await _start_peers(config, service, node_id, stack)
        metrics = NodeMetrics(
            service,
            lambda: peers.connected_count if peers is not None else 0,
            p2p_sent=peers.sent if peers is not None else None,
            p2p_errors=peers.errors if peers is not None else None,
        )
        ctx = ApiContext(
            service, config.network, version, node_id, token, metrics, peers, config.prune_depth
        )
        app = create_app(ctx, config.api_body_limit)
        await stack.enter_async_context(
            _listening(app, config.api_host, config.resolved_api_port, "API")
        )
        log.info("node %s ready", node_id.hex()[:16])
        async with asyncio.TaskGroup() as tg:
            tg.create_task(_maintenance(service, stop), name="maintenance")
            if pruner is not None:
                close = None if peers is None else peers.close_key
                tg.create_task(_prune(pruner, stop, service, close), name="prune")
            if peers is not None:
                tg.create_task(peers.run(stop), name="p2p")
        log.info("shutting down")
    log.info("database closed")


async def _start_peers(
    config: NodeConfig, service: NodeService, node_id: bytes, stack: AsyncExitStack
) -> PeerManager | None:
    """The peer manager, set up and listening; its loops run in the daemon's TaskGroup."""
    if not config.p2p:
        log.info("peer-to-peer disabled (--no-p2p)")
        return None
    peers = PeerManager(config.p2p_settings(), service, node_id)
    p2p_app = web.Application(client_max_size=1024)
    p2p_app.router.add_get(wire.PROTOCOL_PATH, peers.handle_inbound)
    # Exit order is reversed: listener closed first (stop accepting), then peers closed.
    stack.push_async_callback(_stop_peers, peers)
    await peers.start(run=False)
    await stack.enter_async_context(
        _listening(p2p_app, config.p2p_host, config.resolved_p2p_port, "P2P")
    )
    return peers


async def _stop_peers(peers: PeerManager) -> None:
    try:
        await asyncio.wait_for(peers.stop(), SHUTDOWN_STEP_S)
    except TimeoutError:
        log.warning("peers did not close within %.0f s", SHUTDOWN_STEP_S)


def _close_store(store: KVStore) -> None:
    try:
        store.close()
    except StorageError as exc:  # pragma: no cover - closing a healthy store does not fail
        log.error("closing the database: %s", exc)
