"""The bounded orphan pool of blocks whose links are not accepted yet (PROTOCOL.md §11.6 P13).

Keyed by H(block bytes), so a mutated copy never shadows the real block. Limits apply in total
and per supplying peer; at a limit the sender's own oldest orphans go first.
"""

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from dagchain.params import ConsensusParams
from dagchain.types import BlockId


@dataclass(frozen=True, slots=True)
class Orphan:
    """A held block: its raw bytes, the links it waits for, who sent it and when."""

    key: bytes
    raw: bytes
    block_id: BlockId
    missing: tuple[BlockId, ...]
    peer: str
    arrival_ms: int


class OrphanPool:
    """Orphans in arrival order with an index from each missing link to its waiters."""

    def __init__(self, params: ConsensusParams) -> None:
        self._params = params
        self._items: OrderedDict[bytes, Orphan] = OrderedDict()
        self._waiting: dict[BlockId, set[bytes]] = {}
        self._bytes = 0
        self._peer_count: dict[str, int] = {}
        self._peer_bytes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    @property
    def total_bytes(self) -> int:
        """Bytes held in total."""
        return self._bytes

    @staticmethod
    def key_of(raw: bytes) -> bytes:
        """H(block bytes): the pool key (P13)."""
        return hashlib.blake2b(raw, digest_size=32).digest()

    def has_block(self, block_id: BlockId) -> bool:
        """True if some held orphan has this block id."""
        return any(o.block_id == block_id for o in self._items.values())

    def add(
        self, raw: bytes, block_id: BlockId, missing: tuple[BlockId, ...], peer: str, now_ms: int
    ) -> list[Orphan]:
        """Hold a block; returns the orphans evicted to respect the limits (the sender's first)."""
        key = self.key_of(raw)
        if key in self._items:
            return []
        p = self._params
        evicted: list[Orphan] = []
        while self._items and (
            self._peer_count.get(peer, 0) + 1 > p.orphan_peer_max_blocks
            or self._peer_bytes.get(peer, 0) + len(raw) > p.orphan_peer_max_bytes
        ):
            oldest = next((o for o in self._items.values() if o.peer == peer), None)
            if oldest is None:
                break
            evicted.append(self._remove(oldest.key))
        while self._items and (
            len(self._items) + 1 > p.orphan_max_blocks
            or self._bytes + len(raw) > p.orphan_max_bytes
        ):
            own = next((o for o in self._items.values() if o.peer == peer), None)
            victim = own if own is not None else next(iter(self._items.values()))
            evicted.append(self._remove(victim.key))
        orphan = Orphan(key, raw, block_id, missing, peer, now_ms)
        self._items[key] = orphan
        for link in missing:
            self._waiting.setdefault(link, set()).add(key)
        self._bytes += len(raw)
        self._peer_count[peer] = self._peer_count.get(peer, 0) + 1
        self._peer_bytes[peer] = self._peer_bytes.get(peer, 0) + len(raw)
        return evicted

    def pop_waiting_on(self, block_id: BlockId) -> list[Orphan]:
        """Remove and return (in arrival order) the orphans that wait for ``block_id``."""
        keys = self._waiting.pop(block_id, None)
        if not keys:
            return []
        found = [self._items[k] for k in keys if k in self._items]
        found.sort(key=lambda o: (o.arrival_ms, o.key))
        for orphan in found:
            self._remove(orphan.key)
        return found

    def expire(self, now_ms: int) -> list[Orphan]:
        """Drop orphans older than the expiry (P13: 600 s)."""
        limit = now_ms - self._params.orphan_expiry_ms
        old = [o for o in self._items.values() if o.arrival_ms < limit]
        for orphan in old:
            self._remove(orphan.key)
        return old

    def missing_links(self) -> set[BlockId]:
        """Every link some orphan waits for (what a node should fetch)."""
        return set(self._waiting)

    def _remove(self, key: bytes) -> Orphan:
        orphan = self._items.pop(key)
        for link in orphan.missing:
            waiters = self._waiting.get(link)
            if waiters is not None:
                waiters.discard(key)
                if not waiters:
                    del self._waiting[link]
        self._bytes -= len(orphan.raw)
        self._peer_count[orphan.peer] -= 1
        self._peer_bytes[orphan.peer] -= len(orphan.raw)
        if not self._peer_count[orphan.peer]:
            del self._peer_count[orphan.peer]
            del self._peer_bytes[orphan.peer]
        return orphan


__all__ = ["Orphan", "OrphanPool"]
