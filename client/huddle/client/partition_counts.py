"""The partition counts a leader assigns with, kept between rebalances.

A leader needs the partition count of every subscribed topic in each rebalance. Asking
the coordinator every time costs a round trip inside the rebalance, while every member
stays inside it. Counts are kept instead, as Kafka's client keeps its metadata: the
coordinator pushes ``TopicMetadataChanged`` to every group member's connection when a
topic is created, altered or deleted, and those notices update the kept counts. They are
trusted only while nothing could have been missed: on the connection they were fetched on,
by the same member id, with no notice dropped on it since (a connection drops the oldest
notices when its reader falls behind), and for at most ``max_age_s`` (Kafka's
``metadata.max.age.ms``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DEFAULT_MAX_AGE_S = 300.0
# (connection, member id, notices dropped on it): counts fetched under one scope are not
# trusted under another
Scope = tuple[object, str, int]


@dataclass(slots=True)
class PartitionCounts:
    max_age_s: float = DEFAULT_MAX_AGE_S
    _counts: dict[str, int] = field(default_factory=dict)
    _fetched_at: float | None = None
    _scope: Scope | None = None  # what they are valid for

    def get(self, topics: Iterable[str], now: float, scope: Scope) -> dict[str, int] | None:
        """The kept counts of ``topics``, or None if they must be fetched: some topic is
        unknown here, they are too old, or the connection or member id changed."""
        if self._fetched_at is None or scope != self._scope:
            return None
        if now - self._fetched_at > self.max_age_s:
            return None
        wanted = set(topics)
        if not wanted <= self._counts.keys():
            return None
        return {t: n for t, n in self._counts.items() if t in wanted and n > 0}

    def store(
        self,
        topics: Iterable[str],
        counts: Mapping[str, int],
        now: float,
        scope: Scope,
    ) -> None:
        """What the coordinator answered for ``topics`` (absent from ``counts``: no such
        topic, kept as 0 partitions)."""
        self._counts = {t: counts.get(t, 0) for t in topics}
        self._fetched_at = now
        self._scope = scope

    def changed(self, counts: Mapping[str, int]) -> None:
        """A ``TopicMetadataChanged`` notice: topics created, altered (0: deleted)."""
        for topic, partitions in counts.items():
            if topic in self._counts:
                self._counts[topic] = partitions
