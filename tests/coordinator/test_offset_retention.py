"""Offset retention as Kafka's ``GroupMetadata.removeExpiredOffsets`` (KIP-211): which
offsets expire, from when, kept across restarts and shard moves. The core is driven with
explicit clocks."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from huddle.client import Member
from huddle.client.admin import Admin
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator, Peer
from huddle.coordinator.server import serve
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.records import (
    DELETED,
    GroupRecord,
    OffsetRecord,
    Record,
    group_deleted,
)
from huddle.protocol.embedded import Subscription, TopicPartition, encode
from huddle.protocol.errors import (
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from huddle.protocol.messages import (
    CreateTopicsRequest,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    TopicSpec,
)
from tests.cluster.test_failover import owner_of
from tests.etcd import Etcd, etcd
from tests.harness import Driver
from tests.helpers import eventually, fast_server_config, running_server, wait_until

__all__ = ["etcd"]  # the fixture

RETENTION = 60_000
DAY = 86_400_000
WALL = 1_700_000_000_000  # wall clock ms at core time 0
ADMIN = Peer(1, "admin", "127.0.0.1")


def core() -> Coordinator:
    c = Coordinator(
        GroupConfig(
            initial_rebalance_delay_ms=0,
            min_session_timeout_ms=100,
            offsets_retention_ms=RETENTION,
        )
    )
    c.set_wall_clock(0, WALL)
    c.handle(ADMIN, 1, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]), 0)
    return c


def commit(c: Coordinator, group: str, offset: int, now: float) -> None:
    request = OffsetCommitRequest(
        group_id=group,
        topics=[
            OffsetCommitTopic(
                name="t", partitions=[OffsetCommitPartition(partition=0, offset=offset)]
            )
        ],
    )
    c.handle(ADMIN, 2, request, now)


def test_an_admin_group_s_offsets_expire_after_the_retention_and_stay_expired() -> None:
    c = core()
    commit(c, "idle", 7, now=0)
    kept = c.take_changes()
    assert kept[-1] == OffsetRecord("idle", "t", 0, 7, None, WALL)  # stamped with the wall
    # no member ever: its offsets expire the retention after the commit
    assert c.expire_offsets(RETENTION - 1, WALL + RETENTION - 1) == 0
    assert c.expire_offsets(RETENTION, WALL + RETENTION) == 1
    assert "idle" not in c.groups
    tombstones = c.take_changes()
    assert tombstones == [OffsetRecord("idle", "t", 0, DELETED)]
    # a restart replays the commit and its expiry: nothing comes back
    again = Coordinator()
    again.restore([*kept, *tombstones])
    assert "idle" not in again.groups


def test_a_commit_puts_the_expiry_of_its_partition_off() -> None:
    c = core()
    commit(c, "g", 1, now=0)
    c.expire_offsets(0, WALL)
    commit(c, "g", 2, now=RETENTION - 1_000)  # committed again before it expired
    assert c.expire_offsets(RETENTION + 1_000, WALL + RETENTION + 1_000) == 0
    assert c.expire_offsets(2 * RETENTION, WALL + 2 * RETENTION) == 1


def test_a_group_with_members_keeps_its_offsets_however_old() -> None:
    d = Driver(offsets_retention_ms=RETENTION)
    d.core.set_wall_clock(0, WALL)
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]))
    d.core.restore([OffsetRecord("busy", "t", 0, 3, None, WALL - 10 * DAY)])  # long ago
    _, held = d.join_new(1, group="busy")
    assert d.join_response(held).error_code == 0  # a member in the group
    commit(d.core, "other", 1, now=0)
    assert d.core.expire_offsets(3 * RETENTION, WALL + 3 * RETENTION) == 1  # "other" only
    assert set(d.core.groups) == {"busy"}
    assert d.core.groups["busy"].offsets


def test_the_expiry_of_offsets_kept_before_a_restart_counts_from_their_commit() -> None:
    c = Coordinator(GroupConfig(offsets_retention_ms=RETENTION))
    c.restore(
        [
            OffsetRecord("old", "t", 0, 5, None, WALL),
            OffsetRecord("new", "t", 0, 5, None, WALL + RETENTION),
        ]
    )
    assert c.expire_offsets(0, WALL + RETENTION + 1) == 1  # at once: its time had come
    assert set(c.groups) == {"new"}


async def test_a_coordinator_expires_offsets_and_a_restart_does_not_bring_them_back(
    tmp_path: Path,
) -> None:
    retention = GroupConfig(
        initial_rebalance_delay_ms=0,
        min_session_timeout_ms=100,
        offsets_retention_ms=300,
        offsets_retention_check_interval_ms=50,
    )
    config = fast_server_config(data_dir=str(tmp_path), group=retention)
    async with running_server(config) as server, Admin(f"127.0.0.1:{server.port}") as admin:
        await admin.create_topic("t", 2)
        await admin.set_offsets("g", {TopicPartition("t", 0): 4})

        async def expired() -> bool:
            return await admin.committed_offsets("g") == {}

        await eventually(expired, what="the offsets to expire")
    async with (
        running_server(fast_server_config(data_dir=str(tmp_path))) as server,
        Admin(f"127.0.0.1:{server.port}") as admin,
    ):
        assert await admin.committed_offsets("g") == {}
        assert await admin.list_topics() == {"t": 2}


def test_a_group_whose_members_left_keeps_its_offsets_the_retention_from_then() -> None:
    d = Driver(offsets_retention_ms=RETENTION)
    d.core.set_wall_clock(0, WALL)
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]))
    d.core.restore([OffsetRecord("g", "t", 0, 3, None, WALL - 10 * DAY)])  # long ago
    member_id, held = d.join_new(1)
    assert d.join_response(held).error_code == 0
    d.send(1, LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=member_id)]))
    assert not d.core.groups["g"].members
    # its last commit is 10 days old, but it emptied only now: the retention runs from now
    assert d.core.expire_offsets(0, WALL) == 0
    assert d.core.expire_offsets(RETENTION - 1, WALL + RETENTION - 1) == 0
    assert d.core.expire_offsets(RETENTION, WALL + RETENTION) == 1


def test_offsets_kept_before_retention_existed_get_a_full_retention() -> None:
    c = Coordinator(GroupConfig(offsets_retention_ms=RETENTION))
    c.restore([OffsetRecord("legacy", "t", 0, 5)])  # no commit time: kept by an older huddle
    assert c.expire_offsets(0, WALL) == 0  # not at once: from the first look
    assert c.expire_offsets(RETENTION - 1, WALL + RETENTION - 1) == 0
    assert c.expire_offsets(RETENTION, WALL + RETENTION) == 1


def stable_consumers(*conns: int, topics: list[str]) -> tuple[Driver, list[str]]:
    """A Stable group of huddle members (protocol type ``consumer``) subscribed to
    ``topics``, with topics t and u of 2 partitions; core time 0 is ``WALL``."""
    d = Driver(offsets_retention_ms=RETENTION)
    d.core.set_wall_clock(0, WALL)
    d.core.keep_groups()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name=n, partitions=2) for n in "tu"]))
    members = d.form(*conns, metadata=encode(Subscription(topics=topics)))
    assert d.group().state is GroupState.STABLE
    return d, members


def committed(d: Driver, group: str = "g") -> set[tuple[str, int]]:
    return set(d.core.groups[group].offsets) if group in d.core.groups else set()


def test_a_group_that_never_had_members_expires_each_partition_from_its_own_commit() -> None:
    c = core()
    commit(c, "admin", 1, now=0)
    c.handle(ADMIN, 3, _commit_request("admin", partition=1, offset=5), RETENTION / 2)
    assert c.expire_offsets(RETENTION - 1, WALL + RETENTION - 1) == 0
    assert c.expire_offsets(RETENTION, WALL + RETENTION) == 1  # t-0 only
    assert set(c.groups["admin"].offsets) == {("t", 1)}
    assert c.take_changes()[-1] == OffsetRecord("admin", "t", 0, DELETED)
    assert c.expire_offsets(RETENTION * 3 / 2, WALL + RETENTION * 3 / 2) == 1
    assert "admin" not in c.groups


def test_a_commit_to_an_empty_group_does_not_restart_its_clock() -> None:
    """Kafka counts an Empty group's offsets from when it emptied (its
    currentStateTimestamp), whatever was committed since: an administrator's offsets set
    long after the group emptied expire with the rest."""
    d, (a,) = stable_consumers(1, topics=["t"])
    d.commit(1, {("t", 0): 3}, member_id=a, generation=d.group().generation)
    d.advance(1_000)
    d.leave(1, a)  # emptied at WALL + 1 s
    d.advance(RETENTION - 2_000)
    assert d.commit(2, {("t", 1): 9}).topics[0].partitions[0].error_code == 0  # an admin
    assert d.core.expire_offsets(d.now, WALL + 1_000 + RETENTION - 1) == 0
    assert d.core.expire_offsets(d.now, WALL + 1_000 + RETENTION) == 2  # both at once
    assert "g" not in d.core.groups
    assert d.core.take_changes()[-1] == group_deleted("g")  # its record goes with it


def test_a_stable_consumer_group_loses_the_offsets_of_topics_it_no_longer_subscribes_to() -> None:
    d, (a, b) = stable_consumers(1, 2, topics=["t"])
    generation = d.group().generation
    d.commit(1, {("t", 0): 1, ("u", 0): 2}, member_id=a, generation=generation)  # u: before
    assert d.core.expire_offsets(d.now, WALL + RETENTION - 1) == 0
    assert d.core.expire_offsets(d.now, WALL + RETENTION) == 1
    # t is subscribed: its offset stays however old, and so does the group
    assert committed(d) == {("t", 0)}
    assert set(d.group().members) == {a, b}
    assert d.group().generation == generation


def test_a_group_whose_subscriptions_the_coordinator_cannot_read_keeps_its_offsets() -> None:
    """Another protocol type, or subscriptions that are not huddle's (a Kafka client's),
    or a group in a rebalance: the coordinator does not know what is subscribed, and
    expires nothing while the group has members (as Kafka)."""
    for kwargs in ({"protocol_type": "connect"}, {"metadata": b"not a subscription"}):
        d = Driver(offsets_retention_ms=RETENTION)
        d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
        (a,) = d.form(1, **kwargs)
        d.commit(1, {("t", 0): 1}, member_id=a, generation=d.group().generation)
        assert d.core.expire_offsets(0, WALL + 10 * RETENTION) == 0
        assert committed(d) == {("t", 0)}
    d, (a,) = stable_consumers(1, topics=["t"])
    d.commit(1, {("u", 0): 2}, member_id=a, generation=d.group().generation)
    d.join_new(2, metadata=encode(Subscription(topics=["t"])))  # a rebalance begins
    assert d.group().state is GroupState.PREPARING_REBALANCE
    assert d.core.expire_offsets(d.now, WALL + 10 * RETENTION) == 0


def emptied_group(leave_at: float) -> tuple[Driver, list[Record]]:
    """A group whose member committed at wall time ``WALL`` and left ``leave_at`` ms
    later (by the wall clock; the process's own clock stands still): the records a data dir
    or etcd keeps of it."""
    d, (a,) = stable_consumers(1, topics=["t"])
    d.commit(1, {("t", 0): 3}, member_id=a, generation=d.group().generation)
    d.core.set_wall_clock(0, WALL + leave_at)
    d.leave(1, a)
    kept = d.core.take_changes()
    emptied = [r for r in kept if isinstance(r, GroupRecord)][-1]
    assert (emptied.members, emptied.current_state_ms) == ([], WALL + leave_at)
    return d, kept


def test_when_a_group_emptied_survives_a_restart() -> None:
    """Found by probing: a restart lost when a group emptied, and its offsets expired the
    retention after its last commit, long before the retention after it emptied."""
    _, kept = emptied_group(leave_at=10 * DAY)
    restarted = Coordinator(GroupConfig(offsets_retention_ms=RETENTION))
    restarted.restore(kept)
    restarted.start(0.0)
    assert restarted.groups["g"].state_ms == WALL + 10 * DAY
    assert restarted.expire_offsets(0, WALL + 10 * DAY + RETENTION - 1) == 0
    assert restarted.expire_offsets(0, WALL + 10 * DAY + RETENTION) == 1
    assert "g" not in restarted.groups


def test_when_a_group_emptied_survives_a_shard_move() -> None:
    _, kept = emptied_group(leave_at=10 * DAY)
    taker = Coordinator(GroupConfig(offsets_retention_ms=RETENTION))
    taker.keep_groups()
    taker.load([r for r in kept if isinstance(r, GroupRecord | OffsetRecord)], 0.0)
    assert taker.expire_offsets(0, WALL + 10 * DAY + RETENTION - 1) == 0
    assert taker.expire_offsets(0, WALL + 10 * DAY + RETENTION) == 1


def test_a_group_record_that_does_not_say_when_it_emptied_counts_from_each_commit() -> None:
    """A record written before it kept the time (Kafka: an old GroupMetadata schema with no
    currentStateTimestamp): each partition from its own commit."""
    old = GroupRecord("g", 3, "consumer", None, None, [])
    taker = Coordinator(GroupConfig(offsets_retention_ms=RETENTION))
    taker.load(
        [
            old,
            OffsetRecord("g", "t", 0, 1, None, WALL),
            OffsetRecord("g", "t", 1, 1, None, WALL + DAY),
        ],
        0.0,
    )
    assert taker.expire_offsets(0, WALL + RETENTION) == 1
    assert set(taker.groups["g"].offsets) == {("t", 1)}


def _commit_request(group: str, *, partition: int, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        topics=[
            OffsetCommitTopic(
                name="t", partitions=[OffsetCommitPartition(partition=partition, offset=offset)]
            )
        ],
    )


RETAIN = GroupConfig().offsets_retention_ms  # 7 days: the servers' own checks never expire
PARTITION = TopicPartition("t", 0)


async def empty_a_group(bootstrap: str) -> tuple[float, float]:
    """Offsets set for ``g``, then a member joins and leaves it: (after the commit,
    before the member left), by the wall clock (ms), the first strictly before the second."""

    async def committed() -> bool:  # a cluster node may not have seen the topic yet
        try:
            async with Admin(bootstrap) as admin:
                await admin.set_offsets("g", {PARTITION: 4})
        except (UnknownTopicOrPartitionError, NotCoordinatorError, CoordinatorNotAvailableError):
            return False
        return True

    await eventually(committed, what="the offsets are set")
    committed_by = time.time() * 1000
    async with Member(bootstrap, group_id="g", topics=["t"]) as member:
        await wait_until(lambda: member.assignment == {PARTITION}, what="the member owns t-0")
        left_from = time.time() * 1000
    assert committed_by < left_from
    return committed_by, left_from


def expire_at(core: Coordinator, wall_ms: float) -> int:
    return core.expire_offsets(time.monotonic() * 1000, wall_ms)


async def test_the_retention_clock_survives_a_restart_of_serve_data_dir(tmp_path: Path) -> None:
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server, Admin(f"127.0.0.1:{server.port}") as admin:
        await admin.create_topic("t", 1)
        _, left_from = await empty_a_group(f"127.0.0.1:{server.port}")
        emptied = time.time() * 1000
    async with running_server(config) as server:
        core = server.core
        assert expire_at(core, left_from + RETAIN - 1) == 0  # not from the commit before
        assert core.groups["g"].offsets
        assert expire_at(core, emptied + RETAIN) == 1
        assert "g" not in core.groups


async def test_the_retention_clock_survives_a_shard_move(etcd: Etcd) -> None:
    """Two ``huddle serve --cluster`` nodes (in this process, to reach their cores) on a
    real etcd: the node serving an emptied group stops, the other takes its shard over, and
    counts the group's retention from when it emptied, not from its last commit."""
    config = fast_server_config(
        cluster=f"etcd://{etcd.host}:{etcd.port}",
        shards=2,
        lease_ttl_s=2,
        cluster_prefix="/retention",
    )
    cores = [Coordinator(config.group) for _ in range(2)]
    stops = [asyncio.Event() for _ in range(2)]
    ports: list[int] = []
    nodes = [
        asyncio.create_task(serve(config, ready=ports.append, stop=stop, core=core))
        for core, stop in zip(cores, stops, strict=True)
    ]
    try:
        await wait_until(lambda: len(ports) == 2, what="both nodes listen")
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)

        async def created() -> bool:  # refused while the nodes are still joining
            try:
                async with Admin(bootstrap) as admin:
                    await admin.create_topic("t", 1)
            except (CoordinatorNotAvailableError, NotCoordinatorError):
                return False
            except TopicAlreadyExistsError:
                pass
            return True

        await eventually(created, what="the cluster takes the topic")

        async def spread() -> bool:  # each node owns a shard: none moves until one stops
            async with Admin(bootstrap) as admin:
                described = await admin.describe_cluster()
            return len({s.owner for s in described.shards if s.owner}) == 2 and all(
                s.owner for s in described.shards
            )

        await eventually(spread, what="each node owns a shard")
        owner = ports.index(await owner_of(bootstrap, "g"))
        _, left_from = await empty_a_group(bootstrap)
        emptied = time.time() * 1000
        stops[owner].set()
        await nodes[owner]
        taker = cores[1 - owner]
        await wait_until(lambda: "g" in taker.groups, what="the other node loads the group")
        assert expire_at(taker, left_from + RETAIN - 1) == 0  # not from the commit before
        assert expire_at(taker, emptied + RETAIN) == 1
    finally:
        for stop in stops:
            stop.set()
        await asyncio.gather(*nodes)


def test_offsets_of_a_topic_a_new_generation_no_longer_subscribes_to_expire_on_time() -> None:
    """A look before the subscription changed must not put the expiry off: the next
    generation's subscriptions count, and a commit made after a look still expires on its
    own time."""
    d, (a,) = stable_consumers(1, topics=["t", "u"])
    d.commit(1, {("u", 0): 2}, member_id=a, generation=d.group().generation)
    assert d.core.expire_offsets(d.now, WALL + RETENTION - 1) == 0  # u is subscribed
    rejoined = d.join(1, a, metadata=encode(Subscription(topics=["t"])))
    generation = d.join_response(rejoined).generation_id
    d.sync(1, a, generation, {a: b"t"})
    assert d.group().state is GroupState.STABLE
    d.core.set_wall_clock(d.now, WALL + RETENTION - 1)  # the wall clock moved on
    d.commit(1, {("u", 1): 3}, member_id=a, generation=generation)  # after that look
    assert d.core.expire_offsets(d.now, WALL + RETENTION) == 1  # u-0, from its own commit
    assert d.core.expire_offsets(d.now, WALL + 2 * RETENTION - 2) == 0
    assert d.core.expire_offsets(d.now, WALL + 2 * RETENTION - 1) == 1  # u-1
    assert committed(d) == set()
    assert d.group().members  # a Stable group with no offsets left stays


def test_a_check_goes_a_group_at_a_time_and_sees_what_changed_between() -> None:
    """The transport runs a check a few milliseconds at a time: between two groups other
    requests are handled, and the check sees what they changed."""
    c = core()
    for group in ("a", "b", "c"):
        commit(c, group, 1, now=0)
    steps = c.expiring_offsets(RETENTION, WALL + RETENTION)
    next(steps)  # the first group looked into, and gone
    assert set(c.groups) == {"b", "c"}
    c.handle(ADMIN, 9, _commit_request("b", partition=0, offset=2), RETENTION)  # meanwhile
    assert list(steps) == [None, None]  # b (committed to again: kept) and c (gone)
    assert set(c.groups) == {"b"}
    assert c.take_changes()[-1] == OffsetRecord("c", "t", 0, DELETED)
