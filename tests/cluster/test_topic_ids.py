"""Topic ids in a coordinator cluster: the id a topic is created with is kept in etcd
(``P/topic-ids/<name>``), so every node, a node started again and a failover give it the
same one; a topic deleted and created again gets a new one; a topic an older version
created (no id in etcd) gets the same derived id on every node."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.core import Coordinator, Peer
from huddle.coordinator.topic_ids import derived_topic_id
from huddle.protocol.messages import (
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ListTopicsRequest,
    ListTopicsResponse,
    Reply,
    Request,
    TopicMetadataChanged,
    TopicSpec,
)
from tests.etcd import Etcd, etcd
from tests.helpers import wait_until

__all__ = ["etcd"]  # the fixture

PREFIX = "/ids"
ADMIN = Peer(1, "admin", "127.0.0.1")


async def _nothing() -> None:
    return None


class Node:
    """A cluster node's core and its view of etcd's topics (no listener)."""

    def __init__(self, store: EtcdStore, name: str) -> None:
        self.core = Coordinator()
        self.sent: list[object] = []
        node = ClusterNode(store, node_id=name, advertise="127.0.0.1:1", shards=2, prefix=PREFIX)
        self.serving = ClusterServing(
            self.core,
            store,
            node,
            now=time.monotonic,
            dispatch=lambda out: self.sent.extend(frame for _, frame in out),
            drain=_nothing,
        )

    async def change(self, request: Request) -> None:
        self.core.handle(ADMIN, 1, request, 0.0)
        assert await self.serving.write([self.serving.stamp(r) for r in self.core.take_changes()])

    def listed(self) -> dict[str, uuid.UUID | None]:
        (out,) = self.core.handle(ADMIN, 2, ListTopicsRequest(), 0.0)
        assert isinstance(out[1], Reply)
        assert isinstance(out[1].response, ListTopicsResponse)
        return {t.name: t.topic_id for t in out[1].response.topics}


@asynccontextmanager
async def watching(node: Node) -> AsyncIterator[Node]:
    await node.serving.topics.load()
    watch = asyncio.create_task(node.serving.topics.watch())
    try:
        yield node
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)


async def test_every_node_and_a_node_started_again_give_a_topic_the_same_id(
    etcd: Etcd,
) -> None:
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        a = Node(store, "a")
        async with watching(a), watching(Node(store, "b")) as b:
            await a.change(CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]))
            first = a.core.topics.ids["t"]
            await wait_until(lambda: b.listed() == {"t": first}, what="b has t with its id")
            # b's members were told of t with its id
            told = [f for f in b.sent if isinstance(f, TopicMetadataChanged)]
            assert all(t.topic_id == first for f in told for t in f.topics)

            await b.change(DeleteTopicsRequest(topics=["t"]))
            await wait_until(lambda: a.listed() == {}, what="a sees t deleted")
            await b.change(CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]))
            second = b.core.topics.ids["t"]
            assert second != first
            await wait_until(lambda: a.listed() == {"t": second}, what="a has the new id")
            kept = await store.get(f"{PREFIX}/topic-ids/t".encode())
            assert kept is not None
            assert kept.value == str(second).encode()
        again = Node(store, "a")  # a started again (or a node taking over): etcd's id
        await again.serving.topics.load()
        assert again.listed() == {"t": second}
    finally:
        await store.close()


async def test_a_topic_created_without_an_id_gets_the_same_derived_one_everywhere(
    etcd: Etcd,
) -> None:
    """A topic created by a version that kept no ids in etcd (its key alone)."""
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        await store.put(f"{PREFIX}/topics/old".encode(), b"3")
        entries, _ = await store.read_prefix(f"{PREFIX}/topics/old".encode())
        created = next(iter(entries.values())).created
        a, b = Node(store, "a"), Node(store, "b")
        await a.serving.topics.load()
        await b.serving.topics.load()
        assert a.listed() == b.listed() == {"old": derived_topic_id("old", created)}
        again = Node(store, "a")
        await again.serving.topics.load()
        assert again.listed() == a.listed()
    finally:
        await store.close()
