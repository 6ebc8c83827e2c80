"""The data dir's replay at start-up, a few milliseconds at a time.

The server listens while it loads (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS),
so every long step runs in slices of ``COPY_SLICE_S`` with the loop let through in
between (``Slices``), and without garbage collection (``collections_paused``). Once it is
loaded, the members' sessions start a slice at a time too (``serve_loaded``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from typing import Final

import structlog

from huddle.coordinator.core import Coordinator
from huddle.coordinator.requests import RequestPath
from huddle.coordinator.storage.group_commit import COPY_SLICE_S
from huddle.coordinator.storage.journal import DataDirError, Journal
from huddle.coordinator.sweeps import Timers

log = structlog.get_logger("huddle.server")

FREEZE_AFTER_LOAD: Final = 100_000  # objects a load left: more are frozen (see below)
SERVE_STEP: Final = 64  # loaded groups whose sessions start between two looks at the time


class Slices:
    """Runs steps a slice at a time, letting the loop answer requests in between."""

    def __init__(self) -> None:
        self._until = 0.0  # when to let the loop run

    async def run(self, steps: Iterator[None]) -> None:
        """Run ``steps`` a few milliseconds at a time, letting the loop answer requests
        (COORDINATOR_LOAD_IN_PROGRESS) in between: a large data dir takes seconds."""
        for _ in steps:
            if time.perf_counter() >= self._until:
                await asyncio.sleep(0)
                self._until = time.perf_counter() + COPY_SLICE_S


async def replay(
    core: Coordinator, data_dir: str, fsync: bool, slices: Slices, now: Callable[[], float]
) -> Journal:
    """Read and check the journal off the loop, then replay it into the core. Raises
    DataDirError."""
    journal = await asyncio.to_thread(Journal.open, data_dir, fsync=fsync)
    core.keep_groups()  # a restart loads them (``Coordinator.start``)
    started = time.perf_counter()
    try:
        await slices.run(core.restoring(journal.records))
        await slices.run(core.loading_groups(now()))
    except Exception as exc:
        journal.close()
        raise DataDirError(f"cannot replay {data_dir}: {exc!r}") from exc
    log.info(
        "data_dir_loaded",
        records=len(journal.records),
        groups=core.unserved,
        seconds=round(time.perf_counter() - started, 3),
    )
    journal.records = []
    return journal


async def serve_loaded(
    core: Coordinator, requests: RequestPath, timers: Timers, *, stopping: Callable[[], bool]
) -> None:
    """Start the loaded members' sessions, a slice at a time with requests handled in
    between, each slice at its own time: none starts before the coordinator answers."""
    loop = timers.loop
    while core.unserved and not stopping():
        until = time.perf_counter() + COPY_SLICE_S
        while core.unserved and time.perf_counter() < until:
            requests.send_outside(core.serve_loaded(loop.time() * 1000, SERVE_STEP))
        timers.reschedule()
        requests.flush()
        if core.unserved:
            await asyncio.sleep(0)
    timers.reschedule()


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """No garbage collection while a data dir loads: the load makes millions of objects
    that live on, and each collection of the older generations meanwhile walks them all
    (13 s of collections, one of 2 s, loading 60,000 groups of 10 members). What a large
    load left is then frozen (``gc.freeze``): collections pass it over, or the first one
    after the load would walk it all. A small one is left to the collector (freezing
    would keep what is cyclic garbage by then for good)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_count()[0] >= FREEZE_AFTER_LOAD:
            gc.freeze()
        if enabled:
            gc.enable()
