"""What a pruned node promised to the peers that sync from it (docs/protocol.md decision 40).

A node that answers a peer's ``getmilestones`` (P7) lists milestones whose level sets the peer
then fetches (P9), at most :data:`p2p.sync.MAX_LEVEL_SETS_IN_FLIGHT` at a time, in ascending
height. A pruned node (decision 34) must not delete those bodies under the peer: P9 scores a
level set not found +50, and peers never score a pruned node for a body it pruned (issue 27).
So each peer that syncs from us holds the pruning point at the lowest height it may still fetch:

- a non-empty ``milestones`` answer whose first header is at height h: hold at h;
- a ``getlevelset`` for the level set at height g: the requester opens a level set only once
  fewer than 8 are in flight, and a level set leaves its flight only when applied, so every
  level set below g - 7 is done: hold at max(hold, g - 7);
- the hold ends when the peer goes, or after :data:`HOLD_IDLE_MS` without a request from it.

The pruner prunes below the lowest live hold only. A hold may keep bodies for at most ``depth``
milestones more than the prune depth asks; a peer fetching so slowly that its hold falls further
behind is disconnected (close 1001, not scored) before its level sets are pruned: it never gets a
``notfound`` for a level set we listed to it, and it syncs from another peer (a new round's
locator below our bodies gets an empty ``milestones``: the unbacked claim, no score).
"""

from typing import final

from dagchain.pruning import Pruner
from p2p.sync import MAX_LEVEL_SETS_IN_FLIGHT

HOLD_IDLE_MS = 120_000
"""A peer's hold ends after this long without a ``getmilestones`` or ``getlevelset`` from it."""


@final
class ServeHolds:
    """Per peer: the lowest best-chain height whose level set it may still fetch from us."""

    def __init__(self, idle_ms: int = HOLD_IDLE_MS) -> None:
        self.idle_ms = idle_ms
        self._holds: dict[str, tuple[int, int]] = {}
        """Peer key -> (height held, last request time in ms)."""

    def listed(self, key: str, first_height: int, now_ms: int) -> None:
        """We answered ``key``'s ``getmilestones`` with milestones from ``first_height`` up."""
        self._holds[key] = (first_height, now_ms)

    def fetching(self, key: str, height: int, now_ms: int) -> None:
        """``key`` asked for the level set at ``height``: what lies 8 below it is done."""
        held = self._holds.get(key)
        if held is None:
            return  # not listed by us in this connection: nothing was promised
        self._holds[key] = (max(held[0], height - MAX_LEVEL_SETS_IN_FLIGHT + 1), now_ms)

    def release(self, key: str) -> None:
        """``key`` disconnected (or we closed it)."""
        self._holds.pop(key, None)

    def live(self, now_ms: int) -> dict[str, int]:
        """The holds not idle, by peer (the idle ones are forgotten)."""
        idle = [k for k, (_, at) in self._holds.items() if now_ms - at > self.idle_ms]
        for key in idle:
            del self._holds[key]
        return {k: h for k, (h, _) in self._holds.items()}

    def floor(self, now_ms: int) -> int | None:
        """The lowest live hold (prune only below it), or None."""
        return min(self.live(now_ms).values(), default=None)

    def __len__(self) -> int:
        return len(self._holds)


def prune_step(
    pruner: Pruner, holds: ServeHolds, now_ms: int, max_blocks: int
) -> tuple[int, list[str]]:
    """One bounded pruning step below every live hold.

    Returns the level sets pruned and the peers whose holds fell ``pruner.depth`` milestones
    below the pruning point the depth alone would give: this step still keeps what they were
    promised, their holds are dropped, and the caller closes them (not scored) before the next
    step, which prunes it.
    """
    live = holds.live(now_ms)
    lagging = [k for k, h in live.items() if h <= pruner.target() - pruner.depth]
    for key in lagging:
        holds.release(key)
    floor = min(live.values(), default=None)
    return pruner.step(max_blocks, None if floor is None else floor - 1), lagging


__all__ = ["HOLD_IDLE_MS", "ServeHolds", "prune_step"]
