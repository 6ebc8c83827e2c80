"""Partitions as integers: the sticky core works on lists of ints, not on objects.

Topics in play are sorted by name and laid end to end, so partition ``p`` of the topic
starting at ``start`` is the integer ``start + p`` (its pid). Sorting pids sorts by
(topic, partition).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import chain, repeat
from typing import cast

from huddle.protocol.embedded import TopicPartition


class Layout:
    """The topics in play (existing ones someone subscribes to) and their pid ranges."""

    __slots__ = ("count", "start", "starts", "topics", "total")

    def __init__(self, partitions_per_topic: Mapping[str, int], topics: Iterable[str]) -> None:
        self.topics: list[str] = sorted(
            topic for topic in set(topics) if partitions_per_topic.get(topic, 0) > 0
        )
        self.count: dict[str, int] = {t: partitions_per_topic[t] for t in self.topics}
        self.start: dict[str, int] = {}
        self.starts: list[int] = []
        total = 0
        for topic in self.topics:
            self.start[topic] = total
            self.starts.append(total)
            total += self.count[topic]
        self.total = total

    def topic_of(self) -> list[int]:
        """pid -> index into ``topics`` of its topic, for every pid."""
        return list(
            chain.from_iterable(repeat(i, self.count[t]) for i, t in enumerate(self.topics))
        )

    def complete(self, known: list[TopicPartition | None]) -> list[TopicPartition]:
        """``known`` (pid -> object, None where no member sent one) with the gaps filled.

        Objects the members sent are kept, so an unchanged assignment shares them."""
        filled: list[TopicPartition | None] = known
        for topic, start in zip(self.topics, self.starts, strict=True):
            end = start + self.count[topic]
            segment = filled[start:end]
            if None not in segment:
                continue
            # tuple.__new__ straight from map: the NamedTuple's own __new__ is a Python
            # function, twice as slow, and this may build a million of them.
            fresh = map(
                tuple.__new__, repeat(TopicPartition), zip(repeat(topic), range(end - start))
            )
            filled[start:end] = [old or new for old, new in zip(segment, fresh, strict=True)]
        return cast(list[TopicPartition], filled)  # no None is left
