"""Changing what a member subscribes to while it runs: a new list, or a pattern that
follows topics as they are created and deleted; dropped and deleted topics' partitions
are revoked before the join (KIP-429)."""

from __future__ import annotations

import re

import pytest

from huddle.chaos.proxy import fault_proxy
from huddle.client import Admin, TopicPartition
from huddle.client.assignors.sticky import CooperativeStickyAssignor
from huddle.client.member_core import MemberConfig, MemberCore, Next
from huddle.client.subscription import Subscription
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.embedded import Assignment, encode, grouped
from huddle.protocol.messages import JoinGroupResponse, SyncGroupResponse
from tests.helpers import Recorder, member, partitions, settled, wait_until

TP = TopicPartition


def test_a_dropped_or_deleted_topics_partitions_are_revoked_before_the_join() -> None:
    core = MemberCore(
        MemberConfig(group_id="g", topics=["a", "b", "c"]), [CooperativeStickyAssignor()]
    )
    core.owned = frozenset({TP("a", 0), TP("b", 0), TP("c", 0)})
    assert core.subscribe(["a", "c"]) is True
    assert core.subscribe(["c", "a"]) is False  # the same set: nothing to do
    step = core.before_join(gone=frozenset({"c"}))
    assert step.revoked == {TP("b", 0), TP("c", 0)}
    assert step.next is Next.JOIN
    assert core.owned == {TP("a", 0)}
    assert core.join_request().protocols  # joins with what it still owns and the new list


def test_a_pattern_follows_topics_and_remembers_deletions() -> None:
    sub = Subscription(None, r"orders-.*")
    sub.listed(["orders-1", "payments", "orders-2x", "xorders-3"])
    assert sub.current() == ["orders-1", "orders-2x"]
    sub.changed({"orders-9": 3, "payments-2": 1, "orders-1": 0})
    assert sub.current() == ["orders-2x", "orders-9"]
    assert sub.gone() == {"orders-1"}
    sub.changed({"orders-1": 2})  # created again
    assert sub.gone() == frozenset()
    with pytest.raises(ValueError, match="one of them"):
        Subscription(["a"], "b")
    with pytest.raises(ValueError, match="regular expression"):
        Subscription(None, "orders-(")
    with pytest.raises(TypeError, match="not one string"):
        Subscription("orders", None)


async def test_subscribe_moves_the_dropped_topic_to_the_others(bootstrap: str) -> None:
    calls = Recorder()
    async with Admin(bootstrap) as admin:
        await admin.create_topic("a", 2)
        await admin.create_topic("b", 2)
    both = partitions(2, "a") | partitions(2, "b")
    async with (
        member(bootstrap, topics=["a", "b"], listener=calls) as x,
        member(bootstrap, topics=["a", "b"]) as y,
    ):
        await wait_until(lambda: settled([x, y], both), what="the group to settle")
        held_b = frozenset(tp for tp in x.assignment if tp.topic == "b")
        calls.clear()
        await x.subscribe(["a"])
        assert x.subscription == ["a"]
        await wait_until(
            lambda: settled([x, y], both) and all(tp.topic == "a" for tp in x.assignment),
            what="x to give b up",
        )
        assert partitions(2, "b") <= y.assignment
        revoked = [ps for name, ps, _ in calls.calls if name == "revoked"]
        if held_b:
            assert revoked
            assert held_b <= revoked[0]
        assert "lost" not in [name for name, _, _ in calls.calls]


async def test_a_pattern_member_takes_new_topics_and_gives_up_deleted_ones(
    bootstrap: str,
) -> None:
    calls = Recorder()
    async with Admin(bootstrap) as admin:
        await admin.create_topic("orders-1", 2)
        await admin.create_topic("payments", 2)
        async with member(
            bootstrap, topics=None, pattern=re.compile(r"orders-.*"), listener=calls
        ) as m:
            await wait_until(lambda: settled([m], partitions(2, "orders-1")), what="orders-1")
            assert m.subscription == ["orders-1"]
            await admin.create_topic("orders-2", 3)
            expected = partitions(2, "orders-1") | partitions(3, "orders-2")
            await wait_until(lambda: settled([m], expected), what="orders-2 to be taken")
            calls.clear()
            await admin.delete_topic("orders-1")
            await wait_until(lambda: settled([m], partitions(3, "orders-2")), what="orders-1 to go")
            assert m.subscription == ["orders-2"]
            revoked = [ps for name, ps, _ in calls.calls if name == "revoked"]
            assert revoked
            assert partitions(2, "orders-1") <= revoked[0]
            assert "lost" not in [name for name, _, _ in calls.calls]


def test_an_assignment_made_for_an_old_subscription_is_not_applied() -> None:
    config = MemberConfig(group_id="g", topics=["a", "b"])
    core = MemberCore(config, [CooperativeStickyAssignor()])
    core.join_request()
    core.on_join(
        JoinGroupResponse(
            generation_id=1,
            protocol_type="consumer",
            protocol_name="cooperative-sticky",
            leader="m",
            member_id="m",
            members=[],
        )
    )
    assert core.subscribe(["a"])  # changed while the JoinGroup was out
    stale = encode(Assignment(assigned=grouped([TP("a", 0), TP("b", 0)])))
    step = core.on_sync(SyncGroupResponse(assignment=stale), 0)
    assert step.next is Next.JOIN
    assert step.assigned is None  # no on_partitions_assigned for a dropped topic
    assert core.owned == frozenset()


async def test_a_pattern_member_catches_up_on_topics_created_while_it_was_away(
    server: CoordinatorServer, bootstrap: str
) -> None:
    """The notice for orders-2 went to nobody on its connection: it was cut off. On its
    next connection it lists the topics again and takes orders-2 in."""
    async with (
        Admin(bootstrap) as admin,
        fault_proxy("127.0.0.1", server.port) as proxy,
    ):
        await admin.create_topic("orders-1", 1)
        async with member(f"127.0.0.1:{proxy.port}", topics=None, pattern=r"orders-.*") as m:
            await wait_until(lambda: settled([m], partitions(1, "orders-1")), what="orders-1")
            await proxy.partition()
            await admin.create_topic("orders-2", 1)
            proxy.heal()
            both = partitions(1, "orders-1") | partitions(1, "orders-2")
            await wait_until(lambda: settled([m], both), what="orders-2 to be taken in")
            assert m.subscription == ["orders-1", "orders-2"]
