"""What happens between connections (``Offline``), driven by hand as both runtimes drive it."""

from __future__ import annotations

from huddle.client.events import SessionExpired
from huddle.client.member_core import MemberState
from huddle.client.offline import Offline
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
