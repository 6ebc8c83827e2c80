"""Shared bits of the benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import structlog


def quiet_logs() -> None:
    """Benchmarks print figures on stdout; the coordinator's events would drown them."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def cpu_model() -> str:
    """The CPU's model name, printed with every figure (machines differ)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


class Stall:
    """The longest lateness seen so far of a timer on the loop (seconds)."""

    worst = 0.0


@contextlib.asynccontextmanager
async def loop_stall(interval_s: float) -> AsyncIterator[Stall]:
    """While inside: a task on the running loop sleeps ``interval_s`` over and over and
    notes how late it wakes at worst (the loop's longest stall)."""
    loop = asyncio.get_running_loop()
    stall = Stall()
    done = False

    async def probe() -> None:
        while not done:
            before = loop.time()
            await asyncio.sleep(interval_s)
            stall.worst = max(stall.worst, loop.time() - before - interval_s)

    task = asyncio.ensure_future(probe())
    try:
        yield stall
    finally:
        done = True
        await task
