"""``paced``: huddle's Design III as a server assignor: partitions move a few at a time.

``uniform`` works out where every partition should be. Of the partitions whose member would
change (a move: its previous target gave it to a member still in the group), at most
``max_moves`` change in one target; the rest stay where they were, and the assignor asks to
run again ``pause_ms`` later (``recheck_at``) for the next batch. Partitions nobody had
(new, or a departed member's) are not moves: they are placed at once. So a join fills the
newcomer in batches while everyone else keeps processing, and each batch is a revocation
the reconciliation carries out before the next.
"""

from __future__ import annotations

from huddle.coordinator.consumer.assignors.base import AssignorResult, GroupSpec
from huddle.coordinator.consumer.assignors.uniform import UniformAssignor
from huddle.coordinator.consumer.messages import Assignment
from huddle.protocol.errors import InvalidArgumentError


class PacedAssignor:
    def __init__(
        self, max_moves: int = 100, pause_ms: float = 1_000, inner: UniformAssignor | None = None
    ) -> None:
        if max_moves < 1:
            raise InvalidArgumentError("max_moves must be at least 1")
        self.max_moves = max_moves
        self.pause_ms = pause_ms
        self.inner = inner or UniformAssignor()

    @property
    def name(self) -> str:
        return "paced"

    def assign(self, spec: GroupSpec) -> AssignorResult:
        ideal = self.inner.assign(spec).assignments
        was: dict[tuple[str, int], str] = {}
        for member_id, member in spec.members.items():
            for topic, ps in member.previous.items():
                for p in ps:
                    was[topic, p] = member_id
        moves = sorted(
            (topic, p, member_id)
            for member_id, assignment in ideal.items()
            for topic, ps in assignment.items()
            for p in ps
            if was.get((topic, p), member_id) != member_id
        )
        if len(moves) <= self.max_moves:
            return AssignorResult(ideal)
        deferred = moves[self.max_moves :]
        staying: dict[str, dict[str, set[int]]] = {}  # member -> what it keeps for now
        leaving: dict[str, dict[str, set[int]]] = {}  # member -> what it does not get yet
        for topic, p, member_id in deferred:
            leaving.setdefault(member_id, {}).setdefault(topic, set()).add(p)
            staying.setdefault(was[topic, p], {}).setdefault(topic, set()).add(p)
        result: dict[str, Assignment] = {}
        for member_id, assignment in ideal.items():
            result[member_id] = _changed(
                assignment, leaving.get(member_id, {}), staying.get(member_id, {})
            )
        return AssignorResult(result, spec.now + self.pause_ms)


def _changed(
    assignment: Assignment, minus: dict[str, set[int]], plus: dict[str, set[int]]
) -> Assignment:
    if not minus and not plus:
        return assignment
    changed = dict(assignment)
    for topic, ps in minus.items():
        changed[topic] = changed[topic] - ps
    for topic, ps in plus.items():
        changed[topic] = changed.get(topic, frozenset()) | ps
    return {t: ps for t, ps in changed.items() if ps}
