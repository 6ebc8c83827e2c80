"""Offset retention (Kafka's KIP-211): the committed offsets of a group without members
expire ``offsets_retention_ms`` after it emptied or last committed, and the expiry is kept
across restarts. The core is driven with explicit clocks."""

from __future__ import annotations

from pathlib import Path

from huddle.client.admin import Admin
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator, Peer
from huddle.coordinator.records import DELETED, OffsetRecord
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.messages import (
    CreateTopicsRequest,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    TopicSpec,
)
from tests.harness import Driver
from tests.helpers import eventually, fast_server_config, running_server

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
    c.offsets.wall_offset_ms = WALL
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


def test_an_empty_group_s_offsets_expire_after_the_retention_and_stay_expired() -> None:
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


def test_a_commit_puts_the_expiry_off() -> None:
    c = core()
    commit(c, "g", 1, now=0)
    c.expire_offsets(0, WALL)
    commit(c, "g", 2, now=RETENTION - 1_000)  # committed again before it expired
    assert c.expire_offsets(RETENTION + 1_000, WALL + RETENTION + 1_000) == 0
    assert c.expire_offsets(2 * RETENTION, WALL + 2 * RETENTION) == 1


def test_a_group_with_members_keeps_its_offsets_however_old() -> None:
    d = Driver(offsets_retention_ms=RETENTION)
    d.core.offsets.wall_offset_ms = WALL
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
    d.core.offsets.wall_offset_ms = WALL
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


def test_when_a_group_emptied_is_kept_across_a_restart() -> None:
    d = Driver(offsets_retention_ms=RETENTION)
    d.core.offsets.wall_offset_ms = WALL
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]))
    old = OffsetRecord("g", "t", 0, 3, None, WALL - 10 * DAY)
    d.core.restore([old])
    member_id, held = d.join_new(1)
    assert d.join_response(held).error_code == 0
    d.send(1, LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=member_id)]))
    d.core.take_changes()
    assert d.core.expire_offsets(0, WALL) == 0  # emptied now: its offsets are stamped so
    restamped = d.core.take_changes()
    assert restamped == [OffsetRecord("g", "t", 0, 3, None, WALL)]
    again = Coordinator(GroupConfig(offsets_retention_ms=RETENTION))
    again.restore([old, *restamped])  # a restart right after
    assert again.expire_offsets(RETENTION - 1, WALL + RETENTION - 1) == 0
    assert again.expire_offsets(RETENTION, WALL + RETENTION) == 1
