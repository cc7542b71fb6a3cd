"""Pure relay policy: who gets what, what to fetch, and how a peer's behaviour is scored.

PROTOCOL.md §11.5 (P11 relay, P12 address gossip), §11.6 (orphan parents) and §11.7 (limits and
misbehaviour). Time arrives as ``now_ms`` and randomness as a ``random.Random`` (STYLE.md rule 2);
nothing here touches a socket, so the simulator drives the very same policy.
"""

import random
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from p2p import scores, wire

KNOWN_INVENTORY_SIZE = 50_000
"""P11: known-inventory set per peer (LRU)."""
RECENT_BLOCK_TXS = 50_000
"""Txids of recently accepted blocks a node counts as had (docs/protocol.md decision 42)."""
RELAY_PUSH = 3
"""P11 ``relay_push``: full blocks pushed to this many random peers, inv to the rest."""
TX_INV_INTERVAL_MS = 250
TX_REANNOUNCE_MIN_MS = 30_000
TX_REANNOUNCE_MAX_MS = 60_000
"""Pool txs a peer is not known to have are announced to it again every 30-60 s (docs/p2p.md)."""
TX_REANNOUNCE_MAX_ITEMS = 1000
"""At most one ``inv`` (1000 txids) per peer per re-announce round."""
ANNOUNCER_TIMEOUT_MS = 10_000
"""P11: one announcer at a time, 10 s each."""
MAX_OUTSTANDING_GETDATA = 2
REQUEST_TIMEOUT_MS = 30_000
"""P6."""
MAX_TIMEOUTS = 3
ADDR_MIN_INTERVAL_MS = 10_000
ADDR_MAX_UNSOLICITED = 10
ADDR_RELAY_FANOUT = 2
ADDR_RELAY_AGE_S = 600
GETADDR_MAX = 1000


class CompactLru(dict[bytes, None]):
    """The LRU operations of ``OrderedDict`` on a plain dict: about a third of its bytes.

    ``move_to_end`` is a pop and a re-insert (a dict keeps insertion order) and
    ``popitem(last=False)`` deletes the first key, which walks past the deleted slots at the
    front of the table: cheap while the dict stays below its cap, as a ``forget_relayed``
    inventory does (its items leave when relayed), slow for an LRU that sits at its cap.
    """

    __slots__ = ()

    def move_to_end(self, key: bytes) -> None:
        self[key] = self.pop(key)

    def popitem(self, last: bool = True) -> tuple[bytes, None]:
        if last:
            return super().popitem()
        key = next(iter(self))
        del self[key]
        return key, None


_ABSENT = object()


class KnownInventory:
    """Ids a peer is known to have (sent to us, or sent by us): LRU of ``size`` entries.

    ``compact``: hold the LRU in a ``CompactLru`` (the same order and evictions, a third of the
    bytes) for an inventory that stays below its cap (the simulator's ``forget_relayed``
    inventories, thousands of links).
    """

    def __init__(self, size: int = KNOWN_INVENTORY_SIZE, compact: bool = False) -> None:
        self._size = size
        self.ids: OrderedDict[bytes, None] | CompactLru = CompactLru() if compact else OrderedDict()
        """The LRU itself (oldest first), for the relay's inlined ``add``."""

    def __contains__(self, item: object) -> bool:
        return item in self.ids

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, item: bytes) -> None:
        """Remember ``item`` (refreshing it if known)."""
        ids = self.ids
        if item in ids:
            ids.move_to_end(item)
        else:
            ids[item] = None
            if len(ids) > self._size:
                ids.popitem(last=False)

    def unknown(self, pairs: list[tuple[bytes, tuple[int, bytes]]]) -> list[tuple[int, bytes]]:
        """The inventory pairs of ``pairs`` (id, pair) whose id is not known, in order."""
        ids = self.ids
        return [pair for item, pair in pairs if item not in ids]

    def take_unknown(self, pairs: list[tuple[bytes, tuple[int, bytes]]]) -> list[tuple[int, bytes]]:
        """As :meth:`unknown`, and forget the known ones (``forget_relayed``)."""
        pop = self.ids.pop
        return [pair for item, pair in pairs if pop(item, _ABSENT) is _ABSENT]


@dataclass(frozen=True, slots=True)
class RelayPlan:
    """P11 for one block: full pushes and announcements."""

    push: tuple[str, ...]
    announce: tuple[str, ...]


def plan_block_relay(
    block_id: bytes,
    ready_peers: Sequence[str],
    known: Mapping[str, KnownInventory],
    sender: str | None,
    rng: random.Random,
    relay_push: int = RELAY_PUSH,
) -> RelayPlan:
    """P11: push to ``relay_push`` random ready peers not known to have it, inv the rest.

    The sender and peers known to have the block get nothing.
    """
    targets = [p for p in ready_peers if p != sender and not (p in known and block_id in known[p])]
    push = rng.sample(targets, min(relay_push, len(targets)))
    pushed = set(push)
    return RelayPlan(tuple(push), tuple(p for p in targets if p not in pushed))


class TxAnnouncer:
    """P11: txs accepted into the mempool are announced to all peers, batched every 250 ms."""

    def __init__(self, interval_ms: int = TX_INV_INTERVAL_MS) -> None:
        self.interval_ms = interval_ms
        self._queue: OrderedDict[bytes, str | None] = OrderedDict()
        self._last_flush_ms = 0

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, txid: bytes, sender: str | None = None) -> None:
        """Queue a txid (``sender`` is not told about its own tx)."""
        self._queue.setdefault(txid, sender)

    def due(self, now_ms: int) -> bool:
        """True when a batch should go out."""
        return bool(self._queue) and now_ms - self._last_flush_ms >= self.interval_ms

    def flush(self, now_ms: int) -> list[tuple[bytes, str | None]]:
        """Take the queued (txid, sender) pairs in arrival order."""
        self._last_flush_ms = now_ms
        out = list(self._queue.items())
        self._queue.clear()
        return out


def plan_tx_announcements(
    batch: Iterable[tuple[bytes, str | None]],
    ready_peers: Sequence[str],
    known: Mapping[str, KnownInventory],
) -> dict[str, list[bytes]]:
    """Per peer: the txids of ``batch`` it is not known to have (never its own)."""
    out: dict[str, list[bytes]] = {}
    for txid, sender in batch:
        for peer in ready_peers:
            if peer != sender and not (peer in known and txid in known[peer]):
                out.setdefault(peer, []).append(txid)
    return out


def mempool_inv_batches(
    txids: Iterable[bytes],
    known: KnownInventory,
    announced: "AnnouncedTxs | Mapping[bytes, int] | None" = None,
    now_ms: int = 0,
    min_age_ms: int = 0,
    limit: int | None = None,
    batch: int = wire.MAX_INV,
) -> list[list[bytes]]:
    """Pool txids to announce to one peer, in ``inv`` batches of at most ``batch`` items.

    On a new connection (P11 as docs/p2p.md maps it) the whole pool not ``known`` to the peer
    is announced; a re-announce round passes ``announced`` (txid → when we last announced it to
    this peer) and ``min_age_ms``, so a tx announced within the last round is not repeated, and
    ``limit`` caps the round. ``known`` holds what the peer has: it sent or announced it to us,
    or we sent it the tx itself; our own ``inv`` does not count, as a lost ``getdata`` must not
    leave the peer without the tx for good.
    """
    out: list[bytes] = []
    for txid in txids:
        if limit is not None and len(out) >= limit:
            break
        if txid in known:
            continue
        if announced is not None:
            last = announced.get(txid)
            if last is not None and now_ms - last < min_age_ms:
                continue
        out.append(txid)
    return [out[i : i + batch] for i in range(0, len(out), batch)]


class ReannounceTimer:
    """When the next tx re-announce round is due: every 30-60 s, uniformly at random."""

    def __init__(
        self,
        rng: random.Random,
        min_ms: int = TX_REANNOUNCE_MIN_MS,
        max_ms: int = TX_REANNOUNCE_MAX_MS,
    ) -> None:
        self.rng = rng
        self.min_ms = min_ms
        self.max_ms = max_ms
        self._next_ms: int | None = None

    def due(self, now_ms: int) -> bool:
        """True once per interval (the first call only starts the clock)."""
        if self._next_ms is None:
            self._schedule(now_ms)
            return False
        if now_ms < self._next_ms:
            return False
        self._schedule(now_ms)
        return True

    def _schedule(self, now_ms: int) -> None:
        self._next_ms = now_ms + self.rng.randint(self.min_ms, self.max_ms)


class AnnouncedTxs:
    """Per peer: txid → when we last announced it (bounded LRU, like the known inventory)."""

    def __init__(self, size: int = KNOWN_INVENTORY_SIZE) -> None:
        self._size = size
        self._at: OrderedDict[bytes, int] = OrderedDict()

    def __contains__(self, item: object) -> bool:
        return item in self._at

    def __len__(self) -> int:
        return len(self._at)

    def get(self, item: bytes, default: int | None = None) -> int | None:
        """When ``item`` was last announced, or ``default``."""
        return self._at.get(item, default)

    def add(self, item: bytes, now_ms: int) -> None:
        """Record an announcement of ``item`` at ``now_ms``."""
        self._at[item] = now_ms
        self._at.move_to_end(item)
        if len(self._at) > self._size:
            self._at.popitem(last=False)


class RecentTxs:
    """Txids seen in recently accepted blocks: a bounded rolling set (docs/protocol.md decision 42).

    Two generations of ``size // 2`` each: once the newer is full it becomes the older and the
    older is dropped, so between ``size // 2`` and ``size`` of the latest txids are held, exactly
    (Bitcoin Core's recent-confirmed filter is a rolling Bloom filter of 48,000; a set never
    answers wrongly, and a node's few MB do not matter).
    """

    __slots__ = ("_half", "_new", "_old")

    def __init__(self, size: int = RECENT_BLOCK_TXS) -> None:
        if size < 2:
            raise ValueError("a RecentTxs holds at least 2 txids")
        self._half = size // 2
        self._new: set[bytes] = set()
        self._old: set[bytes] = set()

    def __contains__(self, item: object) -> bool:
        return item in self._new or item in self._old

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def add(self, item: bytes) -> None:
        """Record ``item`` as seen now."""
        new = self._new
        new.add(item)
        if len(new) >= self._half:
            self._old, self._new = new, set()


@dataclass(slots=True)
class _Fetch:
    peer: str
    deadline_ms: int
    others: list[str] = field(default_factory=list)


class BlockFetcher:
    """P11/P13 getdata bookkeeping: one announcer at a time per id, 10 s each, then the next."""

    def __init__(self, timeout_ms: int = ANNOUNCER_TIMEOUT_MS) -> None:
        self.timeout_ms = timeout_ms
        self._fetching: dict[bytes, _Fetch] = {}

    def __contains__(self, item: object) -> bool:
        return item in self._fetching

    def __len__(self) -> int:
        return len(self._fetching)

    def on_announce(self, item: bytes, peer: str, now_ms: int) -> bool:
        """A peer has ``item``; True if we should getdata it from that peer now."""
        fetch = self._fetching.get(item)
        if fetch is None:
            self._fetching[item] = _Fetch(peer, now_ms + self.timeout_ms)
            return True
        if peer != fetch.peer and peer not in fetch.others:
            fetch.others.append(peer)
        return False

    def on_received(self, item: bytes) -> None:
        """``item`` arrived (or was found elsewhere): stop fetching it."""
        self._fetching.pop(item, None)

    def requested_from(self, item: bytes) -> str | None:
        """The peer we asked for ``item``."""
        fetch = self._fetching.get(item)
        return None if fetch is None else fetch.peer

    def on_not_found(self, item: bytes, peer: str, now_ms: int) -> str | None:
        """The asked peer lacks ``item``: the next announcer to ask, if any."""
        fetch = self._fetching.get(item)
        if fetch is None or fetch.peer != peer:
            return None
        return self._next(item, fetch, now_ms)

    def expire(self, now_ms: int) -> list[tuple[bytes, str]]:
        """Fetches past their deadline, moved to the next announcer: (item, peer) to ask."""
        out = []
        for item, fetch in list(self._fetching.items()):
            if now_ms >= fetch.deadline_ms:
                nxt = self._next(item, fetch, now_ms)
                if nxt is not None:
                    out.append((item, nxt))
        return out

    def forget_peer(self, peer: str, now_ms: int) -> list[tuple[bytes, str]]:
        """A peer left: reassign what we asked it for."""
        out = []
        for item, fetch in list(self._fetching.items()):
            if peer in fetch.others:
                fetch.others.remove(peer)
            if fetch.peer == peer:
                nxt = self._next(item, fetch, now_ms)
                if nxt is not None:
                    out.append((item, nxt))
        return out

    def _next(self, item: bytes, fetch: _Fetch, now_ms: int) -> str | None:
        if not fetch.others:
            del self._fetching[item]
            return None
        fetch.peer = fetch.others.pop(0)
        fetch.deadline_ms = now_ms + self.timeout_ms
        return fetch.peer


class AddrLimiter:
    """P12: unsolicited ``addr`` of at most 10 entries, at most one per 10 s."""

    def __init__(self) -> None:
        self._last_ms: int | None = None

    def check(self, count: int, solicited: bool, now_ms: int) -> int | None:
        """None to accept, else the score (0: drop silently; 20: too large)."""
        if solicited:
            return None
        if count > ADDR_MAX_UNSOLICITED:
            return scores.SCORE_BIG_ADDR
        if self._last_ms is not None and now_ms - self._last_ms < ADDR_MIN_INTERVAL_MS:
            return 0
        self._last_ms = now_ms
        return None


__all__ = [
    "MAX_OUTSTANDING_GETDATA",
    "RECENT_BLOCK_TXS",
    "RELAY_PUSH",
    "REQUEST_TIMEOUT_MS",
    "TX_REANNOUNCE_MAX_ITEMS",
    "AddrLimiter",
    "AnnouncedTxs",
    "BlockFetcher",
    "CompactLru",
    "KnownInventory",
    "ReannounceTimer",
    "RelayPlan",
    "TxAnnouncer",
    "mempool_inv_batches",
    "plan_block_relay",
    "plan_tx_announcements",
]
