"""The checks a ConsumerGroupHeartbeat passes before it changes anything (Kafka's
``throwIfConsumerGroupHeartbeatRequestIsInvalid`` and ``throwIfConsumerGroupMemberEpochIsInvalid``).

Version 1 of the API, where the client chooses its member id: an empty one is refused at
every epoch. A wire serving version 0 (the coordinator chooses) makes one up before it calls
the core.
"""

from __future__ import annotations

from huddle.coordinator.consumer.member import ConsumerMember, is_subset
from huddle.coordinator.consumer.messages import (
    JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroupConfig,
    HeartbeatRequest,
    RefusedError,
)
from huddle.coordinator.consumer.target import compiled
from huddle.protocol.errors import ErrorCode


def _invalid(message: str) -> RefusedError:
    return RefusedError(ErrorCode.INVALID_REQUEST, message)


def check_request(request: HeartbeatRequest, config: ConsumerGroupConfig) -> None:
    if not request.member_id:
        raise _invalid("MemberId can't be empty.")
    if not request.group_id:
        raise _invalid("GroupId can't be empty.")
    if request.instance_id == "":
        raise _invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise _invalid("RackId can't be empty.")
    if request.member_epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise _invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or any(request.owned.values()):
            raise _invalid("TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise _invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            )
    elif request.member_epoch == STATIC_LEAVE_EPOCH:
        if request.instance_id is None:
            raise _invalid("InstanceId can't be null.")
    elif request.member_epoch < STATIC_LEAVE_EPOCH:
        raise _invalid("MemberEpoch is invalid.")
    if request.rebalance_timeout_ms < -1:
        raise _invalid("RebalanceTimeoutMs is invalid.")
    if request.server_assignor is not None and request.server_assignor not in config.assignors:
        raise RefusedError(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(config.assignors)}.",
        )
    if request.subscribed_topic_regex:
        compiled(request.subscribed_topic_regex)


def check_epoch(member: ConsumerMember, request: HeartbeatRequest) -> None:
    """FENCED_MEMBER_EPOCH unless the request's epoch is the member's, or its previous one
    with owned partitions it still has (the answer that moved it on was lost), or 0: a
    member fenced while the coordinator still has it rejoins so, owning nothing (KIP-848;
    Kafka 4.0 fenced it again at every rejoin until its session ran out, KAFKA-19233)."""
    received = request.member_epoch
    if received == JOIN_EPOCH:
        return
    if received > member.member_epoch:
        raise RefusedError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"the member's epoch ({received}) is greater than the one the coordinator knows "
            f"({member.member_epoch}); it must give up all its partitions and rejoin",
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch or not is_subset(request.owned, member.assigned)
    ):
        raise RefusedError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"the member's epoch ({received}) is smaller than the one the coordinator knows "
            f"({member.member_epoch}); it must give up all its partitions and rejoin",
        )
