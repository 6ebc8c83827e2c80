"""Mixed groups on the Kafka wire: a stable classic group (JoinGroup/SyncGroup) is upgraded to a
consumer group when a ConsumerGroupHeartbeat joins it, its classic member goes on through
JoinGroup/SyncGroup/Heartbeat with assignments from the server assignor, no partition is
given to the consumer member before the classic member gave it up, the group survives a
restart on the data dir, and ``--consumer-migration-policy disabled`` refuses the upgrade."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, NoReturn

import pytest

from huddle.coordinator.consumer import DoubleOwnerError
from huddle.coordinator.consumer import classic as consumer_classic
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.protocol.consumer_protocol import (
    KafkaAssignment,
    KafkaSubscription,
    read_assignment,
    write_assignment,
    write_subscription,
)
from huddle.protocol.messages import TopicSpec
from tests.helpers import fast_server_config
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _beat, _join, _owned, _owning
from tests.kafka.test_wire import _create

UNKNOWN_SERVER_ERROR, NONE, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = -1, 0, 22, 27
GROUP_ID_NOT_FOUND = 69
ALL = {0, 1, 2, 3}


def _metadata(owned: set[int]) -> bytes:
    """A cooperative client's subscription to t (v1: with the partitions it owns)."""
    return write_subscription(KafkaSubscription(1, ["t"], None, [("t", sorted(owned))]))


def _classic_join(member_id: str, owned: set[int]) -> dict[str, Any]:
    return {
        "group_id": "g",
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "cooperative-sticky", "metadata": _metadata(owned)}],
    }


class Classic:
    """A classic member on a raw connection, acting on its answers as a Kafka client."""

    def __init__(self, conn: RawKafka) -> None:
        self.conn = conn
        self.member_id = ""
        self.generation = -1
        self.holds: set[int] = set()
        self.correlation = 100

    async def call(self, api: Api, version: int, **fields: Any) -> Any:
        self.correlation += 1
        return await self.conn.call(api, version, self.correlation, **fields)

    async def join(self, *, lead: bool = False) -> Any:
        """JoinGroup (twice for a new member: MEMBER_ID_REQUIRED), then SyncGroup (the
        leader of a classic group assigns itself every partition)."""
        joined = await self.call(Api.JOIN_GROUP, 5, **_classic_join(self.member_id, self.holds))
        if not self.member_id:
            self.member_id = joined.member_id
            joined = await self.call(Api.JOIN_GROUP, 5, **_classic_join(self.member_id, set()))
        assert joined.error_code == NONE, joined
        self.generation = joined.generation_id
        assignments = []
        if lead:
            assert joined.leader == self.member_id
            mine = write_assignment(KafkaAssignment(1, [("t", sorted(ALL))]))
            assignments = [{"member_id": self.member_id, "assignment": mine}]
        synced = await self.call(
            Api.SYNC_GROUP,
            5,
            group_id="g",
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="cooperative-sticky",
            assignments=assignments,
        )
        assert synced.error_code == NONE, synced
        given = read_assignment(synced.assignment).assigned_partitions
        self.holds = {p for topic, parts in given if topic == "t" for p in parts}
        return joined

    async def heartbeat(self) -> int:
        beat = await self.call(
            Api.HEARTBEAT,
            4,
            group_id="g",
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
        )
        return int(beat.error_code)


async def _upgrade(kafka: Listening, conn: RawKafka) -> tuple[uuid.UUID, Classic, Any]:
    """A classic member owning all of t, then a consumer member "b" joining its group."""
    _create(kafka.server, TopicSpec(name="t", partitions=4))
    t_id = kafka.server.core.topics.ids["t"]
    classic = Classic(conn)
    await classic.join(lead=True)
    assert classic.holds == ALL
    b = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **{**_join("b", "t"), "group_id": "g"})
    return t_id, classic, b


async def test_a_consumer_member_joins_a_classic_group_and_the_classic_member_rejoins(
    kafka: Listening,
) -> None:
    async with RawKafka(kafka.port) as conn:
        t_id, classic, b = await _upgrade(kafka, conn)
        first = classic.generation
        assert (b.error_code, b.member_epoch) == (NONE, first + 1)
        assert _owned(b, t_id) == set()  # the classic member still owns everything
        assert "g" not in kafka.server.core.groups or not kafka.server.core.groups["g"].members

        # told to rejoin; it reports all it owns, keeps half, and must rejoin again
        assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
        joined = await classic.join()
        assert (joined.leader, joined.members) == ("", ())  # a follower: nothing to assign
        assert classic.generation == first
        assert len(classic.holds) == 2
        beat = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **{**_beat("b", first + 1), "group_id": "g"}
        )
        assert beat.assignment is None  # nothing released yet: still nothing of its own
        assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
        await classic.join()
        assert classic.generation == first + 1
        assert await classic.heartbeat() == NONE
        beat = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            3,
            **{**_beat("b", first + 1, topic_partitions=[]), "group_id": "g"},
        )
        assert _owned(beat, t_id) == ALL - classic.holds
        described = await conn.call(
            Api.CONSUMER_GROUP_DESCRIBE, 1, 7, group_ids=["g"], include_authorized_operations=False
        )
        members = {m.member_id: m for m in described.groups[0].members}
        assert members[classic.member_id].member_type == 0  # classic
        assert members["b"].member_type == 1  # consumer
        assert members[classic.member_id].member_epoch == classic.generation

        # offsets: the classic member commits with its epoch as generation
        commit = await conn.call(
            Api.OFFSET_COMMIT,
            8,
            4,
            group_id="g",
            generation_id_or_member_epoch=classic.generation - 1,
            member_id=classic.member_id,
            group_instance_id=None,
            topics=[
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                    ],
                }
            ],
        )
        assert commit.topics[0].partitions[0].error_code == ILLEGAL_GENERATION

        # the classic member leaves: the consumer member gets everything
        left = await conn.call(
            Api.LEAVE_GROUP,
            3,
            5,
            group_id="g",
            members=[{"member_id": classic.member_id, "group_instance_id": None}],
        )
        assert (left.error_code, left.members[0].error_code) == (NONE, NONE)
        owned = _owning(t_id, ALL - classic.holds)
        beat = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            6,
            **{**_beat("b", first + 1, topic_partitions=owned), "group_id": "g"},
        )
        assert _owned(beat, t_id) == ALL


async def test_an_upgraded_group_survives_a_restart(tmp_path: Path) -> None:
    config = fast_server_config(data_dir=str(tmp_path))
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with RawKafka(kafka.port) as conn:
            _, classic, b = await _upgrade(kafka, conn)
            assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
            await classic.join()  # keeps half, at its epoch
            member_id, generation, holds = classic.member_id, classic.generation, classic.holds
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        group = server.consumer.core.groups["g"]
        kept = group.members[member_id]
        assert kept.classic is not None
        assert kept.classic.session_timeout_ms == 10_000
        assert (kept.member_epoch, kept.assigned) == (generation, {"t": frozenset(holds)})
        assert "b" in group.members
        async with RawKafka(kafka.port) as conn:
            again = Classic(conn)
            again.member_id, again.generation, again.holds = member_id, generation, holds
            # it goes on where it was: told to rejoin (it has partitions to give up)
            assert await again.heartbeat() == REBALANCE_IN_PROGRESS
            await again.join()
            assert again.generation == b.member_epoch
            assert again.holds == holds


async def test_the_upgrade_is_refused_when_the_policy_is_disabled(logs: object) -> None:
    config = fast_server_config(consumer_migration_policy="disabled")
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with RawKafka(kafka.port) as conn:
            _, classic, b = await _upgrade(kafka, conn)
            assert b.error_code == GROUP_ID_NOT_FOUND
            assert "disabled" in b.error_message
            assert await classic.heartbeat() == NONE  # the classic group goes on


async def test_a_bug_in_a_classic_request_to_a_consumer_group_is_answered(
    kafka: Listening, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure serving a classic member of a consumer group (here the core's bug
    detector) is answered UNKNOWN_SERVER_ERROR; the connection and the group go on."""

    def broken(*args: object) -> NoReturn:
        raise DoubleOwnerError("planted")

    async with RawKafka(kafka.port) as conn:
        _, classic, _ = await _upgrade(kafka, conn)
        monkeypatch.setattr(consumer_classic, "join", broken)
        failed = await classic.call(Api.JOIN_GROUP, 5, **_classic_join(classic.member_id, set()))
        assert failed.error_code == UNKNOWN_SERVER_ERROR
        assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
