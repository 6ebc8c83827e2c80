"""Sticky assignors: balanced first, then as close as possible to what members owned."""

from __future__ import annotations

from collections.abc import Mapping

from huddle.client.assignors._sticky import sticky_assign
from huddle.client.assignors.base import (
    ASSIGNORS,
    Assignor,
    GroupAssignment,
    MemberSubscription,
    RebalanceProtocol,
)


@ASSIGNORS.register
class StickyAssignor(Assignor):
    """Kafka's StickyAssignor for the eager protocol. Members revoke everything before
    joining but still report what they owned (``owned``, ``generation``), so it needs no
    user data: each member gets its balanced share, its previous partitions first."""

    name = "sticky"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        return sticky_assign(
            partitions_per_topic, subscriptions, cooperative=False, rules=self.claim_rules
        )


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
