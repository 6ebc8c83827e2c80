"""Group administration: DescribeGroups, ListGroups and DeleteGroups (Kafka's admin
requests on groups). They read the groups as they are and never change a membership;
DeleteGroups removes an Empty group (classic, or consumer-protocol) with its offsets, kept
as deletions.
"""

from __future__ import annotations

import structlog

from huddle.coordinator import consumer_admin
from huddle.coordinator.consumer import GroupPhase
from huddle.coordinator.consumer_admin import ConsumerSource
from huddle.coordinator.group import Group
from huddle.coordinator.sessions import Sessions
from huddle.coordinator.state import STATES_BY_NAME, GroupState
from huddle.coordinator.storage.records import Record, group_deleted, offset_deleted
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    DeletedGroup,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)

log = structlog.get_logger("huddle.core")

E = ErrorCode


class GroupAdmin:
    def __init__(self, sessions: Sessions, changes: list[Record]) -> None:
        self.sessions = sessions
        self.changes = changes  # what to keep across restarts (see coordinator.storage.records)
        # the consumer-protocol groups (the server's ConsumerService): described and
        # listed beside the classic ones (huddle.coordinator.consumer_admin)
        self.consumer: ConsumerSource | None = None

    def forget_group(self, group: Group) -> None:
        """The group and its offsets go, and stay gone: deletions are kept as records.
        Member ids handed out and not yet used go with it (a JoinGroup with one later is
        answered UNKNOWN_MEMBER_ID, as for any member id the group does not know)."""
        group_id = group.group_id
        for member_id in list(group.pending):
            self.sessions.drop_pending(group, member_id, "the group was deleted")
        for topic, partition in sorted(group.offsets):
            self.changes.append(offset_deleted(group_id, topic, partition))
        group.offsets.clear()
        if self.sessions.keep_groups:
            self.changes.append(group_deleted(group_id))
            group.kept = None  # deleted already
        self.sessions.collect(group)

    def delete_groups(self, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
        """Kafka's DeleteGroups: an Empty group goes, with its committed offsets (kept as
        deletions: a restart or another node does not bring them back), even while a member
        id handed out by MEMBER_ID_REQUIRED waits to be used (Kafka moves it to Dead). An
        empty consumer-protocol group goes the same way, its records with it (Kafka's
        ``ConsumerGroup.validateDeleteGroup``: one with members is NON_EMPTY_GROUP)."""
        results = []
        for group_id in dict.fromkeys(request.groups):
            group = self.sessions.groups.get(group_id)
            members = self._consumer_members(group_id)
            if members:  # a consumer group's offsets stay while it has members (Kafka's)
                code = E.NON_EMPTY_GROUP
                message = (
                    f"consumer group {group_id!r} has {members} members: only an empty group goes"
                )
            elif members == 0 and _holds_offsets_only(group):  # an empty consumer group
                assert self.consumer is not None
                self.consumer.delete(group_id)
                if group is not None:
                    self.forget_group(group)
                code, message = E.NONE, None
            elif group is None or group.is_(GroupState.DEAD):
                code, message = E.GROUP_ID_NOT_FOUND, f"no group {group_id!r}"
            elif group.members or not group.is_(GroupState.EMPTY):
                code = E.NON_EMPTY_GROUP
                message = f"group {group_id!r} has {group.size} members: only an empty group goes"
            else:
                self.forget_group(group)
                log.info("group_deleted", group_id=group_id)
                code, message = E.NONE, None
            results.append(DeletedGroup(group_id=group_id, error_code=code, error_message=message))
        return DeleteGroupsResponse(results=results)

    def describe(self, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
        described = []
        for group_id in dict.fromkeys(request.groups):  # each group once
            group = self.sessions.groups.get(group_id)
            consumer = self._consumer_group(group_id) if _holds_offsets_only(group) else None
            if consumer is not None:
                described.append(consumer)
                continue
            if group is None:
                described.append(
                    DescribedGroup(
                        group_id=group_id,
                        error_code=E.GROUP_ID_NOT_FOUND,
                        error_message=f"no group {group_id!r}",
                        state=GroupState.DEAD.value,
                    )
                )
                continue
            stable = group.state is GroupState.STABLE
            name = group.protocol_name
            members = [
                DescribedMember(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.host,
                    metadata=m.metadata_for(name) if name in m.protocol_names else b"",
                    assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            ]
            described.append(
                DescribedGroup(
                    group_id=group_id,
                    state=group.state.value,
                    generation_id=group.generation,
                    protocol_type=group.protocol_type or "",
                    protocol_name=name or "",
                    leader=group.leader or "",
                    members=members,
                )
            )
        return DescribeGroupsResponse(groups=described)

    def list_groups(self, request: ListGroupsRequest) -> ListGroupsResponse:
        wanted: set[GroupState] | None = None
        asked: set[str] | None = None
        if request.states is not None:
            asked = {s.lower() for s in request.states}
            unknown = [s for s in request.states if s.lower() not in _KNOWN_STATES]
            if unknown:
                return ListGroupsResponse(
                    error_code=E.INVALID_REQUEST,
                    error_message=f"unknown group states {unknown}; known: "
                    + ", ".join(dict.fromkeys(_KNOWN_STATES.values())),
                )
            wanted = {STATES_BY_NAME[s] for s in asked if s in STATES_BY_NAME}
        consumer = self.consumer.core.groups if self.consumer is not None else {}
        groups = [
            ListedGroup(
                group_id=g.group_id, protocol_type=g.protocol_type or "", state=g.state.value
            )
            for g in self.sessions.groups.values()
            if (wanted is None or g.state in wanted)
            and not (g.group_id in consumer and _holds_offsets_only(g))
        ]
        if self.consumer is not None:
            groups += consumer_admin.listed(self.consumer, asked)
        return ListGroupsResponse(groups=sorted(groups, key=lambda g: g.group_id))

    def _consumer_members(self, group_id: str) -> int | None:
        """How many members the consumer group ``group_id`` has (None: no such group)."""
        if self.consumer is None:
            return None
        group = self.consumer.core.groups.get(group_id)
        return None if group is None else len(group.members)

    def _consumer_group(self, group_id: str) -> DescribedGroup | None:
        if self.consumer is None:
            return None
        return consumer_admin.described(self.consumer, group_id)


def _holds_offsets_only(group: Group | None) -> bool:
    """No classic group, or an Empty one without members: a consumer group of that id (whose
    commits keep its offsets in the classic core) is shown in its place."""
    return group is None or (not group.members and group.is_(GroupState.EMPTY))


# every state name a group of either protocol has (lower case -> as shown)
_KNOWN_STATES: dict[str, str] = {
    **{s.value.lower(): s.value for s in GroupState},
    **{p.value.lower(): p.value for p in GroupPhase},
}
