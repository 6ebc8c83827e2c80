"""The consumer group protocol (KIP-848) on huddle's own wire.

The server's one ``ConsumerService`` (``huddle.coordinator.consumer_service``) serves a
``ConsumerHeartbeatRequest`` (topics by name, as the core takes them) beside the classic
core: ``HuddleConsumer.serve`` is the request path's handler for that type, so the ACLs,
the groups and their timers are the ones the Kafka listener uses (whose
ConsumerGroupHeartbeat is translated to the same request and served by the same handler).
Its answer goes as the core's do: once the records the heartbeat made are kept (the data
dir's journal, or etcd). A pushed notice is not held: it carries no state, only "heartbeat
now", and that heartbeat's answer waits behind the write. It remembers the
connection each member last heartbeated on and pushes it a ``ConsumerAssignmentChanged``
when the service names the member (its next heartbeat would be answered differently), so
a huddle member reconciles at once rather than at its next heartbeat interval. An
``OffsetCommitRequest`` by a consumer group's member at its epoch is checked against the
member's epoch by the Kafka listener's rule (``ConsumerGroups.check_offsets``, set as the
core's ``Offsets.consumer_commit``). A peer that
handshook with protocol version 1 does not know these messages: its request is answered
UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from huddle.coordinator.config import consumer_assignors
from huddle.coordinator.connection import Connection
from huddle.coordinator.consumer import ConsumerCoordinator, ConsumerGroupConfig, HeartbeatAnswer
from huddle.coordinator.consumer import HeartbeatRequest as CoreRequest
from huddle.coordinator.consumer.assignors import ASSIGNORS, DeferredAssignor
from huddle.coordinator.consumer.messages import ClassicGroupSnapshot
from huddle.coordinator.consumer_service import ConsumerService
from huddle.coordinator.core import Coordinator
from huddle.coordinator.effects import Outgoing
from huddle.coordinator.huddle_wire import HuddleWire
from huddle.coordinator.kafka.consumer_groups import OFFSET_COMMIT_EPOCH_FROM, ConsumerGroups
from huddle.coordinator.mixed_groups import (
    MixedGroups,
    classic_snapshot,
    drop_classic,
    to_classic,
)
from huddle.coordinator.security.acls import Authorizer
from huddle.coordinator.storage.kept_consumer_groups import ConsumerKept
from huddle.coordinator.storage.records import Record
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    INTRODUCED_IN,
    Call,
    ConsumerAssignmentChanged,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ConsumerTopicPartitions,
    ErrorResponse,
    Reply,
)

if TYPE_CHECKING:
    from huddle.coordinator.host import CoordinatorServer

_SINCE = INTRODUCED_IN[ConsumerHeartbeatRequest]


class CoreConsumerView:
    """A coordinator core's topics, ACLs, classic groups and kept consumer records as the
    consumer service reads them: the part of ``consumer_service.ConsumerHost`` that any
    transport of the core shares (the server's, the simulator's)."""

    def __init__(self, core: Coordinator) -> None:
        self._core = core

    @property
    def topic_partitions(self) -> Mapping[str, int]:
        return self._core.topics.partitions

    @property
    def topic_names(self) -> Mapping[uuid.UUID, str]:
        return self._core.topics.names

    @property
    def topic_ids(self) -> Mapping[str, uuid.UUID]:
        return self._core.topics.ids

    @property
    def topics_version(self) -> int:
        return self._core.sessions.topics_version

    def classic_members(self, group_id: str) -> int:
        group = self._core.groups.get(group_id)
        return 0 if group is None else len(group.members)

    @property
    def authorizer(self) -> Authorizer | None:
        return self._core.authorizer

    @property
    def consumer_kept(self) -> ConsumerKept:
        return self._core.consumer_kept


class ServerConsumerHost(CoreConsumerView):
    """The server as the consumer service reads it (``consumer_service.ConsumerHost``): its
    core's view, its clock, its keeper and its cluster."""

    def __init__(self, server: CoordinatorServer) -> None:
        super().__init__(server.core)
        self._server = server
        self.now_ms = server.now_ms

    def classic_snapshot(self, group_id: str) -> ClassicGroupSnapshot | tuple[ErrorCode, str]:
        return classic_snapshot(self._server, group_id)

    def drop_classic(self, group_id: str) -> None:
        drop_classic(self._server, group_id)

    def to_classic(
        self,
        group_id: str,
        group: ClassicGroupSnapshot,
        clients: Mapping[str, tuple[str, str]],
    ) -> None:
        to_classic(self._server, group_id, group, clients)

    def keep(self, records: list[Record], *, outside: bool) -> None:
        self._core.keep_consumer(records)
        if outside:
            self._server.keep_outside()

    def not_served(self, group_id: str) -> tuple[ErrorCode, str] | None:
        server = self._server
        if server.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the coordinator is loading its data dir"
        cluster = server.cluster
        if cluster is None:
            if server.config.cluster:
                return ErrorCode.NOT_COORDINATOR, "the node is joining its cluster"
            return None
        refusal = cluster.refuses_group(group_id)
        if refusal is None:
            return None
        return ErrorCode(refusal.error_code), refusal.error_message or ""


def server_service(server: CoordinatorServer) -> ConsumerService:
    """A server's consumer service, with the server's timeouts: its heartbeats served on
    huddle's wire, its groups listed and described there (``consumer_admin``) and counted
    in the metrics (``consumer_metrics``)."""
    cfg = server.config
    hold_ms = cfg.consumer_deferred_hold_ms
    config = ConsumerGroupConfig(
        session_timeout_ms=cfg.consumer_session_timeout_ms,
        heartbeat_interval_ms=cfg.consumer_heartbeat_interval_ms,
        migration_policy=cfg.consumer_migration_policy,
        classic_max_size=server.config.group.max_group_size,
        assignors=consumer_assignors(cfg.consumer_assignors),
        departure_memory_ms=max(ConsumerGroupConfig().departure_memory_ms, hold_ms),
    )
    assignors = {**ASSIGNORS, "deferred": DeferredAssignor(hold_ms=hold_ms)}
    core = ConsumerCoordinator(config, assignors)
    service = ConsumerService(ServerConsumerHost(server), core)
    huddle = HuddleConsumer(service, server.requests.conns)
    server.requests.beside[ConsumerHeartbeatRequest] = huddle.serve
    MixedGroups(server, service)  # the Kafka listener's classic members of consumer groups
    server.core.admin.consumer = service
    server.core.retention.consumer = service  # offsets kept by subscription, empty groups go
    server.core.joins.consumer_group = service.refuses_classic  # huddle's wire's JoinGroup
    # huddle's wire's OffsetCommit at a member epoch, checked as the Kafka listener's v9+
    checks = ConsumerGroups(service)
    server.core.offsets.consumer_commit = lambda group_id, member_id, epoch: _code(
        checks.check_offsets(group_id, member_id, epoch, OFFSET_COMMIT_EPOCH_FROM, commit=True)
    )
    if server.metrics is not None:
        server.metrics.consumer = service
    return service


def _code(checked: int | None) -> ErrorCode | None:
    return None if checked is None else ErrorCode(checked)


class HuddleConsumer:
    """The consumer service's requests and notices on huddle's wire."""

    def __init__(self, service: ConsumerService, conns: Mapping[int, Connection]) -> None:
        self.service = service
        self.conns = conns
        self.members: dict[tuple[str, str], int] = {}  # (group, member) -> its connection
        service.watchers.append(self.tell)
        service.departures.append(self.forget)

    def serve(self, conn: Connection, call: Call) -> list[Outgoing]:
        """The request path's handler of a ``ConsumerHeartbeatRequest``, whatever wire it
        came by (the Kafka listener translates its ConsumerGroupHeartbeat to one): the
        answer, which the path holds until the heartbeat's records are kept."""
        req = call.request
        assert isinstance(req, ConsumerHeartbeatRequest)
        response: ConsumerHeartbeatResponse | ErrorResponse
        if conn.version < _SINCE:
            response = ErrorResponse(
                error_code=ErrorCode.UNSUPPORTED_VERSION,
                error_message=f"consumer_heartbeat needs protocol version {_SINCE}",
            )
        else:
            answer = self.service.heartbeat(core_request(req), conn.peer)
            # a member gone is forgotten (``forget``); a refused heartbeat moves nothing
            if not answer.error and req.member_epoch >= 0:
                key = (req.group_id, req.member_id)
                if conn.wire.listener == HuddleWire.listener:
                    self.members[key] = conn.conn_id
                else:  # a Kafka client gets no notice
                    self.members.pop(key, None)
            response = wire_answer(answer, self.service.core.config.session_timeout_ms)
        return [(conn.conn_id, Reply(correlation_id=call.correlation_id, response=response))]

    def forget(self, group_id: str, member_id: str) -> None:
        self.members.pop((group_id, member_id), None)

    def tell(self, group_id: str, member_id: str, target_epoch: int) -> None:
        conn_id = self.members.get((group_id, member_id))
        if conn_id is None:
            return  # a Kafka client's, or one that left
        conn = self.conns.get(conn_id)
        if conn is None:
            del self.members[group_id, member_id]
            return
        conn.send(
            ConsumerAssignmentChanged(
                group_id=group_id, member_id=member_id, target_epoch=target_epoch
            )
        )


def core_request(req: ConsumerHeartbeatRequest) -> CoreRequest:
    owned: dict[str, frozenset[int]] | None = None
    if req.owned is not None:
        owned = {}
        for topic in req.owned:
            owned[topic.topic] = owned.get(topic.topic, frozenset()) | frozenset(topic.partitions)
    names = req.subscribed_topic_names
    return CoreRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=req.subscribed_topic_regex,
        server_assignor=req.server_assignor,
        owned=owned,
    )


def wire_answer(answer: HeartbeatAnswer, session_timeout_ms: int = 0) -> ConsumerHeartbeatResponse:
    assignment = None
    if answer.assignment is not None:
        assignment = [
            ConsumerTopicPartitions(topic=name, partitions=sorted(partitions))
            for name, partitions in sorted(answer.assignment.items())
            if partitions
        ]
    return ConsumerHeartbeatResponse(
        error_code=answer.error,
        error_message=answer.message,
        member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval_ms=answer.heartbeat_interval_ms,
        assignment=assignment,
        session_timeout_ms=0 if answer.error else session_timeout_ms,
    )
