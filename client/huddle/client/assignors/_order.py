"""The order in which assignors visit members: Kafka's ``MemberInfo`` order."""

from __future__ import annotations

from collections.abc import Mapping

from huddle.client.assignors.base import MemberSubscription


def member_order(subscriptions: Mapping[str, MemberSubscription]) -> list[str]:
    """Static members first, by group instance id, then dynamic members by member id.

    A restarted static member comes back with a new member id but the same instance id,
    so ordering by instance id keeps its place, and with it the partitions that
    order-based assignors (range, roundrobin) give it.
    """

    def key(member_id: str) -> tuple[int, str, str]:
        instance = subscriptions[member_id].group_instance_id
        if instance is None:
            return (1, member_id, "")
        return (0, instance, member_id)

    return sorted(subscriptions, key=key)
