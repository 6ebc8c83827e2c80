"""The consumer group protocol's (KIP-848) messages on huddle's wire: one heartbeat pair and
one notice. Importable from ``huddle.protocol.messages`` too, which gathers them into the
wire's unions (all three came with protocol version 2).

The fields are Kafka's ConsumerGroupHeartbeat v1 with topics by **name** (huddle's wire
names topics; Kafka's carries topic ids). ``None`` means "not sent, unchanged since the last
heartbeat" (Kafka's null); an empty list is a value. The member chooses its member id (a
UUID), joins with epoch 0, leaves with -1 (a static member for now: -2).
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

from huddle.protocol.errors import ErrorCode
from huddle.protocol.message_fields import (
    GroupId,
    InstanceId,
    MemberId,
    Message,
    ProtocolName,
    TopicName,
)

MAX_PARTITIONS = 100_000  # of one topic in an owned list or an assignment
# the topics one member subscribes to by name, or says it owns (Kafka sets no bound but
# the request's size: a consumer may subscribe to thousands of topics)
MAX_TOPICS = 100_000
# a subscription regex (Kafka sets none; RE2's compile time grows faster than the length,
# and the coordinator refuses a longer one INVALID_REGULAR_EXPRESSION)
MAX_REGEX_LENGTH = 4_096


class ConsumerTopicPartitions(Struct, frozen=True, kw_only=True):
    topic: TopicName
    partitions: Annotated[list[int], Meta(max_length=MAX_PARTITIONS)]


class ConsumerHeartbeatRequest(Message, tag="consumer_heartbeat", frozen=True, kw_only=True):
    group_id: GroupId
    member_id: MemberId
    member_epoch: int
    instance_id: InstanceId | None = None
    rack_id: ProtocolName | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Annotated[list[TopicName], Meta(max_length=MAX_TOPICS)] | None = None
    # decoded up to 64 KiB: a pattern over MAX_REGEX_LENGTH is answered by the coordinator
    # (INVALID_REGULAR_EXPRESSION, as Kafka answers a pattern it does not take)
    subscribed_topic_regex: Annotated[str, Meta(max_length=65_536)] | None = None
    server_assignor: ProtocolName | None = None
    owned: Annotated[list[ConsumerTopicPartitions], Meta(max_length=MAX_TOPICS)] | None = None


class ConsumerHeartbeatResponse(
    Message, tag="consumer_heartbeat_response", frozen=True, kw_only=True
):
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    # None: unchanged since the last answer (the member keeps what it has)
    assignment: list[ConsumerTopicPartitions] | None = None
    # the coordinator's session timeout: a member not heard from this long is fenced (0: not
    # said). A member cut off counts its partitions lost once it may have run out.
    session_timeout_ms: int = 0


class ConsumerAssignmentChanged(
    Message, tag="consumer_assignment_changed", frozen=True, kw_only=True
):
    """Pushed to a consumer-protocol member whose next heartbeat would be answered with a
    different assignment (its group's target moved, or partitions it waits for were
    released): it should heartbeat now, not at its next interval."""

    group_id: str
    member_id: str
    target_epoch: int
