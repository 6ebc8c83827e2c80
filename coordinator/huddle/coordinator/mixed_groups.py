"""Mixed groups on the server: a classic group upgraded to a consumer-protocol group, its
classic members served by the consumer group (``huddle.coordinator.consumer.classic``), and
the group downgraded back (``huddle.coordinator.consumer.downgrade``).

- ``classic_snapshot`` reads a classic group for the upgrade, without changing it: it must
  use the ``consumer`` protocol type and have every member on the Kafka listener (huddle's
  own classic members speak huddle's wire, where a classic JoinGroup to a consumer group
  stays refused: docs/consumer-protocol.md says why); a member not heard from since a
  restart loaded it, or since its connection closed, makes it wait
  (COORDINATOR_LOAD_IN_PROGRESS: which listener it is on is not known yet). A rebalancing
  group is upgraded as Kafka 4.0 upgrades it, each member owning its last assignment (what
  it holds: a rebalance keeps it until the next one is stored), except while that is not
  known: a rebalance that began again in the sync phase cleared the assignments, or a
  Stable group's members have not all collected theirs (COORDINATOR_LOAD_IN_PROGRESS then,
  which a consumer retries).
- ``drop_classic`` then takes the members out of the classic coordinator: their sessions
  end there, the JoinGroups and SyncGroups it holds are answered REBALANCE_IN_PROGRESS (as
  Kafka's ``convertToConsumerGroup``), the classic group's record is deleted (a restart
  brings back the consumer group, not the classic one), and its committed offsets stay,
  now the consumer group's.
- ``to_classic`` is the downgrade's classic side: a consumer group whose last
  consumer-protocol member went, its other members classic (``consumer.downgrade``),
  becomes a classic group of those members again, Stable at the consumer group's epoch,
  and rebalances at once (Kafka's ``convertToClassicGroup``): each member is told to
  rejoin at its next Heartbeat, and its leader assigns. Its committed offsets stay (the
  classic group that held them takes the members); its record is kept saying members
  were removed since its assignment, so a restart before the rebalance ends rebalances it
  again.
- ``MixedGroups`` serves the Kafka listener's JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup for a consumer group with members (the request path's ``beside`` handlers;
  any other group's go to the classic coordinator as before). Their records are kept
  before the answers go, as a heartbeat's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import structlog
from msgspec.structs import replace

from huddle.coordinator.answers import refuse_held
from huddle.coordinator.connection import Connection
from huddle.coordinator.consumer import classic
from huddle.coordinator.consumer.classic import ClassicAnswer, ClassicJoin
from huddle.coordinator.consumer.messages import ClassicGroupSnapshot, ClassicSnapshot
from huddle.coordinator.consumer_service import ConsumerService
from huddle.coordinator.effects import Effects
from huddle.coordinator.group import Group, Member
from huddle.coordinator.kafka.consumer_groups import new_member_id
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.kept_groups import NO_CONNECTION, group_record
from huddle.coordinator.storage.records import group_deleted
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    Call,
    ErrorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResult,
    LeaveGroupRequest,
    LeaveGroupResponse,
    Protocol,
    Reply,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
)

if TYPE_CHECKING:
    from huddle.coordinator.effects import Outgoing
    from huddle.coordinator.host import CoordinatorServer

log = structlog.get_logger("huddle.coordinator.mixed_groups")

Handler = Callable[[Connection, Call], "list[Outgoing] | None"]

KAFKA_LISTENER = "kafka"
_UPGRADED = "the group was upgraded to a consumer group: join it again"


def classic_snapshot(
    server: CoordinatorServer, group_id: str
) -> ClassicGroupSnapshot | tuple[ErrorCode, str]:
    """The classic group ``group_id`` as the upgrade takes it, or why it cannot be taken."""
    group = server.core.groups[group_id]
    if group.protocol_type != classic.CONSUMER_PROTOCOL_TYPE:
        return (
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"Group {group_id} is a classic group of protocol type {group.protocol_type!r}: "
            "only one of the consumer protocol type is upgraded",
        )
    conns = server.requests.conns
    name = group.protocol_name or ""
    members = []
    unheard = False
    for member in group.members.values():
        conn = conns.get(member.conn_id)
        if conn is None:  # loaded by a restart, or its connection closed: not heard from yet
            unheard = True
        elif conn.wire.listener != KAFKA_LISTENER:
            return (
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Group {group_id} is a classic group with a member on huddle's own wire "
                f"({member.member_id}): it is not upgraded, as mixed groups are served on the "
                "Kafka listener only",
            )
        chosen = [(p.name, p.metadata) for p in member.protocols if p.name == name]
        others = [(p.name, p.metadata) for p in member.protocols if p.name != name]
        members.append(
            ClassicSnapshot(
                member.member_id,
                member.instance_id,
                member.session_timeout_ms,
                member.rebalance_timeout_ms,
                tuple(chosen + others),
                member.assignment,
            )
        )
    if unheard:
        return (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            f"Group {group_id} is a classic group with members not heard from since they "
            "were loaded or their connection closed: it is upgraded once they are",
        )
    if group.assignments_cleared:
        return (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            f"Group {group_id} is a classic group whose rebalance began again before its "
            "members had their assignments: it is upgraded once stable",
        )
    if group.is_(GroupState.STABLE) and group.pending_sync:
        return (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            f"Group {group_id} is a classic group with members yet to collect their "
            "assignments: it is upgraded once they have",
        )
    return ClassicGroupSnapshot(group.generation, tuple(members))


def drop_classic(server: CoordinatorServer, group_id: str) -> None:
    """The classic group's members leave the classic coordinator (its offsets stay). A
    JoinGroup or SyncGroup it holds (the group was rebalancing) is answered
    REBALANCE_IN_PROGRESS: the member joins again, now the consumer group's."""
    core = server.core
    sessions = core.sessions
    group = core.groups[group_id]
    clients = server.consumer.clients  # who each member is, as ConsumerGroupDescribe shows
    fx = Effects(server.now_ms())
    for member_id in list(group.members):
        member = group.members[member_id]
        refuse_held(fx, group, member, ErrorCode.REBALANCE_IN_PROGRESS, _UPGRADED)
        group.remove(member_id)
        sessions.forget(member)
        clients[group_id, member_id] = (member.client_id, member.host)
    for member_id in list(group.pending):  # member ids handed out: the consumer group's now
        sessions.forget_pending(group, member_id)
    for key in (group.join_key, group.sync_key):
        sessions.timers.cancel(key)
    group.pending_sync.clear()
    group.initial_delay_active = False
    rebalancing = group.is_(GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE)
    if rebalancing and sessions.observer is not None:  # the upgrade ended it (metrics)
        sessions.observer.rebalance_completed(group_id, fx.now)
    if not group.is_(GroupState.PREPARING_REBALANCE):
        group.transition(GroupState.PREPARING_REBALANCE)
    group.transition(GroupState.EMPTY)
    # what is left holds the offsets only, as a consumer group's do (retention counts each
    # from its own commit: docs/coordinator.md section 8)
    group.protocol_type = group.protocol_name = group.leader = None
    if sessions.keep_groups and group.kept is not None:
        group.kept = None
        core.changes.append(group_deleted(group_id))
    sessions.collect(group)
    server.requests.send_outside(fx.out)  # once the classic group's deletion is kept
    log.info("classic_group_upgraded", group_id=group_id, generation=group.generation)


def to_classic(
    server: CoordinatorServer,
    group_id: str,
    snapshot: ClassicGroupSnapshot,
    clients: Mapping[str, tuple[str, str]],
) -> None:
    """The downgraded group's members join the classic coordinator, which rebalances it."""
    core = server.core
    sessions = core.sessions
    now = server.now_ms()
    group = core.groups.get(group_id)
    if group is None or group.members:  # none, or (never) one with members: a fresh one
        group = core.groups[group_id] = Group(group_id)
    group.generation = snapshot.generation
    for kept in snapshot.members:
        client_id, host = clients.get(kept.member_id, ("", ""))
        member = Member(
            group_id,
            kept.member_id,
            kept.instance_id,
            client_id=client_id,
            principal=None,  # not known: its next request from its client id binds it
            host=host,
            conn_id=NO_CONNECTION,
            protocol_type=classic.CONSUMER_PROTOCOL_TYPE,
            protocols=[Protocol(name=name, metadata=data) for name, data in kept.protocols],
            session_timeout_ms=kept.session_timeout_ms,
            rebalance_timeout_ms=kept.rebalance_timeout_ms,
        )
        member.assignment = kept.assignment
        member.is_new = False
        group.add(member)
    group.protocol_name = group.select_protocol()
    group.subscribed_topics = group.read_subscribed_topics()
    group.state = GroupState.STABLE  # not a transition: as a group loaded Stable
    group.state_ms = sessions.wall_ms(now)
    fx = Effects(now)
    sessions.start_sessions(fx, group)
    if sessions.keep_groups:
        kept_record = replace(group_record(group, None), members_removed=True)
        group.kept = kept_record
        core.changes.append(kept_record)
    core.rebalances.prepare_rebalance(fx, group, "downgraded from a consumer group")
    server.timers.reschedule()
    log.info("consumer_group_downgraded_to_classic", group_id=group_id, generation=group.generation)


class MixedGroups:
    """The Kafka listener's classic requests to consumer groups."""

    def __init__(self, server: CoordinatorServer, service: ConsumerService) -> None:
        self.server = server
        self.service = service
        self.core = service.core
        beside = server.requests.beside
        for kind, handler in (
            (JoinGroupRequest, self.join),
            (SyncGroupRequest, self.sync),
            (HeartbeatRequest, self.heartbeat),
            (LeaveGroupRequest, self.leave),
        ):
            beside[kind] = _guarded(handler)

    def _mine(self, conn: Connection, group_id: str) -> bool:
        """Whether a classic request for ``group_id`` is the consumer group's to serve."""
        if conn.wire.listener != KAFKA_LISTENER:
            return False
        group = self.core.groups.get(group_id)
        return group is not None and bool(group.members)

    def _heard(self, conn: Connection, group_id: str, member_id: str) -> None:
        """Who the member's client is (the client id and host its last request came from):
        described, and who speaks for it should the group be downgraded."""
        self.service.clients[group_id, member_id] = (conn.peer.client_id, conn.peer.host)

    def _refusal(self, group_id: str) -> tuple[ErrorCode, str] | None:
        return self.service.host.not_served(group_id)

    def join(self, conn: Connection, call: Call) -> list[Outgoing] | None:
        req = call.request
        assert isinstance(req, JoinGroupRequest)
        if not self._mine(conn, req.group_id):
            self.service.refuses_classic(req.group_id)  # an empty one gives its id up
            return None
        response: Response
        refusal = self._refusal(req.group_id)
        if refusal is not None:
            response = JoinGroupResponse(error_code=refusal[0], error_message=refusal[1])
        else:
            request = ClassicJoin(
                req.group_id,
                req.member_id,
                req.group_instance_id,
                req.session_timeout_ms,
                req.rebalance_timeout_ms,
                req.protocol_type,
                tuple((p.name, p.metadata) for p in req.protocols),
                req.require_known_member_id,
            )
            now = self.server.now_ms()
            before = self.service.epoch(req.group_id)
            answer = classic.join(self.core, request, new_member_id(), now, self.service.topics())
            if not answer.error:
                self._heard(conn, req.group_id, answer.member_id)
            self.service.changed(req.group_id, answer.member_id, before)
            response = _join_answer(answer)
        return _reply(conn, call, response)

    def sync(self, conn: Connection, call: Call) -> list[Outgoing] | None:
        req = call.request
        assert isinstance(req, SyncGroupRequest)
        if not self._mine(conn, req.group_id):
            return None
        refusal = self._refusal(req.group_id)
        if refusal is not None:
            return _reply(conn, call, SyncGroupResponse(error_code=refusal[0]))
        answer = classic.sync(
            self.core,
            req.group_id,
            req.member_id,
            req.generation_id,
            req.protocol_type,
            req.protocol_name,
            self.server.now_ms(),
        )
        if not answer.error:
            self._heard(conn, req.group_id, req.member_id)
        response = SyncGroupResponse(
            error_code=answer.error,
            error_message=answer.message,
            protocol_type=classic.CONSUMER_PROTOCOL_TYPE if not answer.error else None,
            protocol_name=answer.protocol_name,
            assignment=answer.assignment,
        )
        return _reply(conn, call, response)

    def heartbeat(self, conn: Connection, call: Call) -> list[Outgoing] | None:
        req = call.request
        assert isinstance(req, HeartbeatRequest)
        if not self._mine(conn, req.group_id):
            return None
        refusal = self._refusal(req.group_id)
        code = refusal[0] if refusal is not None else None
        if code is None:
            code = classic.heartbeat(
                self.core, req.group_id, req.member_id, req.generation_id, self.server.now_ms()
            )
            if code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS):
                self._heard(conn, req.group_id, req.member_id)
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.service.deadlines_moved()  # its rejoin is due (``ClassicRejoinDue``)
        return _reply(conn, call, HeartbeatResponse(error_code=code))

    def leave(self, conn: Connection, call: Call) -> list[Outgoing] | None:
        req = call.request
        assert isinstance(req, LeaveGroupRequest)
        if not self._mine(conn, req.group_id):
            return None
        refusal = self._refusal(req.group_id)
        if refusal is not None:
            return _reply(conn, call, LeaveGroupResponse(error_code=refusal[0]))
        group = self.core.groups[req.group_id]
        now = self.server.now_ms()
        before = group.group_epoch
        results = []
        for m in req.members:
            member_id = m.member_id
            if not member_id and m.group_instance_id is not None:
                member_id = group.static.get(m.group_instance_id, "")
            code = classic.leave(self.core, req.group_id, member_id, now)
            self.service.clients.pop((req.group_id, member_id), None)
            results.append(
                LeaveGroupMemberResult(
                    member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=code
                )
            )
        self.service.changed(req.group_id, None, before)
        return _reply(conn, call, LeaveGroupResponse(members=results))


def _guarded(handler: Handler) -> Handler:
    """The handler, its failures (a bug: the core's ``DoubleOwnerError``, say) logged and
    answered UNKNOWN_SERVER_ERROR: the connection and the server go on."""

    def guarded(conn: Connection, call: Call) -> list[Outgoing] | None:
        try:
            return handler(conn, call)
        except Exception:
            kind = type(call.request).__struct_config__.tag
            log.exception("mixed_group_failed", request=kind)
            refusal = ErrorResponse(
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                error_message=f"the coordinator failed handling a {kind} request",
            )
            return _reply(conn, call, refusal)

    return guarded


def _join_answer(answer: ClassicAnswer) -> JoinGroupResponse:
    if answer.error:
        return JoinGroupResponse(
            error_code=answer.error, error_message=answer.message, member_id=answer.member_id
        )
    return JoinGroupResponse(
        generation_id=answer.generation,
        protocol_type=classic.CONSUMER_PROTOCOL_TYPE,
        protocol_name=answer.protocol_name,
        member_id=answer.member_id,
    )


def _reply(conn: Connection, call: Call, response: Response) -> list[Outgoing]:
    return [(conn.conn_id, Reply(correlation_id=call.correlation_id, response=response))]
