"""A coordinator paused past its members' session timeout evicts nobody who kept
heartbeating (issue 11, item 2).

A process stopped with SIGSTOP and woken with SIGCONT returns from its ``epoll_wait`` with
EINTR; both asyncio's loop and uvloop then run the timers that came due before they poll the
sockets again. Before, every member was evicted the moment the coordinator resumed, although
their heartbeats were waiting in its socket buffers. Now the coordinator reads what is waiting
before it acts on a passed deadline.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    Call,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    Reply,
)
from tests.helpers import raw_member, serve_process, wait_until

pytestmark = pytest.mark.e2e

SESSION_MS = 1_000


async def test_members_that_kept_heartbeating_through_a_coordinator_pause_stay() -> None:
    async with serve_process() as (process, port, events):
        members = [
            (f"g{i}", *await raw_member(port, f"g{i}", session_timeout_ms=SESSION_MS))
            for i in range(3)
        ]
        os.kill(process.pid, signal.SIGSTOP)
        paused = time.monotonic()

        async def heartbeat_all(correlation_id: int) -> None:
            for group_id, client, member_id, generation in members:
                request = HeartbeatRequest(
                    group_id=group_id, generation_id=generation, member_id=member_id
                )
                await client.send(Call(correlation_id=correlation_id, request=request))

        sent = 2
        try:
            # Each member heartbeats as the pause begins and again once it has lasted twice
            # the session timeout; the heartbeats wait in the paused coordinator's buffers.
            await heartbeat_all(1_001)
            await wait_until(
                lambda: time.monotonic() > paused + 2 * SESSION_MS / 1000,
                what="a pause of twice the session timeout",
            )
            await heartbeat_all(1_002)
        finally:
            os.kill(process.pid, signal.SIGCONT)
        for group_id, client, member_id, generation in members:
            for _ in range(sent):
                reply = await client.read_frame()
                assert isinstance(reply, Reply), reply
                assert isinstance(reply.response, HeartbeatResponse), reply
                assert reply.response.error_code == ErrorCode.NONE, (group_id, reply)
            described = await client.call(DescribeGroupsRequest(groups=[group_id]))
            assert isinstance(described, DescribeGroupsResponse), described
            (group,) = described.groups
            assert (group.state, group.generation_id) == ("Stable", generation)
            assert [m.member_id for m in group.members] == [member_id]
            await client.close()
        assert not [e for e in events if e["event"] == "member_removed"]
