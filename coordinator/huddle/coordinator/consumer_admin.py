"""Consumer-protocol (KIP-848) groups described and listed on huddle's own wire.

The server's one ``ConsumerService`` (``huddle.coordinator.consumer_service``) owns their
core, whatever wire their members heartbeat on (the Kafka listener, huddle's own). The
server hands the core's ``GroupAdmin`` that service as its ``ConsumerSource``, so ``huddle
groups list`` and ``huddle groups describe`` show these groups beside the classic ones: group type
``consumer``, state (Kafka's names: Empty, Assigning, Reconciling, Stable), group epoch,
target assignment epoch, the server assignor, and for each member its epoch, its state
(stable, unrevoked_partitions, unreleased_partitions), what it may own now, what it must
give up first, and what the target gives it. ``huddle groups delete`` (DeleteGroups, on
either wire) deletes an empty one with its committed offsets (``group_admin``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol

from huddle.coordinator.consumer import Assignment, ConsumerCoordinator, ConsumerGroup
from huddle.protocol.messages import (
    AssignedTopic,
    ConsumerGroupState,
    ConsumerMemberState,
    DescribedGroup,
    DescribedMember,
    ListedGroup,
)

CONSUMER: Final = "consumer"  # the group type, and the protocol type Kafka lists them with


class ConsumerSource(Protocol):
    """What the huddle wire's group administration reads of the consumer groups."""

    @property
    def core(self) -> ConsumerCoordinator: ...

    @property
    def clients(self) -> Mapping[tuple[str, str], tuple[str, str]]:
        """(group id, member id) -> the client id and host it last heartbeated from."""

    def delete(self, group_id: str) -> None:
        """The empty consumer group ``group_id`` goes (DeleteGroups), its deletion kept with
        the request's answer: a restart or another node does not bring it back."""


def listed(source: ConsumerSource, states: set[str] | None) -> list[ListedGroup]:
    """The consumer groups, those in ``states`` (lower-case names; None: every state)."""
    return [
        ListedGroup(
            group_id=group.group_id,
            protocol_type=CONSUMER,
            state=group.phase.value,
            group_type=CONSUMER,
        )
        for group in source.core.groups.values()
        if states is None or group.phase.value.lower() in states
    ]


def described(source: ConsumerSource, group_id: str) -> DescribedGroup | None:
    """The consumer group ``group_id`` (None: no consumer group has that id)."""
    core = source.core
    group = core.groups.get(group_id)
    if group is None:
        return None
    return DescribedGroup(
        group_id=group_id,
        state=group.phase.value,
        generation_id=group.group_epoch,
        protocol_type=CONSUMER,
        group_type=CONSUMER,
        members=[_member(source, group, member_id) for member_id in sorted(group.members)],
        consumer=ConsumerGroupState(
            group_epoch=group.group_epoch,
            target_epoch=group.target_epoch,
            assignor=group.preferred_assignor(core.config.assignors[0]),
        ),
    )


def _member(source: ConsumerSource, group: ConsumerGroup, member_id: str) -> DescribedMember:
    member = group.members[member_id]
    client_id, host = source.clients.get((group.group_id, member_id), ("", ""))
    return DescribedMember(
        member_id=member_id,
        group_instance_id=member.instance_id,
        client_id=client_id,
        client_host=host,
        consumer=ConsumerMemberState(
            member_epoch=member.member_epoch,
            state=member.state.value,
            subscribed_topics=sorted(member.subscribed_topic_names),
            subscribed_regex=member.subscribed_topic_regex,
            assigned=_topics(member.assigned),
            pending_revocation=_topics(member.pending_revocation),
            target=_topics(group.target.get(member_id, {})),
        ),
    )


def _topics(assignment: Assignment) -> list[AssignedTopic]:
    return [
        AssignedTopic(topic=topic, partitions=sorted(partitions))
        for topic, partitions in sorted(assignment.items())
        if partitions
    ]
