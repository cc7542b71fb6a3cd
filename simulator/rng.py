"""Named random streams derived from one master seed.

Each purpose (``mining``, ``latency``, ``txs``, ``topology``, ``adversary``, ...) draws from its
own ``random.Random``, seeded from BLAKE2b(master seed, name), never from ``hash()``. Adding draws
to one stream therefore never shifts another, and a run is a pure function of its seed.
"""

import hashlib
import random
from typing import final


def derive_seed(master_seed: int, name: str) -> int:
    """A 64-bit seed for stream ``name``: LE(BLAKE2b-8(master seed ‖ name))."""
    data = master_seed.to_bytes(16, "little", signed=True) + name.encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


@final
class RngStreams:
    """The run's random streams; ``stream(name)`` always returns the same object for a name."""

    def __init__(self, master_seed: int) -> None:
        self.master_seed = master_seed
        self._streams: dict[str, random.Random] = {}

    def stream(self, name: str) -> random.Random:
        """The stream called ``name`` (created on first use)."""
        rng = self._streams.get(name)
        if rng is None:
            rng = random.Random(derive_seed(self.master_seed, name))
            self._streams[name] = rng
        return rng


__all__ = ["RngStreams", "derive_seed"]
