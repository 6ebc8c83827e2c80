"""The consumer group protocol (KIP-848, Kafka 4.0's ``group.protocol=consumer``), sans-IO.

The coordinator works out each group's target assignment with a server-side assignor and
reconciles every member toward it, one ConsumerGroupHeartbeat at a time. Nothing here does
IO or reads a clock: a caller passes each request with ``now`` and the topics it may assign
(``TopicView``), and calls ``expire(now)`` when ``next_deadline()`` has passed.
"""

from __future__ import annotations

from huddle.coordinator.consumer.group import ConsumerGroup, DoubleOwnerError, GroupPhase
from huddle.coordinator.consumer.heartbeat import ConsumerCoordinator
from huddle.coordinator.consumer.member import ConsumerMember, MemberState
from huddle.coordinator.consumer.messages import (
    DISABLED,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    MIGRATION_POLICIES,
    STATIC_LEAVE_EPOCH,
    UPGRADE,
    Assignment,
    ConsumerGroupConfig,
    HeartbeatAnswer,
    HeartbeatRequest,
    TopicView,
)
from huddle.coordinator.consumer.timeouts import Fenced

__all__ = [
    "DISABLED",
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "MIGRATION_POLICIES",
    "STATIC_LEAVE_EPOCH",
    "UPGRADE",
    "Assignment",
    "ConsumerCoordinator",
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerMember",
    "DoubleOwnerError",
    "Fenced",
    "GroupPhase",
    "HeartbeatAnswer",
    "HeartbeatRequest",
    "MemberState",
    "TopicView",
]
