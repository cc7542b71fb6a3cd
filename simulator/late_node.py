"""LateNode: a full node that joins the network late and catches up (``network.late_nodes``).

It is the node's own peer-to-peer side with the sockets taken out: a
:class:`p2p.service.NodeService` (the chain and the mempool, the §7.5 pool policy) driven by
:class:`p2p.exchange.Exchange`, the same object ``node/net/manager.py`` drives, so its relay
(P11/P13) and its sync session (P5 peer choice, P7 locator, P8 header checks, P9 level-set
paging with 8 in flight, P6 timeouts, P10's end of initial sync) are the node's code, not a
model of it. This module is only the shell: it carries the exchange's messages over the
simulated network (:func:`simulator.sim_node.send_frames`), dispatches received frames as
``PeerManager._dispatch`` does, and runs the 250 ms maintenance timer while the exchange has
work.

Until it joins, no link to it is up (``Hub.offline``). At the join time each of its links completes
a handshake: the neighbour adds it as a ready peer and announces its pool (P11), and it adds the
neighbour with the best milestone the neighbour's ``hello`` would claim (a relay-only neighbour
claims genesis). Initial sync then runs against the neighbour claiming the most work.

Metrics: blocks it accepts by relay count for propagation like any node's; blocks it applies from
a sync are not propagation (they are old) and are counted apart (``late_join`` in metrics.json).
"""

import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import final

from dagchain.mempool import Mempool
from dagchain.params import ConsensusParams
from dagchain.types import BlockId, TxId
from p2p import wire
from p2p.exchange import MAINTENANCE_MS, ORPHAN_SWEEP_MS, Exchange
from p2p.relay import Send
from p2p.service import NodeEvent, NodeService
from simulator.knowledge import node_ids
from simulator.sim_node import Caches, Hub, full_node_chain, peer_key, send_frames
from simulator.store import RowInterner

log = logging.getLogger(__name__)


@final
class LateNode:
    """One late-joining full node (index ``index``); see the module doc.

    Args:
        index: Its node index.
        params: The consensus parameters.
        hub: The simulation.
        caches: The caches shared by the full nodes (as :class:`simulator.sim_node.SimNode`).
        rows: The shared store-row interner.
    """

    def __init__(
        self,
        index: int,
        params: ConsensusParams,
        hub: Hub,
        caches: Caches,
        rows: RowInterner | None,
    ) -> None:
        self.index = node_ids(index + 1)[index]
        self.params = params
        self.hub = hub
        self.chain = full_node_chain(params, caches, rows)
        self.mempool = Mempool(params, spenders=caches.spenders)
        self.service = NodeService(params, self.chain, self.mempool, self.now)
        self._rng = rng = hub.streams.stream(f"relay:{index}")
        self.exchange = self._new_exchange()
        self.service.subscribe(self._on_event)
        self.online = False
        """Its links are up (between :meth:`join` and :meth:`leave`)."""
        self.restarts = 0
        """Times it came back after :meth:`leave` (``network.late_leave_s``)."""
        self.root: BlockId | None = None
        self.orphaned = 0
        self.joined_ms: float | None = None
        """Engine time of the join (None before)."""
        self.synced_ms: float | None = None
        """Engine time initial sync ended (P10), if it did."""
        self.target_height: int | None = None
        """The observer's best height when we joined (set by the hub)."""
        self.caught_up_ms: float | None = None
        """Engine time our best milestone first reached ``target_height``."""
        self.synced_blocks = 0
        """Blocks applied from sync level sets (P9), not relayed."""
        self.relayed_blocks = 0
        """Blocks accepted from relay (P11) after the join."""
        self.penalties: Counter[str] = Counter()
        """Misbehaviour points it gave its neighbours, by reason (an honest run has none)."""
        self._ready: list[str] = []
        self._outbox: list[Send] = []
        self._links: set[str] = set()
        """Neighbours whose link is up."""
        self._phase = rng.random() * MAINTENANCE_MS
        self._armed = False
        self._generation = 0
        """Bumped by :meth:`leave`: a timer armed before then does nothing."""
        self._last_sweep = -math.inf

    def _new_exchange(self) -> Exchange:
        """A process start: a new relay and sync session (P10 not ended) over our chain."""
        exchange = Exchange(
            self.service, self, lambda: True, self._rng, None, True, self._on_synced
        )
        self.service.subscribe(exchange.on_event)
        return exchange

    # ------------------------------------------------------------------ counters
    @property
    def rejected_blocks(self) -> int:
        """Blocks the core refused (by any rule), as the service counts them."""
        return sum(n for k, n in self.service.rejected.items() if k.startswith("block:"))

    @property
    def rejected_txs(self) -> int:
        """Txs the pool refused."""
        return sum(n for k, n in self.service.rejected.items() if k.startswith("tx:"))

    @property
    def readded_txs(self) -> int:
        """Txs of undone level sets that went back into the pool."""
        return self.service.readded_txs

    def now(self) -> int:
        """The engine clock as the integer ms the core takes."""
        return int(self.hub.now_ms)

    # ------------------------------------------------------------------ Links (p2p.exchange)
    def send_to(self, key: str, msg: wire.Message) -> bool:
        """Queue ``msg`` for neighbour ``key`` (sent when the current input is handled)."""
        if key not in self._links:
            return False
        self._outbox.append((key, msg))
        return True

    def after_sent(self, key: str, callback: Callable[[], None]) -> None:
        """A reply is on the simulated link as soon as it is queued: ``callback`` now."""
        callback()

    def penalise_key(self, key: str, points: int, reason: str) -> None:
        """Record the points (the simulation keeps every link up; an honest run gives none)."""
        if points:
            self.penalties[reason] += points
            log.debug("late node %d: peer %s %s (+%d)", self.index, key, reason, points)

    def ready_keys(self) -> Sequence[str]:
        """The neighbours, once joined."""
        return self._ready

    # ------------------------------------------------------------------ joining
    def join(self) -> None:
        """Bring up every link to a node that is online (the hub has taken us out of
        ``offline``): the handshakes of P4, both ways. A late neighbour still offline connects
        to us when it joins."""
        hub = self.hub
        if self.joined_ms is not None:  # back after leave(): the restarted process
            self.restarts += 1
            self.synced_ms = None
        self.joined_ms = hub.engine.now_ms
        self.caught_up_ms = self.joined_ms if self.target_height == 0 else None
        self.online = True
        offline, nodes = hub.offline, hub.nodes
        for link in hub.network.neighbours[self.index]:
            peer = link.peer
            if peer in offline:
                continue
            node = nodes[peer]
            node.connect(self.index)
            self.connect_to(peer, node.claim())
        self._flush()

    def leave(self) -> None:
        """The node goes down (a SIGKILL): every link closes; what its process held is gone
        (relay and sync state, the pool, the timers), its chain is kept (the node's store is
        durable, §12). The hub puts it in ``offline`` first, and :meth:`join` restarts it."""
        self.online = False
        self._generation += 1
        self._armed = False
        self._outbox = []
        nodes = self.hub.nodes
        for key in self._ready:
            nodes[int(key)].disconnect(self.index)
        self._ready = []
        self._links = set()
        self.service.unsubscribe(self.exchange.on_event)
        self.mempool.clear()
        self.exchange = self._new_exchange()

    def disconnect(self, peer: int) -> None:
        """Neighbour ``peer`` went down: the exchange forgets it (P6's next announcers)."""
        key = peer_key(peer)
        if key not in self._links:
            return
        self._links.discard(key)
        self._ready.remove(key)
        self.exchange.peer_gone(key, self.now())
        self._flush()
        self._arm()

    def connect_to(self, peer: int, claim: tuple[bytes, int, int]) -> None:
        """Node ``peer``, claiming (best, height, chainwork), is a ready peer now
        (``Exchange.peer_ready``: our pool announced, maybe a sync round started, P5)."""
        key = peer_key(peer)
        if key in self._links:
            return
        self._links.add(key)
        self._ready.append(key)
        best, height, work = claim
        hello = wire.Hello(
            proto=wire.PROTOCOL_VERSION,
            network=self.params.network_id,
            genesis=self.chain.genesis_id,
            node=key.encode().rjust(32, b"\0"),
            best=best,
            height=height,
            work=work.to_bytes(32, "little"),
            port=0,
            agent="dagchain-sim",
            time=self.now(),
        )
        self.exchange.peer_ready(key, hello, self.now())
        self._arm()

    def claim(self) -> tuple[bytes, int, int]:
        """What our ``hello`` claims (another late node joining at the same time reads it)."""
        return self.service.best()

    def connect(self, peer: int) -> None:
        """Late node ``peer`` joined after us: it is a ready peer (its claim read now)."""
        self.connect_to(peer, self.hub.nodes[peer].claim())
        self._flush()

    def relay_block(self, block_id: BlockId, raw: bytes) -> None:
        """Relay a block accepted here (P11), as ``Exchange.on_event`` does for each one."""
        self.exchange.send(self.exchange.relay.on_block_accepted(block_id, raw))
        self._flush()

    def relay_tx(self, txid: TxId, raw: bytes, exclude: int) -> None:
        """Announce a tx admitted here with the next batch (not to ``exclude``)."""
        self.exchange.relay.on_tx_accepted(txid, None if exclude < 0 else peer_key(exclude))
        self._arm()

    def on_deliver_block(self, block_id: BlockId, raw: bytes, src: int) -> None:
        """A block handed over outside a frame: as a ``block`` frame from ``src``."""
        self.on_frames(src, (wire.BlockMsg(raw),))

    def on_deliver_tx(self, txid: TxId, raw: bytes, src: int) -> None:
        """A tx handed over outside a frame: as a ``tx`` frame from ``src``."""
        self.on_frames(src, (wire.TxMsg(raw),))

    # ------------------------------------------------------------------ frames
    def on_frames(self, src: int, msgs: tuple[wire.Message, ...]) -> None:
        """Messages from neighbour ``src``, through the one dispatch table (``p2p.dispatch``;
        the simulator models no ``ping`` or ``addr``, so those are unexpected here)."""
        key = peer_key(src)
        if key not in self._links:
            return  # not joined: no link is up
        exchange, now = self.exchange, self.now()
        receive = exchange.receive
        for msg in msgs:
            receive(key, msg, now)
        exchange.check_synced()
        self._flush()
        self._arm()

    def _flush(self) -> None:
        out = self._outbox
        if out:
            self._outbox = []
            send_frames(self.hub, self.index, out)

    # ------------------------------------------------------------------ events
    def _on_event(self, event: NodeEvent) -> None:
        """Knowledge and propagation for what the core accepted (after the exchange relayed it)."""
        hub, index = self.hub, self.index
        if event.kind == "block" and event.block_id is not None:
            block_id = event.block_id
            hub.known_blocks.learn(index, block_id)
            block = self.chain.get_block(block_id)
            if block is not None:
                learn = hub.known_txs.learn
                for tx in block.txs:
                    learn(index, tx.txid)
            if event.from_sync:
                self.synced_blocks += 1
            else:
                self.relayed_blocks += 1
                hub.on_relayed(index, (block_id,))
        elif event.kind == "milestone":
            target = self.target_height
            if (
                self.caught_up_ms is None
                and target is not None
                and self.chain.best_height >= target
            ):
                self.caught_up_ms = hub.engine.now_ms
        elif event.kind == "tx" and event.txid is not None:
            hub.known_txs.learn(index, event.txid)

    def _on_synced(self) -> None:
        self.synced_ms = self.hub.engine.now_ms

    # ------------------------------------------------------------------ timer
    @property
    def busy(self) -> bool:
        """The exchange has timers to run: relay work, a sync round, sync not ended yet."""
        exchange = self.exchange
        sync = exchange.sync
        return exchange.relay.busy or sync.peer is not None or not sync.synced

    def _arm(self) -> None:
        if self._armed or not self.online or not self.busy:
            return
        self._armed = True
        engine = self.hub.engine
        phase, now = self._phase, engine.now_ms
        at = phase + (math.floor((now - phase) / MAINTENANCE_MS) + 1) * MAINTENANCE_MS
        if at <= now:
            at += MAINTENANCE_MS
        engine.schedule_at(at, self._tick, self._generation)

    def _tick(self, generation: int) -> None:
        """``PeerManager._maintain``: the exchange's timers, P6 timeouts, P10."""
        if generation != self._generation:
            return  # armed by the process that went down
        self._armed = False
        exchange, now = self.exchange, self.now()
        engine_now = self.hub.engine.now_ms
        sweep = engine_now - self._last_sweep >= ORPHAN_SWEEP_MS
        if sweep:
            self._last_sweep = engine_now
        for key, _kind in exchange.tick(now, sweep):
            exchange.on_timeout(key)
        exchange.check_synced()
        self._flush()
        self._arm()


__all__ = ["LateNode"]
