"""Consumer-protocol groups (KIP-848) described and listed on the Kafka wire.

- ConsumerGroupDescribe (API key 69, v0-1): each group's state (Kafka's names: Empty,
  Assigning, Reconciling, Stable), group epoch, target assignment epoch, the server
  assignor it uses, and each member's epoch, subscription, client id and host, its
  assigned partitions (``assignment``: as Kafka's, not those it is still revoking) and
  what the target gives it (``target_assignment``), topics named by id and name. A group
  id no consumer group has is GROUP_ID_NOT_FOUND ("is not a consumer group" when a
  classic group has it), as Kafka's
  ``GroupMetadataManager.consumerGroupDescribe``; DESCRIBE on the group is needed
  (GROUP_AUTHORIZATION_FAILED). The group's authorized operations when the request asks
  (``include_authorized_operations``; ``huddle.coordinator.kafka.authorized``).
- ConsumerGroupHeartbeat goes to ``consumer_groups`` (``plan``).
- ListGroups: the consumer groups are listed beside the classic ones, group type
  ``consumer`` (v5's field), protocol type ``consumer``, filtered by state and type as
  Kafka filters them, and by DESCRIBE on the group with an authorizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from uuid import UUID

from huddle.coordinator.consumer import ConsumerGroup
from huddle.coordinator.consumer.messages import Assignment
from huddle.coordinator.effects import Peer
from huddle.coordinator.kafka.authorized import NOT_ASKED, group_operations
from huddle.coordinator.kafka.consumer_groups import CONSUMER_GROUP_HEARTBEAT, ConsumerGroups
from huddle.coordinator.kafka.translate import Plan, Values, get
from huddle.coordinator.security.acls import Operation, ResourceType
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import Response

CONSUMER_GROUP_DESCRIBE: Final = 69
APIS: Final = frozenset({CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE})  # ``plan``'s
CONSUMER: Final = "consumer"  # the group type, and the protocol type Kafka lists them with
_MEMBER_TYPE_CLASSIC: Final = 0  # v1's member type: a classic member of a mixed group
_MEMBER_TYPE_CONSUMER: Final = 1


def _described(groups: ConsumerGroups, group_id: str, peer: Peer, operations: bool) -> Values:
    auth = groups.host.authorizer
    if auth is not None and not auth.allowed(
        peer.principal, peer.host, Operation.DESCRIBE, ResourceType.GROUP, group_id
    ):
        return _refused(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    group = groups.core.groups.get(group_id)
    if group is None:
        kind = "is not a consumer group" if groups.host.classic_members(group_id) else "not found"
        return _refused(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} {kind}.")
    ids = groups.host.topic_ids
    return {
        "error_code": ErrorCode.NONE,
        "group_id": group_id,
        "group_state": group.phase.value,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.target_epoch,
        "assignor_name": group.preferred_assignor(groups.core.config.assignors[0]),
        "authorized_operations": (
            group_operations(auth, peer, group_id) if operations else NOT_ASKED
        ),
        "members": [_member(groups, group, member_id, ids) for member_id in sorted(group.members)],
    }


def _member(
    groups: ConsumerGroups, group: ConsumerGroup, member_id: str, ids: Mapping[str, UUID]
) -> Values:
    member = group.members[member_id]
    client_id, host = groups.clients.get((group.group_id, member_id), ("", ""))
    return {
        "member_id": member_id,
        "instance_id": member.instance_id,
        "rack_id": member.rack_id,
        "member_epoch": member.member_epoch,
        "client_id": client_id,
        "client_host": host,
        "subscribed_topic_names": sorted(member.subscribed_topic_names),
        "subscribed_topic_regex": member.subscribed_topic_regex,
        # the ids of the topics it was given, until it heartbeats: a topic created again
        # since shows under its old id
        "assignment": _assignment(member.assigned, _held(member.topic_ids, ids)),
        "target_assignment": _assignment(group.target.get(member_id, {}), ids),
        "member_type": _MEMBER_TYPE_CONSUMER if member.classic is None else _MEMBER_TYPE_CLASSIC,
    }


def _assignment(assignment: Assignment, ids: Mapping[str, UUID]) -> Values:
    return {
        "topic_partitions": [
            {"topic_id": ids[name], "topic_name": name, "partitions": sorted(partitions)}
            for name, partitions in sorted(assignment.items())
            if name in ids and partitions
        ]
    }


def _held(held: Mapping[str, str], ids: Mapping[str, UUID]) -> Mapping[str, UUID]:
    if not held or all(str(ids.get(name)) == i for name, i in held.items()):
        return ids
    return {**ids, **{name: UUID(i) for name, i in held.items()}}


def _refused(group_id: str, code: ErrorCode, message: str | None) -> Values:
    return {
        "error_code": code,
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
        "authorized_operations": NOT_ASKED,
    }


def plan(groups: ConsumerGroups, api_key: int, req: Any, version: int, peer: Peer) -> Plan:
    """A ConsumerGroupHeartbeat (huddle's heartbeat, answered once kept) or a
    ConsumerGroupDescribe (answered now)."""
    if api_key == CONSUMER_GROUP_HEARTBEAT:
        return groups.plan(api_key, req, version, peer)
    return describe(groups, req, peer)


def describe(groups: ConsumerGroups, req: Any, peer: Peer) -> Plan:
    values = {
        "throttle_time": 0,
        "groups": [
            _described(groups, group_id, peer, bool(req.include_authorized_operations))
            for group_id in req.group_ids
        ],
    }
    return Plan([], lambda parts: values)


def with_consumer_groups(groups: ConsumerGroups, plan: Plan, req: Any, peer: Peer) -> Plan:
    """A ListGroups ``plan`` (the classic groups) whose answer lists the consumer groups
    too, as Kafka's filters and the ACLs let it."""
    asked = {s.strip().lower() for s in get(req, "states_filter", ())}
    kinds = {k.lower() for k in get(req, "types_filter", ())}
    auth = groups.host.authorizer

    def shown(group: ConsumerGroup) -> bool:
        if asked and group.phase.value.lower() not in asked:
            return False
        return auth is None or auth.allowed(
            peer.principal, peer.host, Operation.DESCRIBE, ResourceType.GROUP, group.group_id
        )

    def answer(parts: Sequence[Response]) -> Any:
        values = plan.answer(parts)
        assert isinstance(values, Mapping)
        if values.get("error_code") or (kinds and CONSUMER not in kinds):
            return values
        listed = [
            {
                "group_id": group.group_id,
                "protocol_type": CONSUMER,
                "group_state": group.phase.value,
                "group_type": CONSUMER,
            }
            for group in groups.core.groups.values()
            if shown(group)
        ]
        return {**values, "groups": [*values["groups"], *listed]}

    return Plan(plan.calls, answer)
