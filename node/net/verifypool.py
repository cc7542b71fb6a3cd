"""The signature worker pool of initial sync (P9): level sets checked in worker processes.

Each complete level set of the sync plan goes to one worker (:func:`p2p.verify.verify_blocks`)
ahead of its turn; the txids that passed go into the chain's signature cache before the level
set is applied, so ``Chain.on_block`` skips T1-T6 for them. Correctness never depends on the
pool: a tx a worker did not pass (or a pool that failed) is simply not cached, and ``on_block``
checks it itself. Every failure is logged and counted.
"""

import asyncio
import contextlib
import ctypes
import functools
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor

from dagchain.params import ConsensusParams
from p2p.verify import verify_blocks

log = logging.getLogger(__name__)


class VerifyPool:
    """At most one worker task per level set (keyed by its milestone id), started lazily.

    Args:
        params: The consensus parameters the workers check against.
        workers: Worker processes (0: no pool, every check stays in ``on_block``).
    """

    def __init__(self, params: ConsensusParams, workers: int) -> None:
        self.params = params
        self.workers = workers
        self.failures = 0
        """Pool start-ups and worker tasks that failed (logged; sync went on without them)."""
        self._pool: ProcessPoolExecutor | None = None
        self._broken = False
        self._closed = False
        self._jobs: dict[bytes, asyncio.Future[list[bytes]]] = {}

    def start(
        self, jobs: Iterable[tuple[bytes, list[bytes]]], on_done: Callable[[bytes], None]
    ) -> None:
        """Send each new (milestone id, raws) to a worker; ``on_done(ms)`` once it answered
        (not if it was dropped meanwhile)."""
        if self.workers <= 0 or self._broken or self._closed:
            return
        loop = asyncio.get_running_loop()
        for ms, raws in jobs:
            if ms in self._jobs or not raws:
                continue
            try:
                if self._pool is None:
                    self._pool = ProcessPoolExecutor(
                        self.workers,
                        mp_context=multiprocessing.get_context("spawn"),
                        initializer=_worker_init,
                        initargs=(os.getpid(),),
                    )
                fut = loop.run_in_executor(self._pool, verify_blocks, raws, self.params)
            except Exception as exc:  # a broken or shut-down pool: verify in on_block instead
                self.failures += 1
                log.warning("sync signature workers unavailable: %s", exc)
                self._broken = True
                return
            self._jobs[ms] = fut
            fut.add_done_callback(functools.partial(self._done, ms, on_done))

    def _done(
        self, ms: bytes, on_done: Callable[[bytes], None], fut: asyncio.Future[list[bytes]]
    ) -> None:
        if fut.cancelled() or self._jobs.get(ms) is not fut:
            return  # dropped meanwhile (sync was reset)
        exc = fut.exception()
        if exc is not None:
            self.failures += 1
            log.warning("sync signature worker failed: %r", exc)
        if not self._closed:
            on_done(ms)

    def ready(self, ms: bytes) -> bool:
        """No worker is still checking this level set (the sync plan's apply gate)."""
        fut = self._jobs.get(ms)
        return fut is None or fut.done()

    def take(self, ms: bytes) -> list[bytes]:
        """The txids a finished worker passed for this level set (forgotten afterwards)."""
        fut = self._jobs.pop(ms, None)
        if fut is None or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return []
        return fut.result()

    def drop(self) -> None:
        """Forget every task (sync was reset): their answers are ignored."""
        for fut in self._jobs.values():
            fut.cancel()
        self._jobs.clear()

    async def close(self) -> None:
        """Drop the tasks and shut the processes down."""
        self._closed = True
        self.drop()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


def _worker_init(parent_pid: int) -> None:
    """In a signature worker: die with the node, even when it is killed with SIGKILL."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the node died before prctl
        os._exit(0)


__all__ = ["VerifyPool"]
