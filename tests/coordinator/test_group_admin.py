"""Group administration as kafka-consumer-groups does it: deleting a group (only an empty
one), resetting its offsets (dry run, execute; refused while it has members), and
describing its members with the committed offsets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from structlog.typing import EventDict

from huddle.cli import main
from huddle.client.admin import Admin
from huddle.client.member import Member
from huddle.client.offset_reset import Reset, chosen_partitions, parse_topic, plan
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator, Peer
from huddle.coordinator.security.acls import Authorizer, Operation, ResourceType
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.records import DELETED, OffsetRecord
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode, GroupIdNotFoundError, NonEmptyGroupError
from huddle.protocol.messages import (
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    Reply,
    TopicSpec,
)
from tests.harness import SESSION_MS, Driver
from tests.helpers import fast_server_config, running_server
from tests.security_setup import acl

ADMIN = Peer(1, "admin", "127.0.0.1")
T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def core_with_offsets(group: str = "g") -> Coordinator:
    core = Coordinator(GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100))
    core.handle(ADMIN, 1, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=3)]), 0)
    commit = OffsetCommitRequest(
        group_id=group,
        topics=[
            OffsetCommitTopic(name="t", partitions=[OffsetCommitPartition(partition=0, offset=7)])
        ],
    )
    core.handle(ADMIN, 2, commit, 0)
    core.take_changes()
    return core


def delete(core: Coordinator, *groups: str, peer: Peer = ADMIN) -> dict[str, int]:
    out = core.handle(peer, 3, DeleteGroupsRequest(groups=list(groups)), 1)
    (reply,) = [f for _, f in out if isinstance(f, Reply)]
    assert isinstance(reply.response, DeleteGroupsResponse)
    return {r.group_id: r.error_code for r in reply.response.results}


def test_an_empty_group_is_deleted_with_its_offsets_and_the_deletion_is_kept() -> None:
    core = core_with_offsets()
    assert delete(core, "g", "nothing") == {
        "g": ErrorCode.NONE,
        "nothing": ErrorCode.GROUP_ID_NOT_FOUND,
    }
    assert "g" not in core.groups
    kept = core.take_changes()
    assert kept == [OffsetRecord("g", "t", 0, DELETED)]
    # a restart replays the commit, then its deletion: nothing comes back
    restarted = Coordinator()
    restarted.restore([OffsetRecord("g", "t", 0, 7), *kept])
    assert "g" not in restarted.groups


def test_deleting_a_group_needs_delete_on_it() -> None:
    core = core_with_offsets()
    alice = Peer(2, "c", "127.0.0.1", "User:alice")
    core.authorizer = Authorizer([acl("User:alice", Operation.DELETE, ResourceType.GROUP, "other")])
    assert delete(core, "g", peer=alice) == {"g": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    assert "g" in core.groups


def test_reset_plans() -> None:
    assert parse_topic("t") == ("t", None)
    assert parse_topic("t:2,0") == ("t", [0, 2])
    with pytest.raises(ValueError, match="partitions are numbers"):
        parse_topic("t:x")
    with pytest.raises(ValueError, match="no 3"):
        chosen_partitions(["t:3"], {"t": 3})
    with pytest.raises(ValueError, match="no topic"):
        chosen_partitions(["u"], {"t": 3})
    current = {T0: 10, T1: 1}
    parts = chosen_partitions(["t"], {"t": 3})
    assert [(p.current, p.new) for p in plan(Reset("to-earliest"), parts, current)] == [
        (10, 0),
        (1, 0),
        (None, 0),
    ]
    assert [p.new for p in plan(Reset("shift-by", -5), parts, current)] == [5, 0, 0]
    assert [p.new for p in plan(Reset("to-offset", 42), parts, current)] == [42, 42, 42]
    with pytest.raises(ValueError, match="0 or more"):
        Reset("to-offset", -1)


async def test_offsets_are_reset_deleted_and_stay_so_after_a_restart(tmp_path: Path) -> None:
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 3)
            await admin.set_offsets("g", {T0: 5, T2: 9})
            assert await admin.committed_offsets("g") == {T0: 5, T2: 9}
            await admin.set_offsets("h", {T1: 1})
            await admin.delete_group("g")
            with pytest.raises(GroupIdNotFoundError):
                await admin.delete_group("g")
    async with running_server(config) as server, Admin(f"127.0.0.1:{server.port}") as admin:
        assert await admin.committed_offsets("g") == {}
        assert await admin.committed_offsets("h") == {T1: 1}


async def test_a_group_with_members_is_neither_deleted_nor_reset(
    capsys: pytest.CaptureFixture[str], logs: list[EventDict]
) -> None:
    async with running_server(fast_server_config()) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 3)
        async with Member(bootstrap, group_id="busy", topics=["t"], session_timeout_ms=6000) as m:
            await m.wait_stable(10)
            await m.commit({T0: 3})
            async with Admin(bootstrap) as admin:
                with pytest.raises(NonEmptyGroupError):
                    await admin.delete_group("busy")
                with pytest.raises(NonEmptyGroupError):
                    await admin.set_offsets("busy", {T0: 0})
                assert await admin.committed_offsets("busy") == {T0: 3}
            args = ["groups", "reset-offsets", "busy", "--topic", "t", "--to-earliest"]
            code = await asyncio.to_thread(main, [*args, "--execute", "--bootstrap", bootstrap], {})
            assert code == 1
            refused = capsys.readouterr().err
            assert "NON_EMPTY_GROUP" in refused
            assert "group 'busy' has 1 member (Stable)" in refused
            code = await asyncio.to_thread(
                main, ["groups", "describe", "busy", "--bootstrap", bootstrap], {}
            )
            assert code == 0
            described = capsys.readouterr().out
            owned = [line.split() for line in described.splitlines() if line.startswith("t  ")]
            assert [row[:3] for row in owned] == [["t", "0", "3"], ["t", "1", "-"], ["t", "2", "-"]]
            assert all(row[3] == m.member_id for row in owned)


async def test_reset_offsets_from_the_command_line(
    capsys: pytest.CaptureFixture[str], logs: list[EventDict]
) -> None:
    async with running_server(fast_server_config()) as server:
        bootstrap = ["--bootstrap", f"127.0.0.1:{server.port}"]
        async with Admin(bootstrap[1]) as admin:
            await admin.create_topic("t", 3)
            await admin.set_offsets("g", {T0: 10, T1: 20})

        async def huddle(*argv: str) -> int:
            return await asyncio.to_thread(main, [*argv, *bootstrap], {})

        reset = ["groups", "reset-offsets", "g", "--topic", "t:0,1", "--shift-by", "-15"]
        assert await huddle(*reset, "--json") == 0
        dry = json.loads(capsys.readouterr().out)
        assert dry["executed"] is False
        assert [(o["current"], o["new"]) for o in dry["offsets"]] == [(10, 0), (20, 5)]
        async with Admin(bootstrap[1]) as admin:
            assert await admin.committed_offsets("g") == {T0: 10, T1: 20}  # unchanged
        assert await huddle(*reset, "--execute") == 0
        assert "offsets set" in capsys.readouterr().out
        async with Admin(bootstrap[1]) as admin:
            assert await admin.committed_offsets("g") == {T0: 0, T1: 5}
        assert await huddle("groups", "reset-offsets", "g", "--topic", "u", "--to-earliest") == 2
        assert "no topic 'u'" in capsys.readouterr().err
        assert await huddle("groups", "delete", "g") == 0
        assert await huddle("groups", "delete", "g") == 1
        assert "GROUP_ID_NOT_FOUND" in capsys.readouterr().err


def delete_through(d: Driver, *groups: str) -> dict[str, int]:
    answer = d.response(d.send(9, DeleteGroupsRequest(groups=list(groups))))
    assert isinstance(answer, DeleteGroupsResponse)
    return {r.group_id: r.error_code for r in answer.results}


def test_an_empty_group_is_deleted_while_a_handed_out_member_id_is_pending() -> None:
    """Kafka moves an Empty group to Dead whatever member ids it handed out (KIP-394); the
    pending member's JoinGroup with its id then finds no group (UNKNOWN_MEMBER_ID), and it
    joins anew with an empty id, into a new group without the deleted offsets."""
    d = Driver()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    assert d.commit(9, {("t", 0): 7}).error_code == ErrorCode.NONE
    handed = d.join_response(d.join(1))
    assert handed.error_code == ErrorCode.MEMBER_ID_REQUIRED
    d.advance(SESSION_MS / 2)
    assert delete_through(d, "g") == {"g": ErrorCode.NONE}
    assert "g" not in d.core.groups
    late = d.join_response(d.join(1, handed.member_id))
    assert late.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    member_id, held = d.join_new(1)
    assert member_id != handed.member_id
    joined = d.join_response(held)
    assert (joined.error_code, joined.generation_id) == (ErrorCode.NONE, 1)
    d.sync(1, member_id, 1, {member_id: b"t-0"})
    d.advance(SESSION_MS / 2 + 1)  # the old id's expiry, had it stayed armed, is past
    assert d.heartbeat(1, member_id, 1) == ErrorCode.NONE
    assert d.group().offsets == {}
    assert delete_through(d, "g") == {"g": ErrorCode.NON_EMPTY_GROUP}


def test_a_pending_member_id_from_a_deleted_group_is_unknown_to_the_group_made_again() -> None:
    d = Driver()
    handed = d.join_response(d.join(1))
    assert delete_through(d, "g") == {"g": ErrorCode.NONE}
    newcomer, held = d.join_new(2)  # another member makes the group again
    assert d.join_response(held).error_code == ErrorCode.NONE  # no old id holds it up
    late = d.join_response(d.join(1, handed.member_id))
    assert late.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert list(d.group().members) == [newcomer]
    assert d.group().state is GroupState.COMPLETING_REBALANCE  # the late join changed nothing
