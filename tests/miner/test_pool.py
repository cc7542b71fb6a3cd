"""Parallel hashing workers: threads with the C kernel, processes with hashlib."""

import hashlib
import threading
import time
from pathlib import Path

import pytest

from dagchain.params import DEVNET
from dagchain.types import Address
from miner.pool import HashPool, WorkerKind, default_worker_kind
from miner.search import KERNEL, search_nonce_python

PREFIX = bytes(range(142))


def _meets(nonce: int, target: int) -> bool:
    digest = hashlib.blake2b(PREFIX + nonce.to_bytes(8, "little"), digest_size=32).digest()
    return int.from_bytes(digest, "little") <= target


def test_threads_are_used_when_the_kernel_releases_the_gil() -> None:
    assert default_worker_kind(releases_gil=True) == "thread"
    expected = "thread" if KERNEL == "c" else "process"
    assert default_worker_kind() == expected


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_workers_find_a_valid_nonce(kind: WorkerKind) -> None:
    target = 2**256 // 200_000
    with HashPool(2, kind=kind) as pool:
        result = pool.search(PREFIX, target, start=5)
    assert result.nonce is not None
    assert result.nonce >= 5
    assert _meets(result.nonce, target)
    assert result.hashes >= 1


def test_process_workers_run_the_python_fallback() -> None:
    target = 2**256 // 2000
    with HashPool(2, kind="process", search=search_nonce_python) as pool:
        result = pool.search(PREFIX, target)
    assert result.nonce is not None
    assert _meets(result.nonce, target)


def test_a_limited_range_without_a_solution_ends_with_none() -> None:
    with HashPool(2) as pool:
        result = pool.search(PREFIX, 0, start=0, limit=50_000)
    assert result.nonce is None
    assert result.hashes == 50_000


def test_abort_stops_a_search_within_a_few_units() -> None:
    """A stale template must die fast: the unreachable target is abandoned within ~100 ms."""
    abort = threading.Event()
    with HashPool(2) as pool:
        timer = threading.Timer(0.2, abort.set)
        timer.start()
        t0 = time.perf_counter()
        result = pool.search(PREFIX, 0, abort=abort)
        stopped_after = time.perf_counter() - t0
    assert result.nonce is None
    assert result.aborted
    assert stopped_after < 0.2 + 0.25  # ~3 ms units; generous for a loaded CI machine


def test_deadline_counts_all_hashes() -> None:
    with HashPool(1) as pool:
        result = pool.search(PREFIX, 0, deadline=time.perf_counter() + 0.2)
    assert result.nonce is None
    assert result.hashrate > 100_000


def test_a_milestone_event_aborts_the_running_search(tmp_path: Path) -> None:
    """The events stream sets the abort flag the running search polls (a stale template)."""
    from miner.controller import Miner, MinerConfig

    cfg = MinerConfig(
        node="http://127.0.0.1:1",
        payout=Address(bytes(32)),
        payout_text="",
        token="t",
        datadir=tmp_path,
        network="devnet",
        params=DEVNET,
    )
    miner = Miner(cfg, api=None)  # type: ignore[arg-type]
    miner.on_event({"type": "block", "hash": "00" * 32})
    assert not miner.abort.is_set()
    miner.on_event({"type": "milestone", "hash": "11" * 32, "height": 3})
    assert miner.abort.is_set()
    assert miner.best_milestone == "11" * 32
    miner.abort.clear()
    miner.on_event({"type": "reorg", "new_head": "22" * 32})
    assert miner.abort.is_set()
