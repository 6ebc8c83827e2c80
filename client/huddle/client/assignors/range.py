"""Kafka's RangeAssignor: each topic split into contiguous ranges over its subscribers."""

from __future__ import annotations

from collections.abc import Mapping

from huddle.client.assignors._order import member_order
from huddle.client.assignors.base import (
    ASSIGNORS,
    Assignor,
    GroupAssignment,
    MemberAssignment,
    MemberSubscription,
)
from huddle.protocol.embedded import TopicPartition


@ASSIGNORS.register
class RangeAssignor(Assignor):
    """Per topic, its subscribers in member order each take a contiguous range of
    partitions; the first ``partitions % subscribers`` take one more than the rest."""

    name = "range"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        order = member_order(subscriptions)
        chosen: dict[str, list[TopicPartition]] = {member: [] for member in order}
        topics = {topic for sub in subscriptions.values() for topic in sub.topics}
        for topic in sorted(topics):
            count = partitions_per_topic.get(topic, 0)
            if count <= 0:
                continue
            takers = [member for member in order if topic in subscriptions[member].topics]
            share, extra = divmod(count, len(takers))
            start = 0
            for rank, member in enumerate(takers):
                end = start + share + (1 if rank < extra else 0)
                chosen[member].extend(TopicPartition(topic, p) for p in range(start, end))
                start = end
        return {
            member: MemberAssignment(partitions=frozenset(tps)) for member, tps in chosen.items()
        }
