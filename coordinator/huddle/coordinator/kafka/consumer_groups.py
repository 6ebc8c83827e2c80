"""The consumer group protocol (KIP-848) on the Kafka listener: ConsumerGroupHeartbeat.

One ``ConsumerGroups`` per Kafka listener (so one per server) owns the sans-IO core
(``huddle.coordinator.consumer.ConsumerCoordinator``): every consumer-protocol group of the
server, keyed by group id. A heartbeat is answered at once, without the classic core's
request path (it needs nothing of it). Here:

- topic ids <-> names: owned partitions arrive as topic ids and are mapped to names with
  the topic registry (an id no topic has is left out); the assignment leaves as ids;
- the topic view the core assigns from is the registry's, its version the registry's count
  of changes, so a regular expression subscription follows topics created and deleted;
- ACLs as Kafka's ``KafkaApis.handleConsumerGroupHeartbeatRequest``: READ on the group
  (else GROUP_AUTHORIZATION_FAILED), DESCRIBE on each subscribed topic name (else
  TOPIC_AUTHORIZATION_FAILED, the whole request); a regex resolves only to topics the
  principal of the heartbeat that resolves it may DESCRIBE (as Kafka 4.x);
- version 0 lets the coordinator choose the member id on join (Kafka 4.0): one is made up
  when a v0 join sends none;
- a group id a classic group with members uses is refused GROUP_ID_NOT_FOUND, as Kafka
  answers a consumer-protocol join to a classic group it does not upgrade online (mixed
  groups are not served yet);
- a supervised timer calls the core's ``expire`` once its next deadline has passed;
- the core's ``DoubleOwnerError`` (a bug detector) is logged and answered
  UNKNOWN_SERVER_ERROR: it never closes the connection or stops the server;
- every change of a group (a heartbeat's, an expiry's) is kept as records
  (``huddle.coordinator.storage.kept_consumer_groups``) through the server's keeper, the
  data dir's journal; the groups kept are loaded when the listener opens, each member at
  its epoch with a fresh session.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol

import msgspec
import structlog

from huddle.coordinator.consumer import (
    ConsumerCoordinator,
    DoubleOwnerError,
    HeartbeatAnswer,
    HeartbeatRequest,
    TopicView,
)
from huddle.coordinator.consumer_metrics import FENCED_BY_EPOCH, ConsumerCounts
from huddle.coordinator.effects import Peer
from huddle.coordinator.kafka import schemas
from huddle.coordinator.kafka.translate import Plan, Values, get
from huddle.coordinator.security.acls import Authorizer, Operation, ResourceType
from huddle.coordinator.storage.kept_consumer_groups import ConsumerKept
from huddle.coordinator.storage.records import Record
from huddle.protocol.errors import ErrorCode

log = structlog.get_logger("huddle.coordinator.kafka.consumer_groups")

CONSUMER_GROUP_HEARTBEAT: Final = 68
STALE_MEMBER_EPOCH: Final = 113  # Kafka's: an offset request's member epoch is not the member's
OFFSET_COMMIT_EPOCH_FROM: Final = 9  # OffsetCommit's first version with a member epoch
_COORDINATOR_CHOOSES_UNTIL: Final = 0  # the last version whose join may leave the member id out


class ConsumerHost(Protocol):
    """What the consumer groups need of the server."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def now_ms(self) -> float:
        """The core's clock, in milliseconds."""

    @property
    def topic_partitions(self) -> Mapping[str, int]: ...

    @property
    def topic_names(self) -> Mapping[uuid.UUID, str]: ...

    @property
    def topic_ids(self) -> Mapping[str, uuid.UUID]: ...

    @property
    def topics_version(self) -> int:
        """Counts the registry's changes (a topic created, resized or deleted)."""

    def classic_members(self, group_id: str) -> int:
        """Members of the classic group ``group_id`` (0: none, or no such group)."""

    @property
    def authorizer(self) -> Authorizer | None: ...

    @property
    def consumer_kept(self) -> ConsumerKept:
        """The consumer groups' records, as the data dir replayed them."""

    def keep(self, records: list[Record]) -> None:
        """Keep these records of the consumer groups' changes (soon: the answers go now)."""

    def not_served(self, group_id: str) -> tuple[ErrorCode, str] | None:
        """Why this server does not coordinate ``group_id`` now (a cluster node that does
        not serve its shard: NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS)."""


def new_member_id() -> str:
    """A member id as Kafka's clients make them (``Uuid.randomUuid().toString()``)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class ConsumerGroups:
    """The server's consumer-protocol groups, served on its Kafka listener."""

    def __init__(self, host: ConsumerHost, core: ConsumerCoordinator | None = None) -> None:
        self.host = host
        self.core = core or ConsumerCoordinator()
        self._view: TopicView | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        # (group id, member id) -> the client id and host it last heartbeated from
        self.clients: dict[tuple[str, str], tuple[str, str]] = {}
        self.counts = ConsumerCounts()  # epoch bumps and fenced members (the metrics')
        self.kept = host.consumer_kept
        self.kept.serving = self
        self.load_kept(None)

    def load_kept(self, group_ids: Iterable[str] | None) -> None:
        """Serve kept groups (None: all): each member at its kept epoch, with a fresh
        session."""
        now = self.host.now_ms()
        for group in self.kept.loaded_groups(group_ids):
            self.core.load(group, now)
            log.info(
                "consumer_group_loaded",
                group_id=group.group_id,
                group_epoch=group.group_epoch,
                members=len(group.members),
            )
        self._arm()

    def unload(self, doomed: Callable[[str], bool]) -> None:
        """Stop serving the groups ``doomed`` names (their cluster shard left this node)."""
        for group_id in [g for g in self.core.groups if doomed(g)]:
            self.core.unload(group_id)
        for key in [k for k in self.clients if doomed(k[0])]:
            del self.clients[key]

    def _keep(self, group_ids: Iterable[str], only: str | None = None) -> None:
        """Keep what changed in these groups (``only``: see ``ConsumerKept.changes``)."""
        records: list[Record] = []
        for group_id in group_ids:
            group = self.core.groups.get(group_id)
            if group is None:
                records += self.kept.gone(group_id)
            else:
                records += self.kept.changes(group, only)
        if records:
            self.host.keep(records)

    def refuses_classic(self, group_id: str) -> bool:
        """Whether ``group_id`` is a consumer-protocol group with members (a JoinGroup for
        it is refused). An empty one is dropped: the classic group takes its id, as Kafka
        turns an empty consumer group into a classic one."""
        group = self.core.groups.get(group_id)
        if group is None:
            return False
        if group.members:
            return True
        del self.core.groups[group_id]
        self._keep([group_id])
        return False

    def check_offsets(
        self, group_id: str, member_id: str | None, epoch: int, version: int, *, commit: bool
    ) -> int | None:
        """An OffsetCommit's (``commit``) or OffsetFetch's member and epoch checked against
        the consumer group ``group_id``, as Kafka's ``ConsumerGroup.validateOffsetCommit``
        and ``validateOffsetFetch``: ``None`` if it is no consumer group (the classic
        rules apply), 0 if it passes (the commit is made as one from outside the group),
        else the error code: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH, or (a member's commit
        older than v9, which cannot carry its epoch) UNSUPPORTED_VERSION."""
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
        if commit and version < OFFSET_COMMIT_EPOCH_FROM:
            return int(ErrorCode.UNSUPPORTED_VERSION)
        if member.member_epoch != epoch:
            return STALE_MEMBER_EPOCH
        return 0

    def topics(self) -> TopicView:
        """The registry as the core's topic view (made again when it changed)."""
        version = self.host.topics_version
        view = self._view
        if view is None or view.version != version:
            view = TopicView(dict(self.host.topic_partitions), version=version)
            self._view = view
        return view

    def _topics_for(self, peer: Peer) -> TopicView:
        """The topic view, with an authorizer limited for regexes to the topics ``peer``
        may DESCRIBE (Kafka 4.x resolves a regex so, as the heartbeat that resolves it)."""
        view = self.topics()
        auth = self.host.authorizer
        if auth is None:
            return view

        def describable(topic: str) -> bool:
            return auth.allowed(
                peer.principal, peer.host, Operation.DESCRIBE, ResourceType.TOPIC, topic
            )

        return msgspec.structs.replace(view, describable=describable)

    # --- requests -----------------------------------------------------------------------

    def plan(self, api_key: int, request: Any, version: int, peer: Peer) -> Plan:
        """The request answered now (no call to the classic core)."""
        values = self.heartbeat(request, version, peer)
        return Plan([], lambda parts: values)

    def heartbeat(self, req: Any, version: int, peer: Peer) -> Values:
        refusal = self._screen(req, peer)
        if refusal is None:
            refusal = self.host.not_served(req.group_id)
        if refusal is not None:
            return _error(*refusal)
        member_id = req.member_id
        if not member_id and req.member_epoch == 0 and version <= _COORDINATOR_CHOOSES_UNTIL:
            member_id = new_member_id()
        if self.host.classic_members(req.group_id):
            return _error(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Group {req.group_id} is a classic group with members: the consumer protocol "
                "cannot join it (mixed groups are not served)",
            )
        request = HeartbeatRequest(
            group_id=req.group_id,
            member_id=member_id,
            member_epoch=req.member_epoch,
            instance_id=req.instance_id,
            rack_id=req.rack_id,
            rebalance_timeout_ms=schemas.milliseconds(req.rebalance_timeout),
            subscribed_topic_names=_maybe_tuple(req.subscribed_topic_names),
            subscribed_topic_regex=get(req, "subscribed_topic_regex"),
            server_assignor=req.server_assignor,
            owned=self._owned(req.topic_partitions),
        )
        now = self.host.now_ms()
        before = self._epoch(req.group_id)
        try:
            answer = self.core.heartbeat(request, now, self._topics_for(peer))
        except DoubleOwnerError as error:
            log.error(
                "consumer_group_bug",
                group_id=req.group_id,
                member_id=member_id,
                error=str(error),
                client_id=peer.client_id,
            )
            return _error(ErrorCode.UNKNOWN_SERVER_ERROR, "the coordinator failed (logged)")
        finally:
            self._arm()
            self._keep([req.group_id], member_id)
        self.counts.rebalances += max(self._epoch(req.group_id) - before, 0)
        if answer.error == ErrorCode.FENCED_MEMBER_EPOCH:
            self.counts.fenced[FENCED_BY_EPOCH] += 1
        key = (req.group_id, answer.member_id or member_id)
        if answer.error or req.member_epoch < 0:
            self.clients.pop(key, None)
        else:
            self.clients[key] = (peer.client_id, peer.host)
        return self._values(answer)

    def _epoch(self, group_id: str) -> int:
        group = self.core.groups.get(group_id)
        return 0 if group is None else group.group_epoch

    def _screen(self, req: Any, peer: Peer) -> tuple[ErrorCode, str] | None:
        auth = self.host.authorizer
        if auth is None:
            return None
        allowed = auth.allowed
        if not allowed(peer.principal, peer.host, Operation.READ, ResourceType.GROUP, req.group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
        for name in req.subscribed_topic_names or ():
            if not allowed(peer.principal, peer.host, Operation.DESCRIBE, ResourceType.TOPIC, name):
                return ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Topic {name} is not authorized."
        return None

    def _owned(self, owned: Any) -> dict[str, frozenset[int]] | None:
        if owned is None:
            return None
        names = self.host.topic_names
        mapped: dict[str, frozenset[int]] = {}
        for topic in owned:
            name = names.get(topic.topic_id)
            if name is not None:
                mapped[name] = mapped.get(name, frozenset()) | frozenset(topic.partitions)
        return mapped

    def _values(self, answer: HeartbeatAnswer) -> Values:
        values: dict[str, Any] = {
            "error_code": answer.error,
            "error_message": answer.message,
            "member_id": answer.member_id,
            "member_epoch": answer.member_epoch,
            "heartbeat_interval": answer.heartbeat_interval_ms,
            "throttle_time": 0,
        }
        if answer.assignment is not None:
            ids = self.host.topic_ids
            values["assignment"] = {
                "topic_partitions": [
                    {"topic_id": ids[name], "partitions": sorted(partitions)}
                    for name, partitions in sorted(answer.assignment.items())
                    if name in ids and partitions
                ]
            }
        return values

    # --- the timer ----------------------------------------------------------------------

    def _arm(self) -> None:
        """The timer set for the core's next deadline (if it moved earlier, or was none)."""
        deadline = self.core.next_deadline()
        if deadline is None:
            return
        if self._timer is not None and self._timer_at is not None and self._timer_at <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = self.host.loop
        self._timer_at = deadline
        self._timer = loop.call_at(deadline / 1000, self._expire)

    def _expire(self) -> None:
        self._timer = self._timer_at = None
        touched: set[str] = set()
        try:
            epochs = {group_id: g.group_epoch for group_id, g in self.core.groups.items()}
            for fenced in self.core.expire(self.host.now_ms()):
                self.counts.fenced[fenced.reason] += 1
                touched.add(fenced.group_id)
                self.clients.pop((fenced.group_id, fenced.member_id), None)
                log.info(
                    "consumer_member_fenced",
                    group_id=fenced.group_id,
                    member_id=fenced.member_id,
                    member_epoch=fenced.epoch,
                    reason=fenced.reason,
                )
            self.counts.rebalances += sum(
                max(self._epoch(group_id) - epoch, 0) for group_id, epoch in epochs.items()
            )
        except Exception:  # the timer goes on: one group's failure stops no other's expiry
            log.exception("consumer_expiry_failed")
        finally:
            self._arm()
            self._keep(sorted(touched))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _maybe_tuple(names: Any) -> tuple[str, ...] | None:
    return None if names is None else tuple(names)


def _error(code: ErrorCode, message: str) -> Values:
    return {"error_code": code, "error_message": message, "member_epoch": -1, "throttle_time": 0}
