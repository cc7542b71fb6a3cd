"""Sans-I/O sync session: P5 peer choice, P7-P10 catch-up rounds (PROTOCOL.md §11.4).

One :class:`SyncSession` per node. It takes wire messages and times (integer ms) and returns a
:class:`SyncStep`: the messages to send (``[(peer_key, message)]``), the blocks to getdata (the
caller routes them through :class:`p2p.relay.Relay`, which keeps P11's two outstanding getdata
per peer), and the penalties for the caller to apply. The level sets to hand to the core come
from :meth:`SyncSession.pop_ready`, in height order; the caller submits them and reports a
failure back with :meth:`SyncSession.fail` or :meth:`SyncSession.reset`. No socket, clock or event
loop (the h11 pattern of STYLE.md); the header checks and the level-set plan are
:mod:`p2p.sync`'s.

What it keeps: the sync peer and its :class:`p2p.sync.SyncPlan`, the locator's extra entry (the
last verified header), whether the peer's headers are exhausted, each ready peer's claim (the
chainwork and height it advertised or proved, and P9 v2's no-new-round-until time), our
outstanding ``getmilestones``/``getlevelset``/``getpending`` and their deadlines (P6), the
blocks fetched from a ``pending`` reply (exempt from P14), and whether initial sync ended (P10).
"""

import logging
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol, final

from dagchain.errors import InvalidBlock, NotYetValid
from dagchain.params import ConsensusParams
from dagchain.retarget import Snapshot
from dagchain.types import TxId
from p2p import gossip, scores, wire
from p2p.relay import Send
from p2p.scores import Penalty
from p2p.service import NodeService
from p2p.sync import (
    MAX_GETDATA_ITEMS,
    MAX_LEVEL_SETS_IN_FLIGHT,
    SyncError,
    SyncPlan,
    VerifiedHeader,
    is_tip_fresh,
    verify_milestone_headers,
)

log = logging.getLogger(__name__)

UNBACKED_ROUND_INTERVAL_MS = 60_000
"""P9 (v2): after a round that did not back a peer's claim, no new round with it for 60 s."""
ORPHAN_SYNC_TRIGGER = 64
"""P13: more missing ancestors than this triggers milestone sync."""


class SyncHost(Protocol):
    """What the session reads of its node: the core's chain and the shell's peers."""

    @property
    def params(self) -> ConsensusParams:
        """The consensus parameters."""
        ...

    @property
    def genesis_id(self) -> bytes:
        """Our genesis id."""
        ...

    def has_block(self, block_id: bytes) -> bool:
        """True if the block is accepted here."""
        ...

    def locator(self) -> Sequence[bytes]:
        """P7's locator of our best milestone chain."""
        ...

    def get_snapshot(self, block_id: bytes) -> Snapshot | None:
        """A milestone's snapshot, if we have it."""
        ...

    def timestamp(self, block_id: bytes) -> int | None:
        """A block's timestamp, if we have it."""
        ...

    def best_work(self) -> int:
        """Chainwork of our best milestone."""
        ...

    def best_timestamp(self) -> int:
        """Timestamp of our best milestone."""
        ...

    def ready_peers(self) -> Sequence[str]:
        """Keys of the peers with a completed handshake, in connection order."""
        ...

    def seeds_tried(self) -> bool:
        """Every configured seed was dialed at least once (P10 a)."""
        ...


@dataclass(frozen=True, slots=True)
class SyncSettings:
    """The P6/P9 numbers; the defaults are the protocol's."""

    request_timeout_ms: int = gossip.REQUEST_TIMEOUT_MS
    unbacked_round_interval_ms: int = UNBACKED_ROUND_INTERVAL_MS
    max_level_sets_in_flight: int = MAX_LEVEL_SETS_IN_FLIGHT
    max_blocks_requested: int = MAX_GETDATA_ITEMS * gossip.MAX_OUTSTANDING_GETDATA
    """Listed blocks asked for per pump (two full getdata)."""


@dataclass(slots=True)
class PeerClaim:
    """What one ready peer claims: its hello's best, raised by milestones it proves to have."""

    chainwork: int
    height: int
    unbacked_until_ms: int = 0
    """P9 (v2): no new sync round with this peer before this time (its claim was unbacked)."""


@dataclass(slots=True)
class SyncStep:
    """What the caller does after one input, in this order."""

    sends: list[Send] = field(default_factory=list)
    fetch: list[tuple[str, list[bytes]]] = field(default_factory=list)
    """Blocks to getdata, per peer (through the relay's two-outstanding rule)."""
    penalties: list[Penalty] = field(default_factory=list)
    synced: bool = False
    """Initial sync just ended (P10): the node is ready."""
    pump: str | None = None
    """Apply what is complete (:meth:`SyncSession.pop_ready`), then call
    :meth:`SyncSession.pump` for this peer."""

    def extend(self, other: "SyncStep") -> "SyncStep":
        """Append ``other``'s actions to this step."""
        self.sends += other.sends
        self.fetch += other.fetch
        self.penalties += other.penalties
        self.synced = self.synced or other.synced
        self.pump = self.pump if other.pump is None else other.pump
        return self


@final
class SyncSession:
    """P5 and P7-P10 for one node, one sync peer at a time.

    Args:
        host: The chain and the ready peers.
        settings: The protocol numbers.
        on_reset: Called whenever the plan is dropped (e.g. to drop signature-worker tasks).
    """

    def __init__(
        self,
        host: SyncHost,
        settings: SyncSettings | None = None,
        on_reset: Callable[[], None] | None = None,
    ) -> None:
        self.host = host
        self.settings = s = settings if settings is not None else SyncSettings()
        self.on_reset = on_reset
        self.peer: str | None = None
        """The sync peer of the current round."""
        self.plan = SyncPlan(s.max_level_sets_in_flight)
        self.synced = False
        self.claims: dict[str, PeerClaim] = {}
        self.unbacked_rounds = 0
        """Rounds that ended without backing the peer's claim (logged, counted)."""
        self._requests: dict[str, dict[str, int]] = {}
        self._asked_locator: list[bytes] = []
        """The locator of the outstanding ``getmilestones``: the reply is checked against what
        was asked, not against our best chain at its arrival, which a reorganisation in between
        may have changed (the soak found honest peers banned for it, issue 26)."""
        self._exhausted = False
        self._last: VerifiedHeader | None = None
        self._from_pending = gossip.KnownInventory(2 * wire.MAX_IDS)

    # ------------------------------------------------------------------ peers
    def add_peer(self, key: str, chainwork: int, height: int) -> None:
        """``key`` completed its handshake, claiming this best milestone."""
        self.claims[key] = PeerClaim(chainwork, height)
        self._requests[key] = {}

    def remove_peer(self, key: str, now_ms: int) -> SyncStep:
        """``key`` left: if it was the sync peer, start over with the next."""
        self.claims.pop(key, None)
        self._requests.pop(key, None)
        if self.peer == key:
            return self.restart(now_ms)
        return SyncStep()

    def note_milestone(self, key: str, block_id: bytes) -> None:
        """``key`` sent or announced this block, or we sent it in full: if we hold it as a
        milestone heavier than the peer's claim, that is its claim now (``GET /v1/peers``)."""
        claim = self.claims.get(key)
        if claim is None:
            return
        snap = self.host.get_snapshot(block_id)
        if snap is not None and snap.chainwork > claim.chainwork:
            claim.chainwork = snap.chainwork
            claim.height = snap.height

    def requests(self, key: str) -> Mapping[str, int]:
        """Our outstanding sync requests to ``key``: kind → deadline (for §11.7's solicited
        replies)."""
        return self._requests.get(key, {})

    def fetched_from_pending(self, block_id: bytes) -> bool:
        """We getdata'd this block from a ``pending`` reply (P9): exempt from P14."""
        return block_id in self._from_pending

    # ------------------------------------------------------------------ rounds
    def maybe_start(self, now_ms: int, exclude: str | None = None) -> SyncStep:
        """P5: sync with the peer advertising the most work, if that is more than ours."""
        if self.peer is not None:
            return SyncStep()
        work = self.host.best_work()
        best: PeerClaim | None = None
        best_key = ""
        for key in self.host.ready_peers():
            claim = self.claims.get(key)
            if claim is None or key == exclude or claim.unbacked_until_ms > now_ms:
                continue
            if best is None or claim.chainwork > best.chainwork:
                best, best_key = claim, key
        if best is not None and best.chainwork > work:
            return self.start(best_key, now_ms)
        return SyncStep()

    def start(self, key: str, now_ms: int) -> SyncStep:
        """Start a round with ``key`` (P5, or P13: an orphan with an unknown milestone link)."""
        if self.peer is not None and self.peer in self.claims:
            return SyncStep()
        claim = self.claims.get(key)
        if claim is None or claim.unbacked_until_ms > now_ms:
            return SyncStep()  # P9 (v2): one round per 60 s with a peer whose claim was unbacked
        self.reset()
        self.peer = key
        return SyncStep([self._getmilestones(key, now_ms)])

    def reset(self) -> None:
        """Drop the round (no sync peer)."""
        self.peer = None
        self.plan.reset()
        if self.on_reset is not None:
            self.on_reset()
        self._exhausted = False
        self._last = None

    def restart(self, now_ms: int) -> SyncStep:
        """Drop the round and start the next with the best peer (a timeout, a disconnect)."""
        self.reset()
        return self.maybe_start(now_ms)

    def fail(self, key: str, reason: str, score: int, now_ms: int) -> SyncStep:
        """The sync peer failed: drop the round, penalise it, go on with another peer."""
        self.reset()
        step = SyncStep(penalties=[Penalty(key, score, f"sync: {reason}")])
        return step.extend(self.maybe_start(now_ms, exclude=key))

    def _locator(self) -> list[bytes]:
        locator = [bytes(b) for b in self.host.locator()]
        last = self._last
        if last is not None and last.block_id not in locator:
            locator = [last.block_id, *locator][: wire.MAX_LOCATOR]
        return locator

    def _getmilestones(self, key: str, now_ms: int) -> Send:
        self._requests.setdefault(key, {})["milestones"] = now_ms + self.settings.request_timeout_ms
        self._asked_locator = self._locator()
        return key, wire.GetMilestones(tuple(self._asked_locator))

    def _unsolicited(self, key: str, what: str) -> SyncStep:
        return SyncStep(penalties=[Penalty(key, scores.SCORE_UNSOLICITED, f"unsolicited {what}")])

    # ------------------------------------------------------------------ answers
    def on_milestones(self, key: str, msg: wire.Milestones, now_ms: int) -> SyncStep:
        """P8: verify the headers, queue their level sets; an empty reply ends the headers."""
        requests = self._requests.get(key, {})
        if requests.pop("milestones", None) is None or self.peer != key:
            return self._unsolicited(key, "milestones")
        if not msg.headers:
            self._exhausted = True  # P9: the round ends with an empty reply
            return SyncStep(pump=key)
        last = self._last
        known: dict[bytes, VerifiedHeader] = {} if last is None else {last.block_id: last}
        host = self.host
        try:
            headers = verify_milestone_headers(
                msg.headers,
                self._asked_locator,
                lambda b: known[b].snapshot if b in known else host.get_snapshot(b),
                lambda b: known[b].header.timestamp_ms if b in known else host.timestamp(b),
                host.genesis_id,
                host.params,
                now_ms,
            )
        except SyncError as exc:
            if exc.pause:
                self.reset()
                return SyncStep()
            return self.fail(key, f"bad milestones: {exc.reason}", exc.score, now_ms)
        self._last = headers[-1]
        new = [h for h in headers if not host.has_block(h.block_id)]
        if not new:
            # P9 (v2): a reply of headers we already have ends the round like an empty one
            self._exhausted = True
        self.plan.add_headers(new)
        return SyncStep(pump=key)

    def on_levelset(self, key: str, msg: wire.LevelSet, now_ms: int) -> SyncStep:
        """P9: one page of a level set's ids; ask for the next page."""
        if self.peer != key or not self.plan.is_expected_levelset(msg.ms):
            return self._unsolicited(key, "levelset")
        try:
            nxt = self.plan.on_levelset(msg.ms, msg.offset, msg.total, msg.ids)
        except SyncError as exc:
            return self.fail(key, exc.reason, exc.score, now_ms)
        step = SyncStep(pump=key)
        if nxt is not None:
            step.sends.append((key, wire.GetLevelSet(*nxt)))
        requests = self._requests.setdefault(key, {})
        if self.plan.awaiting_levelsets():
            requests["levelset"] = now_ms + self.settings.request_timeout_ms
        else:
            requests.pop("levelset", None)
        return step

    def on_block(self, key: str, block_id: bytes, raw: bytes) -> bool:
        """A ``block`` from ``key``: True if the plan asked for it (then pump, do not submit)."""
        return self.peer == key and self.plan.on_block(block_id, raw)

    def on_notfound(
        self, key: str, msg: wire.NotFound, pending: AbstractSet[bytes], now_ms: int
    ) -> SyncStep | None:
        """A level set we asked for, or a listed block we asked for (in ``pending``, our
        getdata to ``key``), is not found: the round fails (+50). None if the sync is not
        concerned."""
        if self.peer != key:
            return None
        for kind, item in msg.items:
            if kind == wire.InvKind.LEVEL_SET and self.plan.is_expected_levelset(item):
                return self.fail(key, "level set not found", scores.SCORE_BAD_LEVEL_SET, now_ms)
            if item in pending and self.plan.on_not_found(item):
                return self.fail(key, "listed block not found", scores.SCORE_BAD_LEVEL_SET, now_ms)
        return None

    def on_pending(
        self, key: str, msg: wire.Pending, skip: Callable[[bytes], bool]
    ) -> list[bytes] | None:
        """The answer to our ``getpending``: the ids to getdata (neither had nor ``skip``ped),
        exempt from P14; None if we did not ask (unsolicited, +10)."""
        if self._requests.get(key, {}).pop("pending", None) is None:
            return None
        has = self.host.has_block
        want = [bytes(i) for i in msg.ids if not has(i) and not skip(i)]
        for item in want:
            self._from_pending.add(item)
        return want

    # ------------------------------------------------------------------ level sets
    def complete_jobs(self) -> list[tuple[bytes, list[bytes]]]:
        """(milestone id, raws) of every level set with all its blocks here, in any position
        (for signature workers ahead of their turn)."""
        return [
            (job.milestone.block_id, raws)
            for job, raws in self.plan.complete_jobs(self.host.has_block)
        ]

    def pop_ready(self, may_apply: Callable[[bytes], bool]) -> list[tuple[bytes, list[bytes]]]:
        """(milestone id, raws in order) of the complete level sets at the front, in height
        order, for the core (P9, not relayed); ``may_apply(ms)`` holds back the front one."""
        ready = self.plan.pop_ready(self.host.has_block, lambda j: may_apply(j.milestone.block_id))
        return [(job.milestone.block_id, raws) for job, raws in ready]

    def pump(self, key: str, now_ms: int) -> SyncStep:
        """After applying: fetch listed blocks, open level sets, ask for more headers, or end
        the round (``getpending`` once, then P9 v2's unbacked-claim rule)."""
        step = SyncStep()
        if self.peer != key:
            return step
        plan, requests = self.plan, self._requests.setdefault(key, {})
        wanted = plan.wanted_blocks(self.host.has_block, self.settings.max_blocks_requested)
        if wanted:
            step.fetch.append((key, wanted))
        timeout = self.settings.request_timeout_ms
        for ms, offset in plan.start_jobs():
            requests["levelset"] = now_ms + timeout
            step.sends.append((key, wire.GetLevelSet(ms, offset)))
        if self._exhausted:
            if plan.idle:
                # P9: then getpending once; the round is over (its answer is fetched as it
                # comes, so a peer that never answers holds nothing up)
                if "pending" not in requests:
                    requests["pending"] = now_ms + timeout
                    step.sends.append((key, wire.GetPending()))
                step.extend(self._finish_round(key, now_ms))
            return step
        if plan.queued == 0 and "milestones" not in requests:
            step.sends.append(self._getmilestones(key, now_ms))
        return step

    def _finish_round(self, key: str, now_ms: int) -> SyncStep:
        """The round with ``key`` is over (P9): its headers are exhausted, its level sets in.

        P9 (v2), an unbacked claim: if our best chainwork is still below what the peer
        claimed, it counts from now on as claiming our chainwork (so P5 picks the next peer and
        P10 can end) until a header or block it sends raises our best, and no new round with it
        starts within 60 s. No score: an honest peer can fall behind its own hello.
        """
        self.reset()
        work = self.host.best_work()
        claim = self.claims.get(key)
        if claim is not None and claim.chainwork > work:
            interval = self.settings.unbacked_round_interval_ms
            log.info(
                "peer %s: its claim of more chainwork is not backed by milestones (P9); "
                "no new sync round with it for %d s",
                key,
                interval // 1000,
            )
            self.unbacked_rounds += 1
            claim.chainwork = work
            claim.unbacked_until_ms = now_ms + interval
        step = SyncStep(synced=self.check_synced(now_ms))
        return step.extend(self.maybe_start(now_ms))

    # ------------------------------------------------------------------ timers
    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """(peer, kind) of every sync request past its deadline (P6), forgotten here; the
        caller counts the timeout and calls :meth:`restart` if it was the sync peer's."""
        out: list[tuple[str, str]] = []
        for key, requests in self._requests.items():
            for kind, deadline in list(requests.items()):
                if now_ms >= deadline:
                    del requests[kind]
                    out.append((key, kind))
        return out

    def check_synced(self, now_ms: int) -> bool:
        """P10: (a) every seed tried, nobody ahead, no sync running; or (b) a fresh tip.
        True once, when initial sync ends."""
        if self.synced:
            return False
        host = self.host
        work = host.best_work()
        fresh = is_tip_fresh(host.best_timestamp(), now_ms)
        nobody_ahead = all(
            claim.chainwork <= work
            for key in host.ready_peers()
            if (claim := self.claims.get(key)) is not None
        )
        if fresh or (host.seeds_tried() and nobody_ahead and self.peer is None):
            self.synced = True
        return self.synced


def apply_ready(
    session: SyncSession,
    service: NodeService,
    may_apply: Callable[[bytes], bool],
    take_verified: Callable[[bytes], Sequence[bytes]],
    now_ms: int,
) -> SyncStep:
    """P9: hand the complete level sets at the front to the core, in height order, in one
    synced batch (§12 A1); their events come after it is written.

    ``may_apply(ms)`` holds a level set back while a signature worker checks it;
    ``take_verified(ms)`` gives the txids that passed, put into the chain's signature cache
    first so ``on_block`` skips T1-T6 for them. A failure ends the round (a future block
    pauses it); the returned step carries on with the next peer.
    """
    key = session.peer
    if key is None:
        return SyncStep()
    cache = service.chain.signature_cache
    with service.sync_batch():
        for ms, raws in session.pop_ready(may_apply):
            for txid in take_verified(ms):
                cache.add(TxId(txid))
            try:
                service.submit_level_set(raws, key)
            except NotYetValid:
                session.reset()
                return SyncStep()
            except InvalidBlock as exc:
                return session.fail(key, f"level-set block {exc.rule}", 100, now_ms)
            if not service.has_block(ms):
                return session.fail(key, "level set left its milestone an orphan", 50, now_ms)
            session.note_milestone(key, ms)
    return SyncStep()


class ServiceView:
    """:class:`SyncHost` and :class:`p2p.relay.Inventory` over a :class:`NodeService`.

    Args:
        service: The chain owner.
        ready_peers: The shell's ready peer keys, in connection order.
        seeds_tried: Whether every seed was dialed once.
    """

    def __init__(
        self,
        service: NodeService,
        ready_peers: Callable[[], Sequence[str]],
        seeds_tried: Callable[[], bool],
    ) -> None:
        self.service = service
        self.chain = service.chain
        self._ready_peers = ready_peers
        self._seeds_tried = seeds_tried

    @property
    def params(self) -> ConsensusParams:
        """The consensus parameters."""
        return self.service.params

    @property
    def genesis_id(self) -> bytes:
        """Our genesis id."""
        return self.chain.genesis_id

    def has_block(self, block_id: bytes) -> bool:
        """True if the block is accepted here."""
        return self.service.has_block(block_id)

    def has_tx(self, txid: bytes) -> bool:
        """True if the tx is in the pool or a recently accepted block (decision 42)."""
        return self.service.has_tx(txid)

    def get_block_raw(self, block_id: bytes) -> bytes | None:
        """Canonical bytes of an accepted block."""
        return self.service.get_block_raw(block_id)

    def get_tx_raw(self, txid: bytes) -> bytes | None:
        """Canonical bytes of a pool tx."""
        return self.service.get_tx_raw(txid)

    def locator(self) -> Sequence[bytes]:
        """P7's locator."""
        return self.service.locator()

    def get_snapshot(self, block_id: bytes) -> Snapshot | None:
        """A milestone's snapshot."""
        return self.chain.get_snapshot(block_id)

    def timestamp(self, block_id: bytes) -> int | None:
        """A block's timestamp."""
        block = self.chain.get_block(block_id)
        return None if block is None else int(block.header.timestamp_ms)

    def best_work(self) -> int:
        """Chainwork of our best milestone."""
        return self.service.best()[2]

    def best_timestamp(self) -> int:
        """Timestamp of our best milestone (0 if unknown)."""
        return self.timestamp(self.chain.best_id) or 0

    def ready_peers(self) -> Sequence[str]:
        """The shell's ready peers."""
        return self._ready_peers()

    def seeds_tried(self) -> bool:
        """Whether every seed was dialed once."""
        return self._seeds_tried()


__all__ = [
    "ORPHAN_SYNC_TRIGGER",
    "UNBACKED_ROUND_INTERVAL_MS",
    "PeerClaim",
    "ServiceView",
    "SyncHost",
    "SyncSession",
    "SyncSettings",
    "SyncStep",
    "apply_ready",
]
