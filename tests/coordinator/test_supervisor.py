"""A supervised task never stops for good: dead or stalled, it is started again, and said so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
from structlog.typing import EventDict

from huddle.coordinator.supervisor import Beat, Restarts, progress, supervise
from tests.helpers import wait_until

Body = Callable[[Beat], Coroutine[Any, Any, None]]


@asynccontextmanager
async def supervised(body: Body, stall_s: float = 5.0) -> AsyncIterator[Restarts]:
    restarts = Restarts()
    task = asyncio.create_task(
        supervise("worker", body, stall_s=stall_s, fields={"node": "n1"}, restarts=restarts)
    )
    try:
        yield restarts
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def events(logs: list[EventDict], name: str) -> list[EventDict]:
    return [e for e in logs if e["event"] == name]


async def test_a_task_that_raises_is_started_again_and_logged(logs: list[EventDict]) -> None:
    runs: list[int] = []

    async def body(beat: Beat) -> None:
        runs.append(1)
        if len(runs) < 3:
            raise ConnectionError("etcd went away")
        await asyncio.Event().wait()  # the third run stays

    async with supervised(body) as restarts:
        await wait_until(lambda: len(runs) == 3, what="a third run")
        died = events(logs, "task_died")
        assert [(e["task"], e["node"], e["restarts"]) for e in died] == [
            ("worker", "n1", 1),
            ("worker", "n1", 2),
        ]
        assert "etcd went away" in died[0]["error"]
        assert died[0]["log_level"] == "error"
        assert restarts.counts == {("worker", "died"): 2}


async def test_a_task_that_returns_or_is_cancelled_from_inside_is_started_again(
    logs: list[EventDict],
) -> None:
    """A library that turns its deadline into a bare CancelledError must not end the task
    for good, nor be taken for the supervisor's own cancellation."""
    runs: list[int] = []

    async def body(beat: Beat) -> None:
        runs.append(1)
        if len(runs) == 1:
            return
        if len(runs) == 2:
            raise asyncio.CancelledError()
        await asyncio.Event().wait()

    async with supervised(body):
        await wait_until(lambda: len(runs) == 3, what="a third run")
    assert [e["error"] for e in events(logs, "task_died")] == [
        "returned",
        "cancelled from inside",
    ]


async def test_a_task_that_stops_making_progress_is_cancelled_and_started_again(
    logs: list[EventDict],
) -> None:
    runs: list[str] = []
    beats: list[float] = []
    hung = asyncio.Event()

    async def body(beat: Beat) -> None:
        runs.append("started")
        try:
            if len(runs) == 1:
                await hung.wait()  # a call with no deadline: never answered
            while True:  # later runs beat: never taken for stalled
                beat()
                beats.append(beat.last)
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            runs.append("cancelled")
            raise

    async with supervised(body, stall_s=0.3) as restarts:
        await wait_until(lambda: len(runs) == 3, what="the stalled run cancelled, another one")
        assert runs == ["started", "cancelled", "started"]
        (stalled,) = events(logs, "task_stalled")
        assert (stalled["task"], stalled["node"], stalled["restarts"]) == ("worker", "n1", 1)
        assert stalled["idle_s"] >= 0.3
        # the beating run outlives its stall_s untouched
        await wait_until(lambda: beats[-1] - beats[0] > 0.6, what="a run beating for 0.6 s")
        assert runs == ["started", "cancelled", "started"]
        assert restarts.counts == {("worker", "stalled"): 1}


async def test_cancelling_the_supervisor_ends_its_task() -> None:
    started, ended = asyncio.Event(), asyncio.Event()

    async def body(beat: Beat) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    async with supervised(body):
        await asyncio.wait_for(started.wait(), 10)
    assert ended.is_set()


async def test_a_process_that_stood_still_is_not_taken_for_a_stalled_task(
    logs: list[EventDict],
) -> None:
    """A node frozen by SIGSTOP wakes up with every timer late: its tasks had no chance to
    beat meanwhile, and are not cancelled for it."""
    beats: list[float] = []

    async def body(beat: Beat) -> None:
        beat()
        time.sleep(0.8)  # noqa: ASYNC251 - the loop stands still, as in a SIGSTOPped process
        await asyncio.sleep(0.05)  # the watchdog, long due, wakes first
        while True:
            beat()
            beats.append(beat.last)
            await asyncio.sleep(0.01)

    async with supervised(body, stall_s=0.2) as restarts:
        await wait_until(lambda: len(beats) > 1 and beats[-1] - beats[0] > 0.4, what="beats")
        assert restarts.total == 0
    assert events(logs, "task_stalled") == []


async def test_progress_of_a_task_the_body_started_is_not_the_body_s(
    logs: list[EventDict],
) -> None:
    """A task made inside a supervised body inherits its context (a keeper's write started
    from the reconcile loop, say): its calls must not keep the body, hung meanwhile, from
    being taken for stalled."""
    runs: list[str] = []
    helpers: list[asyncio.Task[None]] = []
    beats: list[float] = []

    async def helper() -> None:
        while True:
            progress()  # a store call ended, in the helper's own task
            await asyncio.sleep(0.01)

    async def body(beat: Beat) -> None:
        runs.append("started")
        if len(runs) == 1:
            helpers.append(asyncio.get_running_loop().create_task(helper()))
            await asyncio.Event().wait()  # hung: only the helper goes on
        while True:
            progress()  # the body's own progress counts
            beats.append(time.monotonic())
            await asyncio.sleep(0.01)

    try:
        async with supervised(body, stall_s=0.3) as restarts:
            await wait_until(lambda: len(runs) == 2, what="the hung body started again")
            assert [e["task"] for e in events(logs, "task_stalled")] == ["worker"]
            await wait_until(lambda: beats[-1] - beats[0] > 0.6, what="0.6 s of progress")
            assert restarts.counts == {("worker", "stalled"): 1}
    finally:
        for task in helpers:
            task.cancel()
