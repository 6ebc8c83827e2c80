"""Mixed groups in the sans-IO core (``consumer.classic``): a stable classic group upgraded to a
consumer group when a consumer-protocol member joins it, its classic members served through
JoinGroup / SyncGroup / Heartbeat, with an explicit clock. Each client is modelled as a Kafka
client acts on its answers, and no partition is ever held by two of them."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from huddle.coordinator.consumer import (
    ConsumerCoordinator,
    ConsumerGroupConfig,
    HeartbeatRequest,
    TopicView,
)
from huddle.coordinator.consumer import classic as mixed
from huddle.coordinator.consumer.classic import ClassicJoin
from huddle.coordinator.consumer.messages import ClassicSnapshot, RefusedError
from huddle.protocol.consumer_protocol import (
    KafkaAssignment,
    KafkaSubscription,
    read_assignment,
    write_assignment,
    write_subscription,
)
from huddle.protocol.errors import ErrorCode
from tests.consumer.helpers import GROUP, Client, flat

E = ErrorCode
TOPICS = TopicView({"t": 6})
GENERATION = 3
SESSION_MS = 10_000


def _subscription(owned: dict[str, frozenset[int]] | None) -> bytes:
    """A ConsumerProtocol subscription to "t": v1 with the owned partitions (a cooperative
    client), v0 without (an eager one)."""
    if owned is None:
        return write_subscription(KafkaSubscription(0, ["t"]))
    partitions = [(t, sorted(ps)) for t, ps in sorted(owned.items()) if ps]
    return write_subscription(KafkaSubscription(1, ["t"], None, partitions))


def _assignment(partitions: list[int]) -> bytes:
    return write_assignment(KafkaAssignment(0, [("t", partitions)]))


@dataclass
class ClassicClient:
    """A classic member as its process sees things: its generation and what it holds. A
    cooperative one reports what it holds when it rejoins and gives up what a SyncGroup no
    longer gives it; an eager one gives up everything before it rejoins."""

    member_id: str
    generation: int
    holds: dict[str, frozenset[int]]
    eager: bool = False
    joins: int = field(default=0)

    def rejoin(self, core: ConsumerCoordinator, now: float) -> None:
        if self.eager:
            self.holds = {}
        protocols = (("range", _subscription(None if self.eager else self.holds)),)
        request = ClassicJoin(
            GROUP, self.member_id, None, SESSION_MS, 30_000, "consumer", protocols
        )
        answer = mixed.join(core, request, "unused", now, TOPICS)
        assert answer.error is E.NONE, answer
        assert answer.protocol_name == "range"
        self.generation = answer.generation
        self.joins += 1
        synced = mixed.sync(core, GROUP, self.member_id, self.generation, "consumer", "range", now)
        assert synced.error is E.NONE, synced
        given = read_assignment(synced.assignment).assigned_partitions
        self.holds = {t: frozenset(ps) for t, ps in given if ps}

    def heartbeat(self, core: ConsumerCoordinator, now: float) -> None:
        code = mixed.heartbeat(core, GROUP, self.member_id, self.generation, now)
        if code is E.REBALANCE_IN_PROGRESS:
            self.rejoin(core, now)
        else:
            assert code is E.NONE

    def leave(self, core: ConsumerCoordinator, now: float) -> None:
        assert mixed.leave(core, GROUP, self.member_id, now) is E.NONE
        self.holds = {}


def _classic_group(eager: bool = False) -> tuple[list[ClassicSnapshot], list[ClassicClient]]:
    snapshots, clients = [], []
    for index, partitions in enumerate(([0, 1, 2], [3, 4, 5])):
        member_id = f"classic-{index}"
        subscription = _subscription(None if eager else {"t": frozenset(partitions)})
        snapshots.append(
            ClassicSnapshot(
                member_id,
                None,
                SESSION_MS,
                30_000,
                (("range", subscription),),
                _assignment(partitions),
            )
        )
        clients.append(
            ClassicClient(member_id, GENERATION, {"t": frozenset(partitions)}, eager=eager)
        )
    return snapshots, clients


def _no_partition_held_twice(holders: list[dict[str, frozenset[int]]]) -> None:
    seen: set[tuple[str, int]] = set()
    for holds in holders:
        mine = flat(holds)
        assert not mine & seen, f"held twice: {mine & seen}"
        seen |= mine


@pytest.mark.parametrize("eager", [False, True], ids=["cooperative", "eager"])
def test_an_upgraded_group_moves_partitions_to_a_consumer_member_never_owned_twice(
    eager: bool,
) -> None:
    core = ConsumerCoordinator()
    snapshots, classics = _classic_group(eager)
    group = mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    # converted as it was: each classic member at the generation, owning its assignment
    assert group.group_epoch == group.target_epoch == GENERATION
    assert {m.member_id: m.member_epoch for m in group.members.values()} == {
        "classic-0": GENERATION,
        "classic-1": GENERATION,
    }
    assert flat(group.members["classic-1"].assigned) == {("t", 3), ("t", 4), ("t", 5)}

    new = Client("new", topics=("t",))
    now = 0.0
    for _ in range(10):
        now += 100
        new.heartbeat(core, now, TOPICS)
        for client in classics:
            client.heartbeat(core, now)
        _no_partition_held_twice([new.owned, *(c.holds for c in classics)])

    # balanced: two partitions each, everyone at the group epoch, each classic member
    # having rejoined (its revocation is its rejoin)
    assert [len(flat(h)) for h in (new.owned, *(c.holds for c in classics))] == [2, 2, 2]
    assert group.group_epoch == GENERATION + 1
    assert all(c.generation == group.group_epoch for c in classics)
    assert all(c.joins >= 1 for c in classics)
    assert new.epoch == group.group_epoch


def test_a_classic_member_is_told_to_rejoin_until_it_gave_up_what_it_must() -> None:
    core = ConsumerCoordinator()
    snapshots, (first, _second) = _classic_group()
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    Client("new", topics=("t",)).heartbeat(core, 1, TOPICS)
    assert mixed.heartbeat(core, GROUP, first.member_id, GENERATION, 2) is E.REBALANCE_IN_PROGRESS
    # it rejoins still holding everything: it stays at its epoch, and its SyncGroup gives
    # it only what it keeps
    first.rejoin(core, 3)
    assert first.generation == GENERATION
    assert len(flat(first.holds)) == 2
    assert mixed.heartbeat(core, GROUP, first.member_id, GENERATION, 4) is E.REBALANCE_IN_PROGRESS
    first.rejoin(core, 5)  # now it reports only what it kept
    assert first.generation == GENERATION + 1
    assert mixed.heartbeat(core, GROUP, first.member_id, first.generation, 6) is E.NONE


def test_a_classic_member_with_a_stale_generation_or_unknown_id_is_refused() -> None:
    core = ConsumerCoordinator()
    snapshots, _ = _classic_group()
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    assert mixed.heartbeat(core, GROUP, "classic-0", 2, 1) is E.ILLEGAL_GENERATION
    assert mixed.heartbeat(core, GROUP, "nobody", GENERATION, 1) is E.UNKNOWN_MEMBER_ID
    synced = mixed.sync(core, GROUP, "classic-0", 2, "consumer", "range", 1)
    assert synced.error is E.ILLEGAL_GENERATION
    other = mixed.sync(core, GROUP, "classic-0", GENERATION, "consumer", "roundrobin", 1)
    assert other.error is E.INCONSISTENT_GROUP_PROTOCOL


def test_a_new_classic_member_joins_a_consumer_group() -> None:
    core = ConsumerCoordinator()
    owner = Client("c", topics=("t",))
    owner.heartbeat(core, 0, TOPICS)
    protocols = (("range", _subscription({})),)
    request = ClassicJoin(GROUP, "", None, SESSION_MS, 30_000, "consumer", protocols, True)
    # JoinGroup v4+: the member id first (MEMBER_ID_REQUIRED), then the join
    first = mixed.join(core, request, "fresh", 1, TOPICS)
    assert (first.error, first.member_id) == (E.MEMBER_ID_REQUIRED, "fresh")
    joined = mixed.join(
        core,
        ClassicJoin(GROUP, "fresh", None, SESSION_MS, 30_000, "consumer", protocols),
        "x",
        2,
        TOPICS,
    )
    assert joined.error is E.NONE
    assert joined.member_id == "fresh"
    # the consumer member still owns everything: the newcomer waits for what it releases
    synced = mixed.sync(core, GROUP, "fresh", joined.generation, None, None, 3)
    assert read_assignment(synced.assignment).assigned_partitions == []
    owner.heartbeat(core, 4, TOPICS)  # told to give up half
    assert len(flat(owner.owned)) == 3
    assert mixed.heartbeat(core, GROUP, "fresh", joined.generation, 4) is E.NONE
    owner.heartbeat(core, 4, TOPICS)  # has given them up
    # its partitions are free: the classic member is told to rejoin, and gets them
    assert mixed.heartbeat(core, GROUP, "fresh", joined.generation, 5) is E.REBALANCE_IN_PROGRESS
    again = mixed.join(
        core,
        ClassicJoin(GROUP, "fresh", None, SESSION_MS, 30_000, "consumer", protocols),
        "x",
        6,
        TOPICS,
    )
    synced = mixed.sync(core, GROUP, "fresh", again.generation, None, None, 7)
    (given,) = read_assignment(synced.assignment).assigned_partitions
    assert set(given[1]) == set(range(6)) - {p for _, p in flat(owner.owned)}


def test_a_wrong_protocol_type_is_inconsistent() -> None:
    core = ConsumerCoordinator()
    Client("c", topics=("t",)).heartbeat(core, 0, TOPICS)
    request = ClassicJoin(GROUP, "m", None, SESSION_MS, 30_000, "connect", (("x", b""),))
    assert mixed.join(core, request, "x", 1, TOPICS).error is E.INCONSISTENT_GROUP_PROTOCOL


def test_a_classic_member_leaves_or_is_fenced_at_its_own_session_timeout() -> None:
    core = ConsumerCoordinator(ConsumerGroupConfig(session_timeout_ms=45_000))
    snapshots, _ = _classic_group()
    group = mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    assert mixed.leave(core, GROUP, "classic-0", 1) is E.NONE
    assert "classic-0" not in group.members
    assert mixed.leave(core, GROUP, "classic-0", 1) is E.UNKNOWN_MEMBER_ID
    fenced = core.expire(SESSION_MS + 1)  # its session, not the consumer protocol's 45 s
    assert [f.member_id for f in fenced] == ["classic-1"]
    assert not group.members


def test_a_classic_member_its_leader_gave_nothing_owns_nothing() -> None:
    core = ConsumerCoordinator()
    snapshots, _ = _classic_group()
    nothing = ClassicSnapshot("idle", None, SESSION_MS, 1, snapshots[0].protocols, b"")
    group = mixed.convert(core, GROUP, GENERATION, [*snapshots, nothing], 0, TOPICS)
    assert group.members["idle"].assigned == {}


def test_a_group_that_cannot_be_converted_is_left_alone() -> None:
    core = ConsumerCoordinator()
    snapshots, _ = _classic_group()
    broken = [snapshots[0], ClassicSnapshot("bad", None, SESSION_MS, 1, (("range", b"\x00"),), b"")]
    with pytest.raises(RefusedError) as refused:
        mixed.convert(core, GROUP, GENERATION, broken, 0, TOPICS)
    assert refused.value.code is E.GROUP_ID_NOT_FOUND
    # two classic members claiming one partition: not converted either
    twice = [
        snapshots[0],
        ClassicSnapshot("b", None, SESSION_MS, 1, snapshots[0].protocols, _assignment([2])),
    ]
    with pytest.raises(RefusedError):
        mixed.convert(core, GROUP, GENERATION, twice, 0, TOPICS)
    assert GROUP not in core.groups


@pytest.mark.parametrize("seed", range(200))
def test_random_mixed_steps_never_hold_a_partition_twice_and_settle(seed: int) -> None:
    """Classic members (cooperative and eager) and consumer-protocol members heartbeat,
    rejoin, join and leave in a random order: after every step no partition is held by
    two clients, and once they all go on heartbeating every partition is held."""
    rng = random.Random(seed)
    core = ConsumerCoordinator()
    snapshots, classics = _classic_group(eager=rng.random() < 0.5)
    mixed.convert(core, GROUP, GENERATION, snapshots, 0, TOPICS)
    consumers: list[Client] = []
    now = 0.0
    for step in range(60):
        now += 50
        roll = rng.random()
        if roll < 0.1 and len(consumers) < 4:
            consumers.append(Client(f"new-{step}", topics=("t",)))
            consumers[-1].heartbeat(core, now, TOPICS)
        elif roll < 0.15 and len(classics) > 1:
            classics.pop(rng.randrange(len(classics))).leave(core, now)
        elif roll < 0.2 and len(consumers) > 1:
            gone = consumers.pop(rng.randrange(len(consumers)))
            assert core.heartbeat(_leave(gone), now, TOPICS).error is E.NONE
        elif roll < 0.6 and consumers:
            rng.choice(consumers).heartbeat(core, now, TOPICS)
        else:
            rng.choice(classics).heartbeat(core, now)
        _no_partition_held_twice([*(c.owned for c in consumers), *(c.holds for c in classics)])
    for _ in range(8):  # everyone heartbeats: the group settles
        now += 50
        for consumer in consumers:
            consumer.heartbeat(core, now, TOPICS)
        for client in classics:
            client.heartbeat(core, now)
        _no_partition_held_twice([*(c.owned for c in consumers), *(c.holds for c in classics)])
    held = [*(flat(c.owned) for c in consumers), *(flat(c.holds) for c in classics)]
    assert set().union(*held) == {("t", p) for p in range(6)}


def _leave(client: Client) -> HeartbeatRequest:
    return HeartbeatRequest(GROUP, client.member_id, -1)
