"""A consumer-protocol group (KIP-848) in a two-node cluster over one real etcd: the node
coordinating it is killed with SIGKILL (the other node refused its heartbeats until then:
NOT_COORDINATOR), the other node takes its shard over from etcd
(``P/consumer-groups/<shard>/...``), and the members' heartbeats at their epochs are
accepted there, with the partitions they had: no epoch moves. Their answers waited for etcd:
it holds every epoch a member was answered."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest

from huddle.chaos.procs import HOST
from huddle.client import Admin
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.storage.records import ConsumerGroupRecord, ConsumerMemberRecord
from tests.cluster.test_failover import PREFIX, SHARDS
from tests.cluster.test_kafka_failover import WAIT_S, coordinator, kafka_cluster, metadata
from tests.etcd import Etcd, etcd
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _beat, _join, _owned, _owning
from tests.kafka.test_consumer_restart import _full

__all__ = ["etcd"]  # the fixture

_decode = msgspec.msgpack.Decoder(ConsumerGroupRecord | ConsumerMemberRecord).decode

NONE, NOT_COORDINATOR, UNKNOWN_MEMBER_ID = 0, 16, 25
ALL: Final = {0, 1, 2, 3}


async def _heartbeats(port: int, *beats: dict[str, Any]) -> list[Any]:
    async with RawKafka(port) as conn:
        return [
            await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, i, **beat)
            for i, beat in enumerate(beats, 1)
        ]


async def _create_topic(port: int) -> None:
    async with Admin(f"{HOST}:{port}") as admin:
        await admin.create_topic("t", len(ALL))


def _form(port: int, t_id: uuid.UUID) -> set[int]:
    """Members a and b share t at epoch 2 on the node at ``port``: a's partitions."""
    _, _, a = asyncio.run(
        _heartbeats(
            port,
            _join("a", "t"),
            _join("b", "t"),
            _beat("a", 1, topic_partitions=_owning(t_id, ALL)),
        )
    )
    mine = _owned(a, t_id)
    a, b = asyncio.run(
        _heartbeats(
            port,
            _beat("a", 1, topic_partitions=_owning(t_id, mine)),
            _beat("b", 2, topic_partitions=[]),
        )
    )
    assert (a.error_code, a.member_epoch) == (NONE, 2)
    assert (b.error_code, b.member_epoch, _owned(b, t_id)) == (NONE, 2, ALL - mine)
    return mine


@pytest.mark.e2e
def test_the_coordinator_killed_the_next_node_serves_the_members_at_their_epochs(
    etcd: Etcd, tmp_path: Path
) -> None:
    with kafka_cluster(etcd, tmp_path / "nodes", count=2) as cluster:
        nodes = cluster.nodes
        asyncio.run(_create_topic(nodes[0].port))
        wait_until_sync(lambda: all(_topic_id(n.kafka) for n in nodes), "t on both nodes")
        t_id = _topic_id(nodes[0].kafka)
        assert t_id is not None
        owner = wait_until_sync(lambda: coordinator(nodes[0].kafka, "g"), "a coordinator")
        mine = _form(owner, t_id)

        (dead,) = [n for n in nodes if n.kafka == owner]
        (survivor,) = [n for n in nodes if n.kafka != owner]
        (elsewhere,) = asyncio.run(_heartbeats(survivor.kafka, _full("a", 2, t_id, mine)))
        assert elsewhere.error_code == NOT_COORDINATOR  # not its shard (yet)
        # the answers waited for etcd (docs/consumer-protocol.md): it holds what they said
        assert asyncio.run(_kept_epochs(etcd)) == {"a": 2, "b": 2}
        dead.proc.send_signal(signal.SIGKILL)  # by its PID
        dead.proc.wait(timeout=WAIT_S)
        wait_until_sync(
            lambda: coordinator(survivor.kafka, "g") == survivor.kafka, "the survivor serves g"
        )
        a, b = asyncio.run(
            _heartbeats(survivor.kafka, _full("a", 2, t_id, mine), _full("b", 2, t_id, ALL - mine))
        )
    assert (a.error_code, a.member_epoch, _owned(a, t_id)) == (NONE, 2, mine)
    assert (b.error_code, b.member_epoch, _owned(b, t_id)) == (NONE, 2, ALL - mine)


@pytest.mark.e2e
def test_an_emptied_group_is_served_at_its_epoch_after_a_failover(
    etcd: Etcd, tmp_path: Path
) -> None:
    """Both members leave (the group epoch moves to 4) and the coordinator is killed: the
    node taking its shard over serves the empty group at epoch 4, so a member fenced
    meanwhile is told UNKNOWN_MEMBER_ID (it rejoins; GROUP_ID_NOT_FOUND would be fatal for
    librdkafka) and rejoins at epoch 4, not at a group made anew at epoch 1."""
    with kafka_cluster(etcd, tmp_path / "nodes", count=2) as cluster:
        nodes = cluster.nodes
        asyncio.run(_create_topic(nodes[0].port))
        wait_until_sync(lambda: all(_topic_id(n.kafka) for n in nodes), "t on both nodes")
        t_id = _topic_id(nodes[0].kafka)
        assert t_id is not None
        owner = wait_until_sync(lambda: coordinator(nodes[0].kafka, "g"), "a coordinator")
        mine = _form(owner, t_id)
        left = asyncio.run(_heartbeats(owner, _beat("a", -1), _beat("b", -1)))
        assert [r.error_code for r in left] == [NONE, NONE]
        assert asyncio.run(_kept_epochs(etcd)) == {}  # no member left, the group is kept
        (dead,) = [n for n in nodes if n.kafka == owner]
        (survivor,) = [n for n in nodes if n.kafka != owner]
        dead.proc.send_signal(signal.SIGKILL)  # by its PID
        dead.proc.wait(timeout=WAIT_S)
        wait_until_sync(
            lambda: coordinator(survivor.kafka, "g") == survivor.kafka, "the survivor serves g"
        )
        late, again = asyncio.run(
            _heartbeats(survivor.kafka, _full("a", 2, t_id, mine), _join("a", "t"))
        )
    assert late.error_code == UNKNOWN_MEMBER_ID
    assert (again.error_code, again.member_epoch, _owned(again, t_id)) == (NONE, 4, ALL)


async def _kept_epochs(etcd: Etcd) -> dict[str, int]:
    """The member epochs etcd holds for group g."""
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        found = await store.get_prefix(
            f"{PREFIX}/consumer-groups/{shard_of('g', SHARDS)}/".encode()
        )
    finally:
        await store.close()
    records = [_decode(e.value) for e in found.values()]
    return {r.member_id: r.member_epoch for r in records if isinstance(r, ConsumerMemberRecord)}


def _topic_id(kafka_port: int) -> uuid.UUID | None:
    answer = metadata(kafka_port, "t")
    if answer is None or not answer.topics or answer.topics[0].error_code:
        return None
    topic_id: uuid.UUID = answer.topics[0].topic_id
    return topic_id


def wait_until_sync(check: Callable[[], Any], what: str) -> Any:
    """``check()``'s first true value, polled until ``WAIT_S`` (each check asks the nodes,
    so it runs its own loop: it cannot run inside one)."""
    deadline = time.monotonic() + WAIT_S
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}")
        time.sleep(0.05)
    return value
