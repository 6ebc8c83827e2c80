"""``range``: Kafka's server-side range assignor.

Per topic, its subscribers in order (static members first, by instance id, then the others
by member id) each get a run of consecutive partitions: ``P // N`` each, one more for the
first ``P % N``. Members that subscribe to the same topics therefore get the same partition
numbers of each (co-partitioning). It is not sticky: a join or a leave shifts the runs.
"""

from __future__ import annotations

from huddle.coordinator.consumer.assignors.base import AssignorError, AssignorResult, GroupSpec
from huddle.coordinator.consumer.messages import Assignment


class RangeAssignor:
    @property
    def name(self) -> str:
        return "range"

    def assign(self, spec: GroupSpec) -> AssignorResult:
        members = spec.members
        order = sorted(
            members,
            key=lambda m: (
                (0, members[m].instance_id or "", m)
                if members[m].instance_id is not None
                else (1, "", m)
            ),
        )
        subscribers: dict[str, list[str]] = {}
        for member_id in order:
            for topic in members[member_id].topics:
                subscribers.setdefault(topic, []).append(member_id)
        result: dict[str, dict[str, frozenset[int]]] = {m: {} for m in order}
        runs: dict[tuple[int, int], frozenset[int]] = {}  # one set per run, shared by topics
        for topic in sorted(subscribers):
            size = spec.partitions.get(topic)
            if size is None:
                raise AssignorError(f"members subscribe to {topic!r} which has no metadata")
            takers = subscribers[topic]
            share, extra = divmod(size, len(takers))
            start = 0
            for index, member_id in enumerate(takers):
                end = start + share + (1 if index < extra else 0)
                if end > start:
                    run = runs.get((start, end))
                    if run is None:
                        run = runs[start, end] = frozenset(range(start, end))
                    result[member_id][topic] = run
                start = end
        assignments: dict[str, Assignment] = dict(result)
        return AssignorResult(assignments)
