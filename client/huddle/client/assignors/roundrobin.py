"""Kafka's RoundRobinAssignor: every partition dealt in turn over the members."""

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
class RoundRobinAssignor(Assignor):
    """All partitions of all subscribed topics, sorted by (topic, partition), go one at a
    time to the next member in a circle (member order), skipping members that do not
    subscribe to the partition's topic. The circle is not restarted per topic."""

    name = "roundrobin"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        order = member_order(subscriptions)
        chosen: dict[str, list[TopicPartition]] = {member: [] for member in order}
        topics = {topic for sub in subscriptions.values() for topic in sub.topics}
        turn = 0
        for topic in sorted(topics):
            count = partitions_per_topic.get(topic, 0)
            if count <= 0:
                continue
            # Someone subscribes to every topic in ``topics``, so the search always ends.
            for partition in range(count):
                while topic not in subscriptions[order[turn]].topics:
                    turn = (turn + 1) % len(order)
                chosen[order[turn]].append(TopicPartition(topic, partition))
                turn = (turn + 1) % len(order)
        return {
            member: MemberAssignment(partitions=frozenset(tps)) for member, tps in chosen.items()
        }
