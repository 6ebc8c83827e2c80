"""What happens between connections (``Offline``), driven by hand as both runtimes drive it."""

from __future__ import annotations

from huddle.client.events import SessionExpired
from huddle.client.member_core import MemberState
from huddle.client.offline import Offline
from huddle.protocol.messages import ListTopicsRequest
from tests.client.test_driver import driver


def state(offline: Offline) -> MemberState:
    return offline.driver.core.state


def test_a_connection_that_ends_while_a_loss_runs_offline_is_ended_after_the_loss() -> None:
    """A reconnect attempt fails while the watchdog's loss runs (its on_partitions_lost):
    neither runtime tells the driver of that end, nor lets a main loop start, until the loss
    is over; then the end is handled as any other (the owed callbacks run next)."""
    offline = Offline(driver())
    offline.connected(500)
    assert offline.connection_lost(0.0)
    assert offline.connection_ended()  # nothing runs offline: handled now
    assert offline.owed_ran() is None
    expired = SessionExpired(offline.driver.core.current)
    assert offline.session_expired(expired)
    assert offline.lose_offline()  # the watchdog's loss runs

    offline.driver.core.state = MemberState.JOINING  # a join cut off starts over, once told
    assert not offline.connection_ended()  # waits for the loss
    assert state(offline) is MemberState.JOINING  # the driver is not told yet
    assert not offline.may_serve

    assert offline.loss_ran()  # the end is handled now
    assert state(offline) is MemberState.UNJOINED
    assert not offline.may_serve  # the callbacks it owes run first
    assert offline.owed_ran() is None
    assert offline.may_serve
    assert not offline.loss_ran()  # handled once


def test_a_loss_offline_with_no_connection_ended_meanwhile_hands_nothing_over() -> None:
    offline = Offline(driver())
    expired = SessionExpired(offline.driver.core.current)
    assert offline.session_expired(expired)
    assert offline.lose_offline()
    assert not offline.may_serve
    assert not offline.loss_ran()
    assert offline.may_serve


def test_a_commit_waits_on_a_new_connection_until_the_member_s_own_first_request() -> None:
    d = driver()
    offline = Offline(d)
    assert not offline.commit_waits  # not serving: a commit is refused, not held
    offline.connected(500)
    assert offline.commit_waits
    offline.sending(ListTopicsRequest(topics=None))  # not one that moves the member
    assert offline.commit_waits
    offline.sending(d.core.heartbeat_request())
    assert not offline.commit_waits
    offline.connection_lost(0.0)
    offline.connection_ended()
    offline.owed_ran()
    offline.connected(500)  # a new connection: it waits again
    assert offline.commit_waits
    offline.sending(d.core.join_request())
    assert not offline.commit_waits
    offline.connected(500)
    offline.connection_lost(1.0)  # lost before it spoke: a commit waiting goes on (and fails)
    assert not offline.commit_waits
