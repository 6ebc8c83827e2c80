"""Offset commits at a member epoch on huddle's wire (KIP-848): the coordinator checks a
consumer group's commits against its members' epochs as the Kafka listener's OffsetCommit
v9+ (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID), and ``Member(group_protocol="consumer")``
commits at its epoch and reads the offsets back, as the classic ``Member`` does."""

from __future__ import annotations

import pytest

from huddle.client.connection import Connection, connect
from huddle.client.events import CommitFailedError
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
)
from tests.client.test_consumer_member import (
    LONG_INTERVAL_MS,
    Recorder,
    _all,
    _member,
    _server,
    _topic,
)
from tests.helpers import fast_server_config, running_server, wait_until


async def _join(conn: Connection, member_id: str) -> int:
    answer = await conn.call(
        ConsumerHeartbeatRequest(
            group_id="g",
            member_id=member_id,
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=["t"],
            owned=[],
        ),
        ConsumerHeartbeatResponse,
    )
    return answer.member_epoch


def _at(offset: int) -> OffsetCommitPartition:
    return OffsetCommitPartition(partition=0, offset=offset)


async def _commit(conn: Connection, member_id: str, epoch: int, offset: int) -> int:
    """The error code of a commit of ``offset`` for t-0 by ``member_id`` at ``epoch``."""
    request = OffsetCommitRequest(
        group_id="g",
        generation_id=epoch,
        member_id=member_id,
        topics=[
            OffsetCommitTopic(
                name="t", partitions=[OffsetCommitPartition(partition=0, offset=offset)]
            )
        ],
    )
    answer = await conn.request(request, timeout=10)
    assert isinstance(answer, OffsetCommitResponse)
    return answer.error_code


async def test_huddle_s_wire_checks_a_consumer_group_s_commits_against_member_epochs() -> None:
    async with _server() as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        async with connect(bootstrap) as conn:
            epoch_a = await _join(conn, "a")
            epoch_b = await _join(conn, "b")  # the group epoch moved on: b is at a later one
            assert epoch_b > epoch_a
            assert await _commit(conn, "a", epoch_a, 5) == ErrorCode.NONE
            assert await _commit(conn, "a", epoch_a + 1, 6) == ErrorCode.STALE_MEMBER_EPOCH
            assert await _commit(conn, "a", epoch_a - 1, 6) == ErrorCode.STALE_MEMBER_EPOCH
            assert await _commit(conn, "nobody", epoch_a, 6) == ErrorCode.UNKNOWN_MEMBER_ID
            assert await _commit(conn, "b", epoch_b, 7) == ErrorCode.NONE
            # from outside the group (an admin's, generation -1 and no member id): refused
            # while it has members, as Kafka's ConsumerGroup.validateOffsetCommit
            assert await _commit(conn, "", -1, 8) == ErrorCode.UNKNOWN_MEMBER_ID
        # only the accepted commits were kept: the last is b's
        assert server.core.groups["g"].offsets[("t", 0)][0] == 7


async def test_a_member_commits_at_its_epoch_and_a_rejoining_one_reads_the_offsets_back() -> None:
    config = fast_server_config(
        consumer_session_timeout_ms=2 * LONG_INTERVAL_MS,
        consumer_heartbeat_interval_ms=LONG_INTERVAL_MS,
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        async with _member(bootstrap, Recorder()) as a:
            await wait_until(lambda: a.assignment == _all(2), what="a to own both")
            await a.commit(dict.fromkeys(a.assignment, 42), metadata="a's")
            assert await a.committed(_all(2)) == dict.fromkeys(_all(2), 42)
            gone, epoch = a.member_id, a.generation
        async with connect(bootstrap) as conn:  # a left: its id commits no more
            assert await _commit(conn, gone, epoch, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        async with _member(bootstrap, Recorder()) as again:  # the application back
            await wait_until(lambda: again.assignment == _all(2), what="it owns both again")
            assert await again.committed(_all(2)) == dict.fromkeys(_all(2), 42)
            await again.commit(dict.fromkeys(again.assignment, 43))
            assert await again.committed(_all(2)) == dict.fromkeys(_all(2), 43)


async def test_a_commit_refused_for_the_member_s_epoch_is_a_commit_failed_error() -> None:
    async with _server() as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        async with _member(bootstrap, Recorder()) as a:
            await wait_until(lambda: a.assignment == _all(2), what="a to own both")
            async with connect(bootstrap) as conn:  # a left, as if fenced: a has not heard
                leave = ConsumerHeartbeatRequest(
                    group_id="g", member_id=a.member_id, member_epoch=-1
                )
                await conn.call(leave, ConsumerHeartbeatResponse)
            with pytest.raises(CommitFailedError) as refused:
                await a.commit(dict.fromkeys(a.assignment, 1))
            assert refused.value.code == ErrorCode.UNKNOWN_MEMBER_ID
