"""Long-running tasks that never stop for good.

``supervise`` runs a task's body in a task of its own, for ever: a body that raises, is
cancelled from inside (a library that turns a deadline into a bare ``CancelledError``) or
returns is logged (``task_died``) and started again; a body that makes no progress for
``stall_s`` (it hangs in a call with no deadline, say) is cancelled, logged
(``task_stalled``) and started again once it has ended: never two bodies of one task at
once. The body reports progress by calling the ``Beat`` it is given, or ``progress()`` from
anywhere in its own task (a store reports each call it ends this way). Progress is the
body's task's alone: a task the body starts (a write handed to a keeper, say) inherits its
context but not its beat, so its calls never keep a hung body alive. After the whole
process stood still (frozen by SIGSTOP, its loop blocked), the body has ``stall_s`` again.
Restarts back off from ``RESTART_MIN_S`` to ``RESTART_MAX_S``; a run that lasted longer than
``stall_s`` starts the backoff over.

Only cancelling the supervisor itself stops it (and its body).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.get_logger("huddle.supervisor")

RESTART_MIN_S = 0.05
RESTART_MAX_S = 1.0
LATE_S = 0.5  # a watchdog woken this much late: the process was frozen (SIGSTOP, a stall)
CANCEL_WAIT_S = 1.0  # a body cancelled by its supervisor's own cancellation: its time to end


_current: contextvars.ContextVar[Beat | None] = contextvars.ContextVar(
    "huddle_supervised_beat", default=None
)


def progress() -> None:
    """The task running this makes progress, if it is a supervised body's own task (not
    one started from it: that one's progress is not the body's)."""
    beat = _current.get()
    if beat is not None and beat.task is not None and beat.task is asyncio.current_task():
        beat()


class Beat:
    """Called by a supervised body whenever it makes progress."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.last = clock()
        self.task: asyncio.Task[None] | None = None  # the body's own task: its progress

    def __call__(self) -> None:
        self.last = self._clock()


@dataclass
class Restarts:
    """How often each supervised task was started again, and why (for metrics)."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (task, why) -> n

    def add(self, task: str, why: str) -> None:
        self.counts[(task, why)] = self.counts.get((task, why), 0) + 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())


Body = Callable[[Beat], Coroutine[Any, Any, None]]


async def supervise(
    name: str,
    body: Body,
    *,
    stall_s: float,
    fields: Mapping[str, object] | None = None,
    restarts: Restarts | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run ``body`` until cancelled, starting it again whenever it dies or stalls."""
    extra = dict(fields or {})
    backoff = RESTART_MIN_S
    count = 0
    while True:
        beat = Beat(clock)
        began = clock()
        context = contextvars.copy_context()
        context.run(_current.set, beat)
        task = asyncio.get_running_loop().create_task(
            body(beat), name=f"huddle {name}", context=context
        )
        beat.task = task
        try:
            why, error = await _watch(task, beat, stall_s, clock)
        except asyncio.CancelledError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, CANCEL_WAIT_S)
            raise
        count += 1
        if restarts is not None:
            restarts.add(name, why)
        if why == "stalled":
            idle = round(clock() - beat.last, 3)
            log.error("task_stalled", task=name, idle_s=idle, restarts=count, **extra)
        else:
            log.error("task_died", task=name, error=error, restarts=count, **extra)
        backoff = RESTART_MIN_S if clock() - began > stall_s else min(backoff * 2, RESTART_MAX_S)
        await asyncio.sleep(backoff)


async def _watch(
    task: asyncio.Task[None], beat: Beat, stall_s: float, clock: Callable[[], float]
) -> tuple[str, str]:
    """Until ``task`` ends (why, and its error) or stalls (cancelled, then "stalled")."""
    while True:
        left = beat.last + stall_s - clock()
        if left <= 0:
            task.cancel()
            # never two bodies of one task at once: wait for this one to end (a body that
            # ignores its cancellation is a bug, said in the log until it ends)
            while not (await asyncio.wait([task], timeout=max(stall_s, CANCEL_WAIT_S)))[0]:
                log.error("task_not_ending", task=task.get_name())
                task.cancel()
            if not task.cancelled():
                task.exception()  # retrieved: it ended its own way while cancelled
            return "stalled", ""
        due = clock() + left
        await asyncio.wait([task], timeout=left)
        late = clock() - due
        if late > LATE_S:  # the whole process (or its loop) stood still: not the task's doing
            beat.last = max(beat.last, clock())
        if task.done():
            if task.cancelled():
                return "died", "cancelled from inside"
            exc = task.exception()
            return "died", "returned" if exc is None else repr(exc)
