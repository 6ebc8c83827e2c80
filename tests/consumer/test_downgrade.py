"""The downgrade in the sans-IO core (``consumer.downgrade``): a converted group whose last
consumer-protocol member leaves or is fenced, the rest classic, is handed back as a classic
group (Kafka 4.0's ``convertToClassicGroup``) when the migration policy downgrades, with an
explicit clock."""

from __future__ import annotations

import random

import msgspec
import pytest

from huddle.coordinator.consumer import ConsumerCoordinator, ConsumerGroupConfig, HeartbeatRequest
from huddle.coordinator.consumer import classic as mixed
from huddle.coordinator.consumer.classic import ClassicJoin
from huddle.coordinator.consumer.messages import ClassicGroupSnapshot
from huddle.coordinator.consumer.timeouts import Fenced
from huddle.protocol.consumer_protocol import read_assignment
from huddle.protocol.errors import ErrorCode
from tests.consumer.helpers import GROUP, Client, flat, join
from tests.consumer.test_classic_members import (
    GENERATION,
    SESSION_MS,
    TOPICS,
    ClassicClient,
    _classic_group,
    _subscription,
)

E = ErrorCode
CONSUMER_SESSION_MS = 45_000


def _mixed(
    policy: str = "bidirectional", classic_max_size: int = 0
) -> tuple[ConsumerCoordinator, list[ClassicClient], Client, float]:
    """Two classic members upgraded by a consumer-protocol member "new", all reconciled."""
    core = ConsumerCoordinator(
        ConsumerGroupConfig(
            migration_policy=policy,
            session_timeout_ms=CONSUMER_SESSION_MS,
            classic_max_size=classic_max_size,
        )
    )
    snapshots, classics = _classic_group()
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    new = Client("new", topics=("t",))
    now = 0.0
    for _ in range(6):
        now += 100
        new.heartbeat(core, now, TOPICS)
        for client in classics:
            client.heartbeat(core, now)
    group = core.groups[GROUP]
    assert all(c.generation == group.group_epoch for c in classics)
    assert len(flat(new.owned)) == 2
    return core, classics, new, now


def _downgraded(core: ConsumerCoordinator) -> ClassicGroupSnapshot:
    (taken,) = core.take_downgraded()
    group_id, classic = taken
    assert group_id == GROUP
    assert core.take_downgraded() == []  # handed over once
    return classic


@pytest.mark.parametrize("policy", ["bidirectional", "downgrade"])
def test_the_last_consumer_member_leaving_hands_a_classic_group_back(policy: str) -> None:
    core, classics, _new, now = _mixed(policy)
    epoch = core.groups[GROUP].group_epoch
    left = core.heartbeat(HeartbeatRequest(GROUP, "new", -1), now + 1, TOPICS)
    assert (left.error, left.member_epoch) == (E.NONE, -1)
    assert GROUP not in core.groups
    assert core.next_deadline() is None  # its members' sessions are the classic group's now
    classic = _downgraded(core)
    # at the epoch its classic members are at: their next Heartbeat is "rejoin", not
    # "illegal generation"
    assert classic.generation == epoch
    assert {m.member_id for m in classic.members} == {c.member_id for c in classics}
    for member, client in zip(classic.members, classics, strict=True):
        assert member.session_timeout_ms == SESSION_MS
        assert member.rebalance_timeout_ms == 30_000
        assert member.protocols[0][0] == "range"
        given = read_assignment(member.assignment).assigned_partitions
        assert {("t", p) for _, ps in given for p in ps} == flat(client.holds)


def test_the_last_consumer_member_fenced_by_its_session_hands_the_group_back() -> None:
    core, classics, _new, now = _mixed()
    fenced: list[Fenced] = []
    while not fenced:  # the classic members go on heartbeating; the consumer member is silent
        now += SESSION_MS / 2
        fenced = core.expire(now)
        for client in classics if not fenced else ():
            assert mixed.heartbeat(core, GROUP, client.member_id, client.generation, now) is E.NONE
    assert [f.member_id for f in fenced] == ["new"]
    assert {m.member_id for m in _downgraded(core).members} == {"classic-0", "classic-1"}
    assert GROUP not in core.groups


@pytest.mark.parametrize("policy", ["upgrade", "disabled"])
def test_a_policy_that_does_not_downgrade_keeps_the_consumer_group(policy: str) -> None:
    core, classics, _new, now = _mixed(policy)
    assert core.heartbeat(HeartbeatRequest(GROUP, "new", -1), now + 1, TOPICS).error is E.NONE
    assert core.take_downgraded() == []
    group = core.groups[GROUP]
    assert set(group.members) == {c.member_id for c in classics}
    # the classic members are served on by the consumer group: told to rejoin, and they
    # get the partitions the consumer member released
    for client in classics:
        client.heartbeat(core, now + 2)
    assert flat(classics[0].holds) | flat(classics[1].holds) == {("t", p) for p in range(6)}


def test_a_classic_member_going_or_the_group_emptying_does_not_downgrade() -> None:
    core, classics, new, now = _mixed()
    classics[0].leave(core, now + 1)  # a classic member's going: the consumer member stays
    assert core.take_downgraded() == []
    classics[1].leave(core, now + 2)
    assert core.take_downgraded() == []
    # the consumer member is the last: its going empties the group, nothing to hand back
    assert set(core.groups[GROUP].members) == {new.member_id}
    assert core.heartbeat(HeartbeatRequest(GROUP, "new", -1), now + 3, TOPICS).error is E.NONE
    assert core.take_downgraded() == []


def test_more_members_than_a_classic_group_may_hold_are_not_downgraded() -> None:
    core, classics, _new, now = _mixed(classic_max_size=1)
    assert core.heartbeat(HeartbeatRequest(GROUP, "new", -1), now + 1, TOPICS).error is E.NONE
    assert core.take_downgraded() == []
    assert set(core.groups[GROUP].members) == {c.member_id for c in classics}


def test_a_consumer_member_leaving_while_another_stays_does_not_downgrade() -> None:
    core, _classics, new, now = _mixed()
    other = Client("other", topics=("t",))
    other.heartbeat(core, now + 1, TOPICS)
    assert core.heartbeat(HeartbeatRequest(GROUP, new.member_id, -1), now + 2, TOPICS).error is (
        E.NONE
    )
    assert core.take_downgraded() == []
    assert "other" in core.groups[GROUP].members


def test_a_classic_member_sharing_no_protocol_with_the_others_is_refused() -> None:
    """As Kafka's ``supportsClassicProtocols``: a classic group must be able to choose one
    protocol, should the group be downgraded."""
    core, _classics, _new, now = _mixed()
    subscription = _subscription({})
    alone = ClassicJoin(GROUP, "x", None, SESSION_MS, 30_000, "consumer", (("rr", subscription),))
    assert mixed.join(core, alone, "x", now, TOPICS).error is E.INCONSISTENT_GROUP_PROTOCOL
    assert "x" not in core.groups[GROUP].members
    both = ClassicJoin(
        GROUP, "x", None, SESSION_MS, 30_000, "consumer", (("rr", subscription), ("range", b""))
    )
    assert mixed.join(core, both, "x", now, TOPICS).error is E.NONE
    # the member itself may change its protocols when it rejoins, as long as the others
    # share one of them
    again = ClassicJoin(
        GROUP, "x", None, SESSION_MS, 30_000, "consumer", (("range", subscription),)
    )
    assert mixed.join(core, again, "x", now + 1, TOPICS).error is E.NONE


def _told_to_rejoin() -> tuple[ConsumerCoordinator, Client, float]:
    """A converted group a consumer-protocol member just joined: classic-0 must give up
    partitions for it, and is told so at its next Heartbeat."""
    core = ConsumerCoordinator(ConsumerGroupConfig(session_timeout_ms=CONSUMER_SESSION_MS))
    snapshots, _ = _classic_group()
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    new = Client("new", topics=("t",))
    new.heartbeat(core, 1, TOPICS)
    assert mixed.heartbeat(core, GROUP, "classic-0", GENERATION, 2) is E.REBALANCE_IN_PROGRESS
    return core, new, 2.0


def _heartbeats_until_fenced(
    core: ConsumerCoordinator, new: Client, now: float, generation: int
) -> tuple[float, list[Fenced]]:
    """classic-0 heartbeats (and classic-1 too, rejoining as told) every 5 s but never does
    what classic-0 is told; the consumer member heartbeats: until the core fences someone."""
    classic_1 = ClassicClient("classic-1", GENERATION, {"t": frozenset({3, 4, 5})})
    while now < 120_000:
        now += 5_000
        fenced = core.expire(now)
        if fenced:
            return now, fenced
        mixed.heartbeat(core, GROUP, "classic-0", generation, now)
        classic_1.heartbeat(core, now)
        new.heartbeat(core, now, TOPICS)
    return now, []


def test_a_classic_member_that_never_rejoins_is_fenced_at_its_rebalance_timeout() -> None:
    """As Kafka's classic join timeout: told to rejoin, a classic member has its rebalance
    timeout to do it, or it is fenced and its partitions go to the others; its heartbeats
    alone do not keep it."""
    core, new, now = _told_to_rejoin()
    fenced_at, fenced = _heartbeats_until_fenced(core, new, now, GENERATION)
    assert [(f.member_id, f.reason) for f in fenced] == [("classic-0", "revocation")]
    assert fenced_at <= now + 30_000 + 5_000  # its rebalance timeout, 30 s
    for _ in range(3):
        fenced_at += 100
        new.heartbeat(core, fenced_at, TOPICS)
    assert len(flat(new.owned)) == 3  # classic-0's share is free: half of it is new's


def test_a_classic_member_that_joins_and_never_syncs_is_fenced_at_its_rebalance_timeout() -> None:
    """As Kafka's classic sync timeout: a JoinGroup answered, the member has its rebalance
    timeout to send its SyncGroup; heartbeating alone does not keep it (the partitions its
    join gave it would be nobody's meanwhile)."""
    core = ConsumerCoordinator(ConsumerGroupConfig(session_timeout_ms=CONSUMER_SESSION_MS))
    snapshots, _ = _classic_group()
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    assert mixed.leave(core, GROUP, "classic-1", 1) is E.NONE
    assert mixed.heartbeat(core, GROUP, "classic-0", GENERATION, 2) is E.REBALANCE_IN_PROGRESS
    subscription = _subscription({"t": frozenset({0, 1, 2})})
    request = ClassicJoin(
        GROUP, "classic-0", None, SESSION_MS, 30_000, "consumer", (("range", subscription),)
    )
    joined = mixed.join(core, request, "x", 3, TOPICS)
    assert joined.error is E.NONE
    now, fenced = 3.0, list[Fenced]()
    while not fenced and now < 120_000:
        now += 5_000
        fenced = core.expire(now)
        if not fenced:
            assert mixed.heartbeat(core, GROUP, "classic-0", joined.generation, now) is E.NONE
    assert [(f.member_id, f.reason) for f in fenced] == [("classic-0", "revocation")]
    assert now <= 3 + 30_000 + 5_000


def _static_consumer_left_for_now() -> tuple[ConsumerCoordinator, list[ClassicClient], float]:
    """A converted group with a static consumer-protocol member ("s", instance "i1") that
    left for now (epoch -2): it keeps its place, and nothing is downgraded yet."""
    core = ConsumerCoordinator(ConsumerGroupConfig(session_timeout_ms=CONSUMER_SESSION_MS))
    snapshots, classics = _classic_group()
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    static = Client("s", topics=("t",), instance_id="i1")
    static.heartbeat(core, 1, TOPICS)
    left = core.heartbeat(HeartbeatRequest(GROUP, "s", -2, instance_id="i1"), 2, TOPICS)
    assert (left.error, left.member_epoch) == (E.NONE, -2)
    assert core.take_downgraded() == []
    assert "s" in core.groups[GROUP].members
    return core, classics, 2.0


def test_a_static_consumer_member_gone_for_now_downgrades_when_its_session_ends() -> None:
    core, classics, now = _static_consumer_left_for_now()
    fenced: list[Fenced] = []
    while not fenced:  # the classic members go on, rejoining as told
        now += SESSION_MS / 2
        fenced = core.expire(now)
        for client in classics if not fenced else ():
            client.heartbeat(core, now)
    assert [f.member_id for f in fenced] == ["s"]
    assert {m.member_id for m in _downgraded(core).members} == {"classic-0", "classic-1"}


def test_a_classic_static_member_taking_the_last_consumer_member_s_place_downgrades() -> None:
    """Kafka's ``validateOnlineDowngradeWithReplacedMemberId``: the instance comes back as a
    classic member (its process rolled back), so no consumer-protocol member is left."""
    core, _, now = _static_consumer_left_for_now()
    request = ClassicJoin(
        GROUP, "", "i1", SESSION_MS, 30_000, "consumer", (("range", _subscription({})),)
    )
    joined = mixed.join(core, request, "c-new", now + 1, TOPICS)
    assert (joined.error, joined.member_id) == (E.NONE, "c-new")
    classic = _downgraded(core)
    assert {m.member_id for m in classic.members} == {"classic-0", "classic-1", "c-new"}
    assert {m.instance_id for m in classic.members} == {None, "i1"}
    assert GROUP not in core.groups


def test_a_classic_static_member_replaces_a_consumer_member_that_never_left() -> None:
    """Kafka 4.0 lets a classic static member take the place of a consumer-protocol member
    under its instance id whether or not that one left with -2 (``UNRELEASED_INSTANCE_ID``
    is only between two consumer-protocol members): a process killed and rolled back to the
    classic protocol gets its old self's partitions at once, and the group is classic
    again. A JoinGroup answered UNRELEASED_INSTANCE_ID, a consumer-protocol error, ends
    the Java classic consumer's poll with an unexpected error."""
    core = ConsumerCoordinator(ConsumerGroupConfig(session_timeout_ms=CONSUMER_SESSION_MS))
    snapshots, classics = _classic_group()
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    static = Client("s", topics=("t",), instance_id="i1")
    for now in range(1, 6):
        static.heartbeat(core, now, TOPICS)
        for client in classics:
            client.heartbeat(core, now)
    held = flat(static.owned)
    assert held
    request = ClassicJoin(
        GROUP, "", "i1", SESSION_MS, 30_000, "consumer", (("range", _subscription({})),)
    )
    joined = mixed.join(core, request, "c-new", 10, TOPICS)  # "s" was killed: no leave
    assert (joined.error, joined.member_id) == (E.NONE, "c-new")
    classic = _downgraded(core)
    given = {
        m.member_id: {
            (t, p) for t, ps in read_assignment(m.assignment).assigned_partitions for p in ps
        }
        for m in classic.members
    }
    assert set(given) == {"classic-0", "classic-1", "c-new"}
    assert given["c-new"] == held


def _leaves(core: ConsumerCoordinator, client: Client, now: float) -> None:
    left = core.heartbeat(HeartbeatRequest(GROUP, client.member_id, -1), now, TOPICS)
    assert left.error is E.NONE


@pytest.mark.parametrize("seed", range(100))
def test_random_mixed_steps_hand_back_what_each_classic_member_holds(seed: int) -> None:
    """Classic and consumer-protocol members heartbeat, rejoin, join and leave in a random
    order until the last consumer-protocol member leaves: the classic group handed back
    gives each classic member at least what its process holds, and no partition to two."""
    rng = random.Random(seed)
    core = ConsumerCoordinator()
    snapshots, classics = _classic_group(eager=rng.random() < 0.5)
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    consumers = [Client("new-0", topics=("t",))]
    consumers[0].heartbeat(core, 0, TOPICS)
    now = 0.0
    for step in range(1, 80):
        now += 50
        roll = rng.random()
        if roll < 0.1 and len(consumers) < 3:
            consumers.append(Client(f"new-{step}", topics=("t",)))
            consumers[-1].heartbeat(core, now, TOPICS)
        elif roll < 0.15 and len(consumers) > 1:
            _leaves(core, consumers.pop(rng.randrange(len(consumers))), now)
        elif roll < 0.6:
            rng.choice(consumers).heartbeat(core, now, TOPICS)
        else:
            rng.choice(classics).heartbeat(core, now)
    while consumers:  # the rollback: the consumer-protocol members leave, the last one too
        now += 50
        _leaves(core, consumers.pop(), now)
    assert not consumers
    classic = _downgraded(core)
    given: dict[str, set[tuple[str, int]]] = {}
    for member in classic.members:
        partitions = read_assignment(member.assignment).assigned_partitions
        given[member.member_id] = {(t, p) for t, ps in partitions for p in ps}
    for client in classics:
        assert flat(client.holds) <= given[client.member_id]
    assert sum(map(len, given.values())) == len(set().union(*given.values()))


def test_a_static_classic_member_restarting_gets_its_partitions_back_and_nobody_moves() -> None:
    """A static classic member of a converted group comes back under a new member id (its
    process restarted, holding nothing): it takes its old self's place and partitions, and
    the other member is not disturbed."""
    core = ConsumerCoordinator()
    snapshots, (_, other) = _classic_group()
    static = msgspec.structs.replace(snapshots[0], instance_id="i0")
    mixed.convert(core, GROUP, GENERATION, [static, snapshots[1]], 0, TOPICS)
    request = ClassicJoin(
        GROUP, "", "i0", SESSION_MS, 30_000, "consumer", (("range", _subscription({})),)
    )
    joined = mixed.join(core, request, "classic-0-again", 1, TOPICS)
    assert (joined.error, joined.member_id) == (E.NONE, "classic-0-again")
    group = core.groups[GROUP]
    assert "classic-0" not in group.members
    synced = mixed.sync(core, GROUP, joined.member_id, joined.generation, None, None, 2)
    assert synced.error is E.NONE
    (given,) = read_assignment(synced.assignment).assigned_partitions
    assert given == ("t", [0, 1, 2])
    assert group.group_epoch == GENERATION  # nothing to rebalance
    assert mixed.heartbeat(core, GROUP, other.member_id, other.generation, 3) is E.NONE
    assert mixed.heartbeat(core, GROUP, joined.member_id, joined.generation, 3) is E.NONE


def test_a_consumer_join_under_a_classic_static_member_s_own_id_is_not_taken_as_it() -> None:
    """A static member rejoining under its own member id is taken back as itself, but only
    a consumer-protocol one: a consumer-protocol join with a classic member's id and
    instance id is another member, refused while the classic one holds the instance id."""
    core = ConsumerCoordinator(ConsumerGroupConfig(session_timeout_ms=CONSUMER_SESSION_MS))
    snapshots, _ = _classic_group()
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    request = ClassicJoin(
        GROUP, "", "i1", SESSION_MS, 30_000, "consumer", (("range", _subscription({})),)
    )
    assert mixed.join(core, request, "c-static", 1, TOPICS).error is E.NONE
    answer = core.heartbeat(join("c-static", ("t",), instance_id="i1"), 2, TOPICS)
    assert answer.error is E.UNRELEASED_INSTANCE_ID
    assert core.groups[GROUP].members["c-static"].classic is not None
