"""Parallel hashing workers for ``--threads N`` (shell: threads or processes, STYLE.md rule 12).

With the C kernel, ``search_nonce`` releases the GIL and N threads hash on N cores. Without it,
hashlib holds the GIL for a 150-byte header, so the N workers are processes running the same
picklable ``search_nonce``. Either way the dispatcher hands out work units sized to about
``unit_s`` (a few ms, calibrated from the workers' own timings), keeps two units per worker in
flight, and stops within one unit when the search is aborted (a stale template) or solved.
"""

import concurrent.futures as cf
import multiprocessing
import sys
import threading
import time
from dataclasses import dataclass
from typing import Literal

from miner.search import NONCE_SPACE, RELEASES_GIL, SearchFunction, search_nonce

WorkerKind = Literal["thread", "process"]

_MIN_UNIT = 256
_MAX_UNIT = 1 << 24
_FIRST_UNIT = 4096


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A finished search: the nonce (None if aborted, past the deadline or exhausted)."""

    nonce: int | None
    hashes: int
    seconds: float
    aborted: bool = False

    @property
    def hashrate(self) -> float:
        return self.hashes / self.seconds if self.seconds > 0 else 0.0


def _timed_search(
    fn: SearchFunction, prefix: bytes, target: int, start: int, count: int
) -> tuple[int | None, float]:
    """One work unit and its own duration (module level, so a process pool can pickle it)."""
    t0 = time.perf_counter()
    nonce = fn(prefix, target, start, count)
    return nonce, time.perf_counter() - t0


def default_worker_kind(releases_gil: bool = RELEASES_GIL) -> WorkerKind:
    """Threads when the search releases the GIL (or there is no GIL), else processes."""
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    return "thread" if releases_gil or not gil else "process"


class HashPool:
    """``workers`` hashing workers sharing one nonce range per search."""

    def __init__(
        self,
        workers: int,
        *,
        kind: WorkerKind | None = None,
        search: SearchFunction = search_nonce,
        unit_s: float = 0.003,
    ) -> None:
        if workers < 1:
            raise ValueError("need at least one worker")
        self.workers = workers
        self.kind: WorkerKind = kind or default_worker_kind()
        self._search = search
        self._unit_s = unit_s
        self._unit = _FIRST_UNIT
        self._executor: cf.Executor
        if self.kind == "thread":
            self._executor = cf.ThreadPoolExecutor(workers, thread_name_prefix="hash")
        else:
            ctx = multiprocessing.get_context("forkserver")
            self._executor = cf.ProcessPoolExecutor(workers, mp_context=ctx)

    def __enter__(self) -> "HashPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _calibrate(self, count: int, elapsed: float) -> None:
        """Move the unit size towards ``unit_s`` of work (a slow unit shrinks it at once)."""
        if elapsed <= 0:
            return
        ideal = int(count * self._unit_s / elapsed)
        self._unit = max(_MIN_UNIT, min(_MAX_UNIT, (self._unit + ideal) // 2, ideal * 2))

    def search(
        self,
        prefix: bytes,
        target: int,
        *,
        start: int = 0,
        limit: int = NONCE_SPACE,
        abort: threading.Event | None = None,
        deadline: float | None = None,
    ) -> SearchResult:
        """Search [start, limit) in parallel until a solution, ``abort`` is set, or ``deadline``.

        ``deadline`` is a ``time.perf_counter()`` value; units in flight at the deadline are
        waited for and counted (a benchmark), while a solution or an abort returns at once.
        """
        t0 = time.perf_counter()
        inflight: dict[cf.Future[tuple[int | None, float]], tuple[int, int]] = {}
        nxt, hashes, found = start, 0, None
        aborted = False
        while True:
            stop = (abort is not None and abort.is_set()) or (
                deadline is not None and time.perf_counter() >= deadline
            )
            aborted = abort is not None and abort.is_set()
            while not stop and nxt < limit and len(inflight) < 2 * self.workers:
                count = min(self._unit, limit - nxt)
                fut = self._executor.submit(_timed_search, self._search, prefix, target, nxt, count)
                inflight[fut] = (nxt, count)
                nxt += count
            if not inflight:
                break
            if stop and deadline is None:  # aborted: leave the last units to finish alone
                for fut in inflight:
                    fut.cancel()
                break
            done, _ = cf.wait(inflight, timeout=0.05, return_when=cf.FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: inflight[f][0]):
                unit_start, count = inflight.pop(fut)
                nonce, elapsed = fut.result()
                self._calibrate(count, elapsed)
                if nonce is not None and (found is None or nonce < found):
                    found = nonce
                hashes += count if nonce is None else nonce - unit_start + 1
            if found is not None:
                for fut in inflight:
                    fut.cancel()
                break
        return SearchResult(found, hashes, time.perf_counter() - t0, aborted and found is None)


def measure_hashrate(
    workers: int,
    seconds: float,
    *,
    kind: WorkerKind | None = None,
    search: SearchFunction = search_nonce,
) -> float:
    """Hashes per second of ``workers`` workers on a fixed header with an unreachable target."""
    prefix = bytes(range(142))
    with HashPool(workers, kind=kind, search=search) as pool:
        pool.search(prefix, 0, deadline=time.perf_counter() + min(0.2, seconds / 10))  # warm up
        result = pool.search(prefix, 0, start=1 << 40, deadline=time.perf_counter() + seconds)
    return result.hashrate


__all__ = ["HashPool", "SearchResult", "WorkerKind", "default_worker_kind", "measure_hashrate"]
