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
  read: the offsets of topics no member subscribes to, each from its own commit;
- any other group (rebalancing, or Stable with subscriptions it cannot read): none.

A group left Empty with no offsets goes (``Sessions.collect``), its record with it. An
offset whose commit time is not known (kept by a version before retention) is stamped with
the time it is first looked at, and kept so: it gets a whole retention from then.
"""

from __future__ import annotations

import structlog

from huddle.coordinator.config import GroupConfig
from huddle.coordinator.group import Group
from huddle.coordinator.membership import Membership
from huddle.coordinator.records import OffsetRecord, Record, offset_deleted
from huddle.coordinator.state import GroupState
from huddle.protocol.embedded import (
    CONSUMER_PROTOCOL_TYPE,
    EmbeddedSchemaError,
    decode_subscription,
)

log = structlog.get_logger("huddle.retention")

S = GroupState
Key = tuple[str, int]


class Retention:
    def __init__(self, membership: Membership, config: GroupConfig, changes: list[Record]) -> None:
        self.membership = membership
        self.config = config
        self.changes = changes
        self._unreadable: dict[str, int] = {}  # group id -> the generation warned about

    def expire(self, wall_ms: float) -> int:
        """Remove every expired offset (kept as deletions); how many were removed."""
        now = int(wall_ms)
        retention = self.config.offsets_retention_ms
        removed = 0
        for group in list(self.membership.groups.values()):
            if not group.offsets:
                continue
            self._stamp_unknown(group, now)
            doomed = self.expired(group, now, retention)
            if not doomed:
                continue
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
            self.membership.collect(group)  # Empty with nothing left: it goes
        groups = self.membership.groups
        self._unreadable = {g: n for g, n in self._unreadable.items() if g in groups}
        return removed

    def expired(self, group: Group, now_ms: int, retention_ms: int) -> list[Key]:
        """The partitions of ``group`` whose offsets have expired at ``now_ms``."""
        offsets = group.offsets
        if not group.protocol_type:  # never had members: each from its own commit
            return sorted(k for k, (_, _, at) in offsets.items() if now_ms - at >= retention_ms)
        if group.is_(S.EMPTY):
            if group.state_ms:  # all at once, from when it emptied
                return sorted(offsets) if now_ms - group.state_ms >= retention_ms else []
            return sorted(k for k, (_, _, at) in offsets.items() if now_ms - at >= retention_ms)
        if not group.is_(S.STABLE):
            return []
        subscribed = self.subscribed_topics(group)
        if subscribed is None:
            return []
        return sorted(
            k
            for k, (_, _, at) in offsets.items()
            if k[0] not in subscribed and now_ms - at >= retention_ms
        )

    def subscribed_topics(self, group: Group) -> frozenset[str] | None:
        """The topics the members of a ``consumer`` group subscribe to, read from their
        subscriptions in the chosen protocol (Kafka's ``computeSubscribedTopics``); None if
        the coordinator cannot know them: another protocol type, or a subscription that is
        not huddle's (a member of another client library)."""
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            try:
                topics.update(decode_subscription(member.metadata_for(group.protocol_name)).topics)
            except (EmbeddedSchemaError, KeyError) as exc:
                if self._unreadable.get(group.group_id) != group.generation:
                    self._unreadable[group.group_id] = group.generation
                    log.warning(
                        "subscriptions_unreadable",
                        group_id=group.group_id,
                        generation=group.generation,
                        member_id=member.member_id,
                        error=str(exc),
                    )
                return None
        self._unreadable.pop(group.group_id, None)
        return frozenset(topics)

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
