"""Pacing for ``--rate``: a token bucket kept as a schedule (pure: the caller passes the clock).

Block k may start at ``next_at``; each accepted block moves ``next_at`` one period (1 / rate) on,
and never to more than ``burst - 1`` periods before ``now``. So the time a block takes (template,
search, submit) counts against its own period instead of adding to it, and after a slow block
(a busy node, a milestone's stale search) up to ``burst`` more blocks start at once to make the
time up. Over any window of T seconds at most ``rate * T + burst + 1`` blocks are accepted.
This is GCRA, the token bucket's dual: ``burst`` is the bucket's size.
"""

import math
from dataclasses import dataclass

CATCH_UP_S = 0.5
"""The default bucket holds this many seconds of blocks (at least one block)."""


def default_burst(rate: float) -> int:
    """Blocks that may start back to back to make up time: ``CATCH_UP_S`` worth, at least 1."""
    return max(1, math.ceil(rate * CATCH_UP_S))


@dataclass
class Pacer:
    """At most ``rate`` accepted blocks per second on average (``rate <= 0``: no limit)."""

    rate: float
    burst: int = 1
    next_at: float | None = None

    def delay(self, now: float) -> float:
        """Seconds to wait before the next block may start (0 when it may start now)."""
        if self.rate <= 0:
            return 0.0
        if self.next_at is None:
            self.next_at = now
        return max(0.0, self.next_at - now)

    def on_accepted(self, now: float) -> None:
        """One block accepted at ``now``: the next one is due one period after this one's slot."""
        if self.rate <= 0:
            return
        period = 1.0 / self.rate
        slot = self.next_at if self.next_at is not None else now
        self.next_at = max(slot + period, now - (self.burst - 1) * period)


__all__ = ["CATCH_UP_S", "Pacer", "default_burst"]
