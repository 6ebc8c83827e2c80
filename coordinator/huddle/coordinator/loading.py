"""Loading what a data dir keeps into the core, in steps.

A restarted coordinator replays its journal (``restoring``: topics, offsets, the last
record of each group), loads every kept group (``loading_groups``: Stable in its
generation, or Empty), and only then starts the loaded members' sessions
(``serve_loaded``), as Kafka loads a whole coordinator partition and then calls
``onGroupLoaded`` for each of its groups: a member's session runs from when the
coordinator can hear it, not from before a load that may take seconds. Each step is short,
so the transport runs them a few milliseconds at a time with requests answered in between
(COORDINATOR_LOAD_IN_PROGRESS until the groups are loaded).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

import msgspec
import structlog

from huddle.coordinator.effects import Effects, Outgoing
from huddle.coordinator.group import Group
from huddle.coordinator.offsets import Offsets
from huddle.coordinator.rebalance import Rebalances
from huddle.coordinator.sessions import Sessions
from huddle.coordinator.storage.kept_consumer_groups import ConsumerKept
from huddle.coordinator.storage.records import (
    DELETED,
    ConsumerGroupRecord,
    ConsumerMemberRecord,
    GroupRecord,
    OffsetRecord,
    Record,
    SessionRecord,
)
from huddle.coordinator.topics import TopicRegistry

log = structlog.get_logger("huddle.loading")

RESTORE_STEP = 512  # records replayed between two yields of ``restoring``


class Loader:
    def __init__(
        self,
        sessions: Sessions,
        rebalances: Rebalances,
        topics: TopicRegistry,
        offsets: Offsets,
        consumer: ConsumerKept,
    ) -> None:
        self.sessions = sessions
        self.rebalances = rebalances
        self.topics = topics
        self.offsets = offsets
        self.consumer = consumer  # consumer-protocol groups: the ConsumerService loads them
        self.kept: dict[str, GroupRecord] = {}  # restored, loaded by ``loading_groups``
        self.unserved: deque[Group] = deque()  # loaded, their sessions not started yet

    def restoring(self, records: Iterable[Record]) -> Iterator[None]:
        """Replay kept records, oldest first, into a core that has not served yet; yields
        every ``RESTORE_STEP`` records."""
        sessions = self.sessions
        partitions = self.topics.partitions
        for i, record in enumerate(records, 1):
            if isinstance(record, OffsetRecord):
                self.offsets.restore(record)
            elif isinstance(record, SessionRecord):  # the last one says (0: served)
                sessions.unserved_fence_ms = record.longest_ms
                if record.longest_ms > 0 and self.kept:
                    self._forget_kept_groups()
            elif isinstance(record, ConsumerGroupRecord | ConsumerMemberRecord):
                self.consumer.apply(record)
            elif isinstance(record, GroupRecord):  # loaded later, the last one of each
                if record.generation == DELETED:
                    self.kept.pop(record.group_id, None)
                else:
                    self.kept[record.group_id] = record
            elif record.partitions > 0:
                sessions.topics_changed()
                old = partitions.get(record.name, 0)
                self.topics.put(record.name, record.partitions, record.topic_id)
                if record.partitions < old:
                    self.offsets.forget_topic(record.name, record.partitions)
            elif self.topics.remove(record.name):
                sessions.topics_changed()
                self.offsets.forget_topic(record.name)
            if i % RESTORE_STEP == 0:
                yield

    def _forget_kept_groups(self) -> None:
        """The group records read so far are not to be trusted: this version writes a
        ``SessionRecord`` that asks for a fence only at the start of a snapshot, before any
        group record. One after them was written by a version that kept no groups in its
        data dir (it served the groups after these records, they are stale) or by a repair
        that skipped damage (a newer record of a group may have been in it). A stale record
        loaded would bring back an old generation with old member ids, and fence a live
        static member that rejoined since as a zombie, for good. So the groups are loaded
        as forgotten, with the fence: Empty since the load (offsets expire from then; the
        members rejoin as new ones), and no generation forms until the sessions the record
        names have run out."""
        log.warning(
            "kept_groups_not_trusted",
            groups=len(self.kept),
            fence_ms=self.sessions.unserved_fence_ms,
        )
        self.kept = {
            group_id: msgspec.structs.replace(
                record, protocol_name=None, leader=None, members=[], members_removed=True
            )
            for group_id, record in self.kept.items()
        }

    def loading_groups(self, now: float) -> Iterator[None]:
        """Load every restored group (``Sessions.build_group``) with its replayed offsets;
        yields after each. Their members have no session yet: ``serve_loaded``."""
        sessions = self.sessions
        kept, self.kept = self.kept, {}
        for record in kept.values():
            restored = sessions.groups.pop(record.group_id, None)  # its offsets, replayed
            group = sessions.build_group(record, now)
            if restored is not None:
                group.offsets = restored.offsets
            sessions.collect(group)  # emptied with no offsets: nothing to keep it for
            if sessions.groups.get(group.group_id) is group:
                self.unserved.append(group)
            yield

    def serve_loaded(self, now: float, most: int | None = None) -> list[Outgoing]:
        """Start the sessions of the loaded groups' members at ``now`` (``most`` groups at
        the most; None: all), and the rebalances a loaded group needs
        (``Rebalances.serve_loaded``). A group that went meanwhile is passed over."""
        fx = Effects(now)
        sessions = self.sessions
        served = 0
        while self.unserved and (most is None or served < most):
            group = self.unserved.popleft()
            if sessions.groups.get(group.group_id) is group:
                self.rebalances.serve_loaded(fx, group)
                sessions.collect(group)
            served += 1
        return fx.out
