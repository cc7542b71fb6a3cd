from collections.abc import Callable, Sequence
from typing import Protocol, final

from simulator.knowledge import Knowledge

class _Sizes(Protocol):
    @property
    def inv(self) -> int: ...
    @property
    def getdata(self) -> int: ...
    @property
    def tx(self) -> int: ...

@final
class Model:
    """A LinkModel's links, latencies, link rates and tick phases as flat arrays."""

    def __init__(
        self,
        neighbours: Sequence[Sequence[int]],
        latency: Sequence[dict[int, float]],
        upload: Sequence[float],
        download: Sequence[float],
        processing_ms: float,
        phase_of: Callable[[int], float],
        upload_free: list[float] | None = None,
    ) -> None: ...
    @property
    def nodes(self) -> int: ...
    @property
    def upload_free(self) -> list[float]: ...

@final
class Frames:
    """Which frames were charged already, shared by all txs (txflow.Frames)."""

    @property
    def exact(self) -> bool: ...
    @property
    def getdata_exact(self) -> bool: ...
    def count(self) -> int: ...
    def prune(self, before_ms: float, /) -> None: ...
    def snapshot(
        self,
    ) -> tuple[dict[tuple[int, float], set[int]], set[tuple[int, int, float]]]: ...

@final
class Spread:
    """One tx's search (txflow.Spread) with dense per-node labels."""

    def __init__(self, model: Model, sizes: _Sizes, frames: Frames | None = None) -> None: ...
    @property
    def arrival(self) -> dict[int, float]: ...
    @property
    def tick(self) -> dict[int, float]: ...
    @property
    def best_inv(self) -> dict[int, float]: ...
    @property
    def source(self) -> dict[int, int]: ...
    @property
    def sizes(self) -> _Sizes: ...
    @property
    def pending(self) -> int: ...
    @property
    def labels_bytes(self) -> int: ...
    @property
    def seq(self) -> int: ...
    waiting: int
    @property
    def invs(self) -> int: ...
    @property
    def inv_frames(self) -> int: ...
    @property
    def fetches(self) -> int: ...
    @property
    def getdata_frames(self) -> int: ...
    def accept(self, node: int, at_ms: float, /) -> None: ...
    def advance(
        self,
        full: int,
        how: int,
        arg: object,
        key: bytes | None = None,
        until_ms: float = ...,
        /,
    ) -> tuple[int, int, float] | None: ...

def learn_each(knowledge: Knowledge, node: int, keys: Sequence[bytes], /) -> None:
    """Knowledge.learn(node, key) for each key in turn (simulator.knowledge)."""

def bit_of(
    holders: dict[bytes, bytearray], everywhere: set[bytes], at: int, bit: int, key: bytes, /
) -> bool:
    """Knowledge.knows(node, key) for the node of byte ``at`` and bit ``bit``."""
