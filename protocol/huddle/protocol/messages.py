"""The messages of the huddle wire protocol, as msgspec Structs.

Every frame body is one of two tagged unions:

* client -> coordinator: ``Handshake`` (first frame of a connection) or ``Call``
  (a correlation id and one request);
* coordinator -> client: ``HandshakeResult``, ``Reply`` (a correlation id and one
  response), or a pushed notice (``RebalanceStarted``, ``TopicMetadataChanged``,
  ``ProtocolError``).

Fields follow Kafka's classic group protocol. Timeouts are in milliseconds. Error codes are
plain integers on the wire (``ErrorCode`` numbers), so a code from a newer peer decodes.

Growing the protocol: a peer ignores fields it does not know, so a new optional field needs
no new version. A new message type does: add it to ``INTRODUCED_IN`` with the version that
brought it, and the coordinator sends it only to connections whose handshake named that
version or a later one; a client skips (and logs) a notice type it does not know.

This module holds the handshake (and SASL) frames, the notices, the envelopes (``Call``,
``Reply``) with the unions they carry, and the versioning (``INTRODUCED_IN``); the request and
response types live by family in ``huddle.protocol.group_messages`` (members: join, sync,
heartbeat, leave, offsets), ``huddle.protocol.consumer_messages`` (the consumer group
protocol's heartbeat and notice) and ``huddle.protocol.admin_messages`` (topics, groups, the
cluster), and ``Message`` with the bounds in ``huddle.protocol.message_fields``. Every one
of them is importable from here.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct, field

from huddle.protocol.admin_messages import (
    AlterTopicsRequest,
    AlterTopicsResponse,
    AssignedTopic,
    ClusterNodeInfo,
    ConsumerGroupState,
    ConsumerMemberState,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletedGroup,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    NodeLiveness,
    ShardInfo,
    TopicMetadata,
    TopicResult,
    TopicSpec,
)
from huddle.protocol.consumer_messages import (
    ConsumerAssignmentChanged,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ConsumerTopicPartitions,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.group_messages import (
    FetchedOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResult,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetCommitTopicResult,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    OffsetFetchTopicResult,
    PartitionResult,
    Protocol,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from huddle.protocol.message_fields import (
    MAX_CLIENT_ID,
    MAX_GROUP_ID,
    MAX_INCARNATION,
    MAX_INSTANCE_ID,
    MAX_ITEMS,
    MAX_LOGIN_HOLD_S,
    MAX_MEMBER_ID,
    MAX_PROTOCOL_NAME,
    MAX_PROTOCOLS,
    MAX_REASON,
    MAX_TOPIC_NAME_ON_WIRE,
    MIN_INCARNATION,
    NO_GENERATION,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    ClientId,
    GroupId,
    Incarnation,
    InstanceId,
    MemberId,
    Message,
    ProtocolName,
    Reason,
    TopicName,
)

__all__ = [
    "INTRODUCED_IN",
    "MAX_CLIENT_ID",
    "MAX_GROUP_ID",
    "MAX_INCARNATION",
    "MAX_INSTANCE_ID",
    "MAX_ITEMS",
    "MAX_LOGIN_HOLD_S",
    "MAX_MEMBER_ID",
    "MAX_PROTOCOLS",
    "MAX_PROTOCOL_NAME",
    "MAX_REASON",
    "MAX_SASL_BYTES",
    "MAX_TOPIC_NAME_ON_WIRE",
    "MIN_INCARNATION",
    "NO_GENERATION",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "AlterTopicsRequest",
    "AlterTopicsResponse",
    "AssignedTopic",
    "Call",
    "CallId",
    "ClientFrame",
    "ClientId",
    "ClusterNodeInfo",
    "ConsumerAssignmentChanged",
    "ConsumerGroupState",
    "ConsumerHeartbeatRequest",
    "ConsumerHeartbeatResponse",
    "ConsumerMemberState",
    "ConsumerTopicPartitions",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DeletedGroup",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "ErrorResponse",
    "FetchedOffset",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "GroupId",
    "Handshake",
    "HandshakeResult",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "Incarnation",
    "InstanceId",
    "JoinGroupMember",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupMemberResult",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListTopicsRequest",
    "ListTopicsResponse",
    "ListedGroup",
    "MemberId",
    "MemberIdentity",
    "Message",
    "NodeLiveness",
    "Notice",
    "OffsetCommitPartition",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetCommitTopic",
    "OffsetCommitTopicResult",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetFetchTopic",
    "OffsetFetchTopicResult",
    "PartitionResult",
    "Protocol",
    "ProtocolError",
    "ProtocolName",
    "Reason",
    "RebalanceStarted",
    "Reply",
    "Request",
    "Response",
    "SaslAuthenticate",
    "SaslAuthenticateResult",
    "ServerFrame",
    "ShardInfo",
    "SyncGroupAssignment",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "Tagged",
    "TopicMetadata",
    "TopicMetadataChanged",
    "TopicName",
    "TopicResult",
    "TopicSpec",
    "known_in",
    "unknown_to",
]


# --- handshake ------------------------------------------------------------------------


class Handshake(Message, tag="handshake", frozen=True, kw_only=True):
    version: int
    client_id: ClientId = ""
    # The SASL mechanism the client will authenticate with (``SaslAuthenticate`` frames
    # follow a successful result), or None: no SASL (a listener that requires it refuses).
    sasl_mechanism: ProtocolName | None = None
    # A random token naming one client instance, the same on every connection it makes
    # (huddle's Member: 16 bytes from ``secrets``): a group member moves to a new connection
    # only if it presents the token the member joined with. None: the client sends none (an
    # admin tool, an older client); its members move by principal and client id.
    incarnation: Incarnation | None = None


class HandshakeResult(Message, tag="handshake_result", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    version: int = PROTOCOL_VERSION
    supported_versions: list[int] = field(default_factory=lambda: list(SUPPORTED_VERSIONS))
    server: str = "huddle"
    # How long a dynamic member may be disconnected before it is removed (-1: never), so a
    # member knows when its partitions must count as lost after losing its connection.
    disconnect_grace_ms: int = -1
    # The node answering (FindCoordinator names nodes so): a client that finds its group's
    # coordinator is the node it is connected to keeps the connection, whatever address
    # (a proxy's, say) it reached it by.
    node_id: str = ""
    # The SASL mechanisms this listener takes; empty: it authenticates no one by SASL.
    sasl_mechanisms: list[str] = field(default_factory=list)
    # Who the client is by the TLS certificate it presented (mTLS: ``User:<subject>``);
    # "": it presented none (after a SASL exchange, its result names the principal).
    principal: str = ""


MAX_SASL_BYTES = 4_096  # one SASL message; SCRAM's are a few hundred bytes


class SaslAuthenticate(Message, tag="sasl_authenticate", frozen=True, kw_only=True):
    """One client message of a SASL exchange (Kafka's SaslAuthenticate), after the handshake."""

    auth_bytes: Annotated[bytes, Meta(max_length=MAX_SASL_BYTES)]


class SaslAuthenticateResult(Message, tag="sasl_authenticate_result", frozen=True, kw_only=True):
    """The coordinator's answer: its next challenge, or the end of the exchange. On success
    the last one carries the server's final message and the principal the client now is;
    on failure the coordinator closes the connection after it."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    auth_bytes: bytes = b""
    complete: bool = False
    principal: str = ""


# --- errors and notices ---------------------------------------------------------------


class ErrorResponse(Message, tag="error_response", frozen=True, kw_only=True):
    """The answer to a request the coordinator could not read or route."""

    error_code: int
    error_message: str


# --- notices: pushed by the coordinator, no correlation id ----------------------------


class RebalanceStarted(Message, tag="rebalance_started", frozen=True, kw_only=True):
    """The group left ``generation_id``: members should rejoin now, not at their next heartbeat."""

    group_id: str
    generation_id: int
    reason: str = ""


class TopicMetadataChanged(Message, tag="topic_metadata_changed", frozen=True, kw_only=True):
    topics: list[TopicMetadata]


class ProtocolError(Message, tag="protocol_error", frozen=True, kw_only=True):
    """Sent before the coordinator closes a connection whose input it cannot continue to read."""

    error_code: int
    error_message: str
    # The coordinator is stopping and keeps its groups: it removes nobody for this
    # connection's close (no disconnect grace), and the coordinator after it (restarted on
    # its data dir, or the cluster node taking its shards) loads every member with a fresh
    # session. False from one that keeps nothing (no data dir, not in a cluster).
    stopping: bool = False


# --- envelopes ------------------------------------------------------------------------

Request = (
    JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | OffsetCommitRequest
    | OffsetFetchRequest
    | CreateTopicsRequest
    | AlterTopicsRequest
    | DeleteTopicsRequest
    | ListTopicsRequest
    | DescribeGroupsRequest
    | DeleteGroupsRequest
    | ListGroupsRequest
    | FindCoordinatorRequest
    | DescribeClusterRequest
    | ConsumerHeartbeatRequest
)

Response = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | CreateTopicsResponse
    | AlterTopicsResponse
    | DeleteTopicsResponse
    | ListTopicsResponse
    | DescribeGroupsResponse
    | DeleteGroupsResponse
    | ListGroupsResponse
    | FindCoordinatorResponse
    | DescribeClusterResponse
    | ConsumerHeartbeatResponse
    | ErrorResponse
)

Notice = RebalanceStarted | TopicMetadataChanged | ProtocolError | ConsumerAssignmentChanged


class Call(Message, tag="call", frozen=True, kw_only=True):
    correlation_id: int
    request: Request


class Reply(Message, tag="reply", frozen=True, kw_only=True):
    correlation_id: int
    response: Response


class CallId(Struct, kw_only=True):
    """Reads only the correlation id of a call whose request could not be decoded."""

    correlation_id: int


ClientFrame = Handshake | SaslAuthenticate | Call
ServerFrame = (
    HandshakeResult
    | SaslAuthenticateResult
    | Reply
    | RebalanceStarted
    | TopicMetadataChanged
    | ProtocolError
    | ConsumerAssignmentChanged
)

# The protocol version that introduced a message type; absent: version 1, the first.
INTRODUCED_IN: dict[type[Message], int] = {
    ConsumerHeartbeatRequest: 2,
    ConsumerHeartbeatResponse: 2,
    ConsumerAssignmentChanged: 2,
}


def known_in(version: int, message: type[Message]) -> bool:
    """Whether a peer that handshook with ``version`` knows this message type."""
    return INTRODUCED_IN.get(message, 1) <= version


def unknown_to(version: int) -> frozenset[type[Message]]:
    """The message types a peer that handshook with ``version`` does not know (none for a
    current peer: then one empty set, shared, not one of 216 bytes per connection)."""
    return frozenset(t for t in INTRODUCED_IN if not known_in(version, t)) or _KNOWS_ALL


_KNOWS_ALL: frozenset[type[Message]] = frozenset()


class Tagged(Struct, kw_only=True):
    """Reads only the ``type`` tag of a frame body (any other fields are ignored)."""

    type: str
