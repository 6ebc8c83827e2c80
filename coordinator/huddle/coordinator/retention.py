"""Offset retention, as Kafka's ``GroupMetadata.removeExpiredOffsets`` (KIP-211).

Every check interval the transport calls ``Retention.expire`` with the wall clock. Which
offsets of a group expire, and from when retention counts, depends on the group
(docs/coordinator.md section 8):

- a group that never had members (no protocol type: offsets an administrator set): each
  partition ``offsets_retention_ms`` after its own last commit;
- an Empty group that had members: every offset ``offsets_retention_ms`` after the group
  emptied (Kafka's ``currentStateTimestamp``, kept in its group record); a commit while it
  is Empty does not restart that clock. A group whose record does not say when it emptied
  (one kept before that was kept) counts each partition from its own commit, as Kafka does
  for an old group metadata record;
- a Stable group of the ``consumer`` protocol type whose subscriptions the coordinator can
  read (``Group.read_subscribed_topics``, when its generation formed or it was loaded): the
  offsets of topics no member subscribes to, each from its own commit;
- any other group (rebalancing, or Stable with subscriptions it cannot read): none.

The offsets of a consumer-protocol group (KIP-848; kept here, in a classic group that only
holds them) expire as Kafka 4.0's ``ConsumerGroup.offsetExpirationCondition`` says: each
partition ``offsets_retention_ms`` after its own commit, unless a member of the group
subscribes to its topic (by name or by regex): so an empty group loses each offset the
retention after it was committed. An empty consumer group left with no offsets is deleted
by the check, its records with it (Kafka's ``cleanupGroupMetadata``: ``maybeDeleteGroup``
once ``cleanupExpiredOffsets`` found every offset expired, or none); ``consumer`` (the
server's ``ConsumerService``) says what the consumer groups are, and deletes them.

A group left Empty with no offsets goes (``Sessions.collect``), its record with it. An
offset whose commit time is not known (kept by a version before retention) is stamped with
the time it is first looked at, and kept so: it gets a whole retention from then.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Protocol

import structlog

from huddle.coordinator.config import GroupConfig
from huddle.coordinator.group import Committed, Group
from huddle.coordinator.sessions import Sessions
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.records import OffsetRecord, Record, offset_deleted
from huddle.protocol.embedded import CONSUMER_PROTOCOL_TYPE

log = structlog.get_logger("huddle.retention")

S = GroupState
Key = tuple[str, int]
# a consumer group's epoch E is marked as _CONSUMER_MARK - E: below every generation (and
# the -1 of a group never looked into)
_CONSUMER_MARK = -2


class ConsumerRetention(Protocol):
    """The consumer-protocol groups, as offset retention reads and deletes them."""

    def retained(self, group_id: str) -> tuple[int, frozenset[str]] | None:
        """The consumer group ``group_id``'s epoch and the topics its members subscribe to
        (their offsets do not expire); None: no consumer group has that id."""

    def empty_group_ids(self) -> list[str]:
        """The consumer groups with no member."""

    def delete(self, group_id: str) -> None:
        """The empty consumer group ``group_id`` goes, its deletion kept."""


class Retention:
    def __init__(self, sessions: Sessions, config: GroupConfig, changes: list[Record]) -> None:
        self.sessions = sessions
        self.config = config
        self.changes = changes
        self.consumer: ConsumerRetention | None = None  # the server's consumer groups

    def expire(self, wall_ms: float) -> int:
        """Remove every expired offset (kept as deletions); how many were removed."""
        steps = self.expiring(wall_ms)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                removed: int = done.value
                return removed

    def expiring(self, wall_ms: float) -> Generator[None, None, int]:
        """``expire`` one group at a time: yields after each group it looked into, so the
        caller can let other work run between them (a million offsets take tens of
        milliseconds to look through). A group is looked into again only once one of its
        offsets may have expired (``expired``'s due time) or its generation changed, so a
        check costs little more than a glance at each group."""
        now = int(wall_ms)
        retention = self.config.offsets_retention_ms
        groups = self.sessions.groups
        removed = 0
        consumer = self.consumer
        for group in list(groups.values()):
            if groups.get(group.group_id) is not group or not group.offsets:
                continue  # gone, or emptied of offsets, since the pass began
            retained = None if consumer is None else consumer.retained(group.group_id)
            # what the due time was found in: the generation, or a consumer group's epoch
            # (it moves whenever a subscription does), kept apart from every generation
            marker = group.generation if retained is None else _CONSUMER_MARK - retained[0]
            if group.retention_generation == marker and now < group.retention_due_ms:
                continue
            self._stamp_unknown(group, now)
            if retained is None:
                doomed, group.retention_due_ms = self.expired(group, now, retention)
            else:
                doomed, group.retention_due_ms = _each_from_its_commit(
                    group.offsets, retained[1], now, retention
                )
            group.retention_generation = marker
            if doomed:
                for topic, partition in doomed:
                    del group.offsets[(topic, partition)]
                    self.changes.append(offset_deleted(group.group_id, topic, partition))
                removed += len(doomed)
                log.info(
                    "offsets_expired",
                    group_id=group.group_id,
                    partitions=len(doomed),
                    left=len(group.offsets),
                    state=group.state.value,
                )
                self.sessions.collect(group)  # Empty with nothing left: it goes
            yield
        if consumer is not None:
            for group_id in consumer.empty_group_ids():
                holder = groups.get(group_id)
                if holder is None or not holder.offsets:  # an empty group, no offset left
                    consumer.delete(group_id)
                    log.info("consumer_group_expired", group_id=group_id)
        return removed

    def expired(self, group: Group, now_ms: int, retention_ms: int) -> tuple[list[Key], int]:
        """The partitions of ``group`` whose offsets have expired at ``now_ms``, and when
        the next may (wall ms; 0: at the next look): never earlier than that, whatever is
        committed meanwhile, while the group stays in this generation with these
        subscriptions."""
        offsets = group.offsets
        if group.is_(S.EMPTY) and group.protocol_type and group.state_ms:
            # had members: all at once, from when it emptied, whatever was committed since
            due = group.state_ms + retention_ms
            return (sorted(offsets) if now_ms >= due else []), due
        if not group.protocol_type or group.is_(S.EMPTY):
            # never had members, or emptied when no one kept the time: each from its commit
            return _each_from_its_commit(offsets, None, now_ms, retention_ms)
        subscribed = group.subscribed_topics
        if not group.is_(S.STABLE) or group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return [], 0
        if subscribed is None:  # not known in this generation
            return [], now_ms + retention_ms
        return _each_from_its_commit(offsets, subscribed, now_ms, retention_ms)

    def _stamp_unknown(self, group: Group, now_ms: int) -> None:
        """Offsets kept with no commit time count from now, and are kept so."""
        offsets = group.offsets
        unknown = [k for k, (_, _, at) in offsets.items() if at == 0]
        for key in sorted(unknown):
            offset, metadata, _ = offsets[key]
            offsets[key] = (offset, metadata, now_ms)
            self.changes.append(
                OffsetRecord(group.group_id, key[0], key[1], offset, metadata, now_ms)
            )


def _each_from_its_commit(
    offsets: dict[Key, Committed], subscribed: frozenset[str] | None, now_ms: int, retention_ms: int
) -> tuple[list[Key], int]:
    """The offsets, of topics not ``subscribed``, committed ``retention_ms`` or more ago,
    and when the next may expire: the oldest left, or one committed from now on. (One
    plain loop: a million offsets take about 80 ms, a dict built on the way five times
    that.)"""
    doomed = []
    cutoff = now_ms - retention_ms
    oldest = now_ms  # of those left
    for key, (_, _, at) in offsets.items():
        if subscribed is not None and key[0] in subscribed:
            continue
        if at <= cutoff:
            doomed.append(key)
        elif at < oldest:
            oldest = at
    doomed.sort()
    return doomed, oldest + retention_ms
