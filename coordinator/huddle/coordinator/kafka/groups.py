"""A group's members on the Kafka wire: JoinGroup, SyncGroup, Heartbeat and LeaveGroup as
the core's requests, and the core's answers as Kafka responses of the request's version.

The core's messages follow Kafka's classic group protocol field for field; what differs
by version is handled here, as Kafka's own coordinator does:

- JoinGroup v0 has no rebalance timeout: the session timeout stands for it. v0-3 have no
  MEMBER_ID_REQUIRED round (KIP-394, v4+): a new member gets its id in the answer that
  lets it in (the core is told so by ``require_known_member_id``). Instance ids come
  with v5 (static membership), reasons with v8. A member turned away from a full group
  (GROUP_MAX_SIZE_REACHED) is answered member id "", as Kafka's
  ``GroupMetadataManager.classicGroupJoinToClassicGroup``.
- SyncGroup v5+ must name the protocol type and name: one that leaves either null is
  answered INCONSISTENT_GROUP_PROTOCOL before the group is looked at, as Kafka's
  ``KafkaApis.handleSyncGroupRequest`` does.
- A JoinGroup, SyncGroup, Heartbeat or LeaveGroup for a consumer-protocol (KIP-848) group
  with members is served by that group (``huddle.coordinator.mixed_groups``: a classic
  member of a mixed group), with the same answers as the core's.
- LeaveGroup v0-2 name one member and answer with one error code; v3+ name a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from huddle.coordinator.kafka import schemas
from huddle.coordinator.kafka.translate import Context, Plan, Values, get
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    Protocol,
    Response,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)

_MEMBER_ID_REQUIRED_FROM = 4  # JoinGroup's version that brought the MEMBER_ID_REQUIRED round
_SYNC_NAMES_PROTOCOL_FROM = 5  # SyncGroup's version from which protocol type and name are due


def join_group(req: Any, version: int, ctx: Context) -> Plan:
    session_ms = schemas.milliseconds(req.session_timeout)
    rebalance = get(req, "rebalance_timeout")
    call = JoinGroupRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        group_instance_id=get(req, "group_instance_id"),
        protocol_type=req.protocol_type,
        protocols=[Protocol(name=p.name, metadata=p.metadata) for p in req.protocols],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms if rebalance is None else schemas.milliseconds(rebalance),
        reason=get(req, "reason"),
        require_known_member_id=version >= _MEMBER_ID_REQUIRED_FROM,
    )

    def answer(parts: Sequence[Response]) -> Values:
        (r,) = parts
        if type(r) is not JoinGroupResponse:
            return {"error_code": r.error_code, "generation_id": -1, "member_id": req.member_id}
        full = r.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED  # Kafka names no member
        return {
            "error_code": r.error_code,
            "generation_id": r.generation_id,
            "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name,
            "leader": r.leader,
            "skip_assignment": r.skip_assignment,
            "member_id": "" if full else r.member_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata,
                }
                for m in r.members
            ],
        }

    return Plan([call], answer)


def sync_group(req: Any, version: int, ctx: Context) -> Plan:
    protocol_type, protocol_name = get(req, "protocol_type"), get(req, "protocol_name")
    if version >= _SYNC_NAMES_PROTOCOL_FROM and (protocol_type is None or protocol_name is None):
        refused = {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "assignment": b""}
        return Plan([], lambda parts: refused)
    call = SyncGroupRequest(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=get(req, "group_instance_id"),
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=[
            SyncGroupAssignment(member_id=a.member_id, assignment=a.assignment)
            for a in req.assignments
        ],
    )

    def answer(parts: Sequence[Response]) -> Values:
        (r,) = parts
        if type(r) is not SyncGroupResponse:
            return {"error_code": r.error_code, "assignment": b""}
        return {
            "error_code": r.error_code,
            "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name,
            "assignment": r.assignment,
        }

    return Plan([call], answer)


def heartbeat(req: Any, version: int, ctx: Context) -> Plan:
    call = HeartbeatRequest(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=get(req, "group_instance_id"),
    )
    return Plan([call], error_only)


def error_only(parts: Sequence[Response]) -> Values:
    return {"error_code": parts[0].error_code}


def leave_group(req: Any, version: int, ctx: Context) -> Plan:
    batch = get(req, "members")
    if batch is None:  # v0-2: the one member leaving
        members = [MemberIdentity(member_id=req.member_id)]
    else:
        members = [
            MemberIdentity(
                member_id=m.member_id,
                group_instance_id=get(m, "group_instance_id"),
                reason=get(m, "reason"),
            )
            for m in batch
        ]
    call = LeaveGroupRequest(group_id=req.group_id, members=members)

    def answer(parts: Sequence[Response]) -> Values:
        (r,) = parts
        if type(r) is not LeaveGroupResponse:
            return {"error_code": r.error_code}
        results = r.members
        if batch is None:  # one error code: the group's, else the member's
            member_code = results[0].error_code if results else ErrorCode.NONE
            return {"error_code": r.error_code or member_code}
        return {
            "error_code": r.error_code,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "error_code": m.error_code,
                }
                for m in results
            ],
        }

    return Plan([call], answer)
