"""The consumer group protocol (KIP-848) of a huddle member, sans-IO.

``ConsumerCore`` holds what a consumer-protocol member knows (its member id, which it makes
itself, its epoch, the partitions it owns, the heartbeat interval the coordinator set) and
decides, without IO or a clock:

- the next ``ConsumerHeartbeatRequest``: a full one (subscription, rebalance timeout,
  instance id, owned partitions) when it joins (epoch 0), a short one otherwise (its epoch
  and what it owns now, which is how it acknowledges a revocation);
- what an answer asks of it (``Reconcile``): partitions to revoke (``on_partitions_revoked``
  first, then they are given up), partitions to take (``on_partitions_assigned``), or, when
  the coordinator fenced it (FENCED_MEMBER_EPOCH) or forgot it (UNKNOWN_MEMBER_ID), every
  partition lost (``on_partitions_lost``) and a rejoin with epoch 0;
- its leave: epoch -1, or -2 for a static member (it keeps its place until its session
  runs out);
- after a lost connection (``disconnected``), or an answer saying the node is not the
  group's coordinator (``Reconcile.find``), a full heartbeat at its epoch to the coordinator
  found again: a coordinator that kept it (its data dir, or a cluster's etcd) goes on with
  it as before; one that forgot it answers UNKNOWN_MEMBER_ID (or, holding no such group
  any more, GROUP_ID_NOT_FOUND), and it loses its partitions and joins with epoch 0;
- its offset commits, made at its member epoch (``commit_request``), which the coordinator
  checks as Kafka's OffsetCommit v9+ (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID).

The runtime (``huddle.client.consumer_member``) performs a ``Reconcile``, tells the core
what it did (``revoked``, ``assigned``, ``lost``), and heartbeats again at once when the
answer changed something (that heartbeat acknowledges it) or when the coordinator pushes a
``ConsumerAssignmentChanged``; otherwise at the heartbeat interval.

While the callbacks of a ``Reconcile`` run (between ``callbacks_begin`` and
``callbacks_done``), the runtime goes on heartbeating at the interval, as a Kafka consumer's
background thread does, so that a callback slower than the session timeout (within the
rebalance timeout) costs nothing. Those heartbeats keep the session alive and nothing more:
they report what the member owns still (a partition being revoked is owned until its
``on_partitions_revoked`` returned), and their answers start no callback. A new target they
bring is reconciled once the running callbacks are done (``callbacks_done`` returns it); a
fence makes the member skip the callbacks left (it runs none on partitions it no longer
holds) and lose what it owns once the running one returned. The coordinator still fences a
member whose revocation outlasts its rebalance timeout.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from huddle.client.generation import offset_commit
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode, raise_for
from huddle.protocol.messages import (
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ConsumerTopicPartitions,
    ErrorResponse,
    OffsetCommitRequest,
)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
# answered so, the member has lost its partitions and joins again with epoch 0
REJOIN_CODES = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
# answered so, the coordinator is found again (another node serves the group, or none yet)
FIND_CODES = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
# answered so, the same heartbeat is sent again after a backoff (the coordinator loads)
RETRY_CODES = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})

NOTHING: frozenset[TopicPartition] = frozenset()


@dataclass(frozen=True)
class Reconcile:
    """What one answer asks of the member, in this order: ``lost`` (fenced: gone already),
    ``revoke`` (give up, then acknowledge), ``assign`` (start). ``again``: heartbeat at once
    (to acknowledge, or to rejoin); ``retry``: send it again after a backoff; ``find``: find
    the group's coordinator again (after a backoff) and heartbeat there."""

    lost: frozenset[TopicPartition] = NOTHING
    revoke: frozenset[TopicPartition] = NOTHING
    assign: frozenset[TopicPartition] = NOTHING
    again: bool = False
    retry: bool = False
    find: bool = False


@dataclass
class ConsumerCore:
    group_id: str
    topics: Sequence[str]
    pattern: str | None = None  # a regular expression the coordinator matches (RE2)
    instance_id: str | None = None
    rebalance_timeout_ms: int = 30_000
    heartbeat_interval_ms: int = 1_000  # until the coordinator sets it
    member_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    epoch: int = JOIN_EPOCH
    owned: frozenset[TopicPartition] = NOTHING
    # a full request is due: joining, or after an error (the coordinator may have lost track)
    full: bool = True
    session_timeout_ms: int = 0  # the coordinator's, as its answers say (0: not said)
    proved_ms: float | None = None  # when the last heartbeat answered in the group was sent
    busy: bool = False  # a reconciliation's callbacks run: heartbeats only keep it alive
    abandoned: bool = False  # fenced while they ran: the callbacks left are skipped
    later: frozenset[TopicPartition] | None = None  # a target answered while they ran
    # ``subscribe`` calls so far, and as the last request was made: a heartbeat answered
    # after a change it did not carry leaves the next one full
    resubscribed: int = 0
    resubscribed_sent: int = 0

    def request(self) -> ConsumerHeartbeatRequest:
        owned = _by_topic(self.owned)
        self.resubscribed_sent = self.resubscribed
        if not self.full:
            return ConsumerHeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=self.epoch,
                owned=owned,
            )
        return ConsumerHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            subscribed_topic_names=list(self.topics),
            subscribed_topic_regex=self.pattern or "",  # "": none (a pattern dropped)
            owned=owned,
        )

    def subscribe(self, topics: Sequence[str], pattern: str | None = None) -> None:
        """Subscribe to ``topics`` and, with ``pattern``, every topic the coordinator has
        whose whole name it matches (RE2, which the coordinator runs); the next heartbeat
        is a full one, which tells the coordinator. What the new subscription drops is
        revoked when the coordinator's answer takes it away, as any revocation."""
        self.topics = list(topics)
        self.pattern = pattern
        self.full = True
        self.resubscribed += 1

    def leave_request(self) -> ConsumerHeartbeatRequest:
        epoch = LEAVE_EPOCH if self.instance_id is None else STATIC_LEAVE_EPOCH
        return ConsumerHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.instance_id,
        )

    def answered(
        self, answer: ConsumerHeartbeatResponse | ErrorResponse, sent_ms: float | None = None
    ) -> Reconcile:
        """What ``answer`` asks; raises the registered ``HuddleError`` for a refusal the
        member cannot get past (an authorization, UNRELEASED_INSTANCE_ID, ...). An
        ``ErrorResponse`` in its place (the heartbeat refused before the group was asked,
        or its change not kept: NOT_COORDINATOR from a cluster node) is read as the
        answer's error code."""
        if isinstance(answer, ErrorResponse):
            code = answer.error_code or ErrorCode.UNKNOWN_SERVER_ERROR
            answer = ConsumerHeartbeatResponse(error_code=code, error_message=answer.error_message)
        code = answer.error_code
        # a group gone from the coordinator (restarted without its data dir) forgot the member
        forgotten = code == ErrorCode.GROUP_ID_NOT_FOUND and self.epoch > JOIN_EPOCH
        if code in REJOIN_CODES or forgotten:
            lost = self.owned
            self.epoch = JOIN_EPOCH
            self.full = True
            if self.busy:  # lost once the callback running returned
                self.abandoned = True
                return Reconcile()
            return Reconcile(lost=lost, again=True)
        if code in FIND_CODES:
            self.full = True
            return Reconcile(find=True)
        if code in RETRY_CODES:
            self.full = True
            return Reconcile(retry=True)
        if code != ErrorCode.NONE:
            raise_for(code, answer.error_message)
        self.full = self.resubscribed != self.resubscribed_sent  # subscribed since it was sent
        self.epoch = answer.member_epoch
        self.proved_ms = sent_ms  # the coordinator renewed the session on receipt, later
        if answer.session_timeout_ms > 0:
            self.session_timeout_ms = answer.session_timeout_ms
        if answer.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = answer.heartbeat_interval_ms
        if answer.assignment is None:
            return Reconcile()
        target = frozenset(
            TopicPartition(t.topic, p) for t in answer.assignment for p in t.partitions
        )
        if self.busy:  # reconciled once the callbacks running are done
            self.later = target
            return Reconcile()
        return self._toward(target)

    def _toward(self, target: frozenset[TopicPartition]) -> Reconcile:
        revoke, assign = self.owned - target, target - self.owned
        return Reconcile(revoke=revoke, assign=assign, again=bool(revoke or assign))

    # --- while callbacks run ---------------------------------------------------------------

    def callbacks_begin(self) -> None:
        """The callbacks of a ``Reconcile`` begin: until ``callbacks_done``, answers to the
        heartbeats sent meanwhile keep the session alive and start nothing."""
        self.busy = True
        self.abandoned = False
        self.later = None

    def keeps_alive(self) -> bool:
        """Whether a heartbeat is due while callbacks run: the member is in the group (a
        fenced one sends nothing until ``on_partitions_lost`` ran and it joins again)."""
        return self.busy and not self.abandoned and self.epoch > JOIN_EPOCH

    def callbacks_done(self) -> Reconcile:
        """The callbacks are done (the core told what each did): what is asked next. Fenced
        meanwhile: what it still owns is lost (``again``: it joins); given a new target
        meanwhile: the way toward it; otherwise nothing."""
        abandoned, later = self.abandoned, self.later
        self.busy = self.abandoned = False
        self.later = None
        if abandoned:
            return Reconcile(lost=self.owned, again=True)
        if later is None:
            return Reconcile()
        return self._toward(later)

    # --- what the runtime did ------------------------------------------------------------

    def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        self.owned = self.owned - frozenset(partitions)

    def assigned(self, partitions: Iterable[TopicPartition]) -> None:
        self.owned = self.owned | frozenset(partitions)

    def lost(self) -> None:
        self.owned = NOTHING

    def session_deadline(self) -> float | None:
        """When the coordinator may have fenced the member for its silence (its session
        timeout after the send of its last answered heartbeat); None: not known, or the
        member owns nothing that could matter."""
        if self.proved_ms is None or self.session_timeout_ms <= 0 or not self.owned:
            return None
        return self.proved_ms + self.session_timeout_ms

    def answer_timeout_ms(self, request_timeout_ms: float) -> float:
        """How long a heartbeat waits for its answer, and a node asked for the coordinator
        for its: a third of the coordinator's session once its answers said it (as the
        classic member's), else ``request_timeout_ms``. A node silent that long is taken as
        gone (frozen, its answers held, the link cut without a reset): the member asks the
        next one and heartbeats there while its session still has time to run, instead of
        waiting past it."""
        if self.session_timeout_ms <= 0:
            return request_timeout_ms
        return min(request_timeout_ms, self.session_timeout_ms / 3)

    def may_own(self, now_ms: float) -> bool:
        """Whether the member's partitions may still be its own at ``now_ms``: not once it
        was fenced (while a callback runs still: the coordinator may have given them to
        others already), nor once its session may have run out (a member cut off from
        every coordinator)."""
        if self.abandoned:
            return False
        deadline = self.session_deadline()
        return deadline is None or now_ms < deadline

    def disconnected(self) -> None:
        """The connection was lost: the next heartbeat, to whichever node coordinates the
        group now, is a full one at the member's epoch (that node may know nothing of it)."""
        self.full = True

    def commit_request(
        self, offsets: Mapping[str, Sequence[tuple[int, int]]], metadata: str | None
    ) -> OffsetCommitRequest:
        """A commit of ``offsets`` (topic -> (partition, offset)) at the member's epoch."""
        return offset_commit(
            self.group_id, self.epoch, self.member_id, self.instance_id, offsets, metadata
        )

    def left(self) -> None:
        self.owned = NOTHING
        self.epoch = JOIN_EPOCH
        self.full = True


def _by_topic(owned: frozenset[TopicPartition]) -> list[ConsumerTopicPartitions]:
    topics: dict[str, list[int]] = {}
    for tp in owned:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [
        ConsumerTopicPartitions(topic=topic, partitions=sorted(partitions))
        for topic, partitions in sorted(topics.items())
    ]
