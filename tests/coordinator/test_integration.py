"""Several raw-protocol clients against the real server on loopback: whole group flows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from huddle.client.connection import Connection, connect
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Protocol,
    RebalanceStarted,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicSpec,
)
from tests.helpers import within

E = ErrorCode
SESSION_MS = 6_000


class RawMember:
    """A member spoken for by hand, one request at a time."""

    def __init__(self, conn: Connection, group: str = "g", instance: str | None = None) -> None:
        self.conn = conn
        self.group = group
        self.instance = instance
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.members: list[str] = []

    def join_request(self) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=self.group,
            member_id=self.member_id,
            group_instance_id=self.instance,
            protocol_type="consumer",
            protocols=[Protocol(name="range", metadata=b"orders")],
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=10_000,
        )

    async def join(self) -> JoinGroupResponse:
        response = await self.conn.call(self.join_request(), JoinGroupResponse, timeout=10)
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.leader = response.leader
        self.members = [m.member_id for m in response.members]
        return response

    async def start_join(self) -> asyncio.Task[JoinGroupResponse]:
        """Send a JoinGroup that will be held, after the KIP-394 step if still needed."""
        if not self.member_id and self.instance is None:
            first = await self.conn.request(self.join_request(), timeout=10)
            assert isinstance(first, JoinGroupResponse)
            assert first.error_code == E.MEMBER_ID_REQUIRED
            self.member_id = first.member_id
        return asyncio.ensure_future(self.join())

    async def sync(self, assignments: dict[str, bytes] | None = None) -> bytes:
        request = SyncGroupRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance,
            assignments=[
                SyncGroupAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        response = await self.conn.call(request, SyncGroupResponse, timeout=10)
        return response.assignment

    async def heartbeat(self) -> int:
        request = HeartbeatRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance,
        )
        response = await self.conn.request(request, timeout=10)
        assert isinstance(response, HeartbeatResponse)
        return response.error_code

    async def next_rebalance_notice(self) -> RebalanceStarted:
        while True:
            notice = await within(self.conn.notices.receive(), wait_s=10)
            if isinstance(notice, RebalanceStarted):
                return notice


@asynccontextmanager
async def members(bootstrap: str, count: int) -> AsyncIterator[list[RawMember]]:
    async with AsyncExitStack() as stack:
        conns = [
            await stack.enter_async_context(connect(bootstrap, client_id=f"m{i}"))
            for i in range(count)
        ]
        yield [RawMember(c) for c in conns]


async def sync_round(group: list[RawMember]) -> dict[str, bytes]:
    """Everyone syncs the generation they joined; the leader gives each its own id."""
    leader = next(m for m in group if m.member_id == m.leader)
    plan = {m: m.encode() for m in leader.members}
    followers = [asyncio.ensure_future(m.sync()) for m in group if m is not leader]
    got = {leader.member_id: await leader.sync(plan)}
    for member, task in zip([m for m in group if m is not leader], followers, strict=True):
        got[member.member_id] = await within(task)
    return got


async def grow(group: list[RawMember], newcomer: RawMember) -> None:
    """A new member joins a stable group; the others rejoin on the notice, as members do."""
    held = await newcomer.start_join()
    rejoins = []
    for member in group:
        notice = await member.next_rebalance_notice()
        assert notice.generation_id == member.generation
        rejoins.append(asyncio.ensure_future(member.join()))
    for task in [*rejoins, held]:
        assert (await within(task)).error_code == E.NONE
    await sync_round([*group, newcomer])


async def test_three_members_form_a_group_on_notices(bootstrap: str) -> None:
    async with members(bootstrap, 3) as (a, b, c):
        assert (await (await a.start_join())).generation_id == 1
        assert await a.sync({a.member_id: b"a"}) == b"a"
        await grow([a], b)
        await grow([a, b], c)
        assert {m.generation for m in (a, b, c)} == {3}
        assert a.leader == b.leader == c.leader == a.member_id
        assert set(a.members) == {a.member_id, b.member_id, c.member_id}
        assert [await m.heartbeat() for m in (a, b, c)] == [E.NONE] * 3


async def test_a_dead_connection_is_noticed_within_the_grace(bootstrap: str) -> None:
    async with members(bootstrap, 2) as (a, b):
        await (await a.start_join())
        await a.sync({a.member_id: b"a"})
        await grow([a], b)
        await b.conn.aclose()  # the process died: its socket closed, no LeaveGroup
        started = time.monotonic()
        notice = await a.next_rebalance_notice()
        noticed_s = time.monotonic() - started
        assert "connection closed" in notice.reason
        assert noticed_s < SESSION_MS / 1000 / 2  # the grace, not the session timeout
        assert (await a.join()).generation_id == 3
        assert a.members == [a.member_id]


async def test_a_held_join_does_not_block_other_requests_on_its_connection(
    bootstrap: str,
) -> None:
    async with members(bootstrap, 2) as (a, b):
        await (await a.start_join())
        await a.sync({a.member_id: b"a"})
        held = await b.start_join()  # held until a rejoins
        await a.next_rebalance_notice()
        # Through b's own connection, while its JoinGroup waits: a topic request.
        created = await b.conn.call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]),
            CreateTopicsResponse,
            timeout=5,
        )
        assert created.topics[0].error_code == E.NONE
        assert not held.done()
        await a.join()
        assert (await within(held)).generation_id == 2


async def test_static_member_restart_keeps_generation_and_assignment(bootstrap: str) -> None:
    async with AsyncExitStack() as stack:
        conns = [await stack.enter_async_context(connect(bootstrap)) for _ in range(2)]
        a, s = RawMember(conns[0]), RawMember(conns[1], instance="static-1")
        await (await a.start_join())
        await a.sync({a.member_id: b"a"})
        await grow([a], s)
        generation, old_id = s.generation, s.member_id
        await s.conn.aclose()
        async with connect(bootstrap) as again:
            restarted = RawMember(again, instance="static-1")
            joined = await restarted.join()
            assert joined.generation_id == generation
            assert restarted.member_id != old_id
            assert await restarted.sync() == old_id.encode()  # the assignment it had
            assert await a.heartbeat() == E.NONE  # no rebalance for the others


async def test_commits_are_fenced_by_generation(bootstrap: str) -> None:
    async with members(bootstrap, 2) as (a, b):
        await a.conn.call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]),
            CreateTopicsResponse,
            timeout=5,
        )
        await (await a.start_join())
        await a.sync({a.member_id: b"a"})
        stale_generation = a.generation
        await grow([a], b)

        def commit(generation: int, offset: int) -> OffsetCommitRequest:
            return OffsetCommitRequest(
                group_id="g",
                generation_id=generation,
                member_id=a.member_id,
                topics=[
                    OffsetCommitTopic(
                        name="t", partitions=[OffsetCommitPartition(partition=0, offset=offset)]
                    )
                ],
            )

        stale = await a.conn.request(commit(stale_generation, 5), timeout=5)
        assert isinstance(stale, OffsetCommitResponse)
        assert stale.error_code == E.ILLEGAL_GENERATION
        current = await a.conn.call(commit(a.generation, 7), OffsetCommitResponse, timeout=5)
        assert current.topics[0].partitions[0].error_code == E.NONE
        fetched = await b.conn.call(
            OffsetFetchRequest(group_id="g"), OffsetFetchResponse, timeout=5
        )
        assert [(t.name, p.partition, p.offset) for t in fetched.topics for p in t.partitions] == [
            ("t", 0, 7)
        ]
