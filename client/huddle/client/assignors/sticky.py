"""Sticky assignors: balanced first, then as close as possible to what members owned."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from huddle.client.assignors._sticky import sticky_assign
from huddle.client.assignors.base import (
    ASSIGNORS,
    Assignor,
    GroupAssignment,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from huddle.protocol.consumer_protocol import (
    NO_GENERATION,
    read_sticky_user_data,
    write_sticky_user_data,
)
from huddle.protocol.embedded import EmbeddedSchemaError, TopicPartition, grouped


@ASSIGNORS.register
class StickyAssignor(Assignor):
    """Kafka's StickyAssignor for the eager protocol. Members revoke everything before
    joining but still report what they owned (``owned``, ``generation``): each member gets
    its balanced share, its previous partitions first.

    Kafka's eager members report nothing owned in the subscription: Kafka's StickyAssignor
    keeps a member's previous assignment and its generation in the user data
    (StickyAssignorUserData). This one writes that user data too, and reads it from a member
    whose subscription claims nothing, so the group stays sticky whichever kind leads."""

    name = "sticky"

    def __init__(self) -> None:
        self._generation = NO_GENERATION  # of the last assignment this member received

    def subscription_user_data(
        self, topics: frozenset[str], owned: frozenset[TopicPartition]
    ) -> bytes:
        if not owned:
            return b""
        previous = [(t.topic, t.partitions) for t in grouped(owned)]
        return write_sticky_user_data(previous, self._generation)

    def on_assignment(self, assignment: MemberAssignment, generation: int) -> None:
        self._generation = generation

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        claims = {m: _with_user_data_claim(s) for m, s in subscriptions.items()}
        return sticky_assign(
            partitions_per_topic, claims, cooperative=False, rules=self.claim_rules
        )


def _with_user_data_claim(sub: MemberSubscription) -> MemberSubscription:
    """``sub``, with what its StickyAssignorUserData says it owned if it claims nothing
    else (a Kafka member's; user data that is not one is left alone)."""
    if sub.owned or not sub.user_data:
        return sub
    try:
        previous, generation = read_sticky_user_data(sub.user_data)
    except EmbeddedSchemaError:
        return sub
    owned = frozenset(TopicPartition(t, p) for t, ps in previous for p in ps)
    return dataclasses.replace(sub, owned=owned, generation=generation)


@ASSIGNORS.register
class CooperativeStickyAssignor(Assignor):
    """Kafka's CooperativeStickyAssignor: the sticky target, except that a partition
    moving away from its valid owner goes to nobody this round (so does one its owner no
    longer subscribes to). Its owner finds it in ``revoked``, gives it up and rejoins; the
    follow-up round hands it over. Partitions without a valid owner are assigned at once.
    Members of a group on the eager protocol revoke everything and report nothing owned,
    so then every partition is assigned at once."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        return sticky_assign(
            partitions_per_topic, subscriptions, cooperative=True, rules=self.claim_rules
        )
