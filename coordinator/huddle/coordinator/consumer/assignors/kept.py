"""What each member keeps of its previous target: shared by ``uniform``'s two paths."""

from __future__ import annotations

from collections.abc import Mapping

from huddle.coordinator.consumer.assignors.base import AssignorError, GroupSpec
from huddle.coordinator.consumer.messages import Assignment


def partition_counts(spec: GroupSpec, topics: frozenset[str]) -> dict[str, int]:
    try:
        return {topic: spec.partitions[topic] for topic in sorted(topics)}
    except KeyError as missing:
        raise AssignorError(f"members subscribe to {missing} which has no metadata") from None


def kept_partitions(
    spec: GroupSpec, counts: Mapping[str, int]
) -> tuple[dict[str, Assignment], dict[str, set[int]]]:
    """Each member's previous target, less what no longer exists, is not subscribed, or
    another member (earlier in id order) already keeps; and, per topic, everything kept."""
    seen: dict[str, set[int]] = {topic: set() for topic in counts}
    kept: dict[str, Assignment] = {}
    for member_id in sorted(spec.members):
        member = spec.members[member_id]
        previous = member.previous
        mine: dict[str, frozenset[int]] | None = None  # a copy, made on the first change
        for topic, partitions in previous.items():
            size = counts.get(topic)
            taken = seen.get(topic)
            keep = partitions
            if size is None or taken is None or topic not in member.topics:
                keep = frozenset()
            else:
                if keep and max(keep) >= size:
                    keep = frozenset(p for p in keep if p < size)
                if not taken.isdisjoint(keep):
                    keep = keep - taken
                taken.update(keep)
            if keep is not partitions:
                if mine is None:
                    mine = dict(previous)
                if keep:
                    mine[topic] = keep
                else:
                    del mine[topic]
        kept[member_id] = previous if mine is None else mine
    return kept, seen
