"""The downgrade on the Kafka wire: a classic group upgraded by a consumer-protocol member
becomes a classic group again when that member leaves (Kafka 4.0's ``bidirectional``
migration policy, huddle's default): its classic member is told to rejoin at its next
Heartbeat (not ILLEGAL_GENERATION: the classic group starts at the epoch it is at), leads
the new generation and takes every partition back; the classic group is kept in the data
dir across a restart, and the ``upgrade`` policy keeps the consumer group instead."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.state import GroupState
from huddle.protocol.consumer_protocol import KafkaAssignment, write_assignment
from huddle.protocol.messages import TopicSpec
from tests.helpers import eventually, fast_server_config
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _beat, _commit, _fetch, _join, _owned
from tests.kafka.test_consumer_upgrade import (
    ALL,
    ILLEGAL_GENERATION,
    NONE,
    REBALANCE_IN_PROGRESS,
    Classic,
    _classic_join,
    _upgrade,
)
from tests.kafka.test_wire import _create

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
    done = await conn.call(Api.OFFSET_COMMIT, 9, 90, **_commit("b", first + 1, 7))
    assert done.topics[0].partitions[0].error_code == NONE  # kept by the classic group after
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
            fetched = await conn.call(Api.OFFSET_FETCH, 9, 91, **_fetch(None, -1))
            assert fetched.groups[0].topics[0].partitions[0].committed_offset == 7


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


async def test_a_classic_static_member_taking_the_consumer_member_s_place_downgrades(
    kafka: Listening,
) -> None:
    """A static consumer-protocol member leaves for now (-2) and its instance comes back as a
    classic member (its process rolled back): no consumer-protocol member is left, and the
    group is a classic group again, which the returning member joins as the others do."""
    server = kafka.server
    async with RawKafka(kafka.port) as conn, RawKafka(kafka.port) as other:
        _, classic, _ = await _upgrade_static(kafka, conn)
        for _ in range(2):  # told to rejoin twice: it gives half up, then is reconciled
            assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
            await classic.join()
        assert await classic.heartbeat() == NONE
        gone = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            3,
            **{**_beat("s", -2), "group_id": "g", "instance_id": "i1"},
        )
        assert (gone.error_code, gone.member_epoch) == (NONE, -2)
        assert "g" in server.consumer.core.groups
        back = Classic(other)
        joined = await back.call(
            Api.JOIN_GROUP, 5, **{**_classic_join("", set()), "group_instance_id": "i1"}
        )
        assert joined.error_code == NONE
        assert "g" not in server.consumer.core.groups
        group = server.core.groups["g"]
        assert set(group.members) == {classic.member_id, joined.member_id}
        assert group.static == {"i1": joined.member_id}
        # both rejoin the classic group's rebalance; one leads and assigns
        assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
        back.member_id = joined.member_id
        await asyncio.gather(classic.join(lead=True), _rejoin_static(back))
        assert classic.holds == ALL  # the leader here assigns itself everything
        assert group.is_(GroupState.STABLE)


async def _upgrade_static(kafka: Listening, conn: RawKafka) -> tuple[uuid.UUID, Classic, Any]:
    """As ``_upgrade``, the consumer member "s" static (instance "i1")."""
    _create(kafka.server, TopicSpec(name="t", partitions=4))
    classic = Classic(conn)
    await classic.join(lead=True)
    s = await conn.call(
        Api.CONSUMER_GROUP_HEARTBEAT,
        1,
        1,
        **{**_join("s", "t"), "group_id": "g", "instance_id": "i1"},
    )
    assert s.error_code == NONE
    return kafka.server.core.topics.ids["t"], classic, s


async def _rejoin_static(member: Classic) -> None:
    joined = await member.call(
        Api.JOIN_GROUP,
        5,
        **{**_classic_join(member.member_id, set()), "group_instance_id": "i1"},
    )
    assert joined.error_code == NONE, joined
    member.generation = joined.generation_id
    synced = await member.call(
        Api.SYNC_GROUP,
        5,
        group_id="g",
        generation_id=member.generation,
        member_id=member.member_id,
        group_instance_id="i1",
        protocol_type="consumer",
        protocol_name="cooperative-sticky",
        assignments=[],
    )
    assert synced.error_code == NONE, synced


async def test_a_group_downgraded_after_a_restart_can_be_upgraded_again(tmp_path: Path) -> None:
    """A mixed group served again after a restart, its classic member heard from by its
    Heartbeats only, downgraded: the classic group knows that member's client (who it is
    must be known to tell which listener it is on), so a consumer member joining later
    upgrades it again rather than waiting for good."""
    config = fast_server_config(data_dir=str(tmp_path))
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with RawKafka(kafka.port) as conn:
            _, classic, b = await _upgrade(kafka, conn)
            member_id, generation = classic.member_id, classic.generation
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with RawKafka(kafka.port) as conn:
            again = Classic(conn)
            again.member_id, again.generation = member_id, generation
            assert await again.heartbeat() == REBALANCE_IN_PROGRESS  # "b" joined: rejoin
            left = await conn.call(
                Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **{**_beat("b", -1), "group_id": "g"}
            )
            assert left.error_code == NONE
            assert "g" not in server.consumer.core.groups
            # behind the group epoch the classic group starts at: its generation is stale
            assert await again.heartbeat() == ILLEGAL_GENERATION
            await again.join(lead=True)
            upgraded = await conn.call(
                Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **{**_join("c", "t"), "group_id": "g"}
            )
            assert upgraded.error_code == NONE
            assert b.error_code == NONE


async def test_a_classic_member_that_does_not_rejoin_is_fenced_on_the_server(
    kafka: Listening,
) -> None:
    """Told to rejoin, a classic member of a consumer group that goes on heartbeating but
    never rejoins is fenced at its rebalance timeout (here 300 ms) by the server's timer, and
    the consumer member gets every partition."""
    _create(kafka.server, TopicSpec(name="t", partitions=4))
    t_id = kafka.server.core.topics.ids["t"]
    async with RawKafka(kafka.port) as conn:
        classic = Classic(conn)
        short = {**_classic_join("", set()), "rebalance_timeout": 300}
        first = await classic.call(Api.JOIN_GROUP, 5, **short)
        joined = await classic.call(Api.JOIN_GROUP, 5, **{**short, "member_id": first.member_id})
        classic.member_id, classic.generation = joined.member_id, joined.generation_id
        mine = write_assignment(KafkaAssignment(1, [("t", sorted(ALL))]))
        synced = await classic.call(
            Api.SYNC_GROUP,
            5,
            group_id="g",
            generation_id=classic.generation,
            member_id=classic.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="cooperative-sticky",
            assignments=[{"member_id": classic.member_id, "assignment": mine}],
        )
        assert synced.error_code == NONE
        b = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **{**_join("b", "t"), "group_id": "g"}
        )
        assert b.error_code == NONE
        assert await classic.heartbeat() == REBALANCE_IN_PROGRESS
        group = kafka.server.consumer.core.groups["g"]

        async def fenced() -> bool:
            await classic.heartbeat()  # it goes on heartbeating, never rejoining
            return classic.member_id not in group.members

        # well before its session (10 s) would end
        await eventually(
            fenced, wait_s=5, what="the classic member fenced at its rebalance timeout"
        )
        beat = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **{**_beat("b", b.member_epoch), "group_id": "g"}
        )
        assert _owned(beat, t_id) == ALL
