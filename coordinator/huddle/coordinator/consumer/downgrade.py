"""The downgrade of a mixed group: a consumer group whose last consumer-protocol member goes
(leaves with epoch -1, or is fenced: its session or its rebalance timeout ran out) while
its other members are all classic becomes a classic group again, as Kafka 4.0 does
(``GroupMetadataManager.validateOnlineDowngradeWithFencedMember`` and
``convertToClassicGroup``, ``ClassicGroup.fromConsumerGroup``). Sans-IO: plain values.

``downgrade`` says whether the member's going downgrades the group and, if so, what the
classic group is: Stable at the consumer group's epoch before the member went (the epoch
its reconciled classic members are at, so their next Heartbeat is REBALANCE_IN_PROGRESS,
not ILLEGAL_GENERATION), each remaining member with its session timeout, rebalance timeout,
the protocols it joined with, and what it owns now as its assignment. The caller (the
server's classic coordinator) then starts a rebalance of it at once, as Kafka does: each
member rejoins with what it owns in its subscription (a cooperative member keeps its
partitions meanwhile; an eager one gives them up), and the group's leader assigns again.

So is one where a classic static member takes the place of the last consumer-protocol
member, which had left for now (epoch -2) under the same instance id (``downgrade_replaced``;
Kafka keeps that classic group Stable, the joining member taking the leaving one's
assignment; huddle rebalances it as after a departure).

Not downgraded, as in Kafka: under a policy that does not downgrade (``upgrade``,
``disabled``); when nobody is left (the group is empty, and a JoinGroup then takes its id
as a fresh classic group); when more members are left than a classic group may hold; when
a classic member goes (only a consumer-protocol member's going downgrades). Nor, as a
guard, when the classic members share no protocol (a classic group must choose one; a
JoinGroup that would make it so is refused INCONSISTENT_GROUP_PROTOCOL).
"""

from __future__ import annotations

from huddle.coordinator.consumer.group import ConsumerGroup
from huddle.coordinator.consumer.member import ConsumerMember
from huddle.coordinator.consumer.messages import (
    ClassicGroupSnapshot,
    ClassicSnapshot,
    ConsumerGroupConfig,
    downgrades,
)
from huddle.protocol.consumer_protocol import KafkaAssignment, Partitions, write_assignment

_ASSIGNMENT_VERSION = 3  # the ConsumerProtocolAssignment version written, as classic.sync's


def downgrade(
    group: ConsumerGroup, leaving_id: str, config: ConsumerGroupConfig
) -> ClassicGroupSnapshot | None:
    """The classic group ``group`` becomes when member ``leaving_id`` goes, or None: it
    stays a consumer group."""
    leaving = group.members.get(leaving_id)
    if leaving is None or leaving.classic is not None:
        return None
    return _classic_group(
        group, [m for m in group.members.values() if m.member_id != leaving_id], config
    )


def downgrade_replaced(
    group: ConsumerGroup, config: ConsumerGroupConfig
) -> ClassicGroupSnapshot | None:
    """The classic group ``group`` becomes now that a classic static member took the place
    of its last consumer-protocol member (Kafka's
    ``validateOnlineDowngradeWithReplacedMemberId``), or None."""
    return _classic_group(group, list(group.members.values()), config)


def _classic_group(
    group: ConsumerGroup, rest: list[ConsumerMember], config: ConsumerGroupConfig
) -> ClassicGroupSnapshot | None:
    if not rest or any(m.classic is None for m in rest):
        return None
    if not downgrades(config.migration_policy):
        return None
    if config.classic_max_size and len(rest) > config.classic_max_size:
        return None
    common = set.intersection(
        *({name for name, _ in m.classic.protocols} for m in rest if m.classic)
    )
    if not common:  # (a JoinGroup to a consumer group is refused this: see consumer.classic)
        return None
    return ClassicGroupSnapshot(group.group_epoch, tuple(_classic(m) for m in rest))


def _classic(member: ConsumerMember) -> ClassicSnapshot:
    classic = member.classic
    assert classic is not None
    owned: dict[str, set[int]] = {}
    for assignment in (member.assigned, member.pending_revocation):
        for topic, numbers in assignment.items():
            owned.setdefault(topic, set()).update(numbers)
    partitions: Partitions = [(t, sorted(ps)) for t, ps in sorted(owned.items()) if ps]
    return ClassicSnapshot(
        member.member_id,
        member.instance_id,
        classic.session_timeout_ms,
        member.rebalance_timeout_ms
        if member.rebalance_timeout_ms > 0
        else classic.session_timeout_ms,
        classic.protocols,
        write_assignment(KafkaAssignment(_ASSIGNMENT_VERSION, partitions)),
    )
