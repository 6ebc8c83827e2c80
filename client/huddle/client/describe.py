"""A group as a person (or a test) wants to read it: the embedded protocol decoded."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from huddle.protocol.embedded import (
    EmbeddedSchemaError,
    TopicPartition,
    decode_assignment,
    decode_subscription,
)
from huddle.protocol.messages import DescribedGroup


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


class GroupView(msgspec.Struct, frozen=True, kw_only=True):
    group_id: str
    state: str
    generation: int
    protocol_type: str
    protocol: str
    leader: str
    members: list[MemberView]


def view(group: DescribedGroup) -> GroupView:
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
