"""The event engine: a heap of (time_ms, seq, callback, args) on a simulated clock.

Time is virtual and given in milliseconds (a float: network delays are fractions of a ms); the
sequence number breaks ties, so events at the same instant run in the order they were scheduled
and a run never depends on how callables compare. There is no wall clock here. An exception in a
callback ends the run (SimPy's rule: an unexpected error is a bug, not a dropped event).
"""

import heapq
import math
from collections.abc import Callable
from typing import Any, final

Callback = Callable[..., None]


@final
class Engine:
    """Discrete-event scheduler. ``schedule`` returns a handle that ``cancel`` accepts."""

    def __init__(self, start_ms: float = 0.0) -> None:
        self.now_ms = start_ms
        self._heap: list[tuple[float, int, Callback, tuple[Any, ...]]] = []
        self._seq = 0
        self._cancelled: set[int] = set()
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
        self._seq += 1
        heapq.heappush(self._heap, (time_ms, seq, callback, args))
        return seq

    def cancel(self, handle: int) -> None:
        """Drop a scheduled event (lazily: it is skipped when it comes up)."""
        self._cancelled.add(handle)

    def __len__(self) -> int:
        return len(self._heap)

    def peek_time(self) -> float | None:
        """Time of the next event, or None if none is left."""
        return self._heap[0][0] if self._heap else None

    def run(
        self, until_ms: float | None = None, progress: Callable[[float], None] | None = None
    ) -> None:
        """Run events in (time, seq) order until none is left or the next is after ``until_ms``.

        ``progress(now_ms)`` is called every 4,096 events (the CLI's progress bar). ``events``
        is brought up to date before each ``progress`` call and when the run returns or raises.
        """
        heap = self._heap
        cancelled = self._cancelled
        pop = heapq.heappop
        limit = math.inf if until_ms is None else until_ms
        events = self.events
        try:
            while heap and heap[0][0] <= limit:
                time_ms, seq, callback, args = pop(heap)
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
        now, heap, push = self.now_ms, self._heap, heapq.heappush
        seq = self._seq
        for time_ms, args in timed_args:
            if time_ms < now:
                self._seq = seq
                raise ValueError(f"cannot schedule at {time_ms} ms, now is {now} ms")
            push(heap, (time_ms, seq, callback, args))
            seq += 1
        self._seq = seq


__all__ = ["Callback", "Engine"]
