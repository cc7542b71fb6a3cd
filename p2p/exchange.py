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
from dataclasses import dataclass, field
from typing import Protocol

from dagchain.crypto import hash32
from p2p import gossip, scores, wire
from p2p.dispatch import Dispatcher
from p2p.intake import take_block, take_tx
from p2p.relay import Relay, RelaySettings, Send
from p2p.scores import Penalty
from p2p.service import NodeEvent, NodeService
from p2p.serving import serve_levelset, serve_milestones, serve_pending
from p2p.syncsession import ServiceView, SyncSession, SyncStep, apply_ready

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

    def after_sent(self, key: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` once what was queued for ``key`` so far is written (or at once)."""
        ...


@dataclass(slots=True)
class PeerLimits:
    """The exchange's per-peer limits of §11.7."""

    missing_inputs: scores.MissingInputLimiter = field(default_factory=scores.MissingInputLimiter)
    """Txs with missing inputs beyond 100 a minute are dropped unexamined (decision 35)."""
    serving: int = 0
    """Our answers to this peer's getdata not yet written (at most two)."""

    def done_serving(self) -> None:
        """One answer to a getdata was written."""
        self.serving = max(0, self.serving - 1)


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
        connection: Handles the connection messages of :mod:`p2p.dispatch` (``ping``, ``addr``);
            None: they are unexpected.
        relay_settings: The relay's numbers (None: the protocol's).
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
        connection: object | None = None,
        relay_settings: RelaySettings | None = None,
    ) -> None:
        self.service = service
        self.stale_filter = stale_filter
        self.links = links
        self.on_ready = on_ready
        self.view = ServiceView(service, links.ready_keys, seeds_tried)
        self.relay = Relay(self.view, rng, relay_settings)
        self.verifier: Verifier = verifier if verifier is not None else NoVerifier()
        self.sync = SyncSession(self.view, on_reset=self.verifier.drop)
        self.stopping = False
        self._peers: dict[str, PeerLimits] = {}
        self.dispatcher = Dispatcher(self, connection)

    def now_ms(self) -> int:
        """The node's clock."""
        return int(self.service.clock())

    def send(self, sends: Iterable[Send]) -> None:
        """Send; a block we send in full counts for the peer's best height (docs/p2p.md)."""
        for key, msg in sends:
            if self.links.send_to(key, msg) and isinstance(msg, wire.BlockMsg):
                block_id = wire.block_frame_id(msg.data)
                if block_id is not None:
                    self.sync.note_milestone(key, block_id)

    def penalise(self, penalties: Iterable[Penalty]) -> None:
        """Hand the penalties to the shell (§11.7)."""
        for penalty in penalties:
            self.links.penalise_key(*penalty)

    # ------------------------------------------------------------------ peers
    def peer_ready(self, key: str, hello: wire.Hello, now: int) -> None:
        """Handshake done: announce our pool to it (P11), maybe sync with it (P5)."""
        self._peers[key] = PeerLimits()
        self.relay.add_peer(key)
        self.sync.add_peer(key, hello.chainwork, hello.height)
        txids = [bytes(t) for t in self.service.mempool.txids_by_fee_rate()]
        self.send(self.relay.announce_pool(key, txids, now))
        self.do(self.sync.maybe_start(now))
        self.check_synced()

    def peer_gone(self, key: str, now: int) -> None:
        """Ask the next announcers for what it owed us; a new round if it was the sync peer."""
        self._peers.pop(key, None)
        self.service.serve_holds.release(key)
        self.send(self.relay.remove_peer(key, now))
        self.do(self.sync.remove_peer(key, now))
        self.check_synced()

    def best_height(self, key: str) -> int:
        """The peer's best milestone height as far as we know."""
        claim = self.sync.claims.get(key)
        return claim.height if claim is not None else 0

    # ------------------------------------------------------------------ messages
    def receive(self, key: str, msg: wire.Message, now: int) -> None:
        """A message from the ready peer ``key``, through the one dispatch table
        (:mod:`p2p.dispatch`; connection messages go to the shell when it handles them)."""
        self.dispatcher.dispatch(key, msg, now)

    def on_unexpected(self, key: str, msg: wire.Message, now: int) -> None:
        """A message this node has no handler for (the simulator models no ``ping``/``addr``)."""
        self.links.penalise_key(key, scores.SCORE_UNSOLICITED, f"unexpected {msg.TYPE}")

    def on_inv(self, key: str, msg: wire.Inv, now: int) -> None:
        """P11: announced items; known blocks count for the peer's best (P5)."""
        has_block = self.service.has_block
        for kind, item in msg.items:
            if kind == BLOCK and has_block(item):
                self.sync.note_milestone(key, item)
        self.send(self.relay.on_inv(key, msg, now, self.sync.synced))

    def on_getdata(self, key: str, msg: wire.GetData, now: int) -> None:
        """§11.7: at most two getdata served at a time per peer (+1 beyond); P11 answers."""
        state = self._peers.get(key)
        if state is None:
            return
        if state.serving >= gossip.MAX_OUTSTANDING_GETDATA:
            self.links.penalise_key(key, scores.SCORE_RATE, "getdata beyond 2 outstanding")
            return
        state.serving += 1
        self.send(self.relay.on_getdata(key, msg))
        self.links.after_sent(key, state.done_serving)

    def on_notfound(self, key: str, msg: wire.NotFound, now: int) -> None:
        """P9 (a level set or listed block we asked for) or P11 (the next announcer)."""
        step = self.sync.on_notfound(key, msg, self.relay.pending_items(key), now)
        if step is not None:
            self.do(step)
            return
        result = self.relay.on_notfound(key, msg, now)
        if not result.expected:
            self.links.penalise_key(key, scores.SCORE_UNSOLICITED, "unsolicited notfound")
        self.send(result.sends)

    def on_block(self, key: str, msg: wire.BlockMsg, now: int) -> None:
        """A ``block``: its fetch is done; to the sync session or the core."""
        self._on_block(key, msg.data, now)

    def on_tx(self, key: str, msg: wire.TxMsg, now: int) -> None:
        """A ``tx`` from ``key``: its fetch is done; into the pool (§7.5, §11.7)."""
        state = self._peers.get(key)
        if state is None:
            return
        raw = msg.data
        self.send(self.relay.on_tx(key, hash32(raw), now).sends)
        penalty = take_tx(self.service, key, raw, state.missing_inputs, now).penalty
        if penalty is not None:
            self.links.penalise_key(*penalty)

    def on_getmilestones(self, key: str, msg: wire.GetMilestones, now: int) -> None:
        """P7, P8: milestone headers after the peer's locator."""
        self.links.send_to(key, serve_milestones(self.service, msg, key))

    def on_getlevelset(self, key: str, msg: wire.GetLevelSet, now: int) -> None:
        """P9: a page of a level set's ids."""
        self.links.send_to(key, serve_levelset(self.service, msg, key))

    def on_getpending(self, key: str, msg: wire.GetPending, now: int) -> None:
        """P9: our pending blocks."""
        self.links.send_to(key, serve_pending(self.service, msg))

    def on_pending(self, key: str, msg: wire.Pending, now: int) -> None:
        """P9: the pending blocks of the sync peer; fetch those we lack."""
        want = self.sync.on_pending(key, msg, lambda i: i in self.relay.fetcher)
        if want is None:
            self.links.penalise_key(key, scores.SCORE_UNSOLICITED, "unsolicited pending")
            return
        for item in want:
            self.relay.fetcher.on_announce(item, key, now)
        self.send(self.relay.request(key, [(BLOCK, i) for i in want], now))

    def on_milestones(self, key: str, msg: wire.Milestones, now: int) -> None:
        """P8: milestone headers of a sync round."""
        self.do(self.sync.on_milestones(key, msg, now))

    def on_levelset(self, key: str, msg: wire.LevelSet, now: int) -> None:
        """P9: the ids of one level set of a sync round."""
        self.do(self.sync.on_levelset(key, msg, now))

    def _on_block(self, key: str, raw: bytes, now: int) -> None:
        block_id = wire.block_frame_id(raw)
        if block_id is None:
            self.links.penalise_key(key, scores.SCORE_BLOCK_INVALID, "block MALFORMED (H1)")
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
        self.penalise(intake.penalties)
        if intake.missing:
            self.send(self.relay.on_orphan(key, intake.missing, now))
        if intake.behind:
            self.do(self.sync.start(key, now))
        self.sync.note_milestone(key, block_id)

    def on_event(self, event: NodeEvent) -> None:
        """P11: relay what the core accepted (not the level sets of a sync, P9)."""
        if event.kind == "block" and event.block_id is not None:
            if event.from_sync:
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
        self.penalise(step.penalties)
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
        # P9: level sets go to the core in height order; their events say so (not relayed)
        verifier, now = self.verifier, self.now_ms()
        step = apply_ready(self.sync, self.service, verifier.ready, verifier.take, now)
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


__all__ = [
    "MAINTENANCE_MS",
    "ORPHAN_SWEEP_MS",
    "Exchange",
    "Links",
    "NoVerifier",
    "PeerLimits",
    "Verifier",
]
