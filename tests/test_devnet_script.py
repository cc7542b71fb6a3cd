"""scripts/devnet.py (``make run``): the summary's confirmed-tx rate at any polling interval and
its duplicate rate."""

import importlib.util
from collections import deque
from pathlib import Path
from types import ModuleType

import pytest

from apiclient.models import DagBlock, DagResponse

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "devnet.py"


def _devnet() -> ModuleType:
    spec = importlib.util.spec_from_file_location("devnet_script", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rate_is_shown_when_polls_are_as_far_apart_as_the_window() -> None:
    """With ``--interval 10`` or 15 every poll is a window apart: the rate is still the counter's
    growth over the last interval (it was '-' for good: the only earlier sample was dropped)."""
    devnet = _devnet()
    for interval in (5.0, devnet.TPS_WINDOW_S, 15.0):
        window: deque[tuple[float, float]] = deque(maxlen=64)
        assert devnet.confirmed_rate(window, 100.0, 0.0) is None
        rate = None
        for i in range(1, 6):
            rate = devnet.confirmed_rate(window, 100.0 + i * interval, 20.0 * i * interval)
        assert rate == 20.0, interval


def test_the_rate_covers_about_the_last_window() -> None:
    """Polled every second, the base is the newest sample at least the window old."""
    devnet = _devnet()
    window: deque[tuple[float, float]] = deque(maxlen=64)
    for t in range(31):  # 1 tx/s for 20 s, then 5 tx/s
        devnet.confirmed_rate(window, float(t), float(t if t <= 20 else 20 + 5 * (t - 20)))
    rate = devnet.confirmed_rate(window, 31.0, 75.0)
    assert window[0] == (21.0, 25.0)  # the newest sample a whole window old
    assert rate == (75.0 - 25.0) / 10.0


def test_a_restarted_node_s_counter_starts_a_new_window_instead_of_a_negative_rate() -> None:
    """devnet restarts a node stopped by SIGKILL; its counter starts again from 0, and the
    summary showed ``tps -8.1`` for it. A counter that went down is a restart (as Prometheus'
    ``rate`` reads it): the samples before it are dropped and the rate is measured afresh."""
    devnet = _devnet()
    window: deque[tuple[float, float]] = deque(maxlen=64)
    for t in range(0, 30, 5):  # 4 tx/s
        devnet.confirmed_rate(window, float(t), 4.0 * t)
    assert devnet.confirmed_rate(window, 30.0, 3.0) is None  # restarted: 3 confirmed since
    assert window == deque([(30.0, 3.0)])
    assert devnet.confirmed_rate(window, 35.0, 13.0) == 2.0


def test_duplicate_rate_counts_every_inclusion_after_a_txs_first() -> None:
    """The summary's duplicate rate: of the transfer inclusions in the level sets read, the share
    that repeat a txid another block carries (a tx in three blocks is two repeats)."""
    devnet = _devnet()
    assert devnet.repeat_share([]) == (0, 0)
    assert devnet.repeat_share([("a", "b"), ("c",)]) == (0, 3)
    assert devnet.repeat_share([("a", "b"), ("a",), ("b", "a"), ()]) == (3, 5)


def _h(height: int) -> str:
    """The hash of the one block of level set ``height`` in :class:`_FakeDag`."""
    return f"{height:064x}"


class _FakeDag:
    """``/v1/dag`` of a node whose level set h holds one block ``_h(h)`` carrying one tx."""

    def __init__(self, best: int, carried: dict[str, tuple[str, ...]]) -> None:
        self.best = best
        self.carried = carried
        self.calls: list[tuple[int, int]] = []

    def dag(self, start: int, limit: int) -> DagResponse:
        self.calls.append((start, limit))
        heights = range(start, min(self.best, start + limit - 1) + 1)
        blocks = [_block(_h(h), h, len(self.carried.get(_h(h), ()))) for h in heights]
        pending = _block("ff" * 32, None, 1)
        return DagResponse(best_height=self.best, blocks=[*blocks, pending])


def _block(block_hash: str, height: int | None, txs: int) -> DagBlock:
    zero = "00" * 32
    return DagBlock(
        hash=block_hash,
        milestone_link=zero,
        previous_link=zero,
        tip_links=[zero],
        root=zero,
        peer_height=1,
        is_milestone=False,
        level_set_height=height,
        timestamp_ms=0,
        txs=txs,
    )


def test_repeat_counter_reads_new_level_sets_rereads_the_newest_and_keeps_a_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each poll reads the level sets since the last one (the newest ``REPEAT_REREAD`` again),
    fetches each block with txs once, skips pending blocks and keeps the last ``REPEAT_WINDOW``
    level sets."""
    devnet = _devnet()
    monkeypatch.setattr(devnet, "REPEAT_WINDOW", 30)
    carried: dict[str, tuple[str, ...]] = {_h(h): (f"tx{h // 2}",) for h in range(1, 301) if h % 3}
    fake = _FakeDag(20, carried)
    fetched: list[str] = []

    def transfers(self: object, block_hash: str) -> tuple[str, ...]:
        fetched.append(block_hash)
        return carried[block_hash]

    monkeypatch.setattr(devnet, "SyncNodeApi", lambda url, timeout_s: fake)
    monkeypatch.setattr(devnet.RepeatCounter, "_transfer_txids", transfers)
    counter = devnet.RepeatCounter("http://node0")
    counter.update(20)
    assert fake.calls == [(1, 20)]
    blocks = [_h(h) for h in range(1, 21) if h % 3]
    assert sorted(fetched) == sorted(blocks)
    assert counter.share() == devnet.repeat_share(carried[b] for b in blocks)
    fake.best = 140
    counter.update(140)
    assert fake.calls[1:] == [(111, 30)]  # the window's floor, past the reread
    assert set(counter.level_sets) == set(range(111, 141))
    kept = [_h(h) for h in range(111, 141) if h % 3]
    assert set(counter.transfers) == set(kept)
    assert counter.share() == devnet.repeat_share(carried[b] for b in kept)
    fake.best = 145
    counter.update(145)
    assert fake.calls[2:] == [(131, 15)]
    assert len(fetched) == len(set(fetched))  # a block is fetched once
    assert "duplicates: " in counter.text()
