"""``uniform``: Kafka's default server assignor, sticky and balanced.

Every member ends with the same number of partitions, give or take one, and keeps as much
of its previous target as that allows. When every member subscribes to the same topics
(the common case, and the one at scale), the quota is exact: ``P // N`` each, and the
``P % N`` members that kept the most get one more, so the fewest partitions move. Members
over their quota give up their highest partitions; the freed and the unowned partitions fill
the members under theirs, in member id order, in runs of consecutive partitions.

Different subscriptions take the general path (``general``).
"""

from __future__ import annotations

from collections.abc import Mapping

from huddle.coordinator.consumer.assignors.base import AssignorError, AssignorResult, GroupSpec
from huddle.coordinator.consumer.assignors.general import assign_general
from huddle.coordinator.consumer.assignors.kept import kept_partitions, partition_counts
from huddle.coordinator.consumer.messages import Assignment


class UniformAssignor:
    @property
    def name(self) -> str:
        return "uniform"

    def assign(self, spec: GroupSpec) -> AssignorResult:
        if not spec.members:
            return AssignorResult({})
        if spec.homogeneous:
            return AssignorResult(assign_homogeneous(spec))
        return AssignorResult(assign_general(spec))


def assign_homogeneous(spec: GroupSpec) -> dict[str, Assignment]:
    topics = next(iter(spec.members.values())).topics
    counts = partition_counts(spec, topics)
    kept, seen = kept_partitions(spec, counts)
    total = sum(counts.values())
    order = sorted(spec.members)
    quota_floor, extra = divmod(total, len(order))
    sizes = {m: sum(len(ps) for ps in kept[m].values()) for m in order}
    # The one-more quotas go to the members that kept the most: the fewest partitions move.
    by_kept = sorted(order, key=lambda m: -sizes[m])
    quota = dict.fromkeys(order, quota_floor)
    for member_id in by_kept[:extra]:
        quota[member_id] += 1

    for member_id in order:
        excess = sizes[member_id] - quota[member_id]
        if excess > 0:
            kept[member_id] = _trimmed(kept[member_id], excess, seen)
            sizes[member_id] = quota[member_id]

    pool = _Pool(counts, seen)
    result: dict[str, Assignment] = {}
    for member_id in order:
        need = quota[member_id] - sizes[member_id]
        mine = kept[member_id]
        if need > 0:
            grown = dict(mine)
            for topic, partitions in pool.take(need):
                had = grown.get(topic)
                grown[topic] = partitions if had is None else had | partitions
            mine = grown
        result[member_id] = mine
    if pool.left():
        raise AssignorError("partitions were left unassigned")
    return result


def _trimmed(mine: Assignment, excess: int, seen: dict[str, set[int]]) -> Assignment:
    """``mine`` less its ``excess`` highest partitions (last topics first), which go back to
    the pool (out of ``seen``)."""
    trimmed = dict(mine)
    for topic in sorted(mine, reverse=True):
        if excess <= 0:
            break
        ordered = sorted(mine[topic])
        give = ordered[-excess:]
        seen[topic].difference_update(give)
        excess -= len(give)
        rest = ordered[: len(ordered) - len(give)]
        if rest:
            trimmed[topic] = frozenset(rest)
        else:
            del trimmed[topic]
    return trimmed


class _Pool:
    """The partitions nobody keeps, topic by topic in name order, handed out in runs."""

    def __init__(self, counts: Mapping[str, int], seen: Mapping[str, set[int]]) -> None:
        self.free: list[tuple[str, list[int]]] = []
        for topic, size in counts.items():
            taken = seen[topic]
            if len(taken) == size:
                continue
            if not taken:
                self.free.append((topic, list(range(size))))
            else:
                self.free.append((topic, sorted(set(range(size)).difference(taken))))
        self.topic_index = 0
        self.position = 0

    def take(self, wanted: int) -> list[tuple[str, frozenset[int]]]:
        runs: list[tuple[str, frozenset[int]]] = []
        while wanted > 0 and self.topic_index < len(self.free):
            topic, partitions = self.free[self.topic_index]
            end = min(len(partitions), self.position + wanted)
            runs.append((topic, frozenset(partitions[self.position : end])))
            wanted -= end - self.position
            self.position = end
            if end == len(partitions):
                self.topic_index += 1
                self.position = 0
        return runs

    def left(self) -> bool:
        return self.topic_index < len(self.free)
