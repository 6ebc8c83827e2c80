"""A write abandoned at its deadline may still reach etcd later, after writes made since: it
must never change anything then. A node's link to etcd holds the bytes of the connection
open now (one direction; TCP segments retransmitted long after the sender gave up), the
node connects again, and the held bytes reach etcd at the end."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from huddle.client import Admin
from huddle.client.connection import connect
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.offsets import kept_offsets
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.store import EtcdStore, StoreTimeoutError
from huddle.coordinator.core import Coordinator
from huddle.coordinator.storage.records import OffsetRecord
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    CreateTopicsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    Request,
    TopicSpec,
)
from tests.cluster.late_link import LateLink
from tests.etcd import Etcd, etcd
from tests.helpers import eventually, serve_process, wait_until

__all__ = ["etcd"]  # the fixture


async def _ask(port: int, request: Request) -> int:
    """The error code of ``request``'s answer (NONE: done)."""
    async with connect(f"127.0.0.1:{port}", notices=False) as conn:
        answer = await conn.request(request, timeout=20)
    if isinstance(answer, OffsetCommitResponse):
        return int(answer.error_code or answer.topics[0].partitions[0].error_code)
    return int(getattr(answer, "error_code", -1))


_EPOCH_EVENTS = ("shard_taken", "shard_epoch_renewed")  # a serving's first, and renewed


def _commit(offset: int) -> OffsetCommitRequest:
    partition = OffsetCommitPartition(partition=0, offset=offset)
    return OffsetCommitRequest(
        group_id="g", topics=[OffsetCommitTopic(name="t", partitions=[partition])]
    )


def _joined(events: list[dict[str, Any]]) -> bool:
    return any(e["event"] == "cluster_node_started" for e in events)


async def _serves(port: int) -> bool:
    try:
        async with Admin(f"127.0.0.1:{port}") as admin:
            await admin.list_topics()
    except Exception:
        return False
    return True


async def _committed(port: int, offset: int) -> bool:
    try:
        return await _ask(port, _commit(offset)) == ErrorCode.NONE
    except Exception:
        return False


@pytest.mark.e2e
async def test_an_abandoned_commit_never_sets_an_acknowledged_one_back(etcd: Etcd) -> None:
    """The commit's fenced write times out, the node connects again and goes on serving
    the shard, with its lease; a newer commit is acknowledged. The abandoned write then
    lands: under the epoch the shard was served under, it used to set the offset back (etcd
    held 10 after 20 was acknowledged, and every later load served 10). The epoch is renewed
    before anything is written under it again (the commit made again under the new one)."""
    link = await LateLink(etcd.endpoint).start()
    direct = await EtcdStore.connect([etcd.endpoint])
    flags = ["--cluster", f"etcd://127.0.0.1:{link.port}", "--shards", "1"]
    flags += ["--lease-ttl-s", "10", "--cluster-prefix", "/late"]
    try:
        async with serve_process(*flags) as (_, port, events):
            await eventually(lambda: _serves(port), wait_s=30, what="the node serves")
            async with Admin(f"127.0.0.1:{port}") as admin:
                await admin.create_topic("t", 1)
            await eventually(lambda: _committed(port, 1), what="commit 1")
            link.delay()
            await _ask(port, _commit(10))  # acknowledged once written again, or not
            await eventually(lambda: _committed(port, 20), wait_s=30, what="commit 20 acked")
            epochs = [e["epoch"] for e in events if e["event"] in _EPOCH_EVENTS]
            assert len(set(epochs)) == len(epochs) == 2, epochs  # never one epoch twice
            link.deliver(early_s=1.0)
            await wait_until(lambda: link.answered_late > 0, what="etcd answered the late bytes")
            offset = (await kept_offsets(direct, "/late"))["g", "t", 0].offset
            assert offset == 20, f"acknowledged 20, etcd holds {offset} (epochs {epochs})"
    finally:
        await direct.close()
        await link.close()


async def test_a_fenced_write_that_timed_out_is_not_made_again_elsewhere(etcd: Etcd) -> None:
    """Two endpoints (two links to one etcd): a fenced write that times out on the first
    used to be made again on the second and acknowledged; the first copy, landing after a
    later write, set the value back. Its outcome is unknown now, said so to the caller, who
    moves the epoch on (as a node does) before it writes again."""
    a, b = await LateLink(etcd.endpoint).start(), await LateLink(etcd.endpoint).start()
    store = await EtcdStore.connect([("127.0.0.1", a.port), ("127.0.0.1", b.port)], timeout_s=2)
    direct = await EtcdStore.connect([etcd.endpoint])
    owner, value = b"/two/shards/0", b"/two/offset"
    try:
        lease = await direct.grant(60)
        epoch = await direct.claim(owner, b"n1", lease)
        assert epoch is not None
        assert await store.write_fenced(owner, epoch, {value: b"10"})
        a.delay()
        with pytest.raises(StoreTimeoutError):
            await store.write_fenced(owner, epoch, {value: b"20"})
        renewed = await store.renew(owner, b"n1", epoch, lease)  # on the other endpoint
        assert renewed is not None
        assert renewed > epoch
        assert store.endpoint == ("127.0.0.1", b.port)
        assert await store.write_fenced(owner, renewed, {value: b"30"})
        a.deliver(early_s=1.0)
        await wait_until(lambda: a.answered_late > 0, what="etcd answered the late bytes")
        kept = await direct.get(value)
        assert kept is not None
        assert kept.value == b"30"
    finally:
        await store.close()
        await direct.close()
        await a.close()
        await b.close()


@pytest.mark.e2e
async def test_an_abandoned_topic_creation_never_brings_a_deleted_topic_back(
    etcd: Etcd,
) -> None:
    """A creation whose write timed out (not acknowledged), then the topic created and
    deleted (both acknowledged): the first creation landing late used to bring the deleted
    topic back in etcd, for every node. Topic changes are compare-and-set on revisions that
    any later change moves."""
    link = await LateLink(etcd.endpoint).start()
    direct = await EtcdStore.connect([etcd.endpoint])
    flags = ["--cluster", f"etcd://127.0.0.1:{link.port}", "--shards", "1"]
    flags += ["--lease-ttl-s", "10", "--cluster-prefix", "/latetopic"]
    create = CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=3)])
    try:
        async with serve_process(*flags) as (_, port, events):
            # the node listens before it joins: etcd held up during the join ends it
            await wait_until(lambda: _joined(events), wait_s=30, what="the node joined")
            async with Admin(f"127.0.0.1:{port}", timeout=30) as admin:
                await admin.create_topic("joined", 1)
            link.delay()
            assert await _ask(port, create) != ErrorCode.NONE  # not acknowledged
            async with Admin(f"127.0.0.1:{port}", timeout=30) as admin:
                await admin.create_topic("t", 2)
                await admin.delete_topic("t")
            link.deliver(early_s=1.0)
            await wait_until(lambda: link.answered_late > 0, what="etcd answered the late bytes")
            assert await direct.get(b"/latetopic/topics/t") is None
            async with Admin(f"127.0.0.1:{port}") as admin:
                assert await admin.list_topics() == {"joined": 1}
    finally:
        await direct.close()
        await link.close()


@pytest.mark.e2e
async def test_etcd_held_up_while_a_node_joins_is_a_clear_error_at_start(etcd: Etcd) -> None:
    """The node listens before it joins the cluster; an etcd that stops answering during
    the join ends it as one that cannot be reached does: exit code 1, the reason last, no
    traceback (the test above once delayed etcd that early, and lost its node)."""
    link = await LateLink(etcd.endpoint).start()
    flags = ["--cluster", f"etcd://127.0.0.1:{link.port}", "--cluster-prefix", "/joining"]
    try:
        async with serve_process(*flags) as (process, _, events):
            await wait_until(lambda: link.connections > 0, what="the node reached etcd")
            link.delay()
            assert await asyncio.wait_for(process.wait(), 30) == 1
        last = events[-1]  # etcd held up while connecting, or during the join after it
        assert last["event"] == "stderr"
        assert last["line"] in (
            "huddle: etcd did not answer within 3 s",
            f"huddle: no etcd endpoint answered: 127.0.0.1:{link.port}: CallTimeoutError",
        )
        assert not any("Traceback" in e.get("line", "") for e in events)
    finally:
        await link.close()


async def test_a_commit_whose_write_outcome_is_unknown_is_written_again_renewed(
    etcd: Etcd,
) -> None:
    """The write reached etcd, but its answer did not reach the node (a deadline passed):
    the shard's epoch is renewed and the write made again under the new one, so the commit
    is acknowledged and the shard goes on being served, loaded nowhere again."""

    class AnswerLost(EtcdStore):
        lost = 1

        async def write_fenced_all(self, *args: Any, **kwargs: Any) -> list[bytes]:
            written = await super().write_fenced_all(*args, **kwargs)
            if self.lost:
                self.lost -= 1
                raise StoreTimeoutError("etcd did not answer within 3 s")
            return written

    store = await AnswerLost.connect([etcd.endpoint])
    try:
        node = ClusterNode(store, node_id="n1", advertise="127.0.0.1:1", shards=1, prefix="/lost")
        serving = ClusterServing(
            Coordinator(), store, node, now=time.monotonic, dispatch=lambda out: None,
            drain=_nothing,
        )  # fmt: skip
        await store.put(b"/lost/topics/t", b"1")
        await serving.topics.load()
        await node.register()
        await node.reconcile()
        epoch = node.epoch(0)
        assert epoch is not None
        assert await serving.write([serving.stamp(OffsetRecord("g", "t", 0, 42))])
        renewed = node.epoch(0)
        assert renewed is not None
        assert renewed > epoch
        assert serving.loads == 1  # served all along
        assert (await kept_offsets(store, "/lost"))["g", "t", 0].offset == 42
        await node.leave()
    finally:
        await store.close()


async def _nothing() -> None:
    return None
