"""The consumer group protocol (KIP-848) on the Kafka listener: ConsumerGroupHeartbeat.

``ConsumerGroups`` translates the Kafka listener's requests for the server's one
``ConsumerService`` (``huddle.coordinator.consumer_service``: the groups, the ACL check,
the expiry timer, the records kept, the counts; huddle's own wire serves the same groups).
A heartbeat becomes huddle's ``ConsumerHeartbeatRequest``, served on the server's request
path like huddle's own: its answer goes once the records it made are kept. Here:

- topic ids <-> names: owned partitions arrive as topic ids and are mapped to names with
  the topic registry; an id no topic has now is mapped to the name the member was given it
  under (a topic deleted, or deleted and created again: the member still owns the old
  topic's partitions until it says otherwise), else left out; the assignment leaves as ids;
- version 0 lets the coordinator choose the member id on join (Kafka 4.0): one is made up
  when a v0 join sends none;
- OffsetCommit / OffsetFetch v9+ are checked against the member epochs (``check_offsets``).
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any, Final, Protocol

import structlog

from huddle.coordinator.consumer_service import ConsumerService, TopicsHost
from huddle.coordinator.effects import Peer
from huddle.coordinator.kafka import schemas
from huddle.coordinator.kafka.translate import Plan, Values, get
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ConsumerTopicPartitions,
    Response,
)

log = structlog.get_logger("huddle.coordinator.kafka.consumer_groups")

CONSUMER_GROUP_HEARTBEAT: Final = 68
STALE_MEMBER_EPOCH: Final = 113  # Kafka's: an offset request's member epoch is not the member's
OFFSET_COMMIT_EPOCH_FROM: Final = 9  # OffsetCommit's first version with a member epoch
_COORDINATOR_CHOOSES_UNTIL: Final = 0  # the last version whose join may leave the member id out


class ConsumerHost(TopicsHost, Protocol):
    """What the Kafka listener's consumer groups need of the server."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...


def new_member_id() -> str:
    """A member id as Kafka's clients make them (``Uuid.randomUuid().toString()``)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class ConsumerGroups:
    """The server's consumer-protocol groups (``ConsumerService``), on its Kafka listener."""

    def __init__(self, service: ConsumerService) -> None:
        self.service = service
        self.host = service.host
        self.core = service.core
        self.clients = service.clients  # (group id, member id) -> client id, host
        self.topics = service.topics

    def check_offsets(
        self, group_id: str, member_id: str | None, epoch: int, version: int, *, commit: bool
    ) -> int | None:
        """An OffsetCommit's (``commit``) or OffsetFetch's member and epoch checked against
        the consumer group ``group_id``, as Kafka's ``ConsumerGroup.validateOffsetCommit``
        and ``validateOffsetFetch``: ``None`` if it is no consumer group (the classic
        rules apply), 0 if it passes (the commit is made as one from outside the group),
        else the error code: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH, or (a member's commit
        older than v9, which cannot carry its epoch) UNSUPPORTED_VERSION; a classic member
        of a mixed group commits with its epoch as generation (else ILLEGAL_GENERATION)."""
        group = self.core.groups.get(group_id)
        if group is None or (not group.members and self.host.classic_members(group_id)):
            return None
        if epoch < 0 and (not group.members or not member_id):
            # an admin's (or a consumer outside group management): only an empty group's
            # offsets may be committed so; any may be read
            return 0 if not commit or not group.members else int(ErrorCode.UNKNOWN_MEMBER_ID)
        member = group.members.get(member_id or "")
        if member is None:
            return int(ErrorCode.UNKNOWN_MEMBER_ID)
        if member.classic is not None:  # a classic member's generation is its epoch
            return 0 if epoch == member.member_epoch else int(ErrorCode.ILLEGAL_GENERATION)
        if commit and version < OFFSET_COMMIT_EPOCH_FROM:
            return int(ErrorCode.UNSUPPORTED_VERSION)
        if member.member_epoch != epoch:
            return STALE_MEMBER_EPOCH
        return 0

    # --- requests -----------------------------------------------------------------------

    def plan(self, api_key: int, request: Any, version: int, peer: Peer) -> Plan:
        """A ConsumerGroupHeartbeat as huddle's ``ConsumerHeartbeatRequest`` (topics by
        name), served by the server's request path like huddle's own (the service's
        handler: ``consumer_wire.HuddleConsumer.serve``), so its answer goes once the
        records it made are kept; the answer's topics are given their ids back."""
        call = self.heartbeat(request, version)
        return Plan([call], lambda parts: self._values(parts[0]))

    def heartbeat(self, req: Any, version: int) -> ConsumerHeartbeatRequest:
        member_id = req.member_id
        if not member_id and req.member_epoch == 0 and version <= _COORDINATOR_CHOOSES_UNTIL:
            member_id = new_member_id()
        names = req.subscribed_topic_names
        return ConsumerHeartbeatRequest(
            group_id=req.group_id,
            member_id=member_id,
            member_epoch=req.member_epoch,
            instance_id=req.instance_id,
            rack_id=req.rack_id,
            rebalance_timeout_ms=schemas.milliseconds(req.rebalance_timeout),
            subscribed_topic_names=None if names is None else list(names),
            subscribed_topic_regex=get(req, "subscribed_topic_regex"),
            server_assignor=req.server_assignor,
            owned=self._owned(req.topic_partitions, req.group_id, member_id),
        )

    def _owned(
        self, owned: Any, group_id: str, member_id: str
    ) -> list[ConsumerTopicPartitions] | None:
        """The owned partitions, by topic name: an id no topic has now by the name the
        member holds it under (``ConsumerMember.topic_ids``), else left out."""
        if owned is None:
            return None
        names = self.host.topic_names
        held: dict[uuid.UUID, str] = {}
        if any(topic.topic_id not in names for topic in owned):
            group = self.core.groups.get(group_id)
            member = None if group is None else group.members.get(member_id)
            if member is not None:
                held = {uuid.UUID(i): name for name, i in member.topic_ids.items()}
        out: list[ConsumerTopicPartitions] = []
        for topic in owned:
            name = names.get(topic.topic_id) or held.get(topic.topic_id)
            if name is not None:
                out.append(ConsumerTopicPartitions(topic=name, partitions=list(topic.partitions)))
        return out

    def _values(self, answer: Response) -> Values:
        if not isinstance(answer, ConsumerHeartbeatResponse):  # refused before, or not kept
            return _error(ErrorCode(answer.error_code), getattr(answer, "error_message", ""))
        values: dict[str, Any] = {
            "error_code": answer.error_code,
            "error_message": answer.error_message,
            "member_id": answer.member_id,
            "member_epoch": answer.member_epoch,
            "heartbeat_interval": answer.heartbeat_interval_ms,
            "throttle_time": 0,
        }
        if answer.assignment is not None:
            ids = self.host.topic_ids
            values["assignment"] = {
                "topic_partitions": [
                    {"topic_id": ids[topic.topic], "partitions": topic.partitions}
                    for topic in answer.assignment
                    if topic.topic in ids
                ]
            }
        return values

    def close(self) -> None:
        self.service.close()


def _error(code: ErrorCode, message: str | None) -> Values:
    return {"error_code": code, "error_message": message, "member_epoch": -1, "throttle_time": 0}
