"""Consumer-protocol groups (KIP-848) kept across a restart, as Kafka keeps its
ConsumerGroup* records in ``__consumer_offsets``.

``ConsumerKept`` holds the last ``ConsumerGroupRecord`` of each group and the last
``ConsumerMemberRecord`` of each of its members: what the data dir's journal replays
(``apply``) and what a compaction writes again (``copy``). ``changes(group)`` says what
changed in a live group since it was last kept, as records (only members whose state or
target changed), and keeps them; a group emptied of members is kept so (its epochs, no
member), as Kafka keeps an empty consumer group; ``gone(group_id)`` the records that delete
a group (DeleteGroups, offset retention, a classic group taking its id).

``loaded_groups`` rebuilds the groups: each member at its kept epoch with its assigned and
pending-revocation partitions (and the ids of their topics) and its target, so a member
that finds the coordinator again goes on heartbeating at its epoch, with no rebalance and
nothing revoked; a topic created again meanwhile is noticed by its id, as if live. Sessions are the
caller's to start (a fresh session for every loaded member, as Kafka schedules one for
each member of a group it loads).

A cluster node keeps the same records in etcd: ``take`` serves a shard's records as the
node takes the shard over, ``drop`` forgets the groups of a shard it lost; both tell the
groups' server (``serving``, the server's ``ConsumerService``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Protocol

from huddle.coordinator.consumer.group import ConsumerGroup
from huddle.coordinator.consumer.member import ClassicMeta, ConsumerMember, MemberState
from huddle.coordinator.consumer.messages import Assignment
from huddle.coordinator.storage.records import (
    DELETED,
    ConsumerGroupRecord,
    ConsumerMemberRecord,
    Record,
)

_Seen = tuple[ConsumerMember, Assignment | None]  # a member and its target, as last kept
ConsumerRecord = ConsumerGroupRecord | ConsumerMemberRecord


class ConsumerServing(Protocol):
    """Who serves the kept groups (the server's ``ConsumerService``)."""

    def load_kept(self, group_ids: Iterable[str]) -> None:
        """Serve these kept groups (a cluster shard taken over)."""

    def unload(self, doomed: Callable[[str], bool]) -> None:
        """Stop serving the groups ``doomed`` names (their shard left this node)."""


class ConsumerKept:
    """The kept records of every consumer-protocol group."""

    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupRecord] = {}
        self.members: dict[str, dict[str, ConsumerMemberRecord]] = {}
        # what the records were made from (identity: a member is replaced when it changes)
        self._seen: dict[str, dict[str, _Seen]] = {}
        self.serving: ConsumerServing | None = None
        # whether changes are kept (a data dir or a cluster): without, ``changes`` is none
        self.enabled = False

    def take(self, records: Iterable[ConsumerRecord]) -> None:
        """A cluster shard's records, read from etcd: its groups are served from now."""
        group_ids: set[str] = set()
        for record in records:
            self.apply(record)
            group_ids.add(record.group_id)
        if self.serving is not None:
            self.serving.load_kept(sorted(g for g in group_ids if g in self.groups))

    def drop(self, doomed: Callable[[str], bool]) -> None:
        """The groups ``doomed`` names are no longer this node's: forgotten, unserved."""
        for group_id in [g for g in {*self.groups, *self.members} if doomed(g)]:
            self.groups.pop(group_id, None)
            self.members.pop(group_id, None)
            self._seen.pop(group_id, None)
        if self.serving is not None:
            self.serving.unload(doomed)

    def apply(self, record: ConsumerRecord) -> None:
        """A replayed record: the last one of each group and member counts."""
        group_id = record.group_id
        if isinstance(record, ConsumerGroupRecord):
            if record.group_epoch == DELETED:
                self.groups.pop(group_id, None)
                self.members.pop(group_id, None)
                self._seen.pop(group_id, None)
            else:
                self.groups[group_id] = record
            return
        members = self.members.setdefault(group_id, {})
        if record.member_epoch == DELETED:
            members.pop(record.member_id, None)
            self._seen.get(group_id, {}).pop(record.member_id, None)
        else:
            members[record.member_id] = record

    def size(self) -> int:
        return len(self.groups) + sum(len(m) for m in self.members.values())

    def copy(self) -> list[Record]:
        """Every kept record, a group's record before its members' (for a snapshot)."""
        out: list[Record] = []
        for group_id, record in sorted(self.groups.items()):
            out.append(record)
            out.extend(self.members.get(group_id, {}).values())
        return out

    def changes(self, group: ConsumerGroup, only: str | None = None) -> list[Record]:
        """The records of what changed in ``group`` since it was last kept (none: the
        same), now kept. A group emptied of members is kept (its epochs, with no member
        records), as Kafka keeps an empty consumer group until it is deleted (DeleteGroups,
        or offset retention: ``gone``). ``only``: the one member a
        heartbeat may have changed, when the group's epochs and its other members did not
        (then only it is looked at, not every member)."""
        group_id = group.group_id
        if not self.enabled:
            return []
        out: list[ConsumerRecord] = []
        record = ConsumerGroupRecord(
            group_id,
            group.group_epoch,
            group.target_epoch,
            dict(group.subscribed_partitions),
            dict(group.subscribed_ids),
        )
        seen = self._seen.setdefault(group_id, {})
        members: Iterable[str] = group.members
        if self.groups.get(group_id) != record:
            out.append(record)
        elif only is not None and only in seen and len(seen) == len(group.members):
            members = (only,) if only in group.members else ()
        if members is group.members:
            for member_id in [m for m in seen if m not in group.members]:
                del seen[member_id]
                out.append(ConsumerMemberRecord(group_id, member_id, DELETED))
        for member_id in members:
            member = group.members[member_id]
            target = group.target.get(member_id)
            last = seen.get(member_id)
            if last is not None and last[0] is member and last[1] is target:
                continue
            seen[member_id] = (member, target)
            out.append(member_record(group_id, member, target))
        for change in out:
            self.apply(change)
        return list(out)

    def gone(self, group_id: str) -> list[Record]:
        """The records that delete ``group_id``: each member's, then the group's (none: not
        kept). A cluster deletes each one's key."""
        if group_id not in self.groups and group_id not in self.members:
            return []
        out: list[Record] = [
            ConsumerMemberRecord(group_id, m, DELETED) for m in self.members.get(group_id, {})
        ]
        out.append(ConsumerGroupRecord(group_id, DELETED))
        self.apply(ConsumerGroupRecord(group_id, DELETED))
        return out

    def loaded_groups(self, group_ids: Iterable[str] | None = None) -> Iterator[ConsumerGroup]:
        """The kept groups (``group_ids``; None: all), rebuilt (``loaded_group``); each is
        now seen as kept."""
        for group_id in list(self.groups) if group_ids is None else group_ids:
            record = self.groups[group_id]
            group = loaded_group(record, self.members.get(group_id, {}).values())
            self._seen[group_id] = {
                m.member_id: (m, group.target.get(m.member_id)) for m in group.members.values()
            }
            yield group


def member_record(
    group_id: str, member: ConsumerMember, target: Assignment | None
) -> ConsumerMemberRecord:
    classic = member.classic
    return ConsumerMemberRecord(
        group_id=group_id,
        **_as_is(member),
        state=member.state.value,
        subscribed_topic_names=sorted(member.subscribed_topic_names),
        assigned=_lists(member.assigned),
        pending_revocation=_lists(member.pending_revocation),
        target=None if target is None else _lists(target),
        classic_session_timeout_ms=None if classic is None else classic.session_timeout_ms,
        classic_protocols=None if classic is None else list(classic.protocols),
        topic_ids=dict(sorted(member.topic_ids.items())),
    )


def loaded_group(
    record: ConsumerGroupRecord, members: Iterable[ConsumerMemberRecord]
) -> ConsumerGroup:
    """The group its records keep: its epochs, its members at their epochs, their targets."""
    group = ConsumerGroup(record.group_id)
    group.group_epoch = record.group_epoch
    group.target_epoch = record.target_epoch
    group.subscribed_partitions = dict(record.subscribed_partitions)
    group.subscribed_ids = dict(record.subscribed_ids)
    for kept in members:
        group.put(
            ConsumerMember(
                **_as_is(kept),
                subscribed_topic_names=frozenset(kept.subscribed_topic_names),
                state=MemberState(kept.state),
                assigned=_sets(kept.assigned),
                pending_revocation=_sets(kept.pending_revocation),
                classic=_classic(kept),
                topic_ids=dict(kept.topic_ids),
            )
        )
        if kept.target is not None:
            group.target[kept.member_id] = _sets(kept.target)
    return group


# the fields a member record keeps as the member holds them (the others are converted)
_AS_IS: Final = (
    "member_id",
    "member_epoch",
    "previous_member_epoch",
    "instance_id",
    "rack_id",
    "rebalance_timeout_ms",
    "subscribed_topic_regex",
    "server_assignor",
)


def _as_is(source: ConsumerMember | ConsumerMemberRecord) -> dict[str, Any]:
    return {name: getattr(source, name) for name in _AS_IS}


def _classic(kept: ConsumerMemberRecord) -> ClassicMeta | None:
    if kept.classic_session_timeout_ms is None or kept.classic_protocols is None:
        return None
    protocols = tuple((name, metadata) for name, metadata in kept.classic_protocols)
    return ClassicMeta(kept.classic_session_timeout_ms, protocols)


def _lists(assignment: Assignment) -> dict[str, list[int]]:
    return {topic: sorted(parts) for topic, parts in sorted(assignment.items()) if parts}


def _sets(assignment: Mapping[str, list[int]]) -> dict[str, frozenset[int]]:
    return {topic: frozenset(parts) for topic, parts in assignment.items()}
