"""The inventory and sync exchange of one node over its ready peers (§11.4-§11.6).

:class:`Exchange` drives the sans-I/O :class:`p2p.relay.Relay` and
:class:`p2p.syncsession.SyncSession` with the node's messages and clock, hands their blocks and
txs to :class:`NodeService`, and carries out what they return through :class:`Links` (the
connections of :class:`node.net.manager.PeerManager`, or the simulator's links). No I/O: the
signature worker pool of :mod:`node.net.verifypool` comes in as a :class:`Verifier` (the
daemon's), or none (:class:`NoVerifier`: every check stays in ``Chain.on_block``), so the
simulator's nodes run this same exchange.
"""

import logging
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from dagchain.crypto import hash32
from p2p import gossip, wire
from p2p.intake import Penalty, take_block, take_tx
from p2p.relay import Relay, Send
from p2p.service import NodeEvent, NodeService
from p2p.syncsession import ServiceView, SyncSession, SyncStep, apply_ready, serve

log = logging.getLogger(__name__)

BLOCK = int(wire.InvKind.BLOCK)
MAINTENANCE_MS = 250
"""The exchange's timers run every 250 ms (tx batches, announcer moves, P6 deadlines)."""
ORPHAN_SWEEP_MS = 1_000
"""P13: the orphan parent sweep runs once a second."""


class Links(Protocol):
    """What the exchange needs of the connections."""

    def send_to(self, key: str, msg: wire.Message) -> bool:
        """Queue ``msg`` for the ready peer ``key``; False if there is none."""
        ...

    def penalise_key(self, key: str, points: int, reason: str) -> None:
        """Add misbehaviour points to ``key`` (a ban closes it)."""
        ...

    def ready_keys(self) -> Sequence[str]:
        """Keys of the ready peers, in connection order."""
        ...


class Verifier(Protocol):
    """Signature checks of complete level sets ahead of their turn (P9; node.net.verifypool)."""

    def start(
        self, jobs: Iterable[tuple[bytes, list[bytes]]], on_done: Callable[[bytes], None]
    ) -> None:
        """Check each new (milestone id, raws); ``on_done(ms)`` once answered."""
        ...

    def ready(self, ms: bytes) -> bool:
        """No check of this level set is still running."""
        ...

    def take(self, ms: bytes) -> list[bytes]:
        """The txids that passed (forgotten afterwards)."""
        ...

    def drop(self) -> None:
        """Forget every check (the sync plan was reset)."""
        ...


class NoVerifier:
    """No worker: every level set may be applied at once, every check stays in ``on_block``."""

    def start(
        self, jobs: Iterable[tuple[bytes, list[bytes]]], on_done: Callable[[bytes], None]
    ) -> None:
        """Check nothing."""

    def ready(self, ms: bytes) -> bool:
        """Always ready."""
        return True

    def take(self, ms: bytes) -> list[bytes]:
        """Nothing passed ahead of time."""
        return []

    def drop(self) -> None:
        """Nothing to forget."""


class Exchange:
    """Relay (P11, P13) and sync (P5, P7-P10) of one node.

    Args:
        service: The chain owner.
        links: The connections.
        seeds_tried: P10 (a): every seed was dialed once.
        rng: Picks push targets and re-announce times.
        verifier: Signature checks of initial sync ahead of time (None: :class:`NoVerifier`).
        stale_filter: P14: drop relayed blocks with a milestone link ``punctuality`` below our
            best.
        on_ready: Called once, when initial sync ends.
    """

    def __init__(
        self,
        service: NodeService,
        links: Links,
        seeds_tried: Callable[[], bool],
        rng: random.Random,
        verifier: Verifier | None = None,
        stale_filter: bool = True,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.service = service
        self.stale_filter = stale_filter
        self.links = links
        self.on_ready = on_ready
        self.view = ServiceView(service, links.ready_keys, seeds_tried)
        self.relay = Relay(self.view, rng)
        self.verifier: Verifier = verifier if verifier is not None else NoVerifier()
        self.sync = SyncSession(self.view, on_reset=self.verifier.drop)
        self.stopping = False
        self._applying_sync = False

    def now_ms(self) -> int:
        """The node's clock."""
        return int(self.service.clock())

    def send(self, sends: Iterable[Send]) -> None:
        """Send; a block we send in full counts for the peer's best height (docs/p2p.md)."""
        for key, msg in sends:
            if self.links.send_to(key, msg) and isinstance(msg, wire.BlockMsg):
                block_id = gossip.block_frame_id(msg.data)
                if block_id is not None:
                    self.sync.note_milestone(key, block_id)

    def penalise(self, key: str, penalties: Iterable[Penalty]) -> None:
        """Apply (points, reason) penalties to ``key``."""
        for points, reason in penalties:
            self.links.penalise_key(key, points, reason)

    # ------------------------------------------------------------------ peers
    def peer_ready(self, key: str, hello: wire.Hello, now: int) -> None:
        """Handshake done: announce our pool to it (P11), maybe sync with it (P5)."""
        self.relay.add_peer(key)
        self.sync.add_peer(key, hello.chainwork, hello.height)
        txids = [bytes(t) for t in self.service.mempool.txids_by_fee_rate()]
        self.send(self.relay.announce_pool(key, txids, now))
        self.do(self.sync.maybe_start(now))
        self.check_synced()

    def peer_gone(self, key: str, now: int) -> None:
        """Ask the next announcers for what it owed us; a new round if it was the sync peer."""
        self.send(self.relay.remove_peer(key, now))
        self.do(self.sync.remove_peer(key, now))
        self.check_synced()

    def best_height(self, key: str) -> int:
        """The peer's best milestone height as far as we know."""
        claim = self.sync.claims.get(key)
        return claim.height if claim is not None else 0

    # ------------------------------------------------------------------ messages
    def on_message(self, key: str, msg: wire.Message, now: int) -> bool:
        """Inventory and sync messages; False if ``msg`` is none of those."""
        if isinstance(msg, wire.Inv):
            for kind, item in msg.items:
                if kind == BLOCK and self.service.has_block(item):
                    self.sync.note_milestone(key, item)
            self.send(self.relay.on_inv(key, msg, now, self.sync.synced))
        elif isinstance(msg, wire.NotFound):
            step = self.sync.on_notfound(key, msg, self.relay.pending_items(key), now)
            if step is not None:
                self.do(step)
                return True
            result = self.relay.on_notfound(key, msg, now)
            if not result.expected:
                self.links.penalise_key(key, gossip.SCORE_UNSOLICITED, "unsolicited notfound")
            self.send(result.sends)
        elif isinstance(msg, wire.BlockMsg):
            self._on_block(key, msg.data, now)
        elif isinstance(msg, wire.Pending):
            want = self.sync.on_pending(key, msg, lambda i: i in self.relay.fetcher)
            if want is None:
                self.links.penalise_key(key, gossip.SCORE_UNSOLICITED, "unsolicited pending")
                return True
            for item in want:
                self.relay.fetcher.on_announce(item, key, now)
            self.send(self.relay.request(key, [(BLOCK, i) for i in want], now))
        elif isinstance(msg, wire.Milestones):
            self.do(self.sync.on_milestones(key, msg, now))
        elif isinstance(msg, wire.LevelSet):
            self.do(self.sync.on_levelset(key, msg, now))
        else:
            return False
        return True

    def answer(self, key: str, msg: wire.Message) -> None:
        """Answer ``getmilestones``, ``getlevelset`` or ``getpending`` (P7-P9)."""
        reply = serve(self.service, msg)
        if reply is not None:
            self.links.send_to(key, reply)

    @property
    def applying_sync(self) -> bool:
        """True while downloaded level sets go to the core (their events are not relayed, P9)."""
        return self._applying_sync

    def _on_block(self, key: str, raw: bytes, now: int) -> None:
        block_id = gossip.block_frame_id(raw)
        if block_id is None:
            self.links.penalise_key(key, gossip.SCORE_BLOCK_INVALID, "block MALFORMED (H1)")
            return
        arrival = self.relay.on_block(key, block_id, now)
        self.send(arrival.sends)
        if self.sync.on_block(key, block_id, raw):
            self.pump_sync(key)
            return
        if not self.sync.synced and not arrival.requested:
            return  # P10: relayed blocks are ignored until initial sync ends
        stale_filter = self.stale_filter and not self.sync.fetched_from_pending(block_id)
        intake = take_block(self.service, key, block_id, raw, stale_filter)
        if intake.stale:
            return
        self.penalise(key, intake.penalties)
        if intake.missing:
            self.send(self.relay.on_orphan(key, intake.missing, now))
        if intake.behind:
            self.do(self.sync.start(key, now))
        self.sync.note_milestone(key, block_id)

    def on_tx(self, key: str, raw: bytes, limiter: gossip.MissingInputLimiter, now: int) -> None:
        """A ``tx`` from ``key``: its fetch is done; into the pool."""
        self.send(self.relay.on_tx(key, hash32(raw), now).sends)
        penalty = take_tx(self.service, key, raw, limiter, now)
        self.penalise(key, (penalty,) if penalty else ())

    def on_event(self, event: NodeEvent) -> None:
        """P11: relay what the core accepted (not the level sets of a sync, P9)."""
        if event.kind == "block" and event.block_id is not None:
            if self._applying_sync:
                return
            raw = self.service.get_block_raw(event.block_id)
            if raw is not None:
                self.send(self.relay.on_block_accepted(event.block_id, raw))
        elif event.kind == "tx" and event.txid is not None:
            self.relay.on_tx_accepted(event.txid, event.data.get("peer"))

    # ------------------------------------------------------------------ sync
    def do(self, step: SyncStep) -> None:
        """Carry out what the sync session asked for."""
        now = self.now_ms()
        self.send(step.sends)
        for key, ids in step.fetch:
            self.send(self.relay.request(key, [(BLOCK, b) for b in ids], now))
        for penalty in step.penalties:
            self.links.penalise_key(penalty.key, penalty.score, penalty.reason)
        if step.synced:
            self._became_synced()
        if step.pump is not None:
            self.pump_sync(step.pump)

    def pump_sync(self, key: str) -> None:
        """Apply complete level sets in order, fetch listed blocks, open new level sets."""
        chain = self.service.chain
        best_before = chain.best_id
        if not self.stopping:
            self.verifier.start(self.sync.complete_jobs(), self._on_verified)
        # P9: level sets go to the core in height order and are not relayed
        self._applying_sync = True
        try:
            verifier, now = self.verifier, self.now_ms()
            step = apply_ready(self.sync, self.service, verifier.ready, verifier.take, now)
        finally:
            self._applying_sync = False
        self.do(step)
        if chain.best_id != best_before:
            self._announce_best(exclude=key)
        self.do(self.sync.pump(key, self.now_ms()))

    def _on_verified(self, ms: bytes) -> None:
        key = self.sync.peer
        if key is not None and not self.stopping:
            self.pump_sync(key)

    def _announce_best(self, exclude: str) -> None:
        """After a sync step moved the best milestone, announce it (inv only) so that peers
        that do not know our branch notice more work (interpretation of P9's 'not relayed')."""
        best = bytes(self.service.chain.best_id)
        for key, state in self.relay.peers.items():
            if key != exclude and best not in state.known:
                state.known.add(best)
                self.links.send_to(key, wire.Inv(((BLOCK, best),)))

    def check_synced(self) -> None:
        """P10: end initial sync once its conditions hold."""
        if self.sync.check_synced(self.now_ms()):
            self._became_synced()

    def _became_synced(self) -> None:
        log.info("initial sync done at height %d", self.service.best()[1])
        if self.on_ready is not None:
            self.on_ready()

    # ------------------------------------------------------------------ timers
    def tick(self, now: int, sweep_orphans: bool) -> list[tuple[str, str]]:
        """The 250 ms timers: tx batches, announcer moves, re-announce rounds, the orphan
        parent sweep (P13). Returns (peer, request kind) of every request that timed out (P6);
        their getdata are already cleared."""
        tick = self.relay.tick(now)
        self.send(tick.sends)
        if self.relay.reannounce_due(now) and len(self.service.mempool):
            txids = [bytes(t) for t in self.service.mempool.txids_by_fee_rate()]
            self.send(self.relay.reannounce(txids, now))
        if sweep_orphans:
            missing = self.service.chain.orphans.missing_links()
            self.send(self.relay.fetch_orphan_parents(missing, now))
        return [(key, "getdata") for key in tick.timed_out] + self.sync.tick(now)

    def on_timeout(self, key: str) -> None:
        """A request to ``key`` timed out: if it is the sync peer, start over (P6)."""
        if self.sync.peer == key:
            self.do(self.sync.restart(self.now_ms()))


__all__ = ["MAINTENANCE_MS", "ORPHAN_SWEEP_MS", "Exchange", "Links", "NoVerifier", "Verifier"]
