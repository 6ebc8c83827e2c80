"""``Member`` and the simulator's member process run one member runtime: fed one scripted
coordinator, they take the same actions.

Each scenario is a scripted coordinator. Each adapter is run against it (the library's
``Member`` on anyio with a scripted connection, the simulator's process on its scheduler
with a scripted link) and what it does is written down: connection attempts and their
ends, the requests it sends, the listener callbacks it runs (when each begins and ends),
and when it tells its driver a connection is gone. Where the script has to wait for the
member (a callback that ends only once a reconnect attempt failed, say), the library's
side waits for that action and the simulator's takes long enough on its clock.

The scenarios: a heartbeat answered with another type (the connection is out of step:
both drop it and connect again, as Kafka's client fails a connection whose answer does
not match its request); a commit refused (ILLEGAL_GENERATION: the member fell out and
rejoins; REBALANCE_IN_PROGRESS: nothing changes); a rebalance notice pushed by the
coordinator; the session running out while every reconnect fails (the loss is handled
offline, and an attempt that fails meanwhile is ended after it), or while a connection is
made and lost at once (never served: its end too waits for the loss); a callback overrunning
the rebalance timeout (the member gives itself up, leaves, and rejoins as a new member).
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    RebalanceStarted,
    Response,
    SyncGroupResponse,
)
from tests.client.parity_script import ASSIGNED, Action, Scenario, Until, both

E = ErrorCode


class HeartbeatOutOfStep(Scenario):
    recorded = (*Scenario.recorded, HeartbeatRequest)
    steady = 2  # heartbeats answered NONE after the sync; the next one is out of step

    def done(self) -> bool:
        return self.seen("connect") >= 2 or self.heartbeats > self.steady + 2

    def heartbeat(self) -> Response | None:
        if self.heartbeats == self.steady + 1:
            return SyncGroupResponse()  # not a heartbeat's answer
        return HeartbeatResponse()


class CommitRefused(Scenario):
    recorded = (*Scenario.recorded, OffsetCommitRequest)
    code: ClassVar[ErrorCode]

    def commit(self) -> Response:
        first = self.seen("send", "OffsetCommitRequest") == 1
        return OffsetCommitResponse(error_code=self.code if first else E.NONE)


class CommitOutOfGeneration(CommitRefused):
    code = E.ILLEGAL_GENERATION
    commits = 1


class CommitDuringRebalance(CommitRefused):
    code = E.REBALANCE_IN_PROGRESS
    commits = 2

    def done(self) -> bool:
        return self.seen("send", "OffsetCommitRequest") >= 2


class NoticePushed(Scenario):
    def heartbeat(self) -> Response | None:
        if self.synced == 1 and self.heartbeats == 2:
            self.push(RebalanceStarted(group_id="sim", generation_id=self.generation))
        return HeartbeatResponse()


class ExpiredOffline(Scenario):
    """The connection drops; the next attempt fails only once the session has run out and
    its loss (``on_partitions_lost``, handled offline) has begun, which lasts until then."""

    session_timeout_ms = 1_000

    def heartbeat(self) -> Response | None:
        if self.synced == 1 and self.heartbeats == 2:
            return None  # the connection drops
        return HeartbeatResponse()

    def connect_fails(self) -> Until | None:
        if self.attempts != 2:
            return None
        return lambda: self.seen("listen", "on_partitions_lost", *ASSIGNED[2:]) > 0

    def callback_until(self, name: str) -> Until | None:
        if name != "on_partitions_lost":
            return None
        return lambda: self.ends >= 2

    def callback_ms(self, name: str) -> float:
        return 10.0 if name == "on_partitions_lost" else 0.0


class LostBeforeServed(ExpiredOffline):
    """As ``ExpiredOffline``, but the attempt made while the loss runs succeeds and its
    connection is lost at once: it is never served (its main loop would wait for the loss)."""

    ends_written = False  # the library notices that loss only once the loss is over

    def connect_fails(self) -> Until | None:
        return None

    def connect_waits(self) -> Until | None:
        return super().connect_fails()

    def lost_at_once(self) -> bool:
        return self.attempts == 2

    def callback_until(self, name: str) -> Until | None:
        if name != "on_partitions_lost":
            return None
        return lambda: self.up >= 2


class GaveUp(Scenario):
    """The first ``on_partitions_assigned`` overruns the rebalance timeout."""

    rebalance_timeout_ms = 300

    def callback_until(self, name: str) -> Until | None:
        if name != "on_partitions_assigned" or self.synced != 1:
            return None
        return lambda: self.seen("send", "LeaveGroupRequest") > 0

    def callback_ms(self, name: str) -> float:
        slow = name == "on_partitions_assigned" and self.synced == 1
        return self.rebalance_timeout_ms + 100.0 if slow else 0.0


SERVED = [("connect",), ("driver", "connected")]
JOINED = [
    *SERVED,
    ("send", "JoinGroupRequest", ""),
    ("send", "SyncGroupRequest"),
    ASSIGNED,
    ("done", "on_partitions_assigned"),
]


def rejoined(member_id: str) -> list[Action]:
    return [
        ("send", "JoinGroupRequest", member_id),
        ("send", "SyncGroupRequest"),
        ASSIGNED,
        ("done", "on_partitions_assigned"),
    ]


def test_a_heartbeat_answered_out_of_step_drops_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert both(HeartbeatOutOfStep, monkeypatch) == [
        *JOINED,
        *[("send", "HeartbeatRequest")] * (HeartbeatOutOfStep.steady + 1),
        # the answer of the wrong type: the connection is dropped and made again
        ("disconnect",),
        ("driver", "disconnected"),
        ("connect",),
    ]


def test_a_commit_refused_out_of_its_generation_loses_the_partitions_and_rejoins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert both(CommitOutOfGeneration, monkeypatch) == [
        *JOINED,
        ("send", "OffsetCommitRequest"),
        ("listen", "on_partitions_lost", *ASSIGNED[2:]),
        ("done", "on_partitions_lost"),
        *rejoined("m-1"),
    ]


def test_a_commit_refused_during_a_rebalance_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert both(CommitDuringRebalance, monkeypatch) == [
        *JOINED,
        ("send", "OffsetCommitRequest"),
        ("send", "OffsetCommitRequest"),
    ]


def test_a_pushed_rebalance_notice_makes_the_member_rejoin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert both(NoticePushed, monkeypatch) == [
        *JOINED,
        ("listen", "on_partitions_revoked", *ASSIGNED[2:]),  # eager: all of it, first
        ("done", "on_partitions_revoked"),
        *rejoined("m-1"),
    ]


def test_a_session_that_runs_out_offline_is_lost_there_and_a_failed_attempt_ends_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert (
        both(ExpiredOffline, monkeypatch)
        == [
            *JOINED,
            ("disconnect",),  # dropped
            ("driver", "disconnected"),
            ("connect",),  # it fails only once the session ran out and its loss began
            ("listen", "on_partitions_lost", *ASSIGNED[2:]),
            ("disconnect",),
            ("done", "on_partitions_lost"),
            ("driver", "disconnected"),  # that attempt's end, once the loss is over
            *SERVED,
            *rejoined("m-1"),
        ]
    )


def test_a_connection_lost_while_a_loss_runs_offline_is_never_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert (
        both(LostBeforeServed, monkeypatch)
        == [
            *JOINED,
            ("driver", "disconnected"),  # dropped
            ("connect",),  # made once the loss began, and lost at once
            ("listen", "on_partitions_lost", *ASSIGNED[2:]),
            ("done", "on_partitions_lost"),
            ("driver", "disconnected"),  # its end, once the loss is over: never served
            *SERVED,
            *rejoined("m-1"),
        ]
    )


def test_a_member_that_gave_up_in_an_overrun_callback_leaves_and_rejoins_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert (
        both(GaveUp, monkeypatch)
        == [
            *JOINED[:-1],
            ("send", "LeaveGroupRequest"),  # while the callback still runs
            ("done", "on_partitions_assigned"),
            ("listen", "on_partitions_lost", *ASSIGNED[2:]),
            ("done", "on_partitions_lost"),
            *rejoined(""),  # a new member id
        ]
    )
