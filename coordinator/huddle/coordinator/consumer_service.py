"""The server's consumer-protocol groups (KIP-848), whatever wire a heartbeat came by.

One ``ConsumerService`` per server owns the sans-IO core
(``huddle.coordinator.consumer.ConsumerCoordinator``): every consumer-protocol group of the
server, keyed by group id. The Kafka listener (``huddle.coordinator.kafka.consumer_groups``)
and huddle's own wire (``huddle.coordinator.consumer_wire``) translate their requests to the
core's ``HeartbeatRequest`` (topics by name) and answer with its ``HeartbeatAnswer``; both
reach the same groups, so a group's members may heartbeat on either listener. Here:

- ACLs as Kafka's ``KafkaApis.handleConsumerGroupHeartbeatRequest``: READ on the group
  (else GROUP_AUTHORIZATION_FAILED), DESCRIBE on each subscribed topic name (else
  TOPIC_AUTHORIZATION_FAILED, the whole request); a regex resolves only to topics the
  principal of the heartbeat that resolves it may DESCRIBE (as Kafka 4.x);
- a group this server does not coordinate now (a cluster node that does not serve its
  shard, or is loading it; the data dir loading) is refused as the host says
  (``not_served``: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS);
- the topic view the core assigns from is the registry's, its version the registry's count
  of changes, so a regular expression subscription follows topics created and deleted; it
  carries each topic's id, so a topic deleted and created again under its name (with the
  same partition count) moves the group epoch and its partitions are revoked and given
  again (``consumer.reconcile``);
- a consumer-protocol member joining a classic group with members upgrades it to a
  consumer group (``consumer.classic``; the classic side: ``mixed_groups``) when the
  migration policy allows it; else GROUP_ID_NOT_FOUND, as Kafka answers (a classic group
  in a rebalance: COORDINATOR_LOAD_IN_PROGRESS, retried until it is stable); and a group
  the core downgrades (its last consumer-protocol member left or was fenced, the rest are
  classic: ``consumer.downgrade``) goes back to the classic coordinator (``to_classic``);
- a supervised timer calls the core's ``expire`` once its next deadline has passed;
- every change of a group (a heartbeat's, an expiry's) is kept as records
  (``huddle.coordinator.storage.kept_consumer_groups``) through the server's keeper (the
  data dir's journal, or etcd), and a heartbeat's answer goes only once its records are
  kept, as the classic protocol's answers do (either wire's: both serve the heartbeat on
  the server's request path, ``RequestPath.beside``); the groups kept are served once the
  data dir is loaded (``load_kept``), each member at its epoch with a fresh session, and
  a cluster node serves and drops a shard's groups as it takes and loses the shard
  (``ConsumerKept``);
- it counts the group epoch bumps and the members fenced (``counts``: the metrics'), and
  ``huddle groups list/describe`` read its groups (``consumer_admin``);
- after each heartbeat and expiry, every member whose next heartbeat would now be answered
  differently (the group epoch moved past the target's: a member joined, left or changed
  its subscription; or it is not reconciled to the target and the target or the partitions
  owned moved since it was last answered or told) is named to the ``watchers``: huddle's
  wire pushes it a notice, so it heartbeats at once rather than at its next interval;
- the core's ``DoubleOwnerError`` (a bug detector) is logged and answered
  UNKNOWN_SERVER_ERROR: it never closes the connection or stops the server.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import msgspec
import structlog

from huddle.coordinator.consumer import (
    ConsumerCoordinator,
    ConsumerGroup,
    DoubleOwnerError,
    HeartbeatAnswer,
    HeartbeatRequest,
    TopicView,
    classic,
)
from huddle.coordinator.consumer.messages import ClassicGroupSnapshot, RefusedError, upgrades
from huddle.coordinator.consumer_metrics import FENCED_BY_EPOCH, ConsumerCounts
from huddle.coordinator.effects import Peer
from huddle.coordinator.security.acls import Authorizer, Operation, ResourceType
from huddle.coordinator.storage.kept_consumer_groups import ConsumerKept
from huddle.coordinator.storage.records import Record
from huddle.protocol.errors import ErrorCode

log = structlog.get_logger("huddle.coordinator.consumer_service")

# (group id, member id, the target assignment's epoch) of a member to tell
Watcher = Callable[[str, str, int], None]
# a group's epoch, its target's epoch, and how many partitions its members own
_Mark = tuple[int, int, int]


class TopicsHost(Protocol):
    """The server's topics, ACLs and classic groups, as the consumer groups read them."""

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

    def classic_snapshot(self, group_id: str) -> ClassicGroupSnapshot | tuple[ErrorCode, str]:
        """The classic group ``group_id`` (with members) as an upgrade takes it: its
        generation and members; or why it cannot be upgraded (``mixed_groups``)."""

    def drop_classic(self, group_id: str) -> None:
        """The upgraded classic group's members leave the classic coordinator (its
        committed offsets stay)."""

    def to_classic(
        self,
        group_id: str,
        group: ClassicGroupSnapshot,
        clients: Mapping[str, tuple[str, str]],
    ) -> None:
        """The downgraded consumer group ``group_id`` is served by the classic coordinator
        from now, as ``group`` says, and rebalances (``clients``: member id -> the client id
        and host it last spoke from)."""

    @property
    def authorizer(self) -> Authorizer | None: ...


class ConsumerHost(TopicsHost, Protocol):
    """What the consumer service needs of the server."""

    @property
    def consumer_kept(self) -> ConsumerKept:
        """The consumer groups' records, as the data dir replayed them."""

    def keep(self, records: list[Record], *, outside: bool) -> None:
        """Keep these records of the consumer groups' changes: with the answers of the
        request being handled (the request path takes them with the core's changes, and
        holds its answers until they are kept), or ``outside`` a request (an expiry: they
        are written now)."""

    def not_served(self, group_id: str) -> tuple[ErrorCode, str] | None:
        """Why this server does not coordinate ``group_id`` now (a cluster node that does
        not serve its shard: NOT_COORDINATOR; loading: COORDINATOR_LOAD_IN_PROGRESS)."""


class ConsumerService:
    """The server's consumer-protocol groups, served to every wire."""

    def __init__(self, host: ConsumerHost, core: ConsumerCoordinator | None = None) -> None:
        self.host = host
        self.core = core or ConsumerCoordinator()
        self._view: TopicView | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        # (group id, member id) -> the client id and host it last heartbeated from
        self.clients: dict[tuple[str, str], tuple[str, str]] = {}
        self.watchers: list[Watcher] = []
        # told (group id, member id) of each member gone from the service (it left, its
        # session or revocation ran out, its group was unloaded): a wire forgets its link
        self.departures: list[Callable[[str, str], None]] = []
        # (group id, member id) -> the group's mark when the member was last answered or told
        self._told: dict[tuple[str, str], _Mark] = {}
        self.counts = ConsumerCounts()  # epoch bumps and fenced members (the metrics')
        self.kept = host.consumer_kept
        self.kept.serving = self

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
        for key in [k for k in self.clients.keys() | self._told.keys() if doomed(k[0])]:
            self._forget(key)

    def _forget(self, key: tuple[str, str]) -> None:
        """A member gone from the service: who it was and what it was told go, and the
        ``departures`` are told."""
        self.clients.pop(key, None)
        self._told.pop(key, None)
        for departed in self.departures:
            departed(*key)

    def delete(self, group_id: str) -> None:
        """The empty group ``group_id`` goes (DeleteGroups, or offset retention): its
        deletion is kept with the request's answer."""
        self.unload(lambda g: g == group_id)
        self._keep([group_id], outside=False)
        log.info("consumer_group_deleted", group_id=group_id)

    def retained(self, group_id: str) -> tuple[int, frozenset[str]] | None:
        """Offset retention's view of ``group_id`` (``retention.ConsumerRetention``): its
        group epoch and the topics its members subscribe to (None: no such group)."""
        group = self.core.groups.get(group_id)
        if group is None:
            return None
        topics = frozenset().union(*map(group.subscribed_topics, group.members.values()))
        return group.group_epoch, topics

    def empty_group_ids(self) -> list[str]:
        return [group_id for group_id, g in self.core.groups.items() if not g.members]

    def _keep(
        self, group_ids: Iterable[str], only: str | None = None, *, outside: bool = True
    ) -> None:
        """Keep what changed in these groups (``only``: see ``ConsumerKept.changes``;
        ``outside``: see ``ConsumerHost.keep``)."""
        records: list[Record] = []
        for group_id in group_ids:
            group = self.core.groups.get(group_id)
            if group is None:
                records += self.kept.gone(group_id)
            else:
                records += self.kept.changes(group, only)
        if records:
            self.host.keep(records, outside=outside)

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

    def topics(self) -> TopicView:
        """The registry as the core's topic view (made again when it changed)."""
        version = self.host.topics_version
        view = self._view
        if view is None or view.version != version:
            ids = {name: str(topic_id) for name, topic_id in self.host.topic_ids.items()}
            view = TopicView(dict(self.host.topic_partitions), version=version, ids=ids)
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

    def screen(
        self, group_id: str, names: Iterable[str] | None, peer: Peer
    ) -> tuple[ErrorCode, str] | None:
        """The ACL check of a heartbeat (``names``: its subscribed topic names, or None)."""
        auth = self.host.authorizer
        if auth is None:
            return None
        allowed = auth.allowed
        if not allowed(peer.principal, peer.host, Operation.READ, ResourceType.GROUP, group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
        for name in names or ():
            if not allowed(peer.principal, peer.host, Operation.DESCRIBE, ResourceType.TOPIC, name):
                return ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Topic {name} is not authorized."
        return None

    def heartbeat(self, request: HeartbeatRequest, peer: Peer) -> HeartbeatAnswer:
        """One heartbeat, screened (ACLs, a group not served here, a classic group's id)
        and answered by the core. What it changed goes to ``host.keep`` with the answer:
        the caller's request path sends the answer once the records are kept."""
        group_id = request.group_id
        refusal = self.screen(group_id, request.subscribed_topic_names, peer)
        if refusal is None:
            refusal = self.host.not_served(group_id)
        if refusal is not None:
            return refused(*refusal)
        if self.host.classic_members(group_id):
            refusal = self._upgrade(request)
            if refusal is not None:
                return refused(*refusal)
        before = self._epoch(group_id)
        try:
            answer = self.core.heartbeat(request, self.host.now_ms(), self._topics_for(peer))
        except DoubleOwnerError as error:
            log.error(
                "consumer_group_bug",
                group_id=request.group_id,
                member_id=request.member_id,
                error=str(error),
                client_id=peer.client_id,
            )
            return refused(ErrorCode.UNKNOWN_SERVER_ERROR, "the coordinator failed (logged)")
        finally:
            self._downgrade()
            self._arm()
            self._keep([group_id], request.member_id, outside=False)
        self.counts.rebalances += max(self._epoch(group_id) - before, 0)
        if answer.error == ErrorCode.FENCED_MEMBER_EPOCH:
            self.counts.fenced[FENCED_BY_EPOCH] += 1
        key = (group_id, answer.member_id or request.member_id)
        group = self.core.groups.get(group_id)
        if request.member_epoch < 0 or group is None or key[1] not in group.members:
            self._forget(key)
        elif not answer.error:
            self.clients[key] = (peer.client_id, peer.host)
            self._told[key] = _mark(group)
        # a refused heartbeat of a member still in the group (a stale or stray one: the
        # member did not move) leaves what is known of it, and its notices, as they were
        self._tell(group_id)
        return answer

    def _upgrade(self, request: HeartbeatRequest) -> tuple[ErrorCode, str] | None:
        """A consumer-protocol member joins the classic group ``request.group_id``: the group
        becomes a consumer group (``consumer.classic.convert``) if the migration policy
        allows it and the group can be upgraded; else why not."""
        group_id = request.group_id
        policy = self.core.config.migration_policy
        if not upgrades(policy):
            return (
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Group {group_id} is a classic group with members and the online upgrade is "
                f"disabled (--consumer-migration-policy {policy})",
            )
        taken = self.host.classic_snapshot(group_id)
        if not isinstance(taken, ClassicGroupSnapshot):
            return taken
        generation, members = taken.generation, taken.members
        refusal = classic.upgrade_refusal(self.core, request, members)
        if refusal is None:
            try:
                classic.convert(
                    self.core, group_id, generation, members, self.host.now_ms(), self.topics()
                )
            except RefusedError as error:
                refusal = error
        if refusal is not None:
            return refusal.code, refusal.message
        self.host.drop_classic(group_id)
        log.info("classic_group_converted", group_id=group_id, members=len(members))
        return None

    def changed(self, group_id: str, member_id: str | None, before: int) -> None:
        """A classic member's request changed ``group_id`` (``member_id``'s, if only it; the
        group epoch was ``before``): its records kept with the answer, its deadlines armed,
        its epoch bumps counted, its members told."""
        self.counts.rebalances += max(self._epoch(group_id) - before, 0)
        self._downgrade()
        self._arm()
        self._keep([group_id], member_id, outside=False)
        self._tell(group_id)

    def _downgrade(self) -> None:
        """Each group the core downgraded (its last consumer-protocol member went, the rest
        are classic: ``consumer.downgrade``) goes to the classic coordinator, which
        rebalances it; its records here go as an emptied group's (``_keep``)."""
        for group_id, group in self.core.take_downgraded():
            clients = {
                m.member_id: self.clients.get((group_id, m.member_id), ("", ""))
                for m in group.members
            }
            for table in (self.clients, self._told):
                for key in [k for k in table if k[0] == group_id]:
                    del table[key]
            self.host.to_classic(group_id, group, clients)
            log.info(
                "consumer_group_downgraded",
                group_id=group_id,
                generation=group.generation,
                members=len(group.members),
            )

    def deadlines_moved(self) -> None:
        """A classic member's request set a deadline in the core: the timer follows it."""
        self._arm()

    def epoch(self, group_id: str) -> int:
        """The group epoch of ``group_id`` (0: no such consumer group)."""
        return self._epoch(group_id)

    def _epoch(self, group_id: str) -> int:
        group = self.core.groups.get(group_id)
        return 0 if group is None else group.group_epoch

    def _tell(self, group_id: str) -> None:
        """Name to the watchers each member of ``group_id`` whose next heartbeat would be
        answered differently than when it was last answered (or told)."""
        group = self.core.groups.get(group_id)
        if group is None or not self.watchers:
            return
        target = group.target_epoch
        moved = group.group_epoch != target  # the next heartbeat works a new target out
        mark: _Mark | None = None
        for member_id, member in group.members.items():
            if (not moved and member.is_reconciled_to(target)) or member.has_left_for_now():
                continue
            key = (group_id, member_id)
            told = self._told.get(key)
            mark = mark or _mark(group)
            if told is None or told == mark:
                continue  # unknown here (a Kafka client's), or told of this already
            self._told[key] = mark
            for watcher in self.watchers:
                watcher(group_id, member_id, group.group_epoch)

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
        loop = asyncio.get_running_loop()
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
                self._forget((fenced.group_id, fenced.member_id))
                log.info(
                    "consumer_member_fenced",
                    group_id=fenced.group_id,
                    member_id=fenced.member_id,
                    member_epoch=fenced.epoch,
                    reason=fenced.reason,
                )
                self._tell(fenced.group_id)
            self.counts.rebalances += sum(
                max(self._epoch(group_id) - epoch, 0) for group_id, epoch in epochs.items()
            )
        except Exception:  # the timer goes on: one group's failure stops no other's expiry
            log.exception("consumer_expiry_failed")
        finally:
            self._downgrade()
            self._arm()
            self._keep(sorted(touched))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _mark(group: ConsumerGroup) -> _Mark:
    owned = sum(len(owners) for owners in group.owners.values())
    return group.group_epoch, group.target_epoch, owned


def refused(code: ErrorCode, message: str) -> HeartbeatAnswer:
    return HeartbeatAnswer(error=code, message=message, member_epoch=-1)
