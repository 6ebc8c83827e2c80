"""The consumer-protocol core while a reconciliation's callbacks run: its heartbeats keep the
session alive, report what is being revoked as owned still, and start nothing; what their
answers bring (a new target, a fence) is acted on once the callbacks are done."""

from __future__ import annotations

from huddle.client.consumer_core import Reconcile
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import ConsumerHeartbeatResponse, ConsumerTopicPartitions
from tests.client.test_consumer_core import _answer, _joined, _tps


def test_a_heartbeat_while_revoking_reports_the_partitions_and_its_answer_starts_nothing() -> None:
    core = _joined(0, 1, 2)
    step = core.answered(_answer(1, 0))
    core.callbacks_begin()  # on_partitions_revoked(1, 2) runs
    assert core.keeps_alive()
    assert core.request().owned == [ConsumerTopicPartitions(topic="t", partitions=[0, 1, 2])]
    kept = core.answered(ConsumerHeartbeatResponse(member_epoch=1), sent_ms=7_000)
    assert kept == Reconcile()  # the same target: no second revocation
    assert core.proved_ms == 7_000  # the session renewed
    core.revoked(step.revoke)
    core.assigned(step.assign)
    assert core.callbacks_done() == Reconcile()
    assert core.request().owned == [ConsumerTopicPartitions(topic="t", partitions=[0])]


def test_a_target_answered_while_callbacks_run_is_reconciled_once_they_are_done() -> None:
    core = _joined(0, 1)
    step = core.answered(_answer(1, 0))
    core.callbacks_begin()
    assert core.answered(_answer(2, 3)) == Reconcile()  # nothing taken while revoking
    core.revoked(step.revoke)
    core.assigned(step.assign)
    assert core.callbacks_done() == Reconcile(revoke=_tps(0), assign=_tps(3), again=True)
    assert (core.epoch, core.busy) == (2, False)


def test_a_member_fenced_while_revoking_skips_the_rest_and_loses_what_it_holds() -> None:
    core = _joined(0, 1)
    step = core.answered(_answer(1, 0))
    core.callbacks_begin()
    fenced = ConsumerHeartbeatResponse(error_code=ErrorCode.FENCED_MEMBER_EPOCH)
    assert core.answered(fenced) == Reconcile()  # the running callback is not cut off
    assert (core.abandoned, core.keeps_alive(), core.epoch) == (True, False, 0)
    assert not core.may_own(0)  # the coordinator may have given them to others already
    core.revoked(step.revoke)  # it returned; on_partitions_assigned is skipped
    assert core.callbacks_done() == Reconcile(lost=_tps(0), again=True)
    assert core.request().member_epoch == 0  # then it joins again
