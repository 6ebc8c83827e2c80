"""The core shared by ``sticky`` and ``cooperative-sticky``: plan, then build assignments."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain

from huddle.client.assignors._claims import Ownership, resolve
from huddle.client.assignors._equal import plan_equal
from huddle.client.assignors._general import plan_general
from huddle.client.assignors._layout import Layout
from huddle.client.assignors._order import member_order
from huddle.client.assignors._plan import Plan
from huddle.client.assignors._rules import CLAIM_RULES, ClaimRules
from huddle.client.assignors.base import GroupAssignment, MemberAssignment, MemberSubscription
from huddle.protocol.embedded import TopicPartition


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, MemberSubscription],
    *,
    cooperative: bool,
    rules: ClaimRules = CLAIM_RULES,
) -> GroupAssignment:
    """Balance first, then keep valid claims. ``cooperative``: partitions moving away from
    a valid owner are withheld this round and listed in the owner's ``revoked``."""
    if not subscriptions:
        return {}
    order = member_order(subscriptions)
    subs = [subscriptions[member] for member in order]
    layout = Layout(partitions_per_topic, frozenset().union(*(sub.topics for sub in subs)))
    ownership = resolve(layout, subs, rules)
    plan = _plan(layout, ownership, subs)
    return _build(order, subs, layout, ownership, plan, cooperative=cooperative, rules=rules)


def _plan(layout: Layout, ownership: Ownership, subs: list[MemberSubscription]) -> Plan:
    first = subs[0].topics
    if all(sub.topics == first for sub in subs):
        return plan_equal(layout.total, ownership)
    in_play = frozenset(layout.topics)
    wanted = [sub.topics & in_play for sub in subs]
    if all(topics == wanted[0] for topics in wanted):
        return plan_equal(layout.total, ownership)
    return plan_general(layout, ownership, wanted)


def _build(
    order: list[str],
    subs: list[MemberSubscription],
    layout: Layout,
    ownership: Ownership,
    plan: Plan,
    *,
    cooperative: bool,
    rules: ClaimRules,
) -> GroupAssignment:
    objects = layout.complete(ownership.objects)
    owner = ownership.owner
    result: GroupAssignment = {}
    for number, (member, sub) in enumerate(zip(order, subs, strict=True)):
        dealt = plan.dealt[number]
        released = plan.released[number] + ownership.stray[number]
        if cooperative:  # withheld until its claimants revoked it (``ClaimRules.dealt``)
            dealt = rules.dealt(dealt, owner)
        if not dealt and not released and ownership.intact[number]:
            partitions = sub.owned
        else:
            partitions = frozenset(map(objects.__getitem__, chain(plan.kept[number], dealt)))
        revoked: frozenset[TopicPartition] = frozenset()
        if cooperative:  # all it gives up: released, stray, contested or gone
            revoked = sub.owned - partitions
        result[member] = MemberAssignment(partitions=partitions, revoked=revoked)
    return result
