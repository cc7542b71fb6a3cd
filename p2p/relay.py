"""Sans-I/O relay: inventory, announcements and getdata scheduling (PROTOCOL.md P11, P13).

One :class:`Relay` per node holds what ``node/net/manager.py`` keeps today in its peers' fields:
each ready peer's known inventory, our outstanding getdata to it (at most two, a backlog behind
them), the announcer queue of every item we are fetching, and the tx announcements waiting for
the next 250 ms batch. It takes wire messages (:mod:`p2p.wire` objects) and times (integer ms) and
returns what to send, as ``[(peer_key, message)]``; what to hand to the core the caller decides
from the returned :class:`Arrival`. No socket, no clock, no event loop (the h11 pattern of
STYLE.md): the daemon's shell and the simulator drive the same object.

The pure pieces are those of :mod:`p2p.gossip` (``KnownInventory``, ``plan_block_relay``,
``TxAnnouncer``, ``plan_tx_announcements``, ``BlockFetcher``); this module composes them.
What stays with the caller: the handshake, scores and bans (an unsolicited ``notfound`` is
reported, not scored), the sync session (level-set ``notfound`` items are left to it), the
serving-side limit of two answered getdata in the send queue, and every core decision.
"""

import random
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol, final

from p2p import gossip, wire
from p2p.sync import MAX_GETDATA_ITEMS

Send = tuple[str, wire.Message]
"""A message for one peer (by its key)."""
BLOCK = int(wire.InvKind.BLOCK)
TX = int(wire.InvKind.TX)


class Inventory(Protocol):
    """What the relay reads of the core: which items we have, and their bytes."""

    def has_block(self, block_id: bytes) -> bool:
        """True if the block is accepted here."""
        ...

    def has_tx(self, txid: bytes) -> bool:
        """True if we have the tx: in the pool, or in a recently accepted block (docs/protocol.md
        decision 42); such a tx is not fetched. Only pool txs are relayed (§11.3)."""
        ...

    def get_block_raw(self, block_id: bytes) -> bytes | None:
        """Canonical bytes of an accepted block."""
        ...

    def get_tx_raw(self, txid: bytes) -> bytes | None:
        """Canonical bytes of a pool tx."""
        ...


@dataclass(frozen=True, slots=True)
class RelaySettings:
    """The P11/P13 numbers; the defaults are the protocol's."""

    relay_push: int = gossip.RELAY_PUSH
    tx_inv_interval_ms: int = gossip.TX_INV_INTERVAL_MS
    announcer_timeout_ms: int = gossip.ANNOUNCER_TIMEOUT_MS
    request_timeout_ms: int = gossip.REQUEST_TIMEOUT_MS
    max_outstanding_getdata: int = gossip.MAX_OUTSTANDING_GETDATA
    max_getdata_items: int = MAX_GETDATA_ITEMS
    max_inv_items: int = wire.MAX_INV
    known_inventory_size: int = gossip.KNOWN_INVENTORY_SIZE
    reannounce_min_ms: int = gossip.TX_REANNOUNCE_MIN_MS
    reannounce_max_ms: int = gossip.TX_REANNOUNCE_MAX_MS
    reannounce_max_items: int = gossip.TX_REANNOUNCE_MAX_ITEMS
    forget_relayed: bool = False
    """Drop an item from every peer's known inventory once we have relayed it, and do not
    record it again. The known inventory is only read when an item is relayed, so this changes
    nothing but the memory (the simulator's thousands of links) and one rare case: a tx that
    goes back into the pool after a reorganisation is announced again to every peer."""


@dataclass(frozen=True, slots=True)
class Arrival:
    """A ``block`` or ``tx`` message was taken in: was it asked for, and what to send now."""

    requested: bool
    sends: tuple[Send, ...] = ()


_ASKED = Arrival(True)
_UNASKED = Arrival(False)


@dataclass(frozen=True, slots=True)
class NotFoundResult:
    """A ``notfound`` taken in: whether any item was one we asked this peer for."""

    expected: bool
    sends: tuple[Send, ...] = ()


@dataclass(frozen=True, slots=True)
class Tick:
    """The timers' work: messages to send, and peers whose getdata timed out (P6)."""

    sends: tuple[Send, ...] = ()
    timed_out: tuple[str, ...] = ()


_ABSENT = object()


@dataclass(slots=True)
class PeerRelay:
    """Relay state of one ready peer."""

    known: gossip.KnownInventory
    backlog: list[tuple[int, bytes]] = field(default_factory=list)
    """Items to getdata once fewer than two getdata are outstanding."""
    getdata_sets: list[set[bytes]] = field(default_factory=list)
    """Items of each outstanding getdata (one counts until all its items are answered)."""
    pending: set[bytes] = field(default_factory=set)
    """Items of our getdata to this peer not yet answered."""
    deadline_ms: int | None = None
    """When our outstanding getdata times out (P6), None if nothing is outstanding."""
    announced: gossip.AnnouncedTxs | None = None
    """Txids we announced to the peer, and when: re-announced while not ``known`` (an ``inv``
    does not make a tx known to the peer, only its answer or our ``tx`` does). None with
    ``forget_relayed``, which neither records nor re-announces."""


@final
class Relay:
    """P11/P13 relay of one node. Peers are keyed by the caller's string keys.

    Args:
        inventory: The core's view (which blocks and txs we have, and their bytes).
        rng: Picks the peers a block is pushed to.
        settings: The protocol numbers.
    """

    def __init__(
        self, inventory: Inventory, rng: random.Random, settings: RelaySettings | None = None
    ) -> None:
        self.settings = s = settings if settings is not None else RelaySettings()
        self.inventory = inventory
        self.rng = rng
        self.peers: dict[str, PeerRelay] = {}
        """Ready peers, in the order they became ready."""
        self.fetcher = gossip.BlockFetcher(s.announcer_timeout_ms)
        self.tx_announcer = gossip.TxAnnouncer(s.tx_inv_interval_ms)
        self._queued: set[bytes] = set()
        """Txids in ``tx_announcer``: accepted, not announced yet."""
        self._last_flush_ms = 0
        self._forget = s.forget_relayed
        self.reannounce_timer = gossip.ReannounceTimer(
            rng, s.reannounce_min_ms, s.reannounce_max_ms
        )

    # ------------------------------------------------------------------ peers
    def add_peer(self, key: str) -> None:
        """``key`` completed its handshake."""
        size = self.settings.known_inventory_size
        if self._forget:
            self.peers[key] = PeerRelay(gossip.KnownInventory(size, compact=True))
        else:
            self.peers[key] = PeerRelay(
                gossip.KnownInventory(size), announced=gossip.AnnouncedTxs(size)
            )

    def remove_peer(self, key: str, now_ms: int) -> list[Send]:
        """``key`` left: ask the next announcer for what we were fetching from it."""
        if self.peers.pop(key, None) is None:
            return []
        sends: list[Send] = []
        for item, nxt in self.fetcher.forget_peer(key, now_ms):
            if nxt in self.peers:
                sends += self.request(nxt, [(BLOCK, item)], now_ms)
        return sends

    def pending_items(self, key: str) -> AbstractSet[bytes]:
        """Items we asked ``key`` for and it has not answered (for §11.7's solicited replies)."""
        peer = self.peers.get(key)
        return frozenset() if peer is None else peer.pending

    def mark_known(self, key: str, item: bytes) -> None:
        """``key`` is known to have ``item`` (it sent it, or we sent it)."""
        peer = self.peers.get(key)
        if peer is not None:
            peer.known.add(item)

    def _remember(self, known: gossip.KnownInventory, item: bytes, is_block: bool) -> None:
        """Record that a peer has ``item``; with ``forget_relayed``, not once we relayed it."""
        if self._forget:
            if is_block:
                if self.inventory.has_block(item):
                    return
            elif item not in self._queued and self.inventory.has_tx(item):
                return
        known.add(item)

    # ------------------------------------------------------------------ inbound inventory
    def on_inv(self, key: str, msg: wire.Inv, now_ms: int, synced: bool = True) -> list[Send]:
        """P11: getdata what we lack from its first announcer; later announcers queue up.

        Before initial sync ends (``synced``, P10) nothing is fetched, txs included (their
        inputs are not in our ledger yet, §7.5's missing-input cap would score honest peers);
        the announcer is only noted as knowing the items. The 30-60 s re-announcement brings
        the txs again after the sync.
        """
        peer = self.peers.get(key)
        if peer is None:
            return []
        items = msg.items
        if len(items) == 1 and items[0][0] == BLOCK and synced:  # a block's relay: no loop
            fetch = self._announced_block(key, peer, items[0][1], now_ms)
            return self.request(key, items, now_ms) if fetch else []
        known = peer.known
        if not synced:
            for _, item in msg.items:
                known.add(item)
            return []
        add, inv, fetcher = known.add, self.inventory, self.fetcher
        has_tx, forget, queued = inv.has_tx, self._forget, self._queued
        ids, size = known.ids, self.settings.known_inventory_size
        want: list[tuple[int, bytes]] = []
        for pair in msg.items:
            kind, item = pair
            if kind == TX:  # the common kind first
                if has_tx(item):
                    if not forget or item in queued:
                        add(item)
                    continue
                if item in ids:  # add(item), inlined: most items of an inv are new here
                    ids.move_to_end(item)
                else:
                    ids[item] = None
                    if len(ids) > size:
                        ids.popitem(last=False)
                # as node/net/manager.py: a tx has one announcer (no fallback), so only blocks
                # ever move to a next announcer
                if item not in fetcher and fetcher.on_announce(item, key, now_ms):
                    want.append(pair)
            elif kind == BLOCK:
                if self._announced_block(key, peer, item, now_ms):
                    want.append(pair)
            else:
                add(item)
        return self.request(key, want, now_ms) if want else []

    def _announced_block(self, key: str, peer: PeerRelay, item: bytes, now_ms: int) -> bool:
        """``key`` announced block ``item``: note it knows it; True to getdata it from ``key``
        now (P11: the first announcer; later ones wait as fallbacks)."""
        if self.inventory.has_block(item):
            if not self._forget:
                peer.known.add(item)
            return False
        peer.known.add(item)
        return self.fetcher.on_announce(item, key, now_ms)

    def request(self, key: str, items: Sequence[tuple[int, bytes]], now_ms: int) -> list[Send]:
        """getdata ``items`` from ``key``: at most two outstanding, the rest waits (P11)."""
        peer = self.peers.get(key)
        if peer is None:
            return []
        peer.backlog.extend(items)
        return self._flush_getdata(key, peer, now_ms)

    def _flush_getdata(self, key: str, peer: PeerRelay, now_ms: int) -> list[Send]:
        s = self.settings
        sends: list[Send] = []
        while peer.backlog and len(peer.getdata_sets) < s.max_outstanding_getdata:
            batch = peer.backlog[: s.max_getdata_items]
            del peer.backlog[: s.max_getdata_items]
            ids = {item for _, item in batch}
            peer.getdata_sets.append(ids)
            peer.pending.update(ids)
            peer.deadline_ms = now_ms + s.request_timeout_ms
            sends.append((key, wire.GetData(tuple(batch))))
        return sends

    def _answered(self, key: str, peer: PeerRelay, item: bytes, now_ms: int) -> list[Send]:
        """An item we asked ``key`` for came (or was not found): a getdata counts as outstanding
        until every one of its items is answered, so a third is never in flight."""
        pending = peer.pending
        pending.discard(item)
        sets = peer.getdata_sets
        peer.deadline_ms = now_ms + self.settings.request_timeout_ms if pending else None
        if len(sets) == 1 and pending:
            return []  # the common case: the only getdata still has unanswered items
        peer.getdata_sets = [ids for ids in sets if not ids.isdisjoint(pending)]
        return self._flush_getdata(key, peer, now_ms) if peer.backlog else []

    # ------------------------------------------------------------------ serving
    def on_getdata(self, key: str, msg: wire.GetData) -> list[Send]:
        """Answer with each block and pool tx we have, one ``notfound`` for the rest."""
        peer = self.peers.get(key)
        if peer is None:
            return []
        inv, known = self.inventory, peer.known
        sends: list[Send] = []
        missing: list[tuple[int, bytes]] = []
        for kind, item in msg.items:
            if kind == BLOCK:
                raw = inv.get_block_raw(item)
                if raw is not None:
                    if not self._forget:
                        known.add(item)
                    sends.append((key, wire.BlockMsg(raw)))
                    continue
            elif kind == TX:
                raw = inv.get_tx_raw(item)
                if raw is not None:
                    self._remember(known, item, False)
                    sends.append((key, wire.TxMsg(raw)))
                    continue
            missing.append((kind, item))
        if missing:
            sends.append((key, wire.NotFound(tuple(missing))))
        return sends

    def on_notfound(self, key: str, msg: wire.NotFound, now_ms: int) -> NotFoundResult:
        """The peer lacks items we asked it for: ask their next announcer (P11).

        Items we did not ask this peer for (and every ``LEVEL_SET`` item) are ignored here;
        ``expected`` is False when no item was ours, for the caller to score.
        """
        peer = self.peers.get(key)
        if peer is None:
            return NotFoundResult(False)
        sends: list[Send] = []
        expected = False
        for kind, item in msg.items:
            if item not in peer.pending:
                continue
            expected = True
            sends += self._answered(key, peer, item, now_ms)
            nxt = self.fetcher.on_not_found(item, key, now_ms)
            if nxt is not None and nxt in self.peers:
                sends += self.request(nxt, [(kind, item)], now_ms)
        return NotFoundResult(expected, tuple(sends))

    # ------------------------------------------------------------------ items received
    def on_block(self, key: str, block_id: bytes, now_ms: int) -> Arrival:
        """A ``block`` message with this id came from ``key``: its fetch is done."""
        return self._on_item(key, block_id, now_ms, True)

    def awaits_block(self, key: str, block_id: bytes) -> bool:
        """Whether a ``block`` message of ``block_id`` from ``key`` would close a fetch of ours
        (one running, or a getdata of it outstanding to ``key``). If not, and the block is
        already held, ``on_block`` changes nothing (with ``forget_relayed``)."""
        if block_id in self.fetcher:
            return True
        peer = self.peers.get(key)
        return peer is not None and block_id in peer.pending

    def on_tx(self, key: str, txid: bytes, now_ms: int) -> Arrival:
        """A ``tx`` message with this id came from ``key``: its fetch is done."""
        return self._on_item(key, txid, now_ms, False)

    def _on_item(self, key: str, item: bytes, now_ms: int, is_block: bool) -> Arrival:
        peer = self.peers.get(key)
        self.fetcher.on_received(item)
        if peer is None:
            return _UNASKED
        self._remember(peer.known, item, is_block)
        if item not in peer.pending:
            return _UNASKED
        sends = self._answered(key, peer, item, now_ms)
        return Arrival(True, tuple(sends)) if sends else _ASKED

    def on_orphan(self, key: str, missing: Iterable[bytes], now_ms: int) -> list[Send]:
        """P13: the block ``key`` sent waits for these links: getdata them from ``key``."""
        peer = self.peers.get(key)
        if peer is None:
            return []
        has = self.inventory.has_block
        want = [(BLOCK, bytes(m)) for m in missing if not has(m) and m not in peer.pending]
        return self.request(key, want, now_ms) if want else []

    def fetch_orphan_parents(self, missing: Iterable[bytes], now_ms: int) -> list[Send]:
        """P13 sweep: links held orphans wait for, asked of every peer in random order."""
        keys = list(self.peers)
        if not keys:
            return []
        has = self.inventory.has_block
        todo = sorted(bytes(m) for m in missing if m not in self.fetcher and not has(m))
        sends: list[Send] = []
        for item in todo[: self.settings.max_getdata_items]:
            for key in self.rng.sample(keys, len(keys)):
                self.fetcher.on_announce(item, key, now_ms)
            first = self.fetcher.requested_from(item)
            if first is not None:
                sends += self.request(first, [(BLOCK, item)], now_ms)
        return sends

    # ------------------------------------------------------------------ our own relay
    def on_block_accepted(self, block_id: bytes, raw: bytes) -> list[Send]:
        """P11: push the block to ``relay_push`` random peers not known to have it, inv the rest.

        Whoever sent it to us is in the known inventory already (so a released orphan, whose
        sender is its parent's, needs no sender).
        """
        if self._forget:
            return self._block_accepted_forgetting(block_id, raw)
        peers = self.peers
        plan = gossip.plan_block_relay(
            block_id,
            list(peers),
            {k: p.known for k, p in peers.items()},
            None,
            self.rng,
            self.settings.relay_push,
        )
        self.fetcher.on_received(block_id)
        sends: list[Send] = []
        if plan.push:
            block = wire.BlockMsg(raw)
            for key in plan.push:
                peers[key].known.add(block_id)
                sends.append((key, block))
        if plan.announce:
            inv = wire.Inv(((BLOCK, bytes(block_id)),))
            for key in plan.announce:
                peers[key].known.add(block_id)
                sends.append((key, inv))
        return sends

    def _block_accepted_forgetting(self, block_id: bytes, raw: bytes) -> list[Send]:
        """``on_block_accepted`` with ``forget_relayed``: ``gossip.plan_block_relay``'s plan (same
        targets, same rng draw) in one pass over the peers that also forgets the block."""
        peers, absent = self.peers.items(), _ABSENT
        targets = [k for k, p in peers if p.known.ids.pop(block_id, absent) is absent]
        self.fetcher.on_received(block_id)
        push = self.rng.sample(targets, min(self.settings.relay_push, len(targets)))
        block = wire.BlockMsg(raw)
        sends: list[Send] = [(key, block) for key in push]
        if len(targets) > len(push):
            inv, pushed = wire.Inv(((BLOCK, bytes(block_id)),)), set(push)
            sends += [(key, inv) for key in targets if key not in pushed]
        return sends

    def on_tx_accepted(self, txid: bytes, sender: str | None = None) -> None:
        """A tx entered the pool: announce it with the next batch (never to ``sender``)."""
        self.tx_announcer.add(txid, sender)
        self._queued.add(txid)

    def next_flush_ms(self) -> int | None:
        """When the queued tx announcements are due, or None if none is queued."""
        if not len(self.tx_announcer):
            return None
        return self._last_flush_ms + self.settings.tx_inv_interval_ms

    def flush_txs(self, now_ms: int) -> list[Send]:
        """P11: one ``inv`` per peer (of up to 1,000 ids each) with the queued txs it lacks.

        The plan of ``gossip.plan_tx_announcements`` (per peer, the batch's txids it is not
        known to have, never its own; peers in the order of the first txid they get), taken
        one peer at a time with one filtering pass over its known inventory.
        """
        batch = self.tx_announcer.flush(now_ms)
        self._last_flush_ms = now_ms
        self._queued.clear()
        if not batch:
            return []
        pairs = [(txid, (TX, txid)) for txid, _ in batch]
        own: dict[str, set[bytes]] = {}
        for txid, sender in batch:
            if sender is not None:
                found = own.get(sender)
                if found is None:
                    own[sender] = {txid}
                else:
                    found.add(txid)
        forget = self._forget
        planned: list[tuple[int, str, PeerRelay, list[tuple[int, bytes]]]] = []
        first = {txid: i for i, (txid, _) in enumerate(batch)} if len(batch) > 1 else None
        for key, peer in self.peers.items():
            items = peer.known.take_unknown(pairs) if forget else peer.known.unknown(pairs)
            mine = own.get(key)
            if mine is not None and items:
                items = [pair for pair in items if pair[1] not in mine]
            if items:
                planned.append((0 if first is None else first[items[0][1]], key, peer, items))
        if first is not None:
            planned.sort(key=_first_index)
        cap = self.settings.max_inv_items
        sends: list[Send] = []
        for _, key, peer, items in planned:
            announced = peer.announced
            if announced is not None:
                for _, txid in items:
                    announced.add(txid, now_ms)
            if len(items) <= cap:
                sends.append((key, wire.Inv(tuple(items))))
            else:
                sends.extend(
                    (key, wire.Inv(tuple(items[start : start + cap])))
                    for start in range(0, len(items), cap)
                )
        return sends

    def announce_pool(self, key: str, txids: Sequence[bytes], now_ms: int) -> list[Send]:
        """A new ready connection: announce our pool (``txids``, by fee rate) in ``inv`` batches
        of at most 1,000, so a tx accepted before the link existed still reaches the peer
        (P11 as docs/p2p.md maps it)."""
        peer = self.peers.get(key)
        if peer is None:
            return []
        batches = gossip.mempool_inv_batches(txids, peer.known, batch=self.settings.max_inv_items)
        return self._tx_invs(key, peer, batches, now_ms)

    def reannounce_due(self, now_ms: int) -> bool:
        """True once every 30-60 s (at random): time for :meth:`reannounce`."""
        return self.reannounce_timer.due(now_ms)

    def reannounce(self, txids: Sequence[bytes], now_ms: int) -> list[Send]:
        """Pool txs (``txids``, by fee rate) a peer is not known to have and that we did not
        announce to it within the last 30 s, at most one ``inv`` of 1,000 per peer (P11)."""
        s = self.settings
        sends: list[Send] = []
        if not txids:
            return sends
        for key, peer in self.peers.items():
            batches = gossip.mempool_inv_batches(
                txids,
                peer.known,
                peer.announced,
                now_ms,
                s.reannounce_min_ms,
                s.reannounce_max_items,
                s.max_inv_items,
            )
            sends += self._tx_invs(key, peer, batches, now_ms)
        return sends

    def _tx_invs(
        self, key: str, peer: PeerRelay, batches: list[list[bytes]], now_ms: int
    ) -> list[Send]:
        announced = peer.announced
        sends: list[Send] = []
        for chunk in batches:
            if announced is not None:
                for txid in chunk:
                    announced.add(txid, now_ms)
            sends.append((key, wire.Inv(tuple((TX, t) for t in chunk))))
        return sends

    # ------------------------------------------------------------------ timers
    def tick(self, now_ms: int) -> Tick:
        """The 250 ms maintenance: flush due tx announcements, move fetches past their
        announcer's 10 s to the next announcer, time out getdata unanswered for 30 s (P6)."""
        sends: list[Send] = []
        if self.tx_announcer.due(now_ms):
            sends += self.flush_txs(now_ms)
        for item, key in self.fetcher.expire(now_ms):
            if key in self.peers:
                sends += self.request(key, [(BLOCK, item)], now_ms)
        timed_out: list[str] = []
        for key, peer in self.peers.items():
            if peer.deadline_ms is not None and now_ms >= peer.deadline_ms:
                timed_out.append(key)
                peer.pending.clear()
                peer.getdata_sets.clear()
                peer.deadline_ms = None
                sends += self._flush_getdata(key, peer, now_ms)
        return Tick(tuple(sends), tuple(timed_out))

    @property
    def busy(self) -> bool:
        """True while a timer has work: txs queued, items being fetched, getdata outstanding."""
        if len(self.tx_announcer) or len(self.fetcher):
            return True
        for peer in self.peers.values():  # noqa: SIM110 - no generator per call (hot path)
            if peer.deadline_ms is not None:
                return True
        return False


def _first_index(plan: tuple[int, str, PeerRelay, list[tuple[int, bytes]]]) -> int:
    return plan[0]


__all__ = [
    "Arrival",
    "Inventory",
    "NotFoundResult",
    "PeerRelay",
    "Relay",
    "RelaySettings",
    "Send",
    "Tick",
]
