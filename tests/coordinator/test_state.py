"""Group state transitions (coordinator/state.py) against Kafka's classic coordinator:
Empty <- PreparingRebalance; PreparingRebalance <- {Stable, CompletingRebalance, Empty};
CompletingRebalance <- PreparingRebalance; Stable <- CompletingRebalance; Dead <- any live state.
"""

from __future__ import annotations

import itertools

import pytest

from huddle.coordinator.group import Group
from huddle.coordinator.state import (
    STATES_BY_NAME,
    VALID_PREVIOUS,
    GroupState,
    IllegalTransitionError,
    check_transition,
)

S = GroupState

# (source, target) pairs the reference allows, written out independently of the module.
KAFKA_TRANSITIONS = {
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.EMPTY, S.DEAD),
    (S.PREPARING_REBALANCE, S.DEAD),
    (S.COMPLETING_REBALANCE, S.DEAD),
    (S.STABLE, S.DEAD),
}
ALL_PAIRS = list(itertools.product(GroupState, GroupState))
ALLOWED = [(src, dst) for src, dst in ALL_PAIRS if src in VALID_PREVIOUS[dst]]
FORBIDDEN = [(src, dst) for src, dst in ALL_PAIRS if src not in VALID_PREVIOUS[dst]]


def _name(pair: tuple[GroupState, GroupState]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def test_the_transition_table_is_kafkas() -> None:
    assert set(VALID_PREVIOUS) == set(GroupState)
    assert set(ALLOWED) == KAFKA_TRANSITIONS


@pytest.mark.parametrize("pair", ALLOWED, ids=_name)
def test_allowed_transition_passes(pair: tuple[GroupState, GroupState]) -> None:
    source, target = pair
    check_transition("g", source, target)


@pytest.mark.parametrize("pair", FORBIDDEN, ids=_name)
def test_forbidden_transition_raises_naming_both_states(
    pair: tuple[GroupState, GroupState],
) -> None:
    source, target = pair
    with pytest.raises(IllegalTransitionError) as raised:
        check_transition("orders", source, target)
    message = str(raised.value)
    assert source.value in message
    assert target.value in message
    assert "'orders'" in message
    assert raised.value.source is source
    assert raised.value.target is target


def test_nothing_leaves_dead() -> None:
    for target in GroupState:
        with pytest.raises(IllegalTransitionError):
            check_transition("g", S.DEAD, target)


def state_of(group: Group) -> GroupState:
    return group.state


def test_group_transition_moves_the_state_only_when_allowed() -> None:
    group = Group("g")
    assert state_of(group) is S.EMPTY
    with pytest.raises(IllegalTransitionError, match="from Empty to Stable"):
        group.transition(S.STABLE)
    assert state_of(group) is S.EMPTY  # a refused transition changes nothing
    for target in (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE):
        group.transition(target)
        assert state_of(group) is target
    with pytest.raises(IllegalTransitionError, match="from Stable to CompletingRebalance"):
        group.transition(S.COMPLETING_REBALANCE)
    assert state_of(group) is S.STABLE
    group.transition(S.DEAD)
    assert state_of(group) is S.DEAD


def test_states_are_found_by_name_in_any_case() -> None:
    for state in GroupState:
        assert STATES_BY_NAME[state.value.lower()] is state
    assert STATES_BY_NAME["preparingrebalance"] is S.PREPARING_REBALANCE
    assert len(STATES_BY_NAME) == len(GroupState)
