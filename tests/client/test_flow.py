"""The member's main loop (``MemberFlow``), driven by hand: actions out, results in."""

from __future__ import annotations

from collections.abc import Mapping

from huddle.client.assignors.base import ASSIGNORS
from huddle.client.driver import MemberDriver
from huddle.client.flow import Call, Listen, MemberFlow
from huddle.client.member_core import MemberConfig, MemberCore, Step
from huddle.client.partition_counts import Scope
from huddle.client.subscription import Subscription
from huddle.protocol.embedded import Assignment, TopicPartition, encode, grouped
from huddle.protocol.messages import (
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicMetadata,
    TopicMetadataChanged,
)
from tests.builders import tps


class Host:
    def __init__(self) -> None:
        self.now = 0.0

    def now_ms(self) -> float:
        return self.now

    def counts_scope(self) -> Scope:
        return (None, "", 0)

    def lags(self) -> Mapping[TopicPartition, int] | None:
        return None


def flow() -> MemberFlow:
    core = MemberCore(MemberConfig(group_id="g", topics=["t"]), [ASSIGNORS.create("range")])
    return MemberFlow(MemberDriver(core, Subscription(["t"], None)), Host())


def test_callbacks_a_lost_connection_cut_off_are_owed_and_run_after() -> None:
    """Found by huddle.sim: the connection dropped while a slow on_partitions_revoked ran;
    the rest of that step (on_partitions_assigned) never ran, yet the member owned what it
    assigned, and later declared lost partitions the application never heard of."""
    f = flow()
    step = Step(revoked=tps("t-0"), assigned=tps("t-1"))
    callbacks = f.apply(step)
    assert next(callbacks) == Listen("on_partitions_revoked", tps("t-0"))
    callbacks.close()  # the connection went: the running callback is cancelled
    assert f.driver.listener_since is None
    owed = f.owed_callbacks()
    assert next(owed) == Listen("on_partitions_assigned", tps("t-1"))  # not the revocation again
    assert list(owed) == []
    assert f.owed is None
    assert list(f.owed_callbacks()) == []  # owed once


def test_a_step_whose_callbacks_all_ran_owes_nothing() -> None:
    f = flow()
    callbacks = f.apply(Step(revoked=tps("t-0"), assigned=tps("t-1")))
    assert [a for a in callbacks] == [
        Listen("on_partitions_revoked", tps("t-0")),
        Listen("on_partitions_assigned", tps("t-1")),
    ]
    assert f.owed is None


def test_a_follower_waits_for_the_leaders_assignment_as_long_as_the_sync_phase_lasts() -> None:
    """Found by huddle.sim: a follower's SyncGroup timed out after one session while the
    leader (frozen) had the whole rebalance timeout to send the assignment; the follower
    dropped its connection and, a dynamic member, lost everything it owned."""
    f = flow()
    config = f.core.config
    rebalance = f._rebalance()
    join = next(rebalance)
    assert isinstance(join, Call)
    assert isinstance(join.request, JoinGroupRequest)
    sync = rebalance.send(
        JoinGroupResponse(generation_id=1, member_id="m-1", leader="m-0", protocol_name="range")
    )
    assert isinstance(sync, Call)
    assert isinstance(sync.request, SyncGroupRequest)
    assert sync.timeout_ms == config.rebalance_timeout_ms + config.session_timeout_ms


def test_a_static_leader_back_in_its_generation_rebalances_when_its_topics_change() -> None:
    """Found by huddle.sim: a restarted static member took its leadership back without an
    assignment (KIP-345), so it knew neither its group's topics nor their counts, and
    ignored a partition-count change: the group went on with partitions that no longer
    existed and never got the new ones."""
    core = MemberCore(
        MemberConfig(group_id="g", topics=["t"], instance_id="i-1"), [ASSIGNORS.create("range")]
    )
    f = MemberFlow(MemberDriver(core, Subscription(["t"], None)), Host())
    rebalance = f._rebalance()
    join = next(rebalance)
    assert isinstance(join, Call)
    assert isinstance(join.request, JoinGroupRequest)
    metadata = join.request.protocols[0].metadata
    sync = rebalance.send(
        JoinGroupResponse(
            generation_id=3,
            member_id="m-1",
            leader="m-1",
            protocol_name="range",
            skip_assignment=True,
            members=[JoinGroupMember(member_id="m-1", group_instance_id="i-1", metadata=metadata)],
        )
    )
    assert isinstance(sync, Call)
    assert isinstance(sync.request, SyncGroupRequest)
    assert sync.request.assignments == []  # no assignment run
    assigned = rebalance.send(
        SyncGroupResponse(assignment=encode(Assignment(assigned=grouped(tps("t-0")))))
    )
    assert assigned == Listen("on_partitions_assigned", tps("t-0"))
    assert f.core.is_leader
    changed = TopicMetadataChanged(topics=[TopicMetadata(name="t", partitions=4)])
    assert [r.reason for r in f.driver.topics_changed(changed)] == [
        "partition counts changed: ['t']"
    ]
