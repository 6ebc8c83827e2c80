"""The messages of the admin side: topics (create, alter, delete, list), group inspection
(describe, delete, list), FindCoordinator and DescribeCluster. Importable from
``huddle.protocol.messages`` too, which gathers them into the wire's unions.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from msgspec import Meta, Struct, field

from huddle.protocol.errors import ErrorCode
from huddle.protocol.message_fields import MAX_ITEMS, NO_GENERATION, GroupId, Message, TopicName

# --- topics ---------------------------------------------------------------------------


class TopicSpec(Struct, frozen=True, kw_only=True):
    name: TopicName
    partitions: int


class TopicResult(Struct, frozen=True, kw_only=True):
    name: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    topic_id: UUID | None = None  # a topic created: the id it was given


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
    # the id the topic was given when it was created (``huddle.coordinator.topic_ids``);
    # None: no such topic (or an older coordinator)
    topic_id: UUID | None = None


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


class AssignedTopic(Struct, frozen=True, kw_only=True):
    """Partitions of one topic in a consumer-protocol member's assignment."""

    topic: str
    partitions: list[int]


class ConsumerMemberState(Struct, frozen=True, kw_only=True):
    """A consumer-protocol (KIP-848) member's reconciliation: its epoch, its state
    (``stable``, ``unrevoked_partitions``, ``unreleased_partitions``), what it may own now,
    what it must give up first, and what the group's target assignment gives it."""

    member_epoch: int
    state: str
    subscribed_topics: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    assigned: list[AssignedTopic] = field(default_factory=list)
    pending_revocation: list[AssignedTopic] = field(default_factory=list)
    target: list[AssignedTopic] = field(default_factory=list)


class DescribedMember(Struct, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    metadata: bytes = b""  # the member's metadata for the chosen protocol
    assignment: bytes = b""
    consumer: ConsumerMemberState | None = None  # a consumer-protocol member's; else None


class ConsumerGroupState(Struct, frozen=True, kw_only=True):
    """A consumer-protocol (KIP-848) group's epochs and the server assignor it uses."""

    group_epoch: int
    target_epoch: int
    assignor: str


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
    group_type: str = "classic"  # "consumer": a consumer-protocol (KIP-848) group
    consumer: ConsumerGroupState | None = None  # a consumer-protocol group's; else None


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
    group_type: str = "classic"  # "consumer": a consumer-protocol (KIP-848) group


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
    kafka_address: str = ""  # HOST:PORT Kafka clients are told to use; "": no Kafka listener


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
