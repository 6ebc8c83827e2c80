"""ConsumerGroupHeartbeat in the sans-IO core: each error code and each transition, with known
answers and an explicit clock (milliseconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from huddle.coordinator.consumer import (
    ConsumerCoordinator,
    ConsumerGroupConfig,
    GroupPhase,
    HeartbeatRequest,
    MemberState,
    TopicView,
)
from huddle.protocol.errors import ErrorCode
from tests.consumer.helpers import GROUP, TOPICS, Client, beat, flat, join

E = ErrorCode


def coordinator(**config: int) -> ConsumerCoordinator:
    return ConsumerCoordinator(ConsumerGroupConfig(**config))  # type: ignore[arg-type]


def test_a_first_member_joins_at_epoch_one_with_every_partition() -> None:
    c = coordinator()
    answer = c.heartbeat(join("m1"), 0, TOPICS)
    assert answer.error is E.NONE
    assert (answer.member_id, answer.member_epoch) == ("m1", 1)
    assert answer.heartbeat_interval_ms == 5_000
    assert answer.assignment == {"a": frozenset(range(6)), "b": frozenset(range(3))}
    assert c.groups[GROUP].phase is GroupPhase.STABLE


def test_an_unchanged_assignment_is_not_sent_again() -> None:
    c = coordinator()
    first = c.heartbeat(join("m1"), 0, TOPICS)
    again = c.heartbeat(beat("m1", 1, first.assignment), 100, TOPICS)
    assert again.error is E.NONE
    assert again.member_epoch == 1
    assert again.assignment is None


def test_a_join_takes_partitions_only_after_their_owner_revoked_them() -> None:
    c = coordinator()
    m1, m2 = Client("m1"), Client("m2")
    m1.heartbeat(c, 0)
    answer = m2.heartbeat(c, 10)
    # The group epoch moved to 2; m2 is at epoch 2 but its share is still m1's.
    assert (answer.member_epoch, answer.assignment) == (2, {})
    group = c.groups[GROUP]
    assert group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    assert group.phase is GroupPhase.RECONCILING

    answer = m1.heartbeat(c, 20)  # told to give up a:5 and b:0-2, still at epoch 1
    assert answer.member_epoch == 1
    assert answer.assignment == {"a": frozenset(range(5))}
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert flat(group.members["m1"].pending_revocation) == {("a", 5), ("b", 0), ("b", 1), ("b", 2)}

    answer = m2.heartbeat(c, 30)  # m1 has not said it revoked: m2 still gets nothing
    assert answer.assignment is None
    assert m2.owned == {}

    answer = m1.heartbeat(c, 40)  # m1 now owns only a:0-4: it moves to epoch 2
    assert (answer.member_epoch, answer.assignment) == (2, None)
    answer = m2.heartbeat(c, 50)
    assert answer.assignment == {"a": frozenset({5}), "b": frozenset(range(3))}
    assert c.groups[GROUP].phase is GroupPhase.STABLE


def test_a_leave_frees_the_partitions_at_once_and_moves_the_group_epoch() -> None:
    c = coordinator()
    m1, m2 = Client("m1"), Client("m2")
    for now in range(0, 60, 10):
        m1.heartbeat(c, now)
        m2.heartbeat(c, now + 1)
    group = c.groups[GROUP]
    assert group.phase is GroupPhase.STABLE
    assert group.group_epoch == 2
    answer = c.heartbeat(beat("m2", -1, None), 100, TOPICS)
    assert (answer.error, answer.member_id, answer.member_epoch) == (E.NONE, "m2", -1)
    assert "m2" not in group.members
    assert group.group_epoch == 3
    assert c.groups[GROUP].phase is GroupPhase.ASSIGNING  # until a heartbeat works out a target
    answer = m1.heartbeat(c, 110)
    assert answer.member_epoch == 3
    assert flat(answer.assignment) == flat({"a": frozenset(range(6)), "b": frozenset(range(3))})


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (HeartbeatRequest(GROUP, "", 0), "MemberId can't be empty."),
        (HeartbeatRequest("", "m", 1), "GroupId can't be empty."),
        (HeartbeatRequest(GROUP, "m", 1, instance_id=""), "InstanceId can't be empty."),
        (HeartbeatRequest(GROUP, "m", 1, rack_id=""), "RackId can't be empty."),
        (
            HeartbeatRequest(GROUP, "m", 0, subscribed_topic_names=("a",), owned={}),
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        (
            HeartbeatRequest(GROUP, "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("a",)),
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            HeartbeatRequest(
                GROUP,
                "m",
                0,
                rebalance_timeout_ms=1,
                subscribed_topic_names=("a",),
                owned={"a": frozenset({1})},
            ),
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            HeartbeatRequest(GROUP, "m", 0, rebalance_timeout_ms=1, owned={}),
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
            "(re-)joining.",
        ),
        (HeartbeatRequest(GROUP, "m", -2), "InstanceId can't be null."),
        (HeartbeatRequest(GROUP, "m", -3), "MemberEpoch is invalid."),
    ],
)
def test_a_malformed_request_is_refused_invalid_request(
    request_: HeartbeatRequest, message: str
) -> None:
    c = coordinator()
    answer = c.heartbeat(request_, 0, TOPICS)
    assert (answer.error, answer.message) == (E.INVALID_REQUEST, message)
    assert c.groups == {}


def test_an_unknown_server_assignor_is_refused() -> None:
    answer = coordinator().heartbeat(join("m1", assignor="sticky"), 0, TOPICS)
    assert answer.error is E.UNSUPPORTED_ASSIGNOR
    assert (
        answer.message
        == "ServerAssignor sticky is not supported. Supported assignors: uniform, range."
    )


def test_a_regex_that_does_not_compile_is_refused() -> None:
    c = coordinator()
    answer = c.heartbeat(join("m1", None, regex="a("), 0, TOPICS)
    assert answer.error is E.INVALID_REGULAR_EXPRESSION
    assert c.groups == {}


def test_a_heartbeat_to_a_group_that_does_not_exist() -> None:
    c = coordinator()
    assert c.heartbeat(beat("m1", 1, {}), 0, TOPICS).error is E.GROUP_ID_NOT_FOUND
    assert c.heartbeat(beat("m1", -1, {}), 0, TOPICS).error is E.GROUP_ID_NOT_FOUND


def test_an_unknown_member_id() -> None:
    c = coordinator()
    c.heartbeat(join("m1"), 0, TOPICS)
    assert c.heartbeat(beat("m2", 1, {}), 1, TOPICS).error is E.UNKNOWN_MEMBER_ID
    assert c.heartbeat(beat("m2", -1, None), 1, TOPICS).error is E.UNKNOWN_MEMBER_ID
    answer = c.heartbeat(beat("m2", 1, {}, instance_id="i9"), 1, TOPICS)
    assert (answer.error, answer.message) == (E.UNKNOWN_MEMBER_ID, "instance id 'i9' is unknown")


def test_an_epoch_ahead_of_the_coordinator_s_is_fenced() -> None:
    c = coordinator()
    first = c.heartbeat(join("m1"), 0, TOPICS)
    answer = c.heartbeat(beat("m1", 2, first.assignment), 1, TOPICS)
    assert answer.error is E.FENCED_MEMBER_EPOCH
    assert "greater" in (answer.message or "")


def test_the_previous_epoch_is_accepted_only_with_owned_partitions_it_still_has() -> None:
    """The answer that moved the member to epoch 2 was lost: it comes back with epoch 1."""
    c = coordinator()
    m1, m2 = Client("m1"), Client("m2")
    m1.heartbeat(c, 0)
    m2.heartbeat(c, 1)
    m1.heartbeat(c, 2)  # revoke a:5, b:*
    kept = {"a": frozenset(range(5))}
    lost = c.heartbeat(beat("m1", 1, kept), 3, TOPICS)
    assert lost.member_epoch == 2  # never reaches the client
    assert c.heartbeat(beat("m1", 1, kept), 4, TOPICS).error is E.NONE
    assert (
        c.heartbeat(beat("m1", 1, {"a": frozenset(range(6))}), 5, TOPICS).error
        is E.FENCED_MEMBER_EPOCH
    )
    assert c.heartbeat(beat("m1", 1, None), 6, TOPICS).error is E.FENCED_MEMBER_EPOCH


def test_a_fenced_member_rejoining_under_its_id_is_taken_back_at_once() -> None:
    """Fenced (FENCED_MEMBER_EPOCH) while the coordinator still has it, the member gives up
    everything and rejoins with epoch 0 under the same member id: it is taken back with
    what it is assigned (as KIP-848 says and Kafka does since KAFKA-19233), not fenced
    again at every rejoin until its session runs out (Kafka 4.0's loop)."""
    c = coordinator()
    m1, m2 = Client("m1"), Client("m2")
    m1.heartbeat(c, 0)
    m2.heartbeat(c, 1)
    m1.heartbeat(c, 2)  # revoke a:5, b:*
    m1.heartbeat(c, 3)  # revoked: epoch 2
    m2.heartbeat(c, 4)
    assert m1.epoch == 2
    assert c.heartbeat(beat("m1", 9, {}), 5, TOPICS).error is E.FENCED_MEMBER_EPOCH
    assert "m1" in c.groups[GROUP].members  # fenced, not taken out
    back = c.heartbeat(join("m1"), 6, TOPICS)
    assert (back.error, back.member_epoch) == (E.NONE, 2)
    assert flat(back.assignment) == {("a", p) for p in range(5)}


def test_a_static_member_rejoining_under_its_own_member_id_is_taken_back() -> None:
    """A static member whose join answer was lost, or that was fenced (FENCED_MEMBER_EPOCH)
    while the coordinator still has it, rejoins with epoch 0 under its own member id and
    instance id: it gets its state back as a dynamic member does. Kafka 4.0 answers
    UNRELEASED_INSTANCE_ID (the instance id is owned by... itself), fatal for librdkafka and
    the Java consumer, until the session ends."""
    c = coordinator()
    s1, m2 = Client("s1", instance_id="i1"), Client("m2")
    first = c.heartbeat(join("s1", instance_id="i1"), 0, TOPICS)
    # the answer was lost: the same join again
    again = c.heartbeat(join("s1", instance_id="i1"), 1, TOPICS)
    assert (again.error, again.member_epoch) == (E.NONE, first.member_epoch)
    assert flat(again.assignment) == flat(first.assignment)
    s1.apply(again)
    m2.heartbeat(c, 2)
    s1.heartbeat(c, 3)  # revokes
    s1.heartbeat(c, 4)
    m2.heartbeat(c, 5)
    epoch = s1.epoch
    assert c.heartbeat(beat("s1", 99, {}, instance_id="i1"), 6, TOPICS).error is (
        E.FENCED_MEMBER_EPOCH
    )
    back = c.heartbeat(join("s1", instance_id="i1"), 7, TOPICS)
    assert (back.error, back.member_epoch) == (E.NONE, epoch)
    assert flat(back.assignment) == flat(s1.owned)
    assert flat(back.assignment).isdisjoint(flat(m2.owned))
    assert c.groups[GROUP].static == {"i1": "s1"}


def test_a_static_member_fenced_by_its_replacement_and_an_unreleased_instance_id() -> None:
    c = coordinator()
    s1 = Client("s1", instance_id="i1")
    s1.heartbeat(c, 0)
    again = c.heartbeat(join("s2", instance_id="i1"), 1, TOPICS)
    assert again.error is E.UNRELEASED_INSTANCE_ID
    assert again.message == (
        "static member 's2' with instance id 'i1' cannot join: "
        "the instance id is owned by member 's1'"
    )
    answer = c.heartbeat(beat("s2", 1, {}, instance_id="i1"), 2, TOPICS)
    assert answer.error is E.FENCED_INSTANCE_ID
    assert (
        c.heartbeat(beat("s2", -1, None, instance_id="i1"), 3, TOPICS).error is E.FENCED_INSTANCE_ID
    )


def test_a_static_member_s_temporary_leave_keeps_its_partitions_for_its_return() -> None:
    c = coordinator()
    s1, m2 = Client("s1", instance_id="i1"), Client("m2")
    for now in range(0, 50, 10):
        s1.heartbeat(c, now)
        m2.heartbeat(c, now + 1)
    group = c.groups[GROUP]
    epoch = group.group_epoch
    held = flat(s1.owned)
    answer = c.heartbeat(beat("s1", -2, None, instance_id="i1"), 100, TOPICS)
    assert (answer.error, answer.member_epoch) == (E.NONE, -2)
    assert group.group_epoch == epoch  # nothing moves
    assert m2.heartbeat(c, 110).assignment is None  # m2 is given none of s1's partitions
    assert {group.owner_of(t, p) for t, p in held} == {"s1"}

    back = c.heartbeat(join("s1b", instance_id="i1"), 200, TOPICS)
    assert back.error is E.NONE
    assert (back.member_id, back.member_epoch) == ("s1b", epoch)
    assert flat(back.assignment) == held
    assert group.group_epoch == epoch
    assert "s1" not in group.members
    assert {group.owner_of(t, p) for t, p in held} == {"s1b"}


def test_a_group_at_its_maximum_size_refuses_a_new_member_only() -> None:
    c = coordinator(max_size=1)
    first = c.heartbeat(join("m1"), 0, TOPICS)
    answer = c.heartbeat(join("m2"), 1, TOPICS)
    assert answer.error is E.GROUP_MAX_SIZE_REACHED
    assert answer.message == "the consumer group has reached its maximum size of 1"
    assert c.heartbeat(beat("m1", 1, first.assignment), 2, TOPICS).error is E.NONE


def test_a_session_ends_without_heartbeats_and_the_partitions_move() -> None:
    c = coordinator(session_timeout_ms=1_000)
    m1, m2 = Client("m1"), Client("m2")
    for now in range(0, 50, 10):
        m1.heartbeat(c, now)
        m2.heartbeat(c, now + 1)
    group = c.groups[GROUP]
    epoch = group.group_epoch
    m2.heartbeat(c, 900)  # m1 stops at 40: its session ends at 1,040
    assert c.expire(1_039) == []
    fenced = c.expire(1_040)
    assert [(f.member_id, f.epoch, f.reason) for f in fenced] == [("m1", epoch, "session")]
    assert list(group.members) == ["m2"]
    assert group.group_epoch == epoch + 1
    answer = m2.heartbeat(c, 1_100)
    assert answer.member_epoch == epoch + 1
    assert flat(answer.assignment) == flat({"a": frozenset(range(6)), "b": frozenset(range(3))})
    assert c.expire(2_099) == []
    assert [f.member_id for f in c.expire(2_100)] == ["m2"]
    assert group.phase is GroupPhase.EMPTY


def test_heartbeats_keep_a_session_alive() -> None:
    c = coordinator(session_timeout_ms=1_000)
    m1 = Client("m1")
    for now in range(0, 5_000, 500):
        m1.heartbeat(c, now)
        assert c.expire(now) == []
    assert c.expire(5_499) == []
    assert [f.member_id for f in c.expire(5_500)] == ["m1"]
    assert m1.heartbeat(c, 5_600).error is E.UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced() -> None:
    c = coordinator(session_timeout_ms=60_000)
    m1 = Client("m1")
    m1.heartbeat(c, 0)
    c.heartbeat(join("m2", rebalance_timeout_ms=1), 10, TOPICS)
    stubborn = {"a": frozenset(range(6)), "b": frozenset(range(3))}
    c.heartbeat(beat("m1", 1, stubborn), 20, TOPICS)  # enters UNREVOKED_PARTITIONS at 20
    c.heartbeat(beat("m1", 1, stubborn), 5_000, TOPICS)  # still owns them
    assert c.expire(10_019) == []  # m1's rebalance timeout is 10 s (helpers.join)
    fenced = c.expire(10_020)
    assert [(f.member_id, f.epoch, f.reason) for f in fenced] == [("m1", 1, "revocation")]
    answer = c.heartbeat(beat("m2", 2, {}), 10_030, TOPICS)
    assert flat(answer.assignment) == flat(stubborn)


def test_a_member_that_revokes_in_time_is_not_fenced() -> None:
    c = coordinator(session_timeout_ms=60_000)
    m1, m2 = Client("m1"), Client("m2")
    m1.heartbeat(c, 0)
    m2.heartbeat(c, 10)
    m1.heartbeat(c, 20)  # told to revoke
    m1.heartbeat(c, 9_000)  # revoked
    assert c.expire(30_000) == []
    assert c.groups[GROUP].members["m1"].member_epoch == 2


def test_a_regex_subscription_follows_new_topics() -> None:
    c = coordinator()
    view = TopicView({"orders-eu": 2, "orders-us": 2, "audit": 4}, version=1)
    answer = c.heartbeat(join("m1", None, regex="orders-.*"), 0, view)
    assert flat(answer.assignment) == {
        ("orders-eu", 0),
        ("orders-eu", 1),
        ("orders-us", 0),
        ("orders-us", 1),
    }
    epoch = c.groups[GROUP].group_epoch
    grown = TopicView({**view.partitions, "orders-asia": 1}, version=2)
    answer = c.heartbeat(beat("m1", answer.member_epoch, answer.assignment), 10, grown)
    assert answer.member_epoch == epoch + 1
    assert ("orders-asia", 0) in flat(answer.assignment)


def test_a_topic_given_partitions_moves_the_group_epoch() -> None:
    c = coordinator()
    answer = c.heartbeat(join("m1", ("a",)), 0, TOPICS)
    wider = TopicView({"a": 8, "b": 3}, version=1)
    answer = c.heartbeat(beat("m1", 1, answer.assignment), 10, wider)
    assert answer.member_epoch == 2
    assert answer.assignment == {"a": frozenset(range(8))}


def test_the_group_uses_the_server_assignor_its_members_ask_for() -> None:
    c = coordinator()
    view = TopicView({"a": 4, "b": 4})
    m1, m2 = Client("m1", assignor="range"), Client("m2", assignor="range")
    for now in range(0, 50, 10):
        m1.heartbeat(c, now, view)
        m2.heartbeat(c, now + 1, view)
    assert c.groups[GROUP].phase is GroupPhase.STABLE
    # range: m1 gets partitions 0-1 of each topic, m2 2-3 (co-partitioned)
    assert m1.owned == {"a": frozenset({0, 1}), "b": frozenset({0, 1})}
    assert m2.owned == {"a": frozenset({2, 3}), "b": frozenset({2, 3})}


def test_a_leave_that_also_changes_the_subscribed_topics_moves_the_group_epoch_once() -> None:
    c = coordinator()
    m1, m2 = Client("m1", ("a",)), Client("m2", ("b",))
    for now in range(0, 50, 10):
        m1.heartbeat(c, now)
        m2.heartbeat(c, now + 1)
    epoch = c.groups[GROUP].group_epoch
    c.heartbeat(beat("m2", -1, None), 100, TOPICS)  # nobody subscribes to b any more
    assert m1.heartbeat(c, 110).member_epoch == epoch + 1
    assert c.groups[GROUP].group_epoch == epoch + 1


def test_a_regex_uses_kafka_s_syntax_and_refuses_backreferences() -> None:
    """Kafka matches subscription regexes with RE2/J: a backreference is no regex there,
    and the answer says why."""
    c = coordinator()
    answer = c.heartbeat(join("m1", None, regex=r"(orders)-\1"), 0, TOPICS)
    assert answer.error is E.INVALID_REGULAR_EXPRESSION
    assert "invalid escape sequence" in (answer.message or "")
    assert c.groups == {}


_BACKTRACKING = """
from huddle.coordinator.consumer import ConsumerCoordinator, ConsumerGroupConfig, TopicView
from tests.consumer.helpers import join
c = ConsumerCoordinator(ConsumerGroupConfig())
view = TopicView({"a" * 64: 1, "ab": 2}, version=1)
answer = c.heartbeat(join("m1", None, regex="(a|a)*b"), 0, view)
print(sorted(answer.assignment or {}))
"""


def test_a_regex_that_backtracks_does_not_hold_the_coordinator_up() -> None:
    """``(a|a)*b`` against a 64-letter topic name: 2**64 steps for a backtracking engine,
    one pass for RE2. Run in a process of its own so that a coordinator that hangs fails
    the test at the deadline instead of hanging it."""
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            [sys.executable, "-c", _BACKTRACKING],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=root,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("matching one member's regex held the coordinator up for 60 s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['ab']"
    assert done.stderr == ""  # RE2 writes nothing of its own


@pytest.mark.parametrize(
    ("regex", "why"),
    [
        # under the length bound, but RE2 takes seconds to compile it (on the event loop)
        ("(.{1,100})" * 200, "pattern too large"),
        ("t|" * 2_500 + "t", "at most 4096 are taken"),
    ],
)
def test_a_regex_too_costly_to_compile_is_refused(regex: str, why: str) -> None:
    """Compiling is the one part of a regex whose time is not linear: one member's huge
    pattern must not hold up the coordinator's other groups. It is refused, and says why."""
    c = coordinator()
    answer = c.heartbeat(join("m1", None, regex=regex), 0, TOPICS)
    assert answer.error is E.INVALID_REGULAR_EXPRESSION
    assert why in (answer.message or "")
    assert c.groups == {}
