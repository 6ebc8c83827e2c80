"""The messages of a group's members: JoinGroup, SyncGroup, Heartbeat and LeaveGroup (Kafka's
classic group protocol), and OffsetCommit / OffsetFetch. Importable from
``huddle.protocol.messages`` too, which gathers them into the wire's unions.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct, field

from huddle.protocol.errors import ErrorCode
from huddle.protocol.message_fields import (
    MAX_ITEMS,
    MAX_PROTOCOLS,
    NO_GENERATION,
    GroupId,
    InstanceId,
    MemberId,
    Message,
    ProtocolName,
    Reason,
    TopicName,
)

# --- group membership -----------------------------------------------------------------


class Protocol(Struct, frozen=True, kw_only=True):
    """One embedded protocol a member supports, with its member metadata."""

    name: ProtocolName
    metadata: bytes = b""


class JoinGroupRequest(Message, tag="join_group", frozen=True, kw_only=True):
    group_id: GroupId
    member_id: MemberId = ""
    group_instance_id: InstanceId | None = None
    protocol_type: ProtocolName
    protocols: Annotated[list[Protocol], Meta(max_length=MAX_PROTOCOLS)]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1
    reason: Reason | None = None
    # A new dynamic member first gets its id in a MEMBER_ID_REQUIRED answer and joins
    # again with it (KIP-394): Kafka's JoinGroup v4+. False: it is let in at once (v0-3).
    require_known_member_id: bool = True


class JoinGroupMember(Struct, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None = None
    metadata: bytes = b""


class JoinGroupResponse(Message, tag="join_group_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list[JoinGroupMember] = field(default_factory=list)
    # How long the coordinator held the request before answering (ms, its clock): the
    # member's session was renewed that long after the request arrived, so no earlier
    # than that long after it was sent. Absent (0) from coordinators before it.
    held_ms: int = 0


class SyncGroupAssignment(Struct, frozen=True, kw_only=True):
    member_id: MemberId
    assignment: bytes = b""


class SyncGroupRequest(Message, tag="sync_group", frozen=True, kw_only=True):
    group_id: GroupId
    generation_id: int
    member_id: MemberId
    group_instance_id: InstanceId | None = None
    protocol_type: ProtocolName | None = None
    protocol_name: ProtocolName | None = None
    assignments: list[SyncGroupAssignment] = field(default_factory=list)


class SyncGroupResponse(Message, tag="sync_group_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class HeartbeatRequest(Message, tag="heartbeat", frozen=True, kw_only=True):
    group_id: GroupId
    generation_id: int
    member_id: MemberId
    group_instance_id: InstanceId | None = None


class HeartbeatResponse(Message, tag="heartbeat_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


class MemberIdentity(Struct, frozen=True, kw_only=True):
    """A member to remove: by member id, or (static members) by instance id with member id ""."""

    member_id: MemberId = ""
    group_instance_id: InstanceId | None = None
    reason: Reason | None = None


class LeaveGroupRequest(Message, tag="leave_group", frozen=True, kw_only=True):
    group_id: GroupId
    members: Annotated[list[MemberIdentity], Meta(max_length=MAX_ITEMS)]


class LeaveGroupMemberResult(Struct, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None = None
    error_code: int = ErrorCode.NONE


class LeaveGroupResponse(Message, tag="leave_group_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    members: list[LeaveGroupMemberResult] = field(default_factory=list)


# --- offsets --------------------------------------------------------------------------


class OffsetCommitPartition(Struct, frozen=True, kw_only=True):
    partition: int
    offset: int
    metadata: str | None = None


class OffsetCommitTopic(Struct, frozen=True, kw_only=True):
    name: TopicName
    partitions: list[OffsetCommitPartition]


class OffsetCommitRequest(Message, tag="offset_commit", frozen=True, kw_only=True):
    group_id: GroupId
    generation_id: int = NO_GENERATION
    member_id: MemberId = ""
    group_instance_id: InstanceId | None = None
    topics: list[OffsetCommitTopic]


class PartitionResult(Struct, frozen=True, kw_only=True):
    partition: int
    error_code: int = ErrorCode.NONE


class OffsetCommitTopicResult(Struct, frozen=True, kw_only=True):
    name: str
    partitions: list[PartitionResult]


class OffsetCommitResponse(Message, tag="offset_commit_response", frozen=True, kw_only=True):
    """Group-level errors are in ``error_code``; per-partition ones in ``topics``."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    topics: list[OffsetCommitTopicResult] = field(default_factory=list)
    # ILLEGAL_GENERATION because the coordinator holds no such group (a commit naming a
    # generation): Kafka's OffsetCommit v9+ answers that GROUP_ID_NOT_FOUND
    no_group: bool = False


class OffsetFetchTopic(Struct, frozen=True, kw_only=True):
    name: TopicName
    partitions: list[int]


class OffsetFetchRequest(Message, tag="offset_fetch", frozen=True, kw_only=True):
    group_id: GroupId
    topics: list[OffsetFetchTopic] | None = None  # None: every committed offset of the group


class FetchedOffset(Struct, frozen=True, kw_only=True):
    partition: int
    offset: int = -1  # -1: nothing committed
    metadata: str | None = None
    error_code: int = ErrorCode.NONE


class OffsetFetchTopicResult(Struct, frozen=True, kw_only=True):
    name: str
    partitions: list[FetchedOffset]


class OffsetFetchResponse(Message, tag="offset_fetch_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    topics: list[OffsetFetchTopicResult] = field(default_factory=list)
