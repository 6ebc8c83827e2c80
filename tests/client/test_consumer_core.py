"""The consumer-protocol member's sans-IO core: what each answer asks of it, its requests,
its leave."""

from __future__ import annotations

import msgspec
import pytest

from huddle.client.consumer_core import ConsumerCore
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import (
    ErrorCode,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
)
from huddle.protocol.messages import ConsumerHeartbeatResponse, ConsumerTopicPartitions


def _answer(epoch: int, *partitions: int, interval: int = 5_000) -> ConsumerHeartbeatResponse:
    return ConsumerHeartbeatResponse(
        member_epoch=epoch,
        heartbeat_interval_ms=interval,
        assignment=[ConsumerTopicPartitions(topic="t", partitions=list(partitions))],
    )


def _tps(*partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition("t", p) for p in partitions)


def _joined(*partitions: int) -> ConsumerCore:
    core = ConsumerCore(group_id="g", topics=["t"])
    step = core.answered(_answer(1, *partitions))
    core.assigned(step.assign)
    return core


def test_a_join_is_a_full_request_with_epoch_0_then_heartbeats_are_short() -> None:
    core = ConsumerCore(group_id="g", topics=["t"], rebalance_timeout_ms=9_000)
    join = core.request()
    assert (join.member_epoch, join.subscribed_topic_names, join.rebalance_timeout_ms) == (
        0,
        ["t"],
        9_000,
    )
    step = core.answered(_answer(1, 0, 1))
    assert (step.assign, step.again) == (_tps(0, 1), True)  # taken, then acknowledged at once
    core.assigned(step.assign)
    beat = core.request()
    assert beat.member_epoch == 1
    assert beat.subscribed_topic_names is None  # unchanged: not sent again
    assert beat.owned == [ConsumerTopicPartitions(topic="t", partitions=[0, 1])]
    assert core.heartbeat_interval_ms == 5_000  # the coordinator's


def test_a_revocation_is_given_up_before_it_is_acknowledged() -> None:
    core = _joined(0, 1, 2)
    step = core.answered(_answer(1, 0))
    assert (step.revoke, step.assign, step.again) == (_tps(1, 2), frozenset(), True)
    assert core.request().owned == [ConsumerTopicPartitions(topic="t", partitions=[0, 1, 2])]
    core.revoked(step.revoke)  # after on_partitions_revoked
    assert core.request().owned == [ConsumerTopicPartitions(topic="t", partitions=[0])]


@pytest.mark.parametrize(
    "code",
    [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND],
)
def test_fenced_or_unknown_loses_everything_and_rejoins_with_epoch_0(code: ErrorCode) -> None:
    core = _joined(0, 1)
    member_id = core.member_id
    step = core.answered(ConsumerHeartbeatResponse(error_code=code))
    assert (step.lost, step.again) == (_tps(0, 1), True)
    core.lost()
    rejoin = core.request()
    assert (rejoin.member_epoch, rejoin.member_id, rejoin.owned) == (0, member_id, [])
    assert rejoin.subscribed_topic_names == ["t"]


def test_a_leave_is_epoch_minus_1_and_a_static_member_s_minus_2() -> None:
    assert _joined(0).leave_request().member_epoch == -1
    static = ConsumerCore(group_id="g", topics=["t"], instance_id="i-1")
    assert static.leave_request().member_epoch == -2
    assert static.leave_request().instance_id == "i-1"


def test_a_retriable_error_retries_and_a_fatal_one_raises() -> None:
    core = _joined(0)
    loading = ConsumerHeartbeatResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert core.answered(loading).retry
    assert core.owned == _tps(0)  # nothing lost
    refused = ConsumerHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(GroupAuthorizationFailedError):
        core.answered(refused)


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_another_coordinator_is_found_and_told_everything_at_the_member_s_epoch(
    code: ErrorCode,
) -> None:
    core = _joined(0, 1)
    step = core.answered(ConsumerHeartbeatResponse(error_code=code))
    assert (step.find, step.lost, step.again) == (True, frozenset(), False)
    beat = core.request()  # to the node found: its epoch, what it owns, its subscription
    assert (beat.member_epoch, beat.subscribed_topic_names) == (1, ["t"])
    assert beat.owned == [ConsumerTopicPartitions(topic="t", partitions=[0, 1])]


def test_after_a_lost_connection_the_next_heartbeat_is_a_full_one_at_the_epoch() -> None:
    core = _joined(0)
    assert core.request().subscribed_topic_names is None
    core.disconnected()
    beat = core.request()
    assert (beat.member_epoch, beat.subscribed_topic_names, beat.rebalance_timeout_ms) == (
        1,
        ["t"],
        30_000,
    )


def test_a_group_not_found_while_joining_is_a_refusal() -> None:
    core = ConsumerCore(group_id="g", topics=["t"])  # epoch 0: a classic group's id
    with pytest.raises(GroupIdNotFoundError):
        core.answered(ConsumerHeartbeatResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND))


def test_a_commit_carries_the_member_epoch() -> None:
    core = _joined(0)
    request = core.commit_request({"t": [(0, 42)]}, "m")
    assert (request.generation_id, request.member_id) == (1, core.member_id)
    assert request.topics[0].partitions[0].offset == 42


def test_a_subscription_changed_while_a_heartbeat_is_out_is_sent_with_the_next() -> None:
    """``subscribe()`` while a heartbeat is answered: that answer is to the old subscription,
    so the next heartbeat is a full one carrying the new (else the coordinator never hears
    of it, and the member keeps the old topics)."""
    core = _joined(0)
    out = core.request()
    assert out.subscribed_topic_names is None
    core.subscribe(["u"])
    core.answered(ConsumerHeartbeatResponse(member_epoch=1))  # the answer to ``out``
    assert core.request().subscribed_topic_names == ["u"]
    core.answered(ConsumerHeartbeatResponse(member_epoch=2))
    assert core.request().subscribed_topic_names is None  # told: short ones again


def test_a_heartbeat_waits_a_third_of_the_coordinators_session_for_its_answer() -> None:
    """Until an answer said the session, the request timeout; then a third of the session
    (never longer than the request timeout), so a lost answer is given up in time for a
    heartbeat on a new connection to keep the session."""
    core = ConsumerCore(group_id="g", topics=["t"])
    assert core.answer_timeout_ms(10_000) == 10_000
    core.answered(msgspec.structs.replace(_answer(1, 0), session_timeout_ms=3_000))
    assert core.answer_timeout_ms(10_000) == 1_000
    core.answered(msgspec.structs.replace(_answer(1, 0), session_timeout_ms=45_000))
    assert core.answer_timeout_ms(10_000) == 10_000
