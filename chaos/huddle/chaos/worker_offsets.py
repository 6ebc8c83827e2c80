"""Where a chaos member process commits and reads its offsets.

A classic member commits through its ``Member`` (``MemberOffsets``: fenced by its
generation). huddle's consumer-protocol member (``Member(group_protocol="consumer")``) has
no ``commit`` yet: ``ConsumerOffsets`` commits on a connection of its own, as an admin tool
does (no generation, no member id, accepted while no classic member is in the group: a
consumer group's id has none), and only the partitions the member owns when it commits.
The coordinator does not check a member epoch there, so a member that was paused past its
session (the ``zombie`` scenario) is held back only by that check of its own; the
report's ``commit_backwards`` check is what shows it if it was not enough.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from huddle.client.connection import Connection
from huddle.client.member import Member
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode, raise_for
from huddle.protocol.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
)

REQUEST_TIMEOUT_S = 10.0


class Offsets(Protocol):
    async def commit(self, positions: Mapping[TopicPartition, int]) -> None: ...

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> Mapping[TopicPartition, int | None]: ...


class MemberOffsets:
    """The classic member's own commits and fetches."""

    def __init__(self, member: Member) -> None:
        self.member = member

    async def commit(self, positions: Mapping[TopicPartition, int]) -> None:
        await self.member.commit(dict(positions))

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> Mapping[TopicPartition, int | None]:
        return await self.member.committed(partitions)


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for tp in sorted(tps):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return topics


class ConsumerOffsets:
    """A consumer-protocol member's commits and fetches, on ``conn`` (see the module)."""

    def __init__(self, conn: Connection, group_id: str, member: Member) -> None:
        self.conn = conn
        self.group_id = group_id
        self.member = member

    async def commit(self, positions: Mapping[TopicPartition, int]) -> None:
        owned = self.member.assignment
        kept = {tp: offset for tp, offset in positions.items() if tp in owned}
        if len(kept) < len(positions):
            raise_for(
                ErrorCode.FENCED_MEMBER_EPOCH,
                "the member no longer owns some of these partitions",
            )
        request = OffsetCommitRequest(
            group_id=self.group_id,
            topics=[
                OffsetCommitTopic(
                    name=topic,
                    partitions=[
                        OffsetCommitPartition(partition=p, offset=kept[TopicPartition(topic, p)])
                        for p in partitions
                    ],
                )
                for topic, partitions in _by_topic(kept).items()
            ],
        )
        answer = await self.conn.call(request, OffsetCommitResponse, timeout=REQUEST_TIMEOUT_S)
        for topic in answer.topics:
            for p in topic.partitions:
                raise_for(p.error_code, f"{topic.name}-{p.partition}")

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> Mapping[TopicPartition, int | None]:
        request = OffsetFetchRequest(
            group_id=self.group_id,
            topics=[
                OffsetFetchTopic(name=topic, partitions=ps)
                for topic, ps in _by_topic(partitions).items()
            ],
        )
        answer = await self.conn.call(request, OffsetFetchResponse, timeout=REQUEST_TIMEOUT_S)
        return {
            TopicPartition(t.name, p.partition): p.offset if p.offset >= 0 else None
            for t in answer.topics
            for p in t.partitions
        }
