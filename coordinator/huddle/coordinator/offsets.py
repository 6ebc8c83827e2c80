"""Committed offsets, fenced by generation (docs/coordinator.md section 4).

Which commits a generation fence lets through is a part of its own (``CommitFence``,
``fence_by_generation`` by default) that the core is given: the simulator passes a faulty
one to prove it finds the bug (``huddle.sim.faulty_offsets``); nothing else does.

A consumer-protocol group's (KIP-848) commit names a member id and its member epoch in
``generation_id``: the server's consumer service checks it (``consumer_commit``, as the
Kafka listener's OffsetCommit v9+ is checked: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), and one
that passes is kept as a commit from outside any classic group.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from huddle.coordinator.effects import Effects, Peer
from huddle.coordinator.group import Committed, Group, Member
from huddle.coordinator.sessions import Sessions
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.records import DELETED, OffsetRecord, Record, offset_deleted
from huddle.coordinator.topics import TopicRegistry
from huddle.coordinator.values import Refusal
from huddle.logs import debug_enabled
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    FetchedOffset,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopicResult,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopicResult,
    PartitionResult,
)

log = structlog.get_logger("huddle.offsets")
_SHARED_RESULTS = 4096  # partitions whose successful commit result is one shared instance
_ok: dict[int, PartitionResult] = {}

E = ErrorCode
S = GroupState
_NONE: Committed = (-1, None, 0)  # what a partition with no committed offset shows

# Whether a commit for a member of ``group`` made in ``generation`` is refused for it (None:
# it is not). Only commits from a known member of a group that is not Empty are asked.
CommitFence = Callable[[Group, int], Refusal | None]


# A consumer-protocol group's check of a commit by ``member_id`` at ``epoch`` (KIP-848):
# None when ``group_id`` is no consumer group (the classic rules apply), NONE when it passes,
# else the code it is refused with (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH). The server's
# consumer service sets it (``Offsets.consumer_commit``).
ConsumerCommitCheck = Callable[[str, str, int], ErrorCode | None]


def fence_by_generation(group: Group, generation: int) -> Refusal | None:
    """A member commits only in the group's current generation (Kafka's rule)."""
    if generation != group.generation:
        return Refusal(
            E.ILLEGAL_GENERATION,
            f"generation {generation} is not the group's {group.generation}",
        )
    return None


class Offsets:
    def __init__(
        self,
        sessions: Sessions,
        topics: TopicRegistry,
        metadata_max: int,
        changes: list[Record],
        request_max: int = 20_000,
        fence: CommitFence = fence_by_generation,
    ) -> None:
        self.sessions = sessions
        self.fence = fence
        self.topics = topics
        self.metadata_max = metadata_max
        self.request_max = request_max  # partitions one request may name
        self.changes = changes  # what to keep across restarts (see coordinator.storage.records)
        # offsets a topic's change drops are kept deleted one by one (a cluster node: etcd
        # has no journal whose topic records would drop them on a replay)
        self.keep_forgotten = False
        self.consumer_commit: ConsumerCommitCheck | None = None

    def commit(self, fx: Effects, peer: Peer, cid: int, req: OffsetCommitRequest) -> None:
        waiter = (peer.conn_id, cid)
        named = sum(len(topic.partitions) for topic in req.topics)
        if named > self.request_max:
            too_many = self._too_many(named, "commit them in smaller requests")
            fx.reply(
                waiter,
                OffsetCommitResponse(error_code=too_many.code, error_message=too_many.message),
            )
            return
        group, error = self._check_commit(fx, peer, req)
        if error is not None:
            no_group = group is None and error.code == E.ILLEGAL_GENERATION
            refused = OffsetCommitResponse(
                error_code=error.code, error_message=error.message, no_group=no_group
            )
            fx.reply(waiter, refused)
            if group is not None:
                self.sessions.collect(group)
            return
        assert group is not None
        results = []
        stored = 0
        offsets, changes, group_id = group.offsets, self.changes, req.group_id
        committed_ms = self.sessions.wall_ms(fx.now)
        counts, metadata_max = self.topics.partitions, self.metadata_max
        for topic in req.topics:
            name = topic.name
            count = counts.get(name, 0)  # 0: no such topic, every partition is unknown
            partitions = []
            for p in topic.partitions:
                partition, offset, metadata = p.partition, p.offset, p.metadata
                if not 0 <= partition < count:
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif offset < 0:
                    code = E.INVALID_REQUEST
                elif metadata is not None and len(metadata.encode()) > metadata_max:
                    code = E.OFFSET_METADATA_TOO_LARGE
                else:
                    code = E.NONE
                    offsets[(name, partition)] = (offset, metadata, committed_ms)
                    changes.append(
                        OffsetRecord(group_id, name, partition, offset, metadata, committed_ms)
                    )
                    stored += 1
                if code == E.NONE and 0 <= partition < _SHARED_RESULTS:
                    result = _ok.get(partition)
                    if result is None:
                        result = _ok[partition] = PartitionResult(partition=partition)
                    partitions.append(result)  # frozen: one shared instance per partition
                else:
                    partitions.append(PartitionResult(partition=partition, error_code=code))
            results.append(OffsetCommitTopicResult(name=name, partitions=partitions))
        if debug_enabled():
            log.debug(
                "offsets_committed",
                group_id=req.group_id,
                member_id=req.member_id,
                generation=req.generation_id,
                partitions=stored,
            )
        fx.reply(waiter, OffsetCommitResponse(topics=results))
        self.sessions.collect(group)

    def _check_commit(
        self, fx: Effects, peer: Peer, req: OffsetCommitRequest
    ) -> tuple[Group | None, Refusal | None]:
        if not req.group_id:
            return None, Refusal(E.INVALID_GROUP_ID, "group id must not be empty")
        groups = self.sessions.groups
        simple = req.generation_id < 0 and not req.member_id
        if self.consumer_commit is not None:  # a simple commit too: only an empty group's
            checked = self.consumer_commit(req.group_id, req.member_id, req.generation_id)
            if checked is not None:
                return self._by_member_epoch(req, checked)
        group = groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0:
                return None, Refusal(E.ILLEGAL_GENERATION, f"no group {req.group_id!r} is running")
            group = groups[req.group_id] = Group(req.group_id)
        if group.is_(S.DEAD):
            return group, Refusal(E.COORDINATOR_NOT_AVAILABLE, "group is dead")
        if req.generation_id < 0 and group.is_(S.EMPTY):
            # The group only stores offsets (an admin tool, a manual commit): any member id,
            # as Kafka's doCommitOffsets.
            return group, None
        member = self.sessions.identify(group, req.member_id, req.group_instance_id)
        if not isinstance(member, Member):
            if simple:
                return group, Refusal(
                    E.UNKNOWN_MEMBER_ID,
                    "commits without a member id are allowed only while the group is empty",
                )
            return group, member
        stale = self.fence(group, req.generation_id)
        if stale is not None:
            return group, stale
        if group.is_(S.COMPLETING_REBALANCE):
            return group, Refusal(E.REBALANCE_IN_PROGRESS, "the group is completing a rebalance")
        # Kafka accepts a commit from whoever names the member, its instance id and its
        # generation (a producer may commit for its consumer on a connection of its own),
        # and renews the member's session; the member moves only with its own client
        gone = self.sessions.follow(member, peer)
        if gone is not None:
            return group, gone
        self.sessions.touch(fx, member)
        return group, None

    def _by_member_epoch(
        self, req: OffsetCommitRequest, checked: ErrorCode
    ) -> tuple[Group | None, Refusal | None]:
        """A consumer-protocol member's commit at its epoch, ``checked``: refused with that
        code, or kept with the group's offsets (a classic group that only stores them, as a
        commit from outside the group is: the Kafka listener's are made so)."""
        if checked != E.NONE and req.generation_id < 0 and not req.member_id:
            why = "commits without a member id are allowed only while the group is empty"
            return None, Refusal(checked, f"{why}: consumer group {req.group_id!r} has members")
        if checked != E.NONE:
            why = f"member {req.member_id!r} of consumer group {req.group_id!r}"
            return None, Refusal(checked, f"{why} is not at epoch {req.generation_id}")
        groups = self.sessions.groups
        group = groups.get(req.group_id)
        if group is None:
            group = groups[req.group_id] = Group(req.group_id)
        return group, None

    def fetch(self, fx: Effects, peer: Peer, cid: int, req: OffsetFetchRequest) -> None:
        """The committed offsets asked for (each partition once, in the order first asked),
        or every committed offset of the group. A request naming more partitions than a
        request may (or asking for all of a group that has more) is refused: its answer
        would hold the loop, and everyone else, up."""
        waiter = (peer.conn_id, cid)
        group = self.sessions.groups.get(req.group_id)
        offsets = group.offsets if group is not None else {}
        topics: dict[str, list[FetchedOffset]] = {}
        if req.topics is None:
            if len(offsets) > self.request_max:
                too_many = self._too_many(len(offsets), "fetch them by partition instead")
                fx.reply(waiter, _fetch_refused(too_many))
                return
            for (name, partition), (offset, metadata, _) in sorted(offsets.items()):
                topics.setdefault(name, []).append(
                    FetchedOffset(partition=partition, offset=offset, metadata=metadata)
                )
        else:
            named = sum(len(topic.partitions) for topic in req.topics)
            if named > self.request_max:
                fx.reply(waiter, _fetch_refused(self._too_many(named, "ask in smaller requests")))
                return
            wanted: dict[str, dict[int, None]] = {}
            for topic in req.topics:
                wanted.setdefault(topic.name, {}).update(dict.fromkeys(topic.partitions))
            for name, partitions in wanted.items():
                topics[name] = [
                    FetchedOffset(partition=partition, offset=offset, metadata=metadata)
                    for partition in partitions
                    for offset, metadata, _ in (offsets.get((name, partition), _NONE),)
                ]
        fx.reply(
            waiter,
            OffsetFetchResponse(
                topics=[OffsetFetchTopicResult(name=n, partitions=ps) for n, ps in topics.items()]
            ),
        )

    def _too_many(self, named: int, advice: str) -> Refusal:
        return Refusal(
            E.INVALID_REQUEST,
            f"{named} partitions in one request is over the limit of {self.request_max}; {advice}",
        )

    def restore(self, record: OffsetRecord) -> None:
        """An offset kept from before a restart (not fenced: it was accepted then)."""
        groups = self.sessions.groups
        group = groups.get(record.group_id)
        if record.offset == DELETED:  # deleted with its group since
            if group is not None:
                group.offsets.pop((record.topic, record.partition), None)
                self.sessions.collect(group)
            return
        if group is None:
            group = groups[record.group_id] = Group(record.group_id)
        group.offsets[(record.topic, record.partition)] = (
            record.offset,
            record.metadata,
            record.committed_ms,
        )

    def forget_topic(self, name: str, partitions_left: int = 0) -> None:
        """Drop committed offsets of a deleted topic, or of partitions cut off by a shrink."""
        for group in list(self.sessions.groups.values()):
            doomed = [k for k in group.offsets if k[0] == name and k[1] >= partitions_left]
            for key in doomed:
                del group.offsets[key]
                if self.keep_forgotten:
                    self.changes.append(offset_deleted(group.group_id, *key))
            self.sessions.collect(group)


def _fetch_refused(error: Refusal) -> OffsetFetchResponse:
    return OffsetFetchResponse(error_code=error.code, error_message=error.message)
