"""The test-only clock offset of the node (node/daemon.py ``node_clock``), used by bench/soak.py
to start a node whose clock is skewed within ``max_future_drift``."""

import pytest

from node.daemon import CLOCK_OFFSET_ENV, StartupError, node_clock, wall_clock_ms


def test_unset_the_node_runs_on_the_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLOCK_OFFSET_ENV, raising=False)
    assert node_clock() is wall_clock_ms


def test_the_offset_shifts_every_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CLOCK_OFFSET_ENV, "-3000")
    clock = node_clock()
    before = wall_clock_ms()
    skewed = clock()
    after = wall_clock_ms()
    assert before - 3000 <= skewed <= after - 3000


def test_a_bad_offset_is_a_one_line_startup_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CLOCK_OFFSET_ENV, "3s")
    with pytest.raises(StartupError, match="not a whole number of ms"):
        node_clock()
