"""The upgrade of a classic group that is rebalancing, on the Kafka wire. As Kafka 4.0's
``convertToConsumerGroup``, a consumer-protocol member joining a rebalancing classic group
upgrades it at once: the JoinGroups and SyncGroups the classic group held are answered
REBALANCE_IN_PROGRESS, and each member owns what its last assignment gave it (a rebalance
leaves it in place until the next is stored). Where that is not what a member holds, the
upgrade waits (COORDINATOR_LOAD_IN_PROGRESS, which a consumer retries): a rebalance that
began again in the sync phase cleared the assignments, or a Stable group's members have
not all collected the assignment stored for them (one still holding partitions the new
assignment moved would share them with the consumer member); or members loaded by a
restart have not been heard from (which listener they speak on is not known yet)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.state import GroupState
from huddle.protocol.messages import TopicSpec
from tests.coordinator.test_metrics import scrape, value
from tests.helpers import fast_server_config, wait_until
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka, parse
from tests.kafka.test_consumer_protocol import _beat, _join, _owned, _owning
from tests.kafka.test_consumer_upgrade import (
    ALL,
    NONE,
    REBALANCE_IN_PROGRESS,
    Classic,
    _classic_join,
)
from tests.kafka.test_wire import _create

COORDINATOR_LOAD_IN_PROGRESS = 14


async def _held_join(kafka: Listening, conn: RawKafka, classic: Classic) -> None:
    """A new classic member's JoinGroup, held: the group rebalances for it."""
    first = await classic.call(Api.JOIN_GROUP, 5, **_classic_join("", set()))
    classic.member_id = first.member_id  # MEMBER_ID_REQUIRED: then the join proper
    classic.correlation += 1
    conn.send(Api.JOIN_GROUP, 5, classic.correlation, **_classic_join(classic.member_id, set()))
    group = kafka.server.core.groups["g"]
    await wait_until(
        lambda: classic.member_id in group.members and group.is_(GroupState.PREPARING_REBALANCE),
        what="the classic group rebalancing for the new member",
    )


@contextlib.asynccontextmanager
async def _connections(kafka: Listening, count: int) -> AsyncIterator[list[RawKafka]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(RawKafka(kafka.port)) for _ in range(count)]


async def _rebalancing(kafka: Listening, one: RawKafka, two: RawKafka) -> tuple[Classic, Classic]:
    """Classic member a owns all of t (on ``one``); b's JoinGroup (on ``two``) is held."""
    _create(kafka.server, TopicSpec(name="t", partitions=4))
    a, b = Classic(one), Classic(two)
    await a.join(lead=True)
    await _held_join(kafka, two, b)
    return a, b


async def _answer(conn: RawKafka, api: Api, version: int) -> Any:
    _, body = await conn.read()
    return parse(api, version, body)


async def _consumer_join(conn: RawKafka, correlation: int) -> Any:
    return await conn.call(
        Api.CONSUMER_GROUP_HEARTBEAT, 1, correlation, **{**_join("n", "t"), "group_id": "g"}
    )


async def test_a_rebalancing_classic_group_is_upgraded_and_its_held_join_answered(
    kafka: Listening,
) -> None:
    async with _connections(kafka, 3) as (one, two, three):
        a, b = await _rebalancing(kafka, one, two)
        t_id: uuid.UUID = kafka.server.core.topics.ids["t"]
        generation = a.generation

        n = await _consumer_join(three, 1)
        assert (n.error_code, n.member_epoch) == (NONE, generation + 1)
        assert _owned(n, t_id) == set()  # a still owns everything
        held = await _answer(two, Api.JOIN_GROUP, 5)
        assert held.error_code == REBALANCE_IN_PROGRESS  # join again: the consumer group's
        assert not kafka.server.core.groups.get("g") or not kafka.server.core.groups["g"].members
        assert set(kafka.server.consumer.core.groups["g"].members) == {
            a.member_id,
            b.member_id,
            "n",
        }

        # everyone goes on: a gives up what it must, b and n get their shares, and no
        # partition is ever held by two of them
        n_epoch, n_owns = n.member_epoch, set[int]()
        b.generation = generation
        for correlation in range(2, 12):
            for classic in (a, b):
                if await classic.heartbeat() == REBALANCE_IN_PROGRESS:
                    await classic.join()
            beat = await three.call(
                Api.CONSUMER_GROUP_HEARTBEAT,
                1,
                correlation,
                **{
                    **_beat("n", n_epoch, topic_partitions=_owning(t_id, n_owns)),
                    "group_id": "g",
                },
            )
            assert beat.error_code == NONE
            n_epoch = beat.member_epoch
            if beat.assignment is not None:
                n_owns = _owned(beat, t_id)
            held = [a.holds, b.holds, n_owns]
            assert sum(map(len, held)) == len(set().union(*held)), f"held twice: {held}"
        assert a.holds | b.holds | n_owns == ALL
        assert all((a.holds, b.holds, n_owns))


async def test_the_upgrade_waits_while_assignments_were_cleared_by_a_rebalance_begun_again(
    kafka: Listening,
) -> None:
    async with _connections(kafka, 4) as (one, two, three, four):
        a, _ = await _rebalancing(kafka, one, two)
        c = Classic(three)
        # a rejoins: the join phase completes, a leads the sync phase...
        rejoined = await a.call(Api.JOIN_GROUP, 5, **_classic_join(a.member_id, a.holds))
        assert rejoined.error_code == NONE
        assert (await _answer(two, Api.JOIN_GROUP, 5)).error_code == NONE
        group = kafka.server.core.groups["g"]
        assert group.is_(GroupState.COMPLETING_REBALANCE)
        # ...and before it assigns, c joins: the rebalance begins again, assignments cleared
        await _held_join(kafka, three, c)
        refused = await _consumer_join(four, 1)
        assert refused.error_code == COORDINATOR_LOAD_IN_PROGRESS
        assert "g" not in kafka.server.consumer.core.groups


async def test_the_upgrade_waits_for_members_to_collect_their_assignments(
    kafka: Listening,
) -> None:
    async with _connections(kafka, 3) as (one, two, three):
        a, b = await _rebalancing(kafka, one, two)
        await a.join(lead=True)  # a assigns itself everything again; b has not synced
        assert (await _answer(two, Api.JOIN_GROUP, 5)).error_code == NONE
        group = kafka.server.core.groups["g"]
        assert group.is_(GroupState.STABLE)
        assert group.pending_sync == {b.member_id}
        refused = await _consumer_join(three, 1)
        assert refused.error_code == COORDINATOR_LOAD_IN_PROGRESS
        synced = await b.call(
            Api.SYNC_GROUP,
            5,
            group_id="g",
            generation_id=a.generation,
            member_id=b.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="cooperative-sticky",
            assignments=[],
        )
        assert synced.error_code == NONE
        upgraded = await _consumer_join(three, 2)
        assert upgraded.error_code == NONE


async def test_the_upgrade_waits_for_the_members_a_restart_loaded_to_be_heard_from(
    tmp_path: Path,
) -> None:
    """A classic group loaded from the data dir has members on no connection until they are
    heard from: which listener they speak on is not known, so the upgrade waits (it was
    refused GROUP_ID_NOT_FOUND, fatal for librdkafka, as if on huddle's own wire)."""
    config = fast_server_config(data_dir=str(tmp_path))
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with RawKafka(kafka.port) as conn:
            _create(server, TopicSpec(name="t", partitions=4))
            a = Classic(conn)
            await a.join(lead=True)
    async with CoordinatorServer(config) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with _connections(kafka, 2) as (one, two):
            waits = await _consumer_join(two, 1)
            assert waits.error_code == COORDINATOR_LOAD_IN_PROGRESS
            again = Classic(one)
            again.member_id, again.generation = a.member_id, a.generation
            assert await again.heartbeat() == NONE
            upgraded = await _consumer_join(two, 2)
            assert (upgraded.error_code, upgraded.member_epoch) == (NONE, a.generation + 1)


async def test_a_rebalance_the_upgrade_cut_short_ends_in_the_metrics(logs: object) -> None:
    """The classic rebalance an upgrade cut short is over (its duration observed): the one
    the downgrade starts later is counted under its own reason, not taken for the same."""
    async with CoordinatorServer(fast_server_config(metrics_port=0)) as server:
        kafka = Listening(server, await listen_kafka(server, "127.0.0.1", 0))
        async with _connections(kafka, 3) as (one, two, three):
            a, b = await _rebalancing(kafka, one, two)
            assert (await _consumer_join(three, 1)).error_code == NONE
            assert (await _answer(two, Api.JOIN_GROUP, 5)).error_code == REBALANCE_IN_PROGRESS
            for classic in (a, b):  # both rejoin the consumer group, reconciled
                classic.generation = a.generation
                for _ in range(3):
                    if await classic.heartbeat() == REBALANCE_IN_PROGRESS:
                        await classic.join()
            left = await three.call(
                Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **{**_beat("n", -1), "group_id": "g"}
            )
            assert left.error_code == NONE
            assert "g" not in server.consumer.core.groups
            samples = await scrape(server.metrics_port)
            reason = "downgraded from a consumer group"
            assert value(samples, "huddle_rebalances_total", reason=reason) == 1
