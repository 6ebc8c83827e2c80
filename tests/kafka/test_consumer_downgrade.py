"""The downgrade on the Kafka wire: a classic group upgraded by a consumer-protocol member
becomes a classic group again when that member leaves (Kafka 4.0's ``bidirectional``
migration policy, huddle's default): its classic member is told to rejoin at its next
Heartbeat (not ILLEGAL_GENERATION: the classic group starts at the epoch it is at), leads
the new generation and takes every partition back; the classic group is kept in the data
dir across a restart, and the ``upgrade`` policy keeps the consumer group instead."""

from __future__ import annotations

from pathlib import Path

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.state import GroupState
from tests.helpers import fast_server_config
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _beat, _owned
from tests.kafka.test_consumer_upgrade import (
    ALL,
    NONE,
    REBALANCE_IN_PROGRESS,
    Classic,
    _upgrade,
)

GROUP_ID_NOT_FOUND = 69


async def _upgraded_then_left(kafka: Listening, conn: RawKafka) -> Classic:
    """A classic member and a consumer member "b" share t, reconciled; then "b" leaves."""
    t_id, classic, b = await _upgrade(kafka, conn)
    first = classic.generation
    assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
    await classic.join()  # keeps half: it must rejoin once more
    assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
    await classic.join()
    assert classic.generation == b.member_epoch == first + 1
    beat = await conn.call(
        Api.CONSUMER_GROUP_HEARTBEAT,
        1,
        2,
        **{**_beat("b", first + 1, topic_partitions=[]), "group_id": "g"},
    )
    assert _owned(beat, t_id) == ALL - classic.holds
    left = await conn.call(
        Api.CONSUMER_GROUP_HEARTBEAT, 1, 3, **{**_beat("b", -1), "group_id": "g"}
    )
    assert (left.error_code, left.member_epoch) == (NONE, -1)
    return classic


async def test_the_consumer_member_leaving_makes_the_group_classic_again(
    kafka: Listening,
) -> None:
    server = kafka.server
    async with RawKafka(kafka.port) as conn:
        classic = await _upgraded_then_left(kafka, conn)
        assert "g" not in server.consumer.core.groups
        group = server.core.groups["g"]
        assert set(group.members) == {classic.member_id}
        assert group.is_(GroupState.PREPARING_REBALANCE)
        assert group.generation == classic.generation
        # told to rejoin; it leads the classic group's next generation and takes all
        assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
        generation = classic.generation
        joined = await classic.join(lead=True)
        assert joined.leader == classic.member_id
        assert classic.generation == generation + 1
        assert classic.holds == ALL
        assert await classic.heartbeat() == NONE
        # the consumer member is gone with its group: it must join again
        again = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT, 1, 4, **{**_beat("b", generation), "group_id": "g"}
        )
        assert again.error_code == GROUP_ID_NOT_FOUND


async def test_a_downgraded_group_survives_a_restart(tmp_path: Path) -> None:
    config = fast_server_config(data_dir=str(tmp_path))
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with RawKafka(kafka.port) as conn:
            classic = await _upgraded_then_left(kafka, conn)
            assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
            await classic.join(lead=True)
            member_id, generation = classic.member_id, classic.generation
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        assert "g" not in server.consumer.core.groups
        group = server.core.groups["g"]
        assert group.is_(GroupState.STABLE)
        assert (set(group.members), group.generation) == ({member_id}, generation)
        async with RawKafka(kafka.port) as conn:
            again = Classic(conn)
            again.member_id, again.generation = member_id, generation
            assert await again.heartbeat() == NONE


async def test_a_restart_before_the_rebalance_ended_rebalances_the_classic_group(
    tmp_path: Path,
) -> None:
    config = fast_server_config(data_dir=str(tmp_path))
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with RawKafka(kafka.port) as conn:
            classic = await _upgraded_then_left(kafka, conn)
            member_id, generation = classic.member_id, classic.generation
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        assert "g" not in server.consumer.core.groups
        assert set(server.core.groups["g"].members) == {member_id}
        async with RawKafka(kafka.port) as conn:
            again = Classic(conn)
            again.member_id, again.generation = member_id, generation
            assert await again.heartbeat() == REBALANCE_IN_PROGRESS
            await again.join(lead=True)
            assert again.holds == ALL


async def test_the_upgrade_policy_keeps_the_consumer_group() -> None:
    config = fast_server_config(consumer_migration_policy="upgrade")
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with RawKafka(kafka.port) as conn:
            classic = await _upgraded_then_left(kafka, conn)
            group = server.consumer.core.groups["g"]
            assert set(group.members) == {classic.member_id}
            assert "g" not in server.core.groups or not server.core.groups["g"].members
            # served on by the consumer group: it rejoins and gets what "b" released
            assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
            await classic.join()
            assert classic.holds == ALL
