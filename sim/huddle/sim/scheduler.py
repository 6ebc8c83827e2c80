"""Simulated time: one clock and one queue of things to do, run in time order.

Ties run in the order they were scheduled, so a run depends on nothing but its inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any


class Timer:
    """Something scheduled; ``cancel`` stops it from running."""

    __slots__ = ("args", "fn", "when")

    def __init__(self, when: float, fn: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
        self.when = when
        self.fn = fn
        self.args = args

    def cancel(self) -> None:
        self.fn = None

    @property
    def pending(self) -> bool:
        return self.fn is not None


class Scheduler:
    def __init__(self) -> None:
        self.now = 0.0
        self.steps = 0
        self._queue: list[tuple[float, int, Timer]] = []
        self._seq = 0

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> Timer:
        """Run ``fn(*args)`` at ``when`` (never before now)."""
        if when < self.now:
            when = self.now
        timer = Timer(when, fn, args)
        self._seq = seq = self._seq + 1
        heappush(self._queue, (when, seq, timer))
        return timer

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> Timer:
        return self.at(self.now + delay, fn, *args)

    def next_time(self) -> float | None:
        queue = self._queue
        while queue and queue[0][2].fn is None:
            heappop(queue)
        return queue[0][0] if queue else None

    def step(self) -> bool:
        """Run the next thing due; False if nothing is left."""
        queue = self._queue
        while queue:
            when, _, timer = heappop(queue)
            fn = timer.fn
            if fn is None:
                continue
            timer.fn = None
            self.now = when
            self.steps += 1
            fn(*timer.args)
            return True
        return False
