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
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct, field

from huddle.protocol.errors import ErrorCode

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
NO_GENERATION = -1

# Bounds on the names and ids a client sends (a frame over them is INVALID_REQUEST, naming
# the field). Kafka's own: 249 characters for topic names and group instance ids; the others
# are bounded so that an id copied into member ids, answers and log lines stays small.
MAX_GROUP_ID = 255
MAX_CLIENT_ID = 255
MAX_MEMBER_ID = 512  # generated ones are the client id, "-", and a UUID
MAX_INSTANCE_ID = 249
MAX_PROTOCOL_NAME = 255  # protocol types and embedded protocol names
MAX_REASON = 255
MAX_TOPIC_NAME_ON_WIRE = 1_024  # a topic name over 249 is refused per topic, saying why
MIN_INCARNATION, MAX_INCARNATION = 16, 64  # bytes of a Handshake's incarnation token
# The longest a coordinator holds back its answer to a SASL login (a success's too) after
# failed logins from the client's address group: a client logging in waits longer for it.
MAX_LOGIN_HOLD_S = 5.0

GroupId = Annotated[str, Meta(max_length=MAX_GROUP_ID)]
ClientId = Annotated[str, Meta(max_length=MAX_CLIENT_ID)]
MemberId = Annotated[str, Meta(max_length=MAX_MEMBER_ID)]
InstanceId = Annotated[str, Meta(max_length=MAX_INSTANCE_ID)]
ProtocolName = Annotated[str, Meta(max_length=MAX_PROTOCOL_NAME)]
Reason = Annotated[str, Meta(max_length=MAX_REASON)]
TopicName = Annotated[str, Meta(max_length=MAX_TOPIC_NAME_ON_WIRE)]
Incarnation = Annotated[bytes, Meta(min_length=MIN_INCARNATION, max_length=MAX_INCARNATION)]
MAX_ITEMS = 1_000  # topics, groups or members one admin or leave request may name
MAX_PROTOCOLS = 64  # embedded protocols one JoinGroup may offer


class Message(Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every tagged message; the tag is the snake_case message name."""


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


# --- topics ---------------------------------------------------------------------------


class TopicSpec(Struct, frozen=True, kw_only=True):
    name: TopicName
    partitions: int


class TopicResult(Struct, frozen=True, kw_only=True):
    name: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


class CreateTopicsRequest(Message, tag="create_topics", frozen=True, kw_only=True):
    topics: Annotated[list[TopicSpec], Meta(max_length=MAX_ITEMS)]


class CreateTopicsResponse(Message, tag="create_topics_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    topics: list[TopicResult] = field(default_factory=list)


class AlterTopicsRequest(Message, tag="alter_topics", frozen=True, kw_only=True):
    """Set the partition count of existing topics (up or down: a topic names any resources)."""

    topics: Annotated[list[TopicSpec], Meta(max_length=MAX_ITEMS)]


class AlterTopicsResponse(Message, tag="alter_topics_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    topics: list[TopicResult] = field(default_factory=list)


class DeleteTopicsRequest(Message, tag="delete_topics", frozen=True, kw_only=True):
    topics: Annotated[list[TopicName], Meta(max_length=MAX_ITEMS)]


class DeleteTopicsResponse(Message, tag="delete_topics_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    topics: list[TopicResult] = field(default_factory=list)


class TopicMetadata(Struct, frozen=True, kw_only=True):
    name: str
    partitions: int = 0
    error_code: int = ErrorCode.NONE  # UNKNOWN_TOPIC_OR_PARTITION: absent or deleted


class ListTopicsRequest(Message, tag="list_topics", frozen=True, kw_only=True):
    topics: Annotated[list[TopicName], Meta(max_length=MAX_ITEMS)] | None = (
        None  # None: every topic
    )


class ListTopicsResponse(Message, tag="list_topics_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    topics: list[TopicMetadata] = field(default_factory=list)


# --- group inspection -----------------------------------------------------------------


class DescribeGroupsRequest(Message, tag="describe_groups", frozen=True, kw_only=True):
    groups: Annotated[list[GroupId], Meta(max_length=MAX_ITEMS)]


class DescribedMember(Struct, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    metadata: bytes = b""  # the member's metadata for the chosen protocol
    assignment: bytes = b""


class DescribedGroup(Struct, frozen=True, kw_only=True):
    group_id: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    state: str = ""
    generation_id: int = NO_GENERATION
    protocol_type: str = ""
    protocol_name: str = ""
    leader: str = ""
    members: list[DescribedMember] = field(default_factory=list)


class DescribeGroupsResponse(Message, tag="describe_groups_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    groups: list[DescribedGroup] = field(default_factory=list)


class DeleteGroupsRequest(Message, tag="delete_groups", frozen=True, kw_only=True):
    """Delete groups and their committed offsets; only a group without members (Kafka's
    DeleteGroups: NON_EMPTY_GROUP otherwise)."""

    groups: Annotated[list[GroupId], Meta(max_length=MAX_ITEMS)]


class DeletedGroup(Struct, frozen=True, kw_only=True):
    group_id: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


class DeleteGroupsResponse(Message, tag="delete_groups_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    results: list[DeletedGroup] = field(default_factory=list)


class ListGroupsRequest(Message, tag="list_groups", frozen=True, kw_only=True):
    states: Annotated[list[Annotated[str, Meta(max_length=64)]], Meta(max_length=16)] | None = (
        None  # None: every state
    )


class ListedGroup(Struct, frozen=True, kw_only=True):
    group_id: str
    protocol_type: str = ""
    state: str = ""


class ListGroupsResponse(Message, tag="list_groups_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    groups: list[ListedGroup] = field(default_factory=list)


class FindCoordinatorRequest(Message, tag="find_coordinator", frozen=True, kw_only=True):
    """Which node coordinates ``group_id``: any node of a cluster answers (Kafka's
    FindCoordinator with key type GROUP)."""

    group_id: GroupId


class FindCoordinatorResponse(Message, tag="find_coordinator_response", frozen=True, kw_only=True):
    """The coordinator's advertised address; COORDINATOR_NOT_AVAILABLE while no live node
    owns the group's shard."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    node_id: str = ""
    host: str = ""
    port: int = 0


class DescribeClusterRequest(Message, tag="describe_cluster", frozen=True, kw_only=True):
    """The nodes of the coordinator's cluster and who owns each shard, as the node asked
    last saw them (a single coordinator is a cluster of one node with no shards)."""

    # The shard owners and epochs too: with an authorizer, that needs DESCRIBE on the
    # cluster; the nodes alone are told to any client (as Kafka's metadata names brokers).
    include_shards: bool = True


class ClusterNodeInfo(Struct, frozen=True, kw_only=True):
    node_id: str
    host: str
    port: int


class ShardInfo(Struct, frozen=True, kw_only=True):
    shard: int
    owner: str = ""  # "": no live node owns it now
    epoch: int = 0


class NodeLiveness(Struct, frozen=True, kw_only=True):
    """How a cluster node keeps up with etcd, as it says of itself: seconds since it last
    refreshed its lease and since it last reconciled its shards (None: not yet), and how
    many times one of its loops had to be started again."""

    lease_refreshed_s_ago: float | None = None
    reconciled_s_ago: float | None = None
    task_restarts: int = 0
    # whether it holds a lease and is registered in etcd now (None: an older node)
    registered: bool | None = None


class DescribeClusterResponse(Message, tag="describe_cluster_response", frozen=True, kw_only=True):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    node_id: str = ""  # the node that answered
    shard_count: int = 0
    nodes: list[ClusterNodeInfo] = field(default_factory=list)
    shards: list[ShardInfo] = field(default_factory=list)
    liveness: NodeLiveness | None = None  # the answering node's own; None: not a cluster node
    # the shards the answering node serves now, by its own account (``shards`` are the
    # owners as it last read them from etcd); None: not told (not a cluster node, an older
    # one, or the shards were not asked for)
    served: list[int] | None = None


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
    | ErrorResponse
)

Notice = RebalanceStarted | TopicMetadataChanged | ProtocolError


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
)

# The protocol version that introduced a message type; absent: version 1, the first.
INTRODUCED_IN: dict[type[Message], int] = {}


def known_in(version: int, message: type[Message]) -> bool:
    """Whether a peer that handshook with ``version`` knows this message type."""
    return INTRODUCED_IN.get(message, 1) <= version


def unknown_to(version: int) -> frozenset[type[Message]]:
    """The message types a peer that handshook with ``version`` does not know."""
    return frozenset(t for t in INTRODUCED_IN if not known_in(version, t))


class Tagged(Struct, kw_only=True):
    """Reads only the ``type`` tag of a frame body (any other fields are ignored)."""

    type: str
