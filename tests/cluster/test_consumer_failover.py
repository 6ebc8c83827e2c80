"""A consumer-protocol group (KIP-848) in a two-node cluster over one real etcd: the node
coordinating it is killed with SIGKILL (the other node refused its heartbeats until then:
NOT_COORDINATOR), the other node takes its shard over from etcd
(``P/consumer-groups/<shard>/...``), and the members' heartbeats at their epochs are
accepted there, with the partitions they had: no epoch moves. Their answers waited for etcd:
it holds every epoch a member was answered. An emptied group is served on at its epoch; a
deleted one is not served again."""

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

NONE, NOT_COORDINATOR, UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND = 0, 16, 25, 69
ALL: Final = {0, 1, 2, 3}


async def _heartbeats(port: int, *beats: dict[str, Any]) -> list[Any]:
    return await _calls(port, *((Api.CONSUMER_GROUP_HEARTBEAT, 1, beat) for beat in beats))


async def _calls(port: int, *calls: tuple[Api, int, dict[str, Any]]) -> list[Any]:
    """The answers to these (api, version, fields) calls, one after another."""
    async with RawKafka(port) as conn:
        return [
            await conn.call(api, version, i, **fields)
            for i, (api, version, fields) in enumerate(calls, 1)
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
    late, again = _emptied_then_failed_over(etcd, tmp_path, delete=False)
    assert late.error_code == UNKNOWN_MEMBER_ID
    assert (again.error_code, again.member_epoch) == (NONE, 4)


@pytest.mark.e2e
def test_a_deleted_consumer_group_stays_deleted_after_a_failover(
    etcd: Etcd, tmp_path: Path
) -> None:
    """DeleteGroups of the emptied group, then the coordinator killed: etcd holds none of its
    records, so the next node does not serve it: GROUP_ID_NOT_FOUND, and a join makes the
    group anew at epoch 1."""
    late, again = _emptied_then_failed_over(etcd, tmp_path, delete=True)
    assert late.error_code == GROUP_ID_NOT_FOUND
    assert (again.error_code, again.member_epoch) == (NONE, 1)


def _emptied_then_failed_over(etcd: Etcd, tmp_path: Path, *, delete: bool) -> list[Any]:
    """Group g formed, emptied (and deleted, if ``delete``), its coordinator killed: the
    answers of the node taking it over to a's heartbeat at its old epoch 2, then a's join."""
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
        assert asyncio.run(_kept_epochs(etcd)) == {}  # no member left
        assert asyncio.run(_kept_group(etcd)) == 4  # the emptied group is kept
        if delete:
            (deleted,) = asyncio.run(_calls(owner, (Api.DELETE_GROUPS, 2, {"groups_names": ["g"]})))
            assert [r.error_code for r in deleted.results] == [NONE]
            assert asyncio.run(_kept_group(etcd)) is None
        (dead,) = [n for n in nodes if n.kafka == owner]
        (survivor,) = [n for n in nodes if n.kafka != owner]
        dead.proc.send_signal(signal.SIGKILL)  # by its PID
        dead.proc.wait(timeout=WAIT_S)
        wait_until_sync(
            lambda: coordinator(survivor.kafka, "g") == survivor.kafka, "the survivor serves g"
        )
        return asyncio.run(_heartbeats(survivor.kafka, _full("a", 2, t_id, mine), _join("a", "t")))


async def _kept_epochs(etcd: Etcd) -> dict[str, int]:
    """The member epochs etcd holds for group g."""
    records = await _kept(etcd)
    return {r.member_id: r.member_epoch for r in records if isinstance(r, ConsumerMemberRecord)}


async def _kept_group(etcd: Etcd) -> int | None:
    """The group epoch etcd holds for group g (None: no group record)."""
    epochs = [r.group_epoch for r in await _kept(etcd) if isinstance(r, ConsumerGroupRecord)]
    return epochs[0] if epochs else None


async def _kept(etcd: Etcd) -> list[ConsumerGroupRecord | ConsumerMemberRecord]:
    """The records etcd holds for group g's shard."""
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        found = await store.get_prefix(
            f"{PREFIX}/consumer-groups/{shard_of('g', SHARDS)}/".encode()
        )
    finally:
        await store.close()
    return [_decode(e.value) for e in found.values()]


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
