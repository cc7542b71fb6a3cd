"""Pacing for ``--rate``: a token bucket kept as a schedule (pure: the caller passes the clock).

Block k's slot is ``next_at``; each accepted block moves ``next_at`` one period (1 / rate) on,
and never to more than ``burst - 1`` periods before ``now``. So the time a block takes (template,
search, submit) counts against its own period instead of adding to it, and after a slow block
(a busy node, a milestone's stale search) up to ``burst`` more blocks start at once to make the
time up. Over any window of T seconds at most ``rate * T + burst + 1`` blocks are accepted.
This is GCRA, the token bucket's dual: ``burst`` is the bucket's size.

Each block after the first starts at a random point of its slot's period (``spread``, a fraction
drawn per block), not at the slot itself. With slots on a fixed grid the phases of miners started
together froze for the whole run (within 2 ms on devnet): three miners whose blocks were further
apart than a block takes to reach the other nodes each saw only the block before theirs unlinked,
so no block ever carried two tip links (``tests/functional/test_miners_knit_tip_links.py``).
Real proof of work finds blocks at random times; the spread restores that, and keeps the average
rate (a block never starts before its slot; one late anyway waits no longer) and the bound above.
"""

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

CATCH_UP_S = 0.5
"""The default bucket holds this many seconds of blocks (at least one block)."""


def default_burst(rate: float) -> int:
    """Blocks that may start back to back to make up time: ``CATCH_UP_S`` worth, at least 1."""
    return max(1, math.ceil(rate * CATCH_UP_S))


@dataclass
class Pacer:
    """At most ``rate`` accepted blocks per second on average (``rate <= 0``: no limit).

    ``spread`` draws where in its period each block after the first starts, a fraction in
    [0, 1) (uniform by default; ``lambda: 0.0`` starts every block at its slot). The first one
    starts at once: a registration, and the first answer of the node (e.g. a refused token).
    """

    rate: float
    burst: int = 1
    next_at: float | None = None
    spread: Callable[[], float] = random.random
    _offset: float = field(default=0.0, init=False, repr=False)

    def delay(self, now: float) -> float:
        """Seconds to wait before the next block may start (0 when it may start now)."""
        if self.rate <= 0:
            return 0.0
        if self.next_at is None:  # the first block (a registration) starts at once
            self.next_at = now
        return max(0.0, self.next_at + self._offset - now)

    def on_accepted(self, now: float) -> None:
        """One block accepted at ``now``: the next one is due one period after this one's slot."""
        if self.rate <= 0:
            return
        period = 1.0 / self.rate
        slot = self.next_at if self.next_at is not None else now
        self.next_at = max(slot + period, now - (self.burst - 1) * period)
        self._draw()

    def _draw(self) -> None:
        """The next block's start within its period, in seconds after its slot."""
        fraction = min(max(self.spread(), 0.0), 1.0)
        self._offset = fraction / self.rate


__all__ = ["CATCH_UP_S", "Pacer", "default_burst"]
