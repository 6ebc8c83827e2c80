"""The topics watch of a cluster node: a busy one is not taken for stalled, and one started
again goes on from where it was, never replaying old changes (a deletion of a topic created
again since would drop the offsets committed to the new one, and members would be told of
old changes again)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from structlog.typing import EventDict

from huddle.client import Admin
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.running import ClusterRun
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.core import Coordinator
from huddle.coordinator.supervisor import supervise
from huddle.protocol.embedded import TopicPartition
from tests.etcd import Etcd, etcd
from tests.helpers import eventually, serve_process, wait_until

__all__ = ["etcd"]  # the fixture


async def _nothing() -> None:
    return None


def _restarted(logs: list[EventDict]) -> bool:
    return any(e["event"] == "task_died" for e in logs)


async def test_a_busy_topics_watch_is_not_started_again_nor_replayed(
    etcd: Etcd, logs: list[EventDict]
) -> None:
    """Another node changes a topic more often than the watch's stall time: every change
    is progress. A watch started again goes on from the last change it delivered: each
    change reaches the core once."""
    store = await EtcdStore.connect([etcd.endpoint])
    other = await EtcdStore.connect([etcd.endpoint])
    core = Coordinator()
    node = ClusterNode(store, node_id="n1", advertise="127.0.0.1:9001", shards=2, prefix="/busy")
    serving = ClusterServing(
        core, store, node, now=time.monotonic, dispatch=lambda out: None, drain=_nothing
    )
    await serving.topics.load()
    run = ClusterRun(store, node, serving)
    supervised = asyncio.create_task(supervise("topics watch", run._follow_topics, stall_s=1.0))
    try:
        began = core.sessions.topics_version
        made = 0

        def applied(count: int) -> Callable[[], bool]:
            return lambda: core.sessions.topics_version - began == count

        while made < 8:  # a change every 0.3 s (pacing), for 2.4 s: past the stall time
            await other.put(f"/busy/topics/x{made}".encode(), b"1")
            made += 1
            await wait_until(applied(made), what="the change applied")
            await asyncio.sleep(0.3)
        assert [e for e in logs if e["event"] in ("task_stalled", "task_died")] == []
        # the watch dies (a bare CancelledError from inside, as gRPC ends a call): its
        # supervisor starts it again, and it goes on from where it was
        (body,) = [t for t in asyncio.all_tasks() if t.get_name() == "huddle topics watch"]
        body.cancel()
        await wait_until(lambda: _restarted(logs), what="the watch started again")
        await other.put(b"/busy/topics/late", b"2")
        await wait_until(lambda: "late" in core.topics.partitions, what="the next change")
        assert set(core.topics.partitions) == {f"x{i}" for i in range(made)} | {"late"}
        assert core.sessions.topics_version - began == made + 1  # none replayed
    finally:
        supervised.cancel()
        await asyncio.gather(supervised, return_exceptions=True)
        await other.close()
        await store.close()


@pytest.mark.e2e
async def test_a_busy_topics_watch_keeps_the_offsets_of_a_re_created_topic(etcd: Etcd) -> None:
    """A deployment creating a topic every 0.7 s for 20 s: the node's topics watch used to
    be taken for stalled after 16 s and started again from the revision the node started
    at, replaying the deletion of a topic created again since: its offsets vanished."""
    flags = ["--cluster", f"etcd://{etcd.host}:{etcd.port}", "--shards", "1"]
    async with serve_process(*flags, "--cluster-prefix", "/busy") as (_, port, events):
        bootstrap = f"127.0.0.1:{port}"

        async def up() -> bool:
            try:
                async with Admin(bootstrap) as admin:
                    await admin.committed_offsets("g")
            except Exception:
                return False
            return True

        await eventually(up, wait_s=30, what="the node serves")
        async with Admin(bootstrap, timeout=30) as admin:
            await admin.create_topic("t", 1)
            await admin.delete_topic("t")
            await admin.create_topic("t", 1)
            await admin.set_offsets("g", {TopicPartition("t", 0): 7})
            began = time.monotonic()
            i = 0
            while time.monotonic() - began < 20:  # pacing, not waiting
                await admin.create_topic(f"x{i}", 1)
                i += 1
                await asyncio.sleep(0.7)
            stalls = [e for e in events if e["event"] == "task_stalled"]
            assert await admin.committed_offsets("g") == {TopicPartition("t", 0): 7}, stalls
            assert stalls == []
