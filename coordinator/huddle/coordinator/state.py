"""Group states and the transitions between them, as data.

Everything that decides whether a group may move from one state to another is here; an
illegal transition raises ``IllegalTransitionError`` naming both states.
"""

from __future__ import annotations

from enum import Enum

from huddle.protocol.errors import HuddleError


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# target state -> the states a group may enter it from (Kafka's classic coordinator)
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState) - {GroupState.DEAD},
}


class IllegalTransitionError(HuddleError, RuntimeError):
    def __init__(self, group_id: str, source: GroupState, target: GroupState) -> None:
        super().__init__(f"group {group_id!r} cannot go from {source.value} to {target.value}")
        self.source = source
        self.target = target


def check_transition(group_id: str, source: GroupState, target: GroupState) -> None:
    if source not in VALID_PREVIOUS[target]:
        raise IllegalTransitionError(group_id, source, target)


STATES_BY_NAME: dict[str, GroupState] = {s.value.lower(): s for s in GroupState}
