"""The coordinator core: sans-IO. Requests and time in, frames to send out.

It never reads a clock, never touches a socket, never sleeps. The transport calls
``handle`` for each request, ``connection_closed`` when a connection goes away, and
``advance`` when ``next_deadline()`` has passed; each returns the frames to send, as
``(conn_id, frame)`` pairs, in order. ``now`` is a monotonic time in milliseconds.

The core is transport-agnostic: the huddle framing server drives it today, and a Kafka
wire-protocol front end can drive the same calls.

``Coordinator`` wires the core's parts together and hands each request to the one that
answers it: ``Joins`` (joining), ``Syncs`` (syncing), ``Heartbeats``, ``Leaves`` (leaving),
``Offsets``, ``TopicRegistry`` (topics) and ``GroupAdmin`` (group_admin); ``Deadlines``
acts on deadlines that passed. They share ``Sessions`` (the groups, their members'
sessions, which connection each speaks through) and move groups through the rebalance
phases with ``Rebalances``. docs/coordinator.md walks a JoinGroup and a heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from uuid import UUID

import msgspec
import structlog

from huddle.coordinator.answers import answer_held
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.deadlines import Deadlines
from huddle.coordinator.effects import Effects, Outgoing, Peer
from huddle.coordinator.group import Committed, Group
from huddle.coordinator.group_admin import GroupAdmin
from huddle.coordinator.heartbeats import Heartbeats
from huddle.coordinator.joining import Joins
from huddle.coordinator.leaving import Leaves
from huddle.coordinator.loading import Loader
from huddle.coordinator.offsets import CommitFence, Offsets, fence_by_generation
from huddle.coordinator.rebalance import Rebalances
from huddle.coordinator.retention import Retention
from huddle.coordinator.security.access import described_topics, screen
from huddle.coordinator.security.acls import Authorizer
from huddle.coordinator.sessions import RebalanceObserver, Sessions, uuid_member_id
from huddle.coordinator.storage.kept_consumer_groups import ConsumerKept
from huddle.coordinator.storage.records import (
    GroupRecord,
    OffsetRecord,
    Record,
    SessionRecord,
    TopicRecord,
)
from huddle.coordinator.syncing import Syncs
from huddle.coordinator.timers import TimerQueue
from huddle.coordinator.topic_ids import NewTopicId, new_topic_id
from huddle.coordinator.topics import TopicRegistry
from huddle.coordinator.values import Deadline
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeGroupsRequest,
    ErrorResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListTopicsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    Reply,
    Request,
    Response,
    SyncGroupRequest,
    TopicMetadata,
    TopicMetadataChanged,
)

__all__ = ["Coordinator", "Outgoing", "Peer"]

log = structlog.get_logger("huddle.core")

E = ErrorCode


class Coordinator:
    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        new_member_id: Callable[[str], str] = uuid_member_id,
        commit_fence: CommitFence = fence_by_generation,
        new_topic_id: NewTopicId = new_topic_id,
    ) -> None:
        self.config = config or GroupConfig()
        self.timers: TimerQueue[Deadline] = TimerQueue()
        self.changes: list[Record] = []  # since take_changes(): what to keep across restarts
        # the parts (see the module's docstring)
        self.sessions = sessions = Sessions(self.config, self.timers, new_member_id, self.changes)
        self.rebalances = rebalances = Rebalances(sessions)
        self.joins = Joins(sessions, rebalances)
        self.syncs = Syncs(sessions, rebalances)
        self.heartbeats = Heartbeats(sessions)
        self.leaves = Leaves(sessions, rebalances)
        self.deadlines = Deadlines(sessions, rebalances)
        self.topics = TopicRegistry(self.config.max_partitions, new_topic_id)
        sessions.topic_counts = self.topics.partitions
        self.offsets = Offsets(
            sessions,
            self.topics,
            self.config.offset_metadata_max_bytes,
            self.changes,
            self.config.max_request_partitions,
            commit_fence,
        )
        self.admin = GroupAdmin(sessions, self.changes)
        self.retention = Retention(sessions, self.config, self.changes)
        # the consumer-protocol groups' records (their groups are the ConsumerService's)
        self.consumer_kept = ConsumerKept()
        self._loader = Loader(sessions, rebalances, self.topics, self.offsets, self.consumer_kept)

        # Which node coordinates a group: the transport sets it (its own address, or the
        # cluster's shard owners); without one, nobody is known.
        self.locate: Callable[[str], FindCoordinatorResponse] = _nobody
        self.describe_cluster: Callable[[], DescribeClusterResponse] = DescribeClusterResponse
        # With an authorizer, each request is screened by its principal's ACLs first
        # (huddle.coordinator.security.access); without one, everything is allowed.
        self.authorizer: Authorizer | None = None
        self._peers: dict[int, Peer] = {}  # with an authorizer: whom each connection is

    @property
    def groups(self) -> dict[str, Group]:
        return self.sessions.groups

    # --- what a transport sets up ------------------------------------------------------

    def keep_groups(self) -> None:
        """Record every group after each rebalance and as it empties (``take_changes``): a
        transport with a data dir or a cluster keeps them, so a restart or the node taking
        a shard over serves them on (``start``, ``load``)."""
        self.sessions.keep_groups = True
        self.consumer_kept.enabled = True

    def keep_consumer(self, records: list[Record]) -> None:
        """Changes of consumer-protocol groups, kept as the core's own (``take_changes``)
        when groups are kept."""
        if self.sessions.keep_groups:
            self.changes.extend(records)

    @property
    def keeps_groups(self) -> bool:
        """Whether ``keep_groups`` was called: a restart knows this one's members."""
        return self.sessions.keep_groups

    def observe_rebalances(self, observer: RebalanceObserver) -> None:
        """Tell ``observer`` (metrics) of each rebalance's phases, on the core's clock."""
        self.sessions.observer = observer

    def set_wall_clock(self, now: float, wall_ms: float) -> None:
        """The wall clock reads ``wall_ms`` (ms since the epoch) at the core's time ``now``:
        commits and groups emptying are stamped with it, for offset retention."""
        self.sessions.set_wall_clock(now, wall_ms)

    def holds_members(self, conn_id: int) -> bool:
        """Whether a member, or a member id handed out and not used yet, speaks through
        the connection ``conn_id`` (one that holds none may be closed when idle)."""
        return conn_id in self.sessions.by_conn

    # --- entry points ----------------------------------------------------------------

    def handle(
        self, peer: Peer, correlation_id: int, request: Request, now: float
    ) -> list[Outgoing]:
        if self.authorizer is not None:
            return self._screened(peer, correlation_id, request, now, self.authorizer)
        return self._handle(peer, correlation_id, request, now)

    def _screened(
        self, peer: Peer, correlation_id: int, request: Request, now: float, auth: Authorizer
    ) -> list[Outgoing]:
        self._peers[peer.conn_id] = peer  # its notices are screened by its principal too
        screened = screen(auth, peer, request)
        if screened.request is None:
            assert screened.refusal is not None
            return [(peer.conn_id, Reply(correlation_id=correlation_id, response=screened.refusal))]
        finish = screened.finish
        out = self._handle(peer, correlation_id, screened.request, now, finish)
        if finish is not None:
            for i, (conn_id, frame) in enumerate(out):
                if (
                    conn_id == peer.conn_id
                    and type(frame) is Reply
                    and frame.correlation_id == correlation_id
                ):
                    response = finish(frame.response)
                    out[i] = (conn_id, Reply(correlation_id=correlation_id, response=response))
                    break
        return out

    def _handle(
        self,
        peer: Peer,
        correlation_id: int,
        request: Request,
        now: float,
        finish: Callable[[Response], Response] | None = None,  # what screening puts back
    ) -> list[Outgoing]:
        if type(request) is HeartbeatRequest:  # the hot path: no Effects, no match
            return [self.heartbeats.heartbeat(peer, correlation_id, request, now)]
        fx = Effects(now)
        match request:
            case JoinGroupRequest():
                self.joins.join(fx, peer, correlation_id, request)
            case SyncGroupRequest():
                self.syncs.sync(fx, peer, correlation_id, request)
            case LeaveGroupRequest():
                self.leaves.leave(fx, peer, correlation_id, request)
            case OffsetCommitRequest():
                self.offsets.commit(fx, peer, correlation_id, request)
            case OffsetFetchRequest():
                self.offsets.fetch(fx, peer, correlation_id, request)
            case CreateTopicsRequest() | AlterTopicsRequest() | DeleteTopicsRequest():
                answer, changed = self.topics.change(request, correlation_id, finish)
                fx.reply((peer.conn_id, correlation_id), answer)
                self._topics_changed(fx, changed)
            case ListTopicsRequest():
                fx.reply((peer.conn_id, correlation_id), self.topics.list(request))
            case DescribeGroupsRequest():
                fx.reply((peer.conn_id, correlation_id), self.admin.describe(request))
            case ListGroupsRequest():
                fx.reply((peer.conn_id, correlation_id), self.admin.list_groups(request))
            case DeleteGroupsRequest():
                fx.reply((peer.conn_id, correlation_id), self.admin.delete_groups(request))
            case FindCoordinatorRequest():
                fx.reply((peer.conn_id, correlation_id), self.locate(request.group_id))
            case DescribeClusterRequest():
                described = self.describe_cluster()
                if not request.include_shards and (described.shards or described.served):
                    described = msgspec.structs.replace(described, shards=[], served=None)
                fx.reply((peer.conn_id, correlation_id), described)
            case _:  # pragma: no cover - the decoder admits only the types above
                fx.reply(
                    (peer.conn_id, correlation_id),
                    ErrorResponse(
                        error_code=E.INVALID_REQUEST,
                        error_message=f"unsupported request {type(request).__name__}",
                    ),
                )
        return fx.out

    def connection_closed(
        self, conn_id: int, now: float, grace_ms: int | None = None
    ) -> list[Outgoing]:
        """``conn_id`` closed; its dynamic members get ``grace_ms`` to come back (None:
        the configured disconnect grace; below 0: none, they stay until their session
        timeout)."""
        self._peers.pop(conn_id, None)
        fx = Effects(now)
        self.sessions.connection_closed(fx, conn_id, grace_ms)
        return fx.out

    def advance(self, now: float, unread: Callable[[int], bool] | None = None) -> list[Outgoing]:
        """Act on every deadline at or before ``now``. ``unread(conn_id)``: whether the
        transport holds input from that connection it has not handed over yet; a member
        whose session ends then is given until that input has been read."""
        fx = Effects(now)
        while (key := self.timers.pop_next(now)) is not None:
            self.deadlines.expire(fx, key, unread)
        return fx.out

    def start(self, now: float) -> None:
        """The coordinator starts serving at ``now``, after ``restore``, in one go: the kept
        groups are loaded as a cluster node loads a shard's (``load``), each Stable in its
        kept generation with a fresh session for every member, and their offsets with them.
        A transport loading a large data dir runs it in steps: ``loading_groups``, then
        ``begin_serving`` and ``serve_loaded`` (``huddle.coordinator.loading``)."""
        for _ in self.loading_groups(now):
            pass
        self.begin_serving(now)
        self.serve_loaded(now)

    def loading_groups(self, now: float) -> Iterator[None]:
        """Load the restored groups, one per step (``Loader.loading_groups``)."""
        return self._loader.loading_groups(now)

    def begin_serving(self, now: float) -> None:
        """The loaded state is served from ``now``. A journal written by an older version
        kept no groups, only the longest session it granted: a member of the groups it
        forgot may still count its session alive for that long, so no generation forms
        before then (``Sessions.fence``), and nobody is handed a partition such a member
        may still be processing. A topic restored without an id (kept before topics had
        ids) is given one now, and that is recorded (``take_changes``)."""
        self.sessions.fence(now)
        for name, count, topic_id in self.topics.give_ids():
            self.changes.append(TopicRecord(name, count, topic_id))

    def serve_loaded(self, now: float, most: int | None = None) -> list[Outgoing]:
        """Start the loaded members' sessions at ``now``, ``most`` groups at a time
        (``Loader.serve_loaded``); ``unserved`` says how many groups are left."""
        return self._loader.serve_loaded(now, most)

    @property
    def unserved(self) -> int:
        return len(self._loader.unserved)

    def next_deadline(self) -> float | None:
        return self.timers.next_deadline()

    def shutdown(self) -> list[Outgoing]:
        """Answer every held request: the coordinator is going away, find it again."""
        fx = Effects(0.0)
        for group in self.groups.values():
            for member in group.members.values():
                answer_held(fx, group, member, _JOIN_UNAVAILABLE, _SYNC_UNAVAILABLE)
        return fx.out

    # --- what is kept across restarts (coordinator.storage.records) ---------------------------

    def take_changes(self) -> list[Record]:
        """The records of every change since the last call, in order; the transport keeps
        them (``huddle.coordinator.storage.journal``) before it sends the answers."""
        if not self.changes:
            return []
        taken = list(self.changes)
        self.changes.clear()
        return taken

    def restore(self, records: Iterable[Record]) -> None:
        """Replay kept records, oldest first, into a core that has not served yet."""
        for _ in self.restoring(records):
            pass

    def restoring(self, records: Iterable[Record]) -> Iterator[None]:
        """``restore`` in steps (``Loader.restoring``)."""
        return self._loader.restoring(records)

    # --- groups moving between cluster nodes ---------------------------------------------

    def load(self, records: Iterable[Record], now: float) -> None:
        """Serve the groups and offsets of a shard this node took over: every group as
        Stable in its kept generation (fresh sessions), then its committed offsets."""
        records = list(records)
        for record in records:
            if isinstance(record, GroupRecord):
                self.rebalances.load_group(record, now)
        for record in records:
            if isinstance(record, OffsetRecord):
                self.offsets.restore(record)

    def unload(self, group_ids: Iterable[str], now: float) -> list[Outgoing]:
        """Stop serving these groups (their shard left this node), offsets and all, with
        no rebalance; requests they hold are answered NOT_COORDINATOR."""
        fx = Effects(now)
        for group_id in group_ids:
            self.sessions.unload_group(fx, group_id)
        return fx.out

    def topic_changed_elsewhere(
        self, name: str, partitions: int, now: float, topic_id: UUID | None = None
    ) -> list[Outgoing]:
        """Another cluster node created, resized or deleted a topic (0: deleted), whose id
        is ``topic_id`` (None: as it is here): the same change here, announced to this
        node's members. Nothing if already so."""
        topics = self.topics
        if topics.partitions.get(name, 0) == partitions and (
            not partitions or topic_id is None or topics.ids.get(name) == topic_id
        ):
            return []
        if partitions > 0:
            topics.put(name, partitions, topic_id)
        else:
            topics.remove(name)
        self.sessions.topics_changed()
        self.offsets.forget_topic(name, partitions)
        fx = Effects(now)
        changed = topics.metadata(name)
        if partitions == 0:
            changed = TopicMetadata(name=name, error_code=E.UNKNOWN_TOPIC_OR_PARTITION)
        self._announce(fx, [changed])
        return fx.out

    def snapshot(self) -> list[Record]:
        """The records that rebuild the kept state as it is now (for compaction)."""
        return list(self.frozen_snapshot()())

    def frozen_snapshot(self) -> Callable[[], Iterator[Record]]:
        """``snapshot`` in two steps: copies of the state's containers now; the returned
        function yields the records from them (anywhere, later)."""
        steps = self.copy_state()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                records: Callable[[], Iterator[Record]] = done.value
                return records

    def copy_state(self) -> Generator[None, None, Callable[[], Iterator[Record]]]:
        """``frozen_snapshot`` one group at a time: yields between groups so the caller can
        let other work run. Groups changed after they were copied are not in the result: the
        caller replays the records of changes made meanwhile after it (records set values,
        so replaying one twice is harmless)."""
        topics = dict(self.topics.partitions)
        ids = dict(self.topics.ids)
        fence = self.sessions.unserved_fence_ms
        consumer = self.consumer_kept.copy()
        groups: list[tuple[str, GroupRecord | None, dict[tuple[str, int], Committed]]] = []
        for gid in list(self.groups):
            group = self.groups.get(gid)
            if group is not None and (group.offsets or group.kept is not None):
                groups.append((gid, group.kept, dict(group.offsets)))
                yield

        def records() -> Iterator[Record]:
            if fence > 0:
                yield SessionRecord(fence)
            for name, count in sorted(topics.items()):
                yield TopicRecord(name, count, ids.get(name))
            yield from consumer
            # one group's copy freed at a time: freeing them all at once is one long stall
            groups.sort(key=lambda item: item[0], reverse=True)
            while groups:
                group_id, kept, offsets = groups.pop()
                if kept is not None:  # as its last record said, not as it is mid-rebalance
                    yield kept
                for (topic, partition), (offset, metadata, at) in sorted(offsets.items()):
                    yield OffsetRecord(group_id, topic, partition, offset, metadata, at)
                del offsets

        return records

    def kept_size(self) -> int:
        """How many records ``snapshot()`` would return."""
        kept = len(self.topics.partitions) + (1 if self.sessions.unserved_fence_ms else 0)
        kept += self.consumer_kept.size()
        return kept + sum(len(g.offsets) + (g.kept is not None) for g in self.groups.values())

    # --- topics and inspection -------------------------------------------------------

    def _topics_changed(self, fx: Effects, changed: list[TopicMetadata]) -> None:
        if changed:
            self.sessions.topics_changed()
        for topic in changed:
            self.changes.append(TopicRecord(topic.name, topic.partitions, topic.topic_id))
            self.offsets.forget_topic(topic.name, topic.partitions)
        self._announce(fx, changed)

    def _announce(self, fx: Effects, changed: list[TopicMetadata]) -> None:
        if not changed:
            return
        notice = TopicMetadataChanged(topics=changed)
        auth = self.authorizer
        for conn_id in sorted(self.sessions.by_conn):
            peer = self._peers.get(conn_id)
            if auth is None or peer is None:
                fx.notify(conn_id, notice)
                continue
            shown = described_topics(auth, peer, changed)  # nothing of topics it may not see
            if shown:
                fx.notify(
                    conn_id,
                    notice if len(shown) == len(changed) else TopicMetadataChanged(topics=shown),
                )

    def expire_offsets(self, now: float, wall_ms: float) -> int:
        """Offset retention (``huddle.coordinator.retention``, Kafka's KIP-211) at the
        wall clock ``wall_ms``. Returns how many offsets expired."""
        self.set_wall_clock(now, wall_ms)
        return self.retention.expire(wall_ms)

    def expiring_offsets(self, now: float, wall_ms: float) -> Generator[None, None, int]:
        """``expire_offsets`` one group at a time (``Retention.expiring``): the transport
        runs it every check interval, a few milliseconds at a time."""
        self.set_wall_clock(now, wall_ms)
        return self.retention.expiring(wall_ms)


def _unavailable(what: str) -> ErrorResponse:
    return ErrorResponse(
        error_code=E.COORDINATOR_NOT_AVAILABLE, error_message=f"coordinator shutting down ({what})"
    )


_JOIN_UNAVAILABLE = _unavailable("join_group")
_SYNC_UNAVAILABLE = _unavailable("sync_group")


def _nobody(group_id: str) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(
        error_code=E.COORDINATOR_NOT_AVAILABLE,
        error_message=f"no coordinator address is known for group {group_id!r}",
    )
