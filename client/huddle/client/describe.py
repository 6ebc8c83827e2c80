"""A group as a person (or a test) wants to read it: the embedded protocol decoded."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from huddle.protocol.embedded import (
    EmbeddedSchemaError,
    TopicPartition,
    decode_assignment,
    decode_subscription,
)
from huddle.protocol.messages import AssignedTopic, DescribedGroup, DescribedMember


class MemberView(msgspec.Struct, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    topics: list[str]  # its subscription ([] if unreadable)
    # What it owns now: its part of the group's current assignment (the coordinator shows
    # assignments of a Stable group only: [] while the group rebalances).
    owned: list[TopicPartition]
    claimed: list[TopicPartition]  # what its last JoinGroup said it owned
    readable: bool = True  # False: the metadata is not huddle's embedded protocol
    # a consumer-protocol (KIP-848) member's: its epoch, its state (stable,
    # unrevoked_partitions, unreleased_partitions), what it must give up before it gets
    # more, and what the group's target assignment gives it (None / []: a classic member)
    member_epoch: int | None = None
    member_state: str | None = None
    subscribed_regex: str | None = None
    pending_revocation: list[TopicPartition] = msgspec.field(default_factory=list)
    target: list[TopicPartition] = msgspec.field(default_factory=list)


class GroupView(msgspec.Struct, frozen=True, kw_only=True):
    group_id: str
    state: str
    generation: int
    protocol_type: str
    protocol: str
    leader: str
    members: list[MemberView]
    group_type: str = "classic"  # "consumer": a consumer-protocol (KIP-848) group
    # a consumer group's epochs and server assignor (None: a classic group)
    group_epoch: int | None = None
    target_epoch: int | None = None
    assignor: str | None = None


def view(group: DescribedGroup) -> GroupView:
    if group.consumer is not None:
        return _consumer_view(group)
    members = []
    for m in group.members:
        try:
            sub = decode_subscription(m.metadata) if m.metadata else None
            assigned = decode_assignment(m.assignment).partitions
            readable = True
        except EmbeddedSchemaError:
            sub, assigned, readable = None, frozenset(), False
        members.append(
            MemberView(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                topics=list(sub.topics) if sub else [],
                owned=sorted(assigned),
                claimed=sorted(sub.owned) if sub else [],
                readable=readable,
            )
        )
    return GroupView(
        group_id=group.group_id,
        state=group.state,
        generation=group.generation_id,
        protocol_type=group.protocol_type,
        protocol=group.protocol_name,
        leader=group.leader,
        members=members,
    )


def _consumer_view(group: DescribedGroup) -> GroupView:
    state = group.consumer
    assert state is not None
    return GroupView(
        group_id=group.group_id,
        state=group.state,
        generation=group.generation_id,
        protocol_type=group.protocol_type,
        protocol="",
        leader="",
        members=[_consumer_member(m) for m in group.members],
        group_type=group.group_type,
        group_epoch=state.group_epoch,
        target_epoch=state.target_epoch,
        assignor=state.assignor,
    )


def _consumer_member(m: DescribedMember) -> MemberView:
    c = m.consumer
    who: dict[str, Any] = {
        "member_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
    }
    if c is None:  # a classic member in a consumer group: not served yet
        return MemberView(**who, topics=[], owned=[], claimed=[], readable=False)
    return MemberView(
        **who,
        topics=c.subscribed_topics,
        owned=_partitions(c.assigned),
        claimed=[],
        member_epoch=c.member_epoch,
        member_state=c.state,
        subscribed_regex=c.subscribed_regex,
        pending_revocation=_partitions(c.pending_revocation),
        target=_partitions(c.target),
    )


def _partitions(topics: list[AssignedTopic]) -> list[TopicPartition]:
    return sorted(TopicPartition(t.topic, p) for t in topics for p in t.partitions)


def compact(partitions: Iterable[TopicPartition]) -> str:
    """``orders:0-3,7 payments:1`` — partitions per topic, runs folded into ranges."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = []
    for topic, numbers in by_topic.items():
        runs: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        parts.append(f"{topic}:{','.join(runs)}")
    return " ".join(parts) or "-"
