"""``huddle serve --data-dir`` restarted under a busy cooperative group: the group goes on
in its generation, no listener is called, and no acknowledged commit is lost. Real
processes (``huddle.testing.CoordinatorProcess``) and real members."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest
from huddle.testing import CoordinatorProcess

from huddle.client import Admin, Member
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.messages import ProtocolError
from tests.helpers import (
    Recorder,
    fast_server_config,
    raw_member,
    running_server,
    settled,
    wait_until,
)

GROUP = "orders"
PARTITIONS = frozenset(TopicPartition("t", p) for p in range(6))
COMMIT_EVERY_S = 0.2


class Committer:
    """Each member commits the next offset of everything it owns every 200 ms; what was
    acknowledged is noted (a commit that fails while the coordinator is away is not)."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        self.acknowledged: dict[TopicPartition, int] = {}
        self.rounds = 0  # rounds every member's commit was acknowledged in
        self._offset = 0

    async def run(self) -> None:
        while True:
            self._offset += 1
            try:
                for member in self.members:
                    offsets = dict.fromkeys(member.assignment, self._offset)
                    await member.commit(offsets)
                    self.acknowledged.update(offsets)
                self.rounds += 1
            except Exception:  # the coordinator is restarting: try again next round
                pass
            await asyncio.sleep(COMMIT_EVERY_S)


@asynccontextmanager
async def busy_group(
    bootstrap: str, *, static: bool
) -> AsyncIterator[tuple[list[Member], list[Recorder], Committer]]:
    """Three cooperative members (static ones with ``static``), settled, committing."""
    async with AsyncExitStack() as stack:
        listeners = [Recorder() for _ in range(3)]
        members = [
            await stack.enter_async_context(
                Member(
                    bootstrap,
                    group_id=GROUP,
                    topics=["t"],
                    instance_id=f"worker-{i}" if static else None,
                    session_timeout_ms=10_000,
                    heartbeat_interval_ms=300,
                    listener=listeners[i],
                )
            )
            for i in range(3)
        ]
        await wait_until(lambda: settled(members, PARTITIONS), what="the group settles")
        committer = Committer(members)
        task = asyncio.create_task(committer.run())
        try:
            yield members, listeners, committer
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("how", "static"),
    [("stop", False), ("kill", True)],
    ids=["sigterm-dynamic-members", "sigkill-static-members"],
)
async def test_a_restart_under_a_busy_cooperative_group_costs_no_rebalance(
    how: str, static: bool
) -> None:
    """SIGTERM and a new process on the same data dir: the dynamic members heard that the
    coordinator was stopping, so its disconnect grace does not apply, and they carry on.
    SIGKILL: only static members can tell nothing from a crash (a dynamic member counts its
    partitions lost after half the disconnect grace, as if it had been cut off)."""
    with CoordinatorProcess() as coordinator:
        async with Admin(coordinator.bootstrap) as admin:
            await admin.create_topic("t", len(PARTITIONS))
        async with busy_group(coordinator.bootstrap, static=static) as (
            members,
            listeners,
            committer,
        ):
            await wait_until(lambda: committer.rounds >= 3, what="commits acknowledged")
            generation = members[0].generation
            owned = [m.assignment for m in members]
            for listener in listeners:
                listener.clear()
            rebalances = len(coordinator.events("rebalance_started"))

            if how == "stop":
                await asyncio.to_thread(coordinator.restart)
            else:
                await asyncio.to_thread(coordinator.kill)
                await asyncio.to_thread(coordinator.start)
            rounds = committer.rounds
            await wait_until(
                lambda: committer.rounds >= rounds + 3, what="commits acknowledged again"
            )

            # no rebalance: the same generation, the same partitions, no callback at all
            assert [m.generation for m in members] == [generation] * 3
            assert [m.assignment for m in members] == owned
            assert [listener.calls for listener in listeners] == [[], [], []]
            assert len(coordinator.events("rebalance_started")) == rebalances
            assert coordinator.events("group_loaded")
        async with Admin(coordinator.bootstrap) as admin:
            committed = await admin.committed_offsets(GROUP)
        # every commit acknowledged before, during and after the restart is kept
        lost = {tp: n for tp, n in committer.acknowledged.items() if committed.get(tp, -1) < n}
        assert lost == {}


async def test_a_member_that_never_comes_back_after_a_restart_is_removed_after_its_session(
    tmp_path: Path,
) -> None:
    """The restarted coordinator arms the loaded sessions itself: nobody needs to ask it
    anything for a member that never returns to be removed, and its group to empty."""
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server:
        client, _, _ = await raw_member(server.port, "gone", session_timeout_ms=300)
        await client.close()
    async with running_server(config) as server:
        assert server.core.groups["gone"].members  # loaded, with a fresh session
        await wait_until(lambda: "gone" not in server.core.groups, what="the member removed")


@pytest.mark.parametrize("data_dir", [False, True], ids=["no-data-dir", "data-dir"])
async def test_only_a_coordinator_that_keeps_its_groups_says_members_ride_through_its_stop(
    tmp_path: Path, data_dir: bool
) -> None:
    """``ProtocolError.stopping`` tells a dynamic member the next coordinator loads its
    session, so it keeps its partitions for its whole session instead of half the
    disconnect grace. A coordinator without a data dir (and not in a cluster) loads nothing
    after it: a member that does not reach the new one at once would keep partitions the
    new one hands to others (found by review: 5.2 s of double ownership, real processes)."""
    config = fast_server_config(data_dir=str(tmp_path) if data_dir else "")
    async with running_server(config) as server:
        client, _, _ = await raw_member(server.port, "g")
        closing = asyncio.ensure_future(server.close())
        frames = await client.frames_until_closed()
        await closing
    errors = [f for f in frames if isinstance(f, ProtocolError)]
    assert len(errors) == 1
    assert errors[0].stopping is data_dir
