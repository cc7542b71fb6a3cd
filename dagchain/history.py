"""Bounded views of stored history: recent rows in memory, older rows read from the store.

Issue 3 (bounded memory): the chain keeps in memory only the rows of a window of recent
milestones; everything older is read from the store on demand through a small LRU cache. Each
in-memory row carries a *tag*, a milestone height (a block's milestone-link height, a snapshot's
or level set's height); :meth:`StoredMap.evict_below` drops every row tagged below the window's
floor. The store is always the truth: rows are written by a batch first and mirrored here after,
so a dropped row is one ``get`` away and a read never sees a value the store does not hold.
"""

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

from dagchain.storage import KVStore
from dagchain.storage import schema as S
from dagchain.types import BlockId

V = TypeVar("V")


class StoredMap(Generic[V]):
    """The rows of one key prefix, by key suffix: a mapping view over memory and the store.

    Invariant: ``recent`` holds exactly the stored rows whose tag is at least ``floor``, so while
    the floor is 0 it is complete and iteration needs no store scan.
    """

    __slots__ = (
        "_by_tag",
        "_cache",
        "_cache_size",
        "_decode",
        "_prefix",
        "_store",
        "floor",
        "recent",
    )

    def __init__(
        self,
        store: KVStore,
        prefix: bytes,
        decode: Callable[[bytes, bytes], V],
        cache_size: int,
    ) -> None:
        self._store = store
        self._prefix = prefix
        self._decode = decode  # (key suffix, raw value) -> value; raises StorageError
        self._cache: OrderedDict[bytes, V] = OrderedDict()
        self._cache_size = cache_size
        self._by_tag: dict[int, list[bytes]] = {}
        self.recent: dict[bytes, V] = {}
        self.floor = 0

    # --- reads ---
    def __getitem__(self, key: bytes) -> V:
        try:
            return self.recent[key]
        except KeyError:
            pass
        value = self._fetch(key)
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: bytes, default: V | None = None) -> V | None:
        """The row's value, or ``default``."""
        value = self.recent.get(key)
        if value is None:
            value = self._fetch(key)
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        return key in self.recent or (isinstance(key, bytes) and self._fetch(key) is not None)

    def _fetch(self, key: bytes) -> V | None:
        cache = self._cache
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
            return value
        raw = self._store.get(self._prefix + key)
        if raw is None:
            return None
        value = self._decode(key, raw)
        cache[key] = value
        if len(cache) > self._cache_size:
            cache.popitem(last=False)
        return value

    # --- whole-prefix views (tests, tools, recovery): memory while complete, else the store ---
    def items(self) -> Iterator[tuple[BlockId, V]]:
        """Every row in ascending key order."""
        if self.floor == 0:
            recent = self.recent
            for key in sorted(recent):
                yield BlockId(key), recent[key]
            return
        cut = len(self._prefix)
        for full_key, raw in self._store.iter_prefix(self._prefix):
            yield BlockId(full_key[cut:]), self._decode(full_key[cut:], raw)

    def __iter__(self) -> Iterator[BlockId]:
        return (item[0] for item in self.items())

    def values(self) -> Iterator[V]:
        """Every row's value, in key order."""
        return (item[1] for item in self.items())

    def __len__(self) -> int:
        if self.floor == 0:
            return len(self.recent)
        return sum(1 for _ in self._store.iter_prefix(self._prefix))

    # --- mirroring writes (after the batch that wrote them) ---
    def add(self, key: bytes, value: V, tag: int) -> None:
        """Mirror a row the last batch wrote; kept in memory only if ``tag`` is in the window."""
        self._cache.pop(key, None)
        if tag >= self.floor:
            self.recent[key] = value
            self._by_tag.setdefault(tag, []).append(key)

    def replace(self, key: bytes, value: V) -> None:
        """Mirror a row the last batch rewrote in place (same tag): memory follows if held."""
        self._cache.pop(key, None)
        if key in self.recent:
            self.recent[key] = value

    def discard(self, key: bytes) -> None:
        """Mirror a row the last batch deleted."""
        self.recent.pop(key, None)
        self._cache.pop(key, None)

    def evict_below(self, floor: int) -> None:
        """Drop rows tagged below ``floor`` from memory (they stay in the store)."""
        recent, by_tag = self.recent, self._by_tag
        for tag in range(self.floor, floor):
            for key in by_tag.pop(tag, ()):
                recent.pop(key, None)
        self.floor = max(self.floor, floor)


class BestChain:
    """Best-chain milestone ids by height (``h`` rows): a list view, the top in memory.

    Supports what callers of the former list use: ``len``, ``[i]`` (negative too), slices,
    iteration; plus :meth:`height_of` (the former ``best_height_of`` dict) through
    :class:`BestHeights`.
    """

    __slots__ = ("_by_height", "_floor", "_heights", "_len", "_snapshot_height", "_store")

    def __init__(self, store: KVStore, snapshot_height: Callable[[bytes], int | None]) -> None:
        self._store = store
        self._snapshot_height = snapshot_height
        self._by_height: dict[int, BlockId] = {}
        self._heights: dict[BlockId, int] = {}
        self._len = 0
        self._floor = 0

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> BlockId: ...
    @overload
    def __getitem__(self, index: slice) -> list[BlockId]: ...
    def __getitem__(self, index: int | slice) -> BlockId | list[BlockId]:
        if isinstance(index, slice):
            return [self._at(h) for h in range(*index.indices(self._len))]
        height = index + self._len if index < 0 else index
        if not 0 <= height < self._len:
            raise IndexError(index)
        return self._at(height)

    def _at(self, height: int) -> BlockId:
        bid = self._by_height.get(height)
        if bid is not None:
            return bid
        key = S.height_key(S.P_HEIGHT, height)
        raw = self._store.get(key)
        if raw is None:
            raise IndexError(height)
        return BlockId(S.decode_row(raw, key)[0])

    def __iter__(self) -> Iterator[BlockId]:
        if self._floor == 0:
            for height in range(self._len):
                yield self._by_height[height]
            return
        for key, raw in self._store.iter_prefix(S.P_HEIGHT):
            yield BlockId(S.decode_row(raw, key)[0])

    def height_of(self, milestone: bytes) -> int | None:
        """Height of ``milestone`` if it is on the best chain, else None."""
        height = self._heights.get(BlockId(milestone))
        if height is not None:
            return height
        height = self._snapshot_height(milestone)
        if height is None or height >= self._len or height >= self._floor:
            return None  # in the window, memory is complete
        return height if self._at(height) == milestone else None

    # --- mirroring writes ---
    def set_top(self, milestones: dict[int, BlockId], length: int) -> None:
        """Load: the ids of heights ``floor..length-1``."""
        self._by_height = dict(milestones)
        self._heights = {b: h for h, b in milestones.items()}
        self._len = length
        self._floor = min(milestones) if milestones else 0

    def append(self, milestone: BlockId) -> None:
        """Mirror a new head at height ``len`` (after the batch that wrote its ``h`` row)."""
        if self._len >= self._floor:
            self._by_height[self._len] = milestone
            self._heights[milestone] = self._len
        self._len += 1

    def pop(self) -> None:
        """Mirror the undo of the head (after the batch that deleted its ``h`` row)."""
        self._len -= 1
        bid = self._by_height.pop(self._len, None)
        if bid is not None:
            self._heights.pop(bid, None)

    def evict_below(self, floor: int) -> None:
        """Forget ids below ``floor`` (read from ``h`` rows when asked)."""
        for height in range(self._floor, min(floor, self._len)):
            bid = self._by_height.pop(height, None)
            if bid is not None:
                self._heights.pop(bid, None)
        self._floor = max(self._floor, floor)


class BestHeights:
    """``milestone id -> best-chain height`` as a read-only mapping (the former dict)."""

    __slots__ = ("_best",)

    def __init__(self, best: BestChain) -> None:
        self._best = best

    def __contains__(self, milestone: object) -> bool:
        return isinstance(milestone, bytes) and self._best.height_of(milestone) is not None

    def __getitem__(self, milestone: bytes) -> int:
        height = self._best.height_of(milestone)
        if height is None:
            raise KeyError(milestone)
        return height

    def get(self, milestone: bytes, default: int | None = None) -> int | None:
        """The height, or ``default`` if ``milestone`` is not on the best chain."""
        height = self._best.height_of(milestone)
        return default if height is None else height


__all__ = ["BestChain", "BestHeights", "StoredMap"]
