"""The event engine: events (time_ms, seq, callback, args) in (time, seq) order on a virtual clock.

Time is virtual and given in milliseconds (a float: network delays are fractions of a ms); the
sequence number breaks ties, so events at the same instant run in the order they were scheduled
and a run never depends on how callables compare. There is no wall clock here. An exception in a
callback ends the run (SimPy's rule: an unexpected error is a bug, not a dropped event).

The queue is a calendar of ``BUCKET_MS`` buckets: future buckets are plain lists (scheduling into
one is an append) and only the earliest open bucket is a heap, made when the clock reaches it.
With a million events in flight (10,000 relaying nodes), popping from one big heap was a quarter
of the run, most of it cache misses on the entries compared; the open bucket's heap is small.
The order is exactly that of one heap over (time_ms, seq): a bucket holds the events whose
``floor(time_ms / BUCKET_MS)`` is its index, and that is monotonic in time_ms.

Dropping is for events that are known, once queued, to change nothing when they run: the relay's
copies of an item that lose the race to a faster copy (``simulator/network.py``, about half of all
deliveries). The caller adds ``id(time_ms)`` of such an event to ``dropped``; the event stays
queued and is skipped, uncounted, when it comes up, for the price of one set lookup per event (no
handle to keep, no callback to run). The time object names the event, so an event that may be
dropped must have a float object of its own as its time (any fresh arithmetic result is): the
object is alive while the event is queued, so no other live object shares its ``id``.
``revive`` takes dropped events back (they then run as if never dropped).

Two implementations run the same events in the same order: :class:`PythonEngine` below, the
reference and the fallback, and ``simulator._engine.Engine`` (simulator/_engine.c, built by
setup.py when a C compiler is present), which keeps each event as a 40-byte record and compares
times in place (the Python heap's comparisons follow pointers to tuples: a quarter of the pops'
time at 10,000 nodes was cache misses). ``Engine`` is the one the simulator uses: the compiled
one unless it was not built or the environment sets ``DAGCHAIN_ENGINE=python``
(``ENGINE_KERNEL`` says which).
"""

import heapq
import itertools
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, final

Callback = Callable[..., None]
Event = tuple[float, int, Callback, tuple[Any, ...]]
BUCKET_MS = 1.0
"""Width of a calendar bucket (virtual ms)."""


@final
class PythonEngine:
    """Discrete-event scheduler. ``schedule`` returns a handle that ``cancel`` accepts."""

    def __init__(self, start_ms: float = 0.0) -> None:
        self.now_ms = start_ms
        self._open: list[Event] = []
        """Heap of the events of buckets up to ``_open_bucket`` (all earlier than the rest)."""
        self._open_bucket = math.floor(start_ms / BUCKET_MS) - 1
        self._buckets: dict[int, list[Event]] = {}
        """Later buckets, by index: events in scheduling order."""
        self._bucket_heap: list[int] = []
        """Heap of the indices in ``_buckets``."""
        self._seq = 0
        self._cancelled: set[int] = set()
        self.dropped: set[int] = set()
        """``id`` of the time object of each queued event to skip (see the module doc)."""
        self.events = 0
        """Events run so far (cancelled ones are not counted)."""

    def schedule(self, delay_ms: float, callback: Callback, *args: Any) -> int:
        """Run ``callback(*args)`` at ``now + delay_ms``; returns the event's handle."""
        if delay_ms < 0:
            raise ValueError(f"cannot schedule into the past (delay {delay_ms} ms)")
        return self.schedule_at(self.now_ms + delay_ms, callback, *args)

    def schedule_at(self, time_ms: float, callback: Callback, *args: Any) -> int:
        """Run ``callback(*args)`` at the absolute virtual time ``time_ms``."""
        if time_ms < self.now_ms:
            raise ValueError(f"cannot schedule at {time_ms} ms, now is {self.now_ms} ms")
        seq = self._seq
        self._seq = seq + 1
        event = (time_ms, seq, callback, args)
        bucket = math.floor(time_ms / BUCKET_MS)
        if bucket <= self._open_bucket:
            heapq.heappush(self._open, event)
            return seq
        waiting = self._buckets.get(bucket)
        if waiting is None:
            self._buckets[bucket] = [event]
            heapq.heappush(self._bucket_heap, bucket)
        else:
            waiting.append(event)
        return seq

    def _advance(self) -> bool:
        """Open the next bucket once the open heap is empty; False if no event is left."""
        if not self._bucket_heap:
            return False
        bucket = heapq.heappop(self._bucket_heap)
        opened = self._buckets.pop(bucket)
        heapq.heapify(opened)
        self._open = opened
        self._open_bucket = bucket
        return True

    def cancel(self, handle: int) -> None:
        """Drop a scheduled event (lazily: it is skipped when it comes up)."""
        self._cancelled.add(handle)

    def revive(self, wanted: Callable[[Event], bool]) -> int:
        """Run the dropped events for which ``wanted(event)`` is true after all.

        They keep their time and place in the order. Scans every queued event: for rare
        corrections only. Returns how many were revived.
        """
        dropped = self.dropped
        back = 0
        if dropped:
            for event in itertools.chain(self._open, *self._buckets.values()):
                key = id(event[0])
                if key in dropped and wanted(event):
                    dropped.remove(key)
                    back += 1
        return back

    def __len__(self) -> int:
        return len(self._open) + sum(len(b) for b in self._buckets.values())

    def queued(self) -> list[Event]:
        """Every queued event (dropped and cancelled ones included), in no particular order."""
        return list(itertools.chain(self._open, *self._buckets.values()))

    def peek_time(self) -> float | None:
        """Time of the next event, or None if none is left."""
        if not self._open and not self._advance():
            return None
        return self._open[0][0]

    def run(
        self, until_ms: float | None = None, progress: Callable[[float], None] | None = None
    ) -> None:
        """Run events in (time, seq) order until none is left or the next is after ``until_ms``.

        ``progress(now_ms)`` is called every 4,096 events (the CLI's progress bar). ``events``
        is brought up to date before each ``progress`` call and when the run returns or raises.
        """
        cancelled, dropped, ident = self._cancelled, self.dropped, id
        pop = heapq.heappop
        limit = math.inf if until_ms is None else until_ms
        events = self.events
        heap = self._open
        try:
            while True:
                if not heap:
                    heap = self._open  # a callback may have opened the next bucket (peek_time)
                    if not heap:
                        if not self._advance():
                            break
                        heap = self._open
                if heap[0][0] > limit:
                    break
                time_ms, seq, callback, args = pop(heap)
                if dropped and ident(time_ms) in dropped:
                    dropped.remove(ident(time_ms))
                    continue
                if cancelled and seq in cancelled:
                    cancelled.discard(seq)
                    continue
                self.now_ms = time_ms
                callback(*args)
                events += 1
                if progress is not None and not events & 4095:
                    self.events = events
                    progress(time_ms)
        finally:
            self.events = events
        if until_ms is not None and self.now_ms < until_ms:
            self.now_ms = until_ms

    def schedule_each(
        self, callback: Callback, timed_args: list[tuple[float, tuple[Any, ...]]]
    ) -> None:
        """``schedule_at(time_ms, callback, *args)`` for each (time_ms, args), in list order."""
        now, seq, floor = self.now_ms, self._seq, math.floor
        open_bucket, buckets = self._open_bucket, self._buckets
        try:
            for time_ms, args in timed_args:
                if time_ms < now:
                    raise ValueError(f"cannot schedule at {time_ms} ms, now is {now} ms")
                bucket = floor(time_ms / BUCKET_MS)
                if bucket <= open_bucket:
                    heapq.heappush(self._open, (time_ms, seq, callback, args))
                else:
                    waiting = buckets.get(bucket)
                    if waiting is None:
                        buckets[bucket] = [(time_ms, seq, callback, args)]
                        heapq.heappush(self._bucket_heap, bucket)
                    else:
                        waiting.append((time_ms, seq, callback, args))
                seq += 1
        finally:
            self._seq = seq


try:
    from simulator._engine import Engine as CEngine
except ImportError:  # built without a C compiler: the Python engine is used
    ENGINE_BUILT = False
else:
    ENGINE_BUILT = True

ENGINE_KERNEL: Final = (
    "c" if ENGINE_BUILT and os.environ.get("DAGCHAIN_ENGINE", "c") != "python" else "python"
)
"""The engine ``Engine`` names: ``"c"`` (simulator._engine) or ``"python"`` (not built, or
``DAGCHAIN_ENGINE=python``)."""

if TYPE_CHECKING:
    Engine = PythonEngine
else:
    Engine = CEngine if ENGINE_KERNEL == "c" else PythonEngine

__all__ = [
    "BUCKET_MS",
    "ENGINE_BUILT",
    "ENGINE_KERNEL",
    "Callback",
    "Engine",
    "Event",
    "PythonEngine",
]
