"""A chaos worker given partitions whose committed offsets it cannot read at that moment
(its coordinator moved, its connection dropped while the callback ran) holds them back
until it can, and starts them from the committed offsets: never from 0."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest

from huddle.chaos import events as ev
from huddle.chaos import worker as worker_module
from huddle.chaos.eventfiles import read_events
from huddle.chaos.events import EventLog
from huddle.chaos.resumes import PendingResumes
from huddle.chaos.worker import Worker, WorkerSettings
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import NotCoordinatorError
from tests.helpers import wait_until

TP0, TP1 = TopicPartition("chaos", 0), TopicPartition("chaos", 1)
COMMITTED = {TP0: 480, TP1: None}  # TP1: nothing committed yet


class _Member:
    """A member whose coordinator answers OffsetFetch only once ``reachable`` is set."""

    member_id = "m-1"
    generation = 3
    is_leader = False

    def __init__(self) -> None:
        self.reachable = anyio.Event()
        self.assignment = frozenset({TP0, TP1})
        self.asked = 0

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        self.asked += 1
        if not self.reachable.is_set():
            raise NotCoordinatorError("node node-1 does not coordinate group 'chaos'")
        return {tp: COMMITTED[tp] for tp in partitions}


def _worker(tmp_path: Path, events: EventLog, member: _Member, **extra: object) -> Worker:
    args = WorkerSettings(
        bootstrap="127.0.0.1:9",
        name="m",
        run_dir=str(tmp_path),
        protocol="consumer",
        **extra,  # type: ignore[arg-type]
    )
    worker = Worker(args, events)
    worker.member = member  # type: ignore[assignment]
    return worker


@pytest.mark.parametrize("stateful", [False, True])
async def test_partitions_wait_for_their_committed_offsets_and_start_from_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stateful: bool
) -> None:
    monkeypatch.setattr(worker_module, "RESUME_ATTEMPTS", 1, raising=False)
    member = _Member()
    with EventLog(tmp_path / "m.jsonl", "m") as events:
        worker = _worker(tmp_path, events, member, stateful=stateful)
        await worker.on_partitions_assigned(frozenset({TP0, TP1}))
        # given, but not started: no task, nothing processed, nothing to commit
        assert worker.workload.tasks == {}
        worker.tick()
        assert worker.workload.positions() == {}
        assert worker.resumes.pending == {TP0, TP1}
        with anyio.fail_after(5.0):
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.resume_loop)
                # it keeps asking while the coordinator is away
                await wait_until(lambda: member.asked >= 3, what="asked again")
                assert worker.workload.tasks == {}
                member.reachable.set()
                await wait_until(lambda: not worker.resumes.pending, what="started")
                tg.cancel_scope.cancel()
    # each task resumes from its committed offset (0: none)
    assert {tp: t.committed for tp, t in worker.workload.tasks.items()} == {TP0: 480, TP1: 0}
    rows = read_events(tmp_path / "m.jsonl")
    assert [r["event"] for r in rows if r["event"] == ev.tag_of(ev.Assigned)] == ["assigned"]
    first: dict[object, object] = {}
    for r in rows:
        if r["event"] == ev.PROCESSED:
            first.setdefault(r["partition"], r["offset"])
    assert first == ({1: 0} if stateful else {0: 480, 1: 0})  # stateful: 0 restores first
    if stateful:
        restores = [r for r in rows if r["event"] == ev.tag_of(ev.RestoreStarted)]
        assert sorted((r["partition"], r["offset"]) for r in restores) == [(0, 480), (1, 0)]


async def test_a_partition_revoked_or_given_again_meanwhile_is_not_started_with_an_old_answer() -> (
    None
):
    resumes = PendingResumes()
    resumes.defer([TP0, TP1])
    taken: list[dict[TopicPartition, int | None]] = []
    answer = anyio.Event()

    asked: list[frozenset[TopicPartition]] = []

    async def fetch(tps: frozenset[TopicPartition]) -> dict[TopicPartition, int | None]:
        asked.append(tps)
        await answer.wait()
        return dict.fromkeys(tps, 7)

    with anyio.fail_after(5.0):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                resumes.run, fetch, lambda: frozenset({TP0, TP1}), lambda r: taken.append(dict(r))
            )
            await wait_until(lambda: asked == [frozenset({TP0, TP1})], what="the first ask")
            resumes.drop([TP1])  # revoked meanwhile
            resumes.defer([TP0])  # given again meanwhile: a commit may have come since
            answer.set()
            await wait_until(lambda: bool(taken), what="taken")
            tg.cancel_scope.cancel()
    assert taken == [{TP0: 7}]  # the second ask, for TP0's new turn
    assert asked == [frozenset({TP0, TP1}), frozenset({TP0})]
    assert resumes.pending == frozenset()
