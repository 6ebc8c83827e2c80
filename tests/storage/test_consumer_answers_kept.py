"""A consumer-protocol heartbeat (KIP-848) is answered only once the records it made (the
member's epoch, its assignment) are kept, as the classic protocol's answers: on huddle's
wire and on the Kafka listener alike. A data dir whose write hangs holds the answer; with
``--fsync`` it comes after the fsync; a write that fails is answered KAFKA_STORAGE_ERROR,
never a member epoch the data dir does not hold. A cluster node's answer waits for etcd."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Final

import msgspec
import pytest

from huddle.client.connection import connect
from huddle.client.member import Member
from huddle.coordinator.cluster.keeper import Stamped
from huddle.coordinator.cluster.oversized import PartlyKept
from huddle.coordinator.cluster.running import ClusterRun
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.connection import Connection
from huddle.coordinator.effects import Outgoing
from huddle.coordinator.held import not_kept
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.storage.records import ConsumerGroupRecord, ConsumerMemberRecord
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    Call,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ErrorResponse,
)
from tests.client.test_consumer_member import _topic
from tests.coordinator.test_consumer_wire import _join as huddle_join
from tests.etcd import Etcd, etcd
from tests.helpers import fast_server_config, running_server, wait_until, within
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _join
from tests.storage.test_group_commit import GatedWrite

__all__ = ["etcd"]  # the fixture

WIRES: Final = ["huddle", "kafka"]
_KEPT = ConsumerGroupRecord | ConsumerMemberRecord


async def _heartbeat(wire: str, server: CoordinatorServer, kafka_port: int) -> tuple[int, int]:
    """Member a joins group g (topic t) on ``wire``: (error code, member epoch)."""
    if wire == "kafka":
        async with RawKafka(kafka_port) as conn:
            answer = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        return answer.error_code, answer.member_epoch
    async with connect(f"127.0.0.1:{server.port}") as conn:
        response = await conn.request(huddle_join("a", "t"), timeout=10)
    if isinstance(response, ErrorResponse):
        return response.error_code, -1
    assert isinstance(response, ConsumerHeartbeatResponse)
    return response.error_code, response.member_epoch


def _held(server: CoordinatorServer, wire: str) -> int:
    """Answers the server holds for the keeper, on ``wire``'s connections."""
    return sum(c.held for c in server.connections() if c.wire.listener == wire)


@pytest.mark.parametrize("wire", WIRES)
async def test_a_heartbeat_is_answered_once_its_records_are_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wire: str, logs: object
) -> None:
    config = fast_server_config(data_dir=str(tmp_path), fsync=True)
    order: list[str] = []
    async with running_server(config) as server:
        kafka = await listen_kafka(server, "127.0.0.1", 0)
        await _topic(f"127.0.0.1:{server.port}", 4)
        commits = server.commits
        assert commits is not None
        gate = GatedWrite()
        real_sync = os.fdatasync

        def synced(fd: int) -> None:
            real_sync(fd)
            order.append("fsync")

        monkeypatch.setattr(os, "pwrite", gate)
        monkeypatch.setattr(os, "fdatasync", synced)

        async def join() -> tuple[int, int]:
            answer = await _heartbeat(wire, server, kafka.port)
            order.append("answered")
            return answer

        joined = asyncio.create_task(join())
        try:
            await gate.started()  # the heartbeat's records are being written: it hangs
            await wait_until(lambda: commits.waiting() > 0, what="the write to hold a request")
            assert _held(server, wire) == 1  # the answer waits for the write
            assert not joined.done()
        finally:
            gate.release.set()
        assert await within(joined) == (ErrorCode.NONE, 1)
    assert order == ["fsync", "answered"]
    async with running_server(config) as server:  # what was answered was kept
        member = server.consumer.core.groups["g"].members["a"]
        assert member.member_epoch == 1


@pytest.mark.parametrize("wire", WIRES)
async def test_a_heartbeat_whose_records_are_not_kept_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wire: str, logs: object
) -> None:
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server:
        kafka = await listen_kafka(server, "127.0.0.1", 0)
        await _topic(f"127.0.0.1:{server.port}", 4)
        gate = GatedWrite(fail=True)
        gate.release.set()
        monkeypatch.setattr(os, "pwrite", gate)
        answer = await within(_heartbeat(wire, server, kafka.port))
        assert answer == (ErrorCode.KAFKA_STORAGE_ERROR, -1)  # no epoch given
        await within(server.wait_closed())  # the data dir failed: the coordinator stopped
    monkeypatch.undo()
    async with running_server(config) as server:
        assert "g" not in server.consumer.core.groups


async def test_a_member_retries_a_heartbeat_whose_change_a_cluster_did_not_keep() -> None:
    """A cluster node answers a heartbeat whose records etcd did not take NOT_COORDINATOR,
    in an ErrorResponse (``held.not_kept``): huddle's member sends it again after a backoff
    (as for that code in a heartbeat's answer), it does not fail."""
    async with running_server(fast_server_config()) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        serve = server.requests.beside[ConsumerHeartbeatRequest]
        refused: list[int] = []

        def not_kept_once(conn: Connection, call: Call) -> list[Outgoing] | None:
            if refused:
                return serve(conn, call)
            refused.append(call.correlation_id)
            return [(conn.conn_id, not_kept(call.correlation_id, clustered=True))]

        server.requests.beside[ConsumerHeartbeatRequest] = not_kept_once
        member = Member(bootstrap, group_id="g", topics=["t"], group_protocol="consumer")
        async with member:
            await within(member.wait_stable())
            assert len(member.assignment) == 2
        assert refused


async def test_a_cluster_node_answers_a_heartbeat_once_etcd_holds_its_records(
    etcd: Etcd, monkeypatch: pytest.MonkeyPatch, logs: object
) -> None:
    """The etcd write of the heartbeat's records hangs: no answer; once it is written, the
    answer leaves, and etcd already holds the member at the epoch it was told."""
    config = fast_server_config(
        cluster=f"etcd://{etcd.host}:{etcd.port}", shards=1, cluster_prefix="/answers-kept"
    )
    began, release = asyncio.Event(), asyncio.Event()
    write = ClusterServing.write

    async def held_write(serving: ClusterServing, records: list[Stamped]) -> bool | PartlyKept:
        if any(isinstance(record, ConsumerMemberRecord) for record, _ in records):
            began.set()
            await release.wait()
        return await write(serving, records)

    monkeypatch.setattr(ClusterServing, "write", held_write)
    async with running_server(config) as server:
        run = await ClusterRun.start(server)
        try:
            await wait_until(lambda: run.node.serves(0), what="the node to serve its shard")
            await _topic(f"127.0.0.1:{server.port}", 4)
            joined = asyncio.create_task(_heartbeat("huddle", server, 0))
            try:
                await within(began.wait())
                assert _held(server, "huddle") == 1  # the answer waits for etcd
                assert not joined.done()
            finally:
                release.set()
            assert await within(joined) == (ErrorCode.NONE, 1)
            records = await run.store.get_prefix(b"/answers-kept/consumer-groups/0/")
            kept = [msgspec.msgpack.decode(e.value, type=_KEPT) for e in records.values()]
            epochs = {
                r.member_id: r.member_epoch for r in kept if isinstance(r, ConsumerMemberRecord)
            }
            assert epochs == {"a": 1}
        finally:
            await run.stop()
