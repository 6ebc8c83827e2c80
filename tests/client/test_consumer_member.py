"""``Member(..., group_protocol="consumer")``: huddle's member on the consumer group
protocol (KIP-848). Members share a topic's partitions as the coordinator assigns them; a
joiner moves only what balance requires (the others see revocations of moved partitions
only); a leaver's partitions go to the rest; a pushed notice makes a member reconcile well
before its heartbeat interval."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from huddle.client.consumer_member import ConsumerProtocolMember
from huddle.client.member import Member
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import InvalidArgumentError
from huddle.protocol.messages import CreateTopicsRequest, CreateTopicsResponse, TopicSpec
from tests.helpers import fast_server_config, running_server, wait_until

LONG_INTERVAL_MS = 60_000  # the coordinator's heartbeat interval: longer than any wait here


class Recorder:
    def __init__(self) -> None:
        self.revoked: list[frozenset[TopicPartition]] = []
        self.assigned: list[frozenset[TopicPartition]] = []
        self.lost: list[frozenset[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        if revoked:
            self.revoked.append(revoked)

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        if assigned:
            self.assigned.append(assigned)

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        self.lost.append(lost)


@contextlib.asynccontextmanager
async def _server() -> AsyncIterator[CoordinatorServer]:
    config = fast_server_config(
        consumer_session_timeout_ms=2 * LONG_INTERVAL_MS,
        consumer_heartbeat_interval_ms=LONG_INTERVAL_MS,
    )
    async with running_server(config) as server:
        yield server


async def _topic(bootstrap: str, partitions: int) -> None:
    from huddle.client.connection import connect

    async with connect(bootstrap) as conn:
        await conn.call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=partitions)]),
            CreateTopicsResponse,
        )


def _member(bootstrap: str, listener: Recorder) -> Member:
    return Member(
        bootstrap, group_id="g", topics=["t"], listener=listener, group_protocol="consumer"
    )


def _all(n: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition("t", p) for p in range(n))


async def test_members_share_a_joiner_moves_only_what_balance_needs_and_a_leaver_gives_all() -> (
    None
):
    async with _server() as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 6)
        ra, rb, rc = Recorder(), Recorder(), Recorder()
        started = time.monotonic()
        async with _member(bootstrap, ra) as a, _member(bootstrap, rb) as b:
            assert isinstance(a, ConsumerProtocolMember)

            def shared(*members: Member, each: int) -> bool:
                owned = [m.assignment for m in members]
                union = frozenset().union(*owned)
                return union == _all(6) and all(len(o) == each for o in owned)

            await wait_until(lambda: shared(a, b, each=3), what="a and b to own 3 each")
            before_a, before_b = a.assignment, b.assignment
            ra.revoked.clear()
            rb.revoked.clear()
            async with _member(bootstrap, rc) as c:
                await wait_until(lambda: shared(a, b, c, each=2), what="2 each")
                # only what moved to c was revoked, and each kept the rest
                moved_a, moved_b = before_a - a.assignment, before_b - b.assignment
                assert len(moved_a) == len(moved_b) == 1
                assert frozenset().union(*ra.revoked) == moved_a
                assert frozenset().union(*rb.revoked) == moved_b
                assert c.assignment == moved_a | moved_b
            # c left: its two go to a and b
            await wait_until(lambda: shared(a, b, each=3), what="c's partitions taken")
            assert frozenset().union(*rc.revoked) == moved_a | moved_b
            assert ra.lost == rb.lost == rc.lost == []
        # the heartbeat interval (60 s) never passed: pushed notices drove every step
        assert time.monotonic() - started < LONG_INTERVAL_MS / 1000 / 4


async def test_a_pushed_notice_reconciles_well_before_the_heartbeat_interval() -> None:
    async with _server() as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        ra, rb = Recorder(), Recorder()
        async with _member(bootstrap, ra) as a:
            await wait_until(lambda: a.assignment == _all(2), what="a to own both")
            async with _member(bootstrap, rb) as b:
                # a must revoke one and b take it: two heartbeats a would otherwise send a
                # minute apart; within 5 s, both happen
                await wait_until(
                    lambda: len(a.assignment) == len(b.assignment) == 1,
                    wait_s=5,
                    what="the partition to move at once",
                )
                assert len(ra.revoked) == 1


def test_an_unknown_group_protocol_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="group_protocol"):
        Member("127.0.0.1:1", group_id="g", topics=["t"], group_protocol="eager")


async def test_a_fenced_member_loses_its_partitions_and_rejoins_with_epoch_0() -> None:
    config = fast_server_config(
        consumer_session_timeout_ms=60_000, consumer_heartbeat_interval_ms=100
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        ra = Recorder()
        async with _member(bootstrap, ra) as a:
            await wait_until(lambda: a.assignment == _all(2), what="a to own both")
            # the coordinator forgets it (as a session expiry would)
            fenced = server.consumer.core.expire(server.now_ms() + 10 * 60_000)
            assert [f.member_id for f in fenced] == [a.member_id]
            await wait_until(lambda: ra.lost == [_all(2)], what="a to lose both")
            await wait_until(lambda: a.assignment == _all(2), what="a to rejoin and own both")
            assert "g" in server.consumer.core.groups
            assert a.member_id in server.consumer.core.groups["g"].members
