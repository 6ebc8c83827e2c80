"""The member runtime's decisions (``MemberDriver``), driven with an explicit clock."""

from __future__ import annotations

from huddle.client.assignors.base import ASSIGNORS
from huddle.client.driver import MemberDriver, SendHeartbeat, WaitUntil
from huddle.client.events import SessionExpired
from huddle.client.generation import Generation
from huddle.client.member_core import MemberConfig, MemberCore, MemberState
from huddle.client.subscription import Subscription
from huddle.protocol.errors import ErrorCode
from tests.builders import tps

SESSION_MS = 3_000


def driver(**config: int) -> MemberDriver:
    core = MemberCore(
        MemberConfig(
            group_id="g",
            topics=["t"],
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=1_000,
            rebalance_timeout_ms=config.get("rebalance_timeout_ms", 10_000),
        ),
        [ASSIGNORS.create("cooperative-sticky")],
    )
    return MemberDriver(core, Subscription(["t"], None))


def stable_driver(*, generation: int, answered_at: float) -> MemberDriver:
    """A Stable member owning t-0 whose heartbeat sent at 10,000 ms was answered."""
    d = driver()
    d.core.current = Generation(generation, "m", "cooperative-sticky")
    d.core.state = MemberState.STABLE
    d.core.owned = tps("t-0")
    d.connected(500)
    sent = d.heartbeat(10_000.0)
    assert isinstance(sent, SendHeartbeat)
    d.heartbeat_answered(ErrorCode.NONE, sent, received_at=answered_at)
    return d


def test_a_join_answer_proves_the_session_from_when_the_coordinator_answered() -> None:
    """Sent at 1,000 ms, held 4,000 ms by the coordinator, read at 60,000 ms (the process
    was frozen with the answer in its socket): the session ends 3,000 ms after the
    coordinator answered, long before the answer was read."""
    d = driver()
    d.core.owned = tps("t-0")
    d.joined(1_000.0, 4_000)
    deadline = d.timer.session_deadline()
    assert deadline is not None
    assert 1_000 + 4_000 * 0.999 + SESSION_MS <= deadline <= 1_000 + 4_000 + SESSION_MS
    assert d.visible(60_000.0) == frozenset()
    assert d.visible(7_000.0) == tps("t-0")


def test_a_heartbeat_answer_proves_the_session_from_its_send() -> None:
    d = stable_driver(generation=1, answered_at=12_500.0)
    assert d.timer.session_deadline() == 10_000.0 + SESSION_MS
    assert d.visible(12_999.0) == tps("t-0")
    assert d.visible(13_000.0) == frozenset()


def test_the_watchdog_expires_the_session_once_and_the_member_owns_nothing_until_handled() -> None:
    d = driver()
    d.core.owned = tps("t-0")
    d.timer.answered(0.0)
    assert d.watchdog(2_000.0) == SESSION_MS
    assert isinstance(d.watchdog(SESSION_MS), SessionExpired)
    assert d.zombie
    assert d.visible(SESSION_MS + 1) == frozenset()
    assert not isinstance(d.watchdog(SESSION_MS + 1), SessionExpired)  # reset: once


def test_heartbeats_wait_until_due_and_stop_once_a_callback_overran() -> None:
    d = driver(rebalance_timeout_ms=5_000)
    d.core.current = Generation(1, "m", "cooperative-sticky")
    d.core.state = MemberState.STABLE
    d.connected(500)
    first = d.heartbeat(0.0)
    assert isinstance(first, SendHeartbeat)
    assert d.heartbeat(10.0) == WaitUntil(1_000.0)
    d.callbacks_began(100.0)
    assert isinstance(d.heartbeat(1_000.0), SendHeartbeat)  # heartbeats go on in callbacks
    assert isinstance(d.heartbeat(5_101.0), SessionExpired)  # overran: given up, once
    assert d.heartbeat(5_102.0) == WaitUntil(None)


def test_reconnect_backoff_doubles_to_its_bound_and_resets_on_connect() -> None:
    d = MemberDriver(driver().core, Subscription(["t"], None), max_retry_backoff_ms=350)
    assert [d.reconnect_delay_ms() for _ in range(4)] == [100, 200, 350, 350]
    d.connected(500)
    assert d.reconnect_delay_ms() == 100


def test_a_session_expiry_about_a_generation_the_member_has_left_changes_nothing() -> None:
    """Found by huddle.sim: the watchdog's expiry, queued while a SyncGroup was under way,
    was handled after the member had joined and synced a new generation, and threw that
    fresh assignment away (on_partitions_lost, and one more rebalance for everyone)."""
    d = driver()
    d.core.current = Generation(2, "m", "cooperative-sticky")
    d.timer.answered(0.0)
    expired = d.watchdog(SESSION_MS)
    assert isinstance(expired, SessionExpired)
    assert expired.generation == Generation(2, "m", "cooperative-sticky")
    # the member rejoins and syncs generation 3 before its main loop sees the event
    d.core.current = Generation(3, "m", "cooperative-sticky")
    d.core.state = MemberState.STABLE
    d.core.owned = tps("t-0")
    d.synced(SESSION_MS + 100)
    assert d.visible(SESSION_MS + 200) == tps("t-0")
    assert d.on_event(expired) is None
    assert d.core.owned == tps("t-0")
    current = SessionExpired(d.core.current)  # an expiry in the generation it is in
    step = d.on_event(current)
    assert step is not None
    assert step.lost == tps("t-0")


def test_rebalancing_answers_keep_a_member_only_until_the_join_phase_can_have_ended() -> None:
    """Found by huddle.sim: a member slow in on_partitions_revoked (within its rebalance
    timeout, counted from when the callback began) kept heartbeating, answered
    REBALANCE_IN_PROGRESS, and went on finishing its revoked partitions after the join phase
    (counted from before it heard of it) had ended without it and handed them on."""
    d = driver(rebalance_timeout_ms=10_000)
    d.core.current = Generation(1, "m", "cooperative-sticky")
    d.core.state = MemberState.STABLE
    d.core.owned = tps("t-0")
    d.connected(500)
    steady = d.heartbeat(0.0)
    assert isinstance(steady, SendHeartbeat)
    d.heartbeat_answered(ErrorCode.NONE, steady, received_at=20.0)
    for at in range(1_000, 12_000, 1_000):  # the group rebalances; the member is slow
        sent = d.heartbeat(float(at))
        assert isinstance(sent, SendHeartbeat)
        d.heartbeat_answered(ErrorCode.REBALANCE_IN_PROGRESS, sent, received_at=at + 20.0)
    assert d.visible(9_999.0) == tps("t-0")
    assert d.visible(10_000.0) == frozenset()  # the phase may have ended without it
    d.joined(10_500.0, 100)  # its JoinGroup made it in: steady again
    assert d.visible(10_700.0) == tps("t-0")


def test_a_member_that_notices_a_lost_connection_late_works_on_nothing_it_may_have_lost() -> None:
    """Found by huddle.sim: a frozen dynamic member woke to a JoinGroup answer and, after
    it, the news that its connection had been reset while it slept; the coordinator had
    removed it a disconnect grace after the reset and handed its partitions on, but the
    member counted the grace from when it noticed."""
    d = driver()
    d.core.current = Generation(1, "m", "cooperative-sticky")
    d.core.state = MemberState.STABLE
    d.core.owned = tps("t-0")
    d.connected(500)
    d.joined(1_000.0, 0)  # its last proof of membership, sent at 1,000 ms
    d.connection_lost(2_400.0)  # noticed at 2,400 ms (it was frozen)
    assert d.visible(2_400.0) == frozenset()  # the coordinator may have seen it at 1,000
    assert d.core.owned == tps("t-0")  # not lost: it may be back in time
    d.connected(500)
    back = d.heartbeat(2_450.0)
    assert isinstance(back, SendHeartbeat)
    d.heartbeat_answered(ErrorCode.NONE, back, received_at=2_470.0)
    assert d.visible(2_500.0) == tps("t-0")  # still a member: it goes on


def test_a_coordinator_that_said_it_was_stopping_leaves_the_member_its_whole_session() -> None:
    """A coordinator that stops (SIGTERM) removes nobody for the connections it closes, and
    the one after it (restarted on its data dir, or a cluster node taking its shards) gives
    every member a fresh session: a dynamic member keeps what it owns for its session, not
    half the disconnect grace (a restart takes longer than that)."""
    d = stable_driver(generation=1, answered_at=10_010.0)
    d.connection_lost(10_100.0, coordinator_stopping=True)
    assert d.visible(12_000.0) == tps("t-0")  # long past half the grace (250 ms)
    assert d.visible(10_000.0 + SESSION_MS - 1) == tps("t-0")
    assert d.visible(10_000.0 + SESSION_MS) == frozenset()  # then, as any session, it ends
    cut_off = stable_driver(generation=1, answered_at=10_010.0)
    cut_off.connection_lost(10_100.0)  # no word from the coordinator: it may be alive
    assert cut_off.visible(10_000.0 + 500) == frozenset()


def heartbeat_every_second(d: MemberDriver, start: float, end: float) -> None:
    """Heartbeats from ``start`` to ``end``, each answered NONE 5 ms after it went out."""
    now = start
    while now < end:
        sent = d.heartbeat(now)
        assert isinstance(sent, SendHeartbeat)
        d.heartbeat_answered(ErrorCode.NONE, sent, received_at=now + 5)
        now += 1_000.0


def syncing(d: MemberDriver) -> MemberDriver:
    """``d`` owned t-0 in generation 1, and its JoinGroup, sent at 1,000 ms, was answered
    with generation 2 at once: it is syncing."""
    d.core.current = Generation(1, "m", "cooperative-sticky")
    d.core.state = MemberState.STABLE
    d.core.owned = tps("t-0")
    d.connected(500)
    d.joined(1_000.0, 0)
    d.core.current = Generation(2, "m", "cooperative-sticky")
    d.core.state = MemberState.SYNCING
    return d


def test_a_member_waiting_on_its_sync_heartbeats_in_the_new_generation_and_stays_alive() -> None:
    """The leader takes longer than a session to send the assignment: the follower's
    SyncGroup is held, and its heartbeats (answered NONE in CompletingRebalance, as by
    Kafka's coordinator) keep the proof of its membership fresh, so it does not give up
    the partitions it owns while it waits."""
    d = syncing(driver())
    d.sync_sent()  # held until the leader's comes
    sent = d.heartbeat(2_000.0)
    assert isinstance(sent, SendHeartbeat)
    assert sent.request.generation_id == 2
    d.heartbeat_answered(ErrorCode.NONE, sent, received_at=2_010.0)
    assert not isinstance(d.watchdog(4_500.0), SessionExpired)
    assert d.visible(4_500.0) == tps("t-0")  # past the join's proof plus a session


def test_a_leader_heartbeating_before_its_sync_is_out_is_bounded_by_the_sync_phase() -> None:
    """The leader takes past its rebalance timeout to compute the assignment. Its
    heartbeats are answered NONE meanwhile (the group waits in CompletingRebalance), but
    the coordinator drops it when its SyncGroup is not in by the rebalance timeout after
    the join: those answers must not stretch the member's proof past that bound."""
    d = syncing(driver(rebalance_timeout_ms=10_000))  # computing the assignment
    heartbeat_every_second(d, 2_000.0, 12_000.0)  # each answered NONE
    assert d.visible(10_999.0) == tps("t-0")
    assert d.visible(11_000.0) == frozenset()  # the join's proof plus the rebalance timeout
    # once its SyncGroup is out, a heartbeat answered NONE shows the group steady again
    d.sync_sent()
    sent = d.heartbeat(12_000.0)
    assert isinstance(sent, SendHeartbeat)
    d.heartbeat_answered(ErrorCode.NONE, sent, received_at=12_005.0)
    assert d.visible(14_000.0) == tps("t-0")


def test_a_syncgroup_lost_with_the_connection_proves_no_steady_group() -> None:
    """The leader's SyncGroup went out, then the connection dropped: heartbeats on the new
    connection (answered NONE while the coordinator still waits for a SyncGroup) prove the
    session only, as before the SyncGroup was sent."""
    d = syncing(driver(rebalance_timeout_ms=10_000))
    d.sync_sent()
    d.disconnected()
    d.connected(500)
    heartbeat_every_second(d, 2_000.0, 12_000.0)  # each answered NONE
    assert d.visible(10_999.0) == tps("t-0")
    assert d.visible(11_000.0) == frozenset()  # the join's proof plus the rebalance timeout


def test_only_a_member_of_a_live_generation_may_commit() -> None:
    """As Kafka's consumer: a member that fell out of the group (or never joined) or whose
    session may have run out commits nothing (an emptied group would take it as an admin's
    commit and set offsets back)."""
    assert driver().commit_refusal(Generation(), 0.0) is not None  # never joined
    d = stable_driver(generation=3, answered_at=10_010.0)
    assert d.commit_refusal(d.core.current, 11_000.0) is None
    assert d.commit_refusal(d.core.current, 10_000.0 + SESSION_MS) is not None  # may be gone
    d.core.lose_all()
    assert d.core.current.id < 0
    assert d.commit_refusal(d.core.current, 11_000.0) is not None
