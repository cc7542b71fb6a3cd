"""Pruning holds of the peers that sync from us (docs/protocol.md decision 40)."""

from p2p.serveholds import HOLD_IDLE_MS, ServeHolds
from p2p.sync import MAX_LEVEL_SETS_IN_FLIGHT


def test_a_hold_starts_at_what_we_listed_and_follows_the_level_sets_asked() -> None:
    holds = ServeHolds()
    holds.fetching("a", 500, 0)  # asked without a listing from us: nothing promised
    assert holds.floor(0) is None
    holds.listed("a", 100, 0)
    holds.fetching("a", 100, 1)
    holds.fetching("a", 107, 2)  # 8 in flight: 100..107, none done yet
    assert holds.floor(2) == 100
    holds.fetching("a", 108, 3)  # asking a 9th: level set 100 is applied
    assert holds.floor(3) == 108 - MAX_LEVEL_SETS_IN_FLIGHT + 1 == 101
    holds.listed("b", 90, 3)
    assert holds.floor(3) == 90
    holds.release("b")
    assert holds.floor(3) == 101


def test_an_idle_hold_ends() -> None:
    holds = ServeHolds()
    holds.listed("a", 100, 0)
    assert holds.floor(HOLD_IDLE_MS) == 100
    assert holds.floor(HOLD_IDLE_MS + 1) is None
    assert len(holds) == 0
