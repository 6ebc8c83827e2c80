"""Offset retention of consumer-protocol groups (KIP-848), as Kafka 4.0's: each offset
expires the retention after its own commit unless a member subscribes to its topic, and an
empty consumer group with no offset left is deleted by the check, its records with it. The
core and the consumer service are driven with explicit clocks."""

from __future__ import annotations

from huddle.coordinator.consumer import HeartbeatRequest
from huddle.coordinator.consumer.messages import ClassicGroupSnapshot
from huddle.coordinator.consumer_service import ConsumerService
from huddle.coordinator.consumer_wire import CoreConsumerView
from huddle.coordinator.core import Coordinator
from huddle.coordinator.storage.records import (
    DELETED,
    ConsumerGroupRecord,
    OffsetRecord,
    Record,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    CreateTopicsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    TopicSpec,
)
from tests.coordinator.test_consumer_service import PEER
from tests.coordinator.test_offset_retention import ADMIN, RETENTION, WALL, commit, core


class Host(CoreConsumerView):
    """A core without a server: its records are the core's changes."""

    def __init__(self, c: Coordinator) -> None:
        super().__init__(c)
        self.c = c

    def now_ms(self) -> float:
        return 0.0

    def classic_snapshot(self, group_id: str) -> ClassicGroupSnapshot | tuple[ErrorCode, str]:
        return ErrorCode.GROUP_ID_NOT_FOUND, "no classic group"

    def drop_classic(self, group_id: str) -> None:
        raise AssertionError("no classic group to drop")

    def to_classic(self, group_id: str, group: object, clients: object) -> None:
        raise AssertionError("no classic member to downgrade to")

    def keep(self, records: list[Record], *, outside: bool) -> None:
        self.c.keep_consumer(records)

    def not_served(self, group_id: str) -> tuple[ErrorCode, str] | None:
        return None


def _serving() -> tuple[Coordinator, ConsumerService]:
    """A core keeping its groups, topics t and u, and its consumer service."""
    c = core()
    c.keep_groups()
    c.handle(ADMIN, 1, CreateTopicsRequest(topics=[TopicSpec(name="u", partitions=1)]), 0)
    service = ConsumerService(Host(c))
    c.retention.consumer = service
    return c, service


def _beat(member_id: str, epoch: int) -> HeartbeatRequest:
    return HeartbeatRequest(
        "g", member_id, epoch, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned={}
    )


def _commit_u(c: Coordinator, offset: int, now: float) -> None:
    """An offset of topic u (which no member subscribes to) for group g."""
    partitions = [OffsetCommitPartition(partition=0, offset=offset)]
    request = OffsetCommitRequest(
        group_id="g", topics=[OffsetCommitTopic(name="u", partitions=partitions)]
    )
    c.handle(ADMIN, 2, request, now)


def _expire(c: Coordinator, at: int) -> list[Record]:
    c.expire_offsets(at, WALL + at)
    return c.take_changes()


async def test_a_consumer_group_keeps_the_offsets_of_the_topics_it_subscribes_to() -> None:
    c, service = _serving()
    assert service.heartbeat(_beat("a", 0), PEER).error == ErrorCode.NONE
    commit(c, "g", 7, now=0)  # t: a subscribes to it
    _commit_u(c, 3, now=0)  # u: nobody does
    c.take_changes()
    assert _expire(c, 3 * RETENTION) == [OffsetRecord("g", "u", 0, DELETED)]
    assert list(c.groups["g"].offsets) == [("t", 0)]
    assert service.core.groups["g"].members  # a member keeps its group


async def test_an_empty_consumer_group_loses_each_offset_then_is_deleted() -> None:
    c, service = _serving()
    service.heartbeat(_beat("a", 0), PEER)
    commit(c, "g", 7, now=0)
    assert service.heartbeat(_beat("a", -1), PEER).error == ErrorCode.NONE  # it empties
    c.take_changes()
    # kept, empty, while its offset lives: the retention after its commit
    assert _expire(c, RETENTION - 1) == []
    assert service.core.groups["g"].group_epoch == 2
    gone = _expire(c, RETENTION)
    assert gone == [OffsetRecord("g", "t", 0, DELETED), ConsumerGroupRecord("g", DELETED)]
    assert "g" not in service.core.groups
    assert "g" not in c.groups
    again = service.heartbeat(_beat("a", 0), PEER)  # a group made anew
    assert (again.error, again.member_epoch) == (ErrorCode.NONE, 1)


async def test_an_empty_consumer_group_with_no_offsets_goes_at_the_next_check() -> None:
    c, service = _serving()
    service.heartbeat(_beat("a", 0), PEER)
    _expire(c, 0)
    assert "g" in service.core.groups  # a member: kept
    service.heartbeat(_beat("a", -1), PEER)
    c.take_changes()
    assert _expire(c, 1) == [ConsumerGroupRecord("g", DELETED)]
    assert service.core.groups == {}
