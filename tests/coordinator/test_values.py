"""The coordinator core's small values: deadline keys and refusals."""

from __future__ import annotations

from huddle.coordinator.config import GroupConfig
from huddle.coordinator.group import Group
from huddle.coordinator.sessions import Sessions
from huddle.coordinator.timers import TimerQueue
from huddle.coordinator.values import (
    Deadline,
    DisconnectGraceEnds,
    JoinPhaseEnds,
    PendingMemberExpires,
    Refusal,
    SessionExpires,
    SyncPhaseEnds,
)
from huddle.protocol.errors import ErrorCode
from tests.harness import Driver


def test_deadlines_of_different_kinds_for_the_same_member_are_distinct() -> None:
    q: TimerQueue[Deadline] = TimerQueue()
    q.set(SessionExpires("g", "m"), 10)
    q.set(DisconnectGraceEnds("g", "m"), 5)
    q.set(PendingMemberExpires("g", "m"), 7)
    q.set(JoinPhaseEnds("g"), 3)
    q.set(SyncPhaseEnds("g"), 4)
    assert len(q) == 5
    assert q.pop_due(10) == [
        JoinPhaseEnds("g"),
        SyncPhaseEnds("g"),
        DisconnectGraceEnds("g", "m"),
        PendingMemberExpires("g", "m"),
        SessionExpires("g", "m"),
    ]


def test_a_refusal_names_the_code_and_why() -> None:
    sessions = Sessions(GroupConfig(), TimerQueue())
    group = Group("g")
    found = sessions.identify(group, "nobody", None)
    assert found == Refusal(ErrorCode.UNKNOWN_MEMBER_ID, "member 'nobody' is not in the group")
    fenced = sessions.identify(group, "nobody", "instance-1")
    assert isinstance(fenced, Refusal)
    assert fenced.code is ErrorCode.UNKNOWN_MEMBER_ID


def test_the_disconnect_grace_and_the_session_expire_by_their_own_deadlines() -> None:
    d = Driver(disconnect_grace_ms=500)
    _a, b = d.form(1, 2)
    d.close(2)
    member = d.group().members[b]
    assert d.core.timers.deadline(member.grace_key) == d.now + 500
    assert d.core.timers.deadline(member.session_key) is not None
    d.advance(500)
    assert b not in d.group().members  # the grace ended it, well before its session
