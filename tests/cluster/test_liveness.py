"""A cluster node never stops serving for good: etcd frozen past the lease, a link to etcd
that died without a reset, a write that never ends. And a shard taken while the topics watch
lags keeps the offsets of topics the node has not heard of yet."""

from __future__ import annotations

import asyncio
import math
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from urllib.parse import quote

import msgspec
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.typing import EventDict

from huddle.chaos.proxy import fault_proxy
from huddle.coordinator.cluster.keeper import EtcdKeeper, Held, Stamped
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import Change, EtcdStore
from huddle.coordinator.core import Coordinator
from huddle.coordinator.metrics import CoordinatorMetrics
from huddle.coordinator.storage.records import OffsetRecord
from huddle.protocol.messages import DescribeClusterResponse, NodeLiveness
from tests.etcd import Etcd, etcd
from tests.helpers import wait_until

__all__ = ["etcd"]  # the fixture

TTL_S = 2
STORE_S = 3.0  # every etcd call's deadline, as a node runs (cluster.running)
SHARDS = 6
# every shard served again within the lease TTL and this, once etcd answers again
SLACK_S = 5.0


@asynccontextmanager
async def running(store: EtcdStore, prefix: str) -> AsyncIterator[ClusterNode]:
    node = ClusterNode(
        store, node_id="n1", advertise="127.0.0.1:9001", shards=SHARDS, prefix=prefix,
        ttl_s=TTL_S,
    )  # fmt: skip
    await node.register()
    task = asyncio.create_task(node.run())
    try:
        await wait_until(lambda: len(node.owned()) == SHARDS, what="every shard served")
        yield node
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        with suppress(Exception):  # etcd may be away: its lease expires by itself then
            await asyncio.wait_for(node.leave(), TTL_S)


async def test_a_node_serves_again_after_etcd_froze_past_its_lease(
    etcd: Etcd, logs: list[EventDict]
) -> None:
    """A keep-alive in flight when etcd froze used to end the node's loops for good (its
    deadline surfaced as a bare CancelledError): no refresh, no reconcile, no log, ever."""
    store = await EtcdStore.connect([etcd.endpoint], timeout_s=TTL_S)
    try:
        async with running(store, "/frozen") as node:
            etcd.process.send_signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            try:
                await wait_until(lambda: node.owned() == {}, what="the node fences itself")
                await wait_until(
                    lambda: time.monotonic() - frozen_at > TTL_S + 1.5,
                    what="etcd frozen past the lease",
                )
            finally:
                etcd.process.send_signal(signal.SIGCONT)
            await wait_until(
                lambda: len(node.owned()) == SHARDS,
                wait_s=TTL_S + SLACK_S,
                what="every shard served again",
            )
            liveness = node.liveness()
            assert liveness.lease_refreshed_s_ago is not None
            assert liveness.lease_refreshed_s_ago < TTL_S
            assert liveness.reconciled_s_ago is not None
            assert liveness.reconciled_s_ago < TTL_S
    finally:
        await store.close()
    said = {e["event"] for e in logs}
    assert {"lease_refresh_failed", "shards_fenced"} <= said


async def test_a_link_to_etcd_that_died_silently_is_left_for_a_new_one(etcd: Etcd) -> None:
    """Every open connection between the node and etcd frozen for good (packets dropped,
    no reset): calls time out, then the store connects again; a watch on the dead link is
    made again on the new one and misses nothing."""
    direct = await EtcdStore.connect([etcd.endpoint])
    async with fault_proxy(*etcd.endpoint) as proxy:
        store = await EtcdStore.connect([("127.0.0.1", proxy.port)], timeout_s=TTL_S)
        try:
            async with running(store, "/silent") as node:
                _, revision = await store.read_prefix(b"/silent/watched/")
                seen: list[Change] = []

                async def watch() -> None:
                    async for change in store.watch_prefix(b"/silent/watched/", revision + 1):
                        seen.append(change)

                watching = asyncio.create_task(watch())
                try:
                    await direct.put(b"/silent/watched/a", b"1")
                    await wait_until(lambda: len(seen) == 1, what="a change through the link")
                    assert proxy.abandon() > 0
                    await direct.put(b"/silent/watched/b", b"2")
                    await wait_until(
                        lambda: [c.key for c in seen][-1:] == [b"/silent/watched/b"],
                        wait_s=TTL_S + SLACK_S,
                        what="the change made after the link died",
                    )
                    assert [c.key for c in seen] == [b"/silent/watched/a", b"/silent/watched/b"]
                    await wait_until(
                        lambda: len(node.owned()) == SHARDS,
                        wait_s=TTL_S + SLACK_S,
                        what="every shard served on the new connection",
                    )
                    assert store.reconnects >= 1
                finally:
                    watching.cancel()
                    await asyncio.gather(watching, return_exceptions=True)
        finally:
            await store.close()
            await direct.close()


@pytest.mark.parametrize("ttl_s", [2, 3])
async def test_a_link_to_etcd_dropping_the_node_s_packets_does_not_cost_its_lease(
    etcd: Etcd, logs: list[EventDict], ttl_s: int
) -> None:
    """The node's connection to etcd drops what the node sends (one way, no reset): a
    keep-alive unanswered for a sixth of the TTL marks it suspect and a second one goes on
    a new connection, in time to keep the lease. Before, the keep-alive's deadline (two
    thirds of the TTL) passed without the connection being suspected, the next one went
    down the same dead link, and the node always lost its lease: every shard moved away
    and back for a fault a new connection fixes at once."""
    direct = await EtcdStore.connect([etcd.endpoint])
    prefix = f"/oneway{ttl_s}"
    async with fault_proxy(*etcd.endpoint) as proxy:
        store = await EtcdStore.connect([("127.0.0.1", proxy.port)], timeout_s=STORE_S)
        node = ClusterNode(
            store, node_id="n1", advertise="127.0.0.1:9001", shards=SHARDS, prefix=prefix,
            ttl_s=ttl_s,
        )  # fmt: skip
        await node.register()
        assert node.lease is not None
        lease = node.lease.id
        task = asyncio.create_task(node.run())
        try:
            await wait_until(lambda: len(node.owned()) == SHARDS, what="every shard served")
            assert proxy.abandon(one_way=True) > 0
            dropped_at = time.monotonic()
            await wait_until(lambda: store.reconnects >= 1, what="a new connection")
            await wait_until(
                lambda: time.monotonic() - dropped_at > ttl_s + 1.0,
                wait_s=ttl_s + SLACK_S,
                what="the lease's TTL and a second past the drop",
            )
            await wait_until(
                lambda: len(node.owned()) == SHARDS,
                wait_s=ttl_s + SLACK_S,
                what="every shard served",
            )
            assert node.lease is not None
            assert node.lease.id == lease
            owners = await direct.get_prefix(f"{prefix}/shards/".encode())
            assert {e.lease for e in owners.values()} == {lease}  # no shard ever moved
            lost = {"lease_lost", "node_rejoined", "register_failed"}
            assert [e["event"] for e in logs if e["event"] in lost] == []
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            with suppress(Exception):
                await asyncio.wait_for(node.leave(), ttl_s)
            await store.close()
            await direct.close()


async def test_a_write_that_never_ends_is_given_up_and_the_next_batch_goes() -> None:
    writes: list[int] = []
    refused: list[list[Held]] = []
    released: list[list[Held]] = []
    given_up: list[list[Stamped]] = []

    async def write(records: list[Stamped]) -> bool:
        writes.append(len(records))
        if len(writes) == 1:
            await asyncio.Event().wait()  # never answered
        return True

    keeper = EtcdKeeper(
        asyncio.get_running_loop(), write, stamp=lambda r: (r, 1), release=released.append,
        refuse=refused.append, deadline_s=0.2, give_up=given_up.append,
    )  # fmt: skip
    record = OffsetRecord("g", "t", 0, 1, None)
    keeper.hold([record], 1, None, [])
    keeper.submit()
    keeper.hold([record], 2, None, [])  # behind the stuck batch
    await asyncio.wait_for(keeper.drain(), 10)
    assert writes == [1, 1]
    assert [[conn for conn, _, _ in h] for h in refused] == [[1]]
    assert [[conn for conn, _, _ in h] for h in released] == [[2]]
    assert given_up == [[(record, 1)]]  # its shard is no longer served


async def test_a_write_cancelled_from_inside_does_not_hold_the_keeper_up() -> None:
    """gRPC ends a call cancelled under it with a bare CancelledError: the batch is refused,
    and the next one is written, instead of every later answer waiting for ever."""
    writes: list[int] = []
    refused: list[list[Held]] = []
    released: list[list[Held]] = []

    async def write(records: list[Stamped]) -> bool:
        writes.append(len(records))
        if len(writes) == 1:
            raise asyncio.CancelledError()
        return True

    keeper = EtcdKeeper(
        asyncio.get_running_loop(), write, stamp=lambda r: (r, 1), release=released.append,
        refuse=refused.append,
    )  # fmt: skip
    record = OffsetRecord("g", "t", 0, 1, None)
    keeper.hold([record], 1, None, [])
    keeper.submit()
    keeper.hold([record], 2, None, [])
    await asyncio.wait_for(keeper.drain(), 10)
    assert [[conn for conn, _, _ in h] for h in refused] == [[1]]
    assert [[conn for conn, _, _ in h] for h in released] == [[2]]


async def test_a_shard_taken_while_the_topics_watch_lags_keeps_offsets_of_unseen_topics(
    etcd: Etcd,
) -> None:
    """Another node created topic t (2 partitions), then grew it to 4, and a group committed
    on all four; this node's topics watch has delivered none of it when it takes the shard.
    The offsets are loaded, and the watch catching up (t: 2, then t: 4) cuts none."""
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        prefix = "/lagging"
        _, before = await store.read_prefix(f"{prefix}/topics/".encode())
        await store.put(f"{prefix}/topics/t".encode(), b"2")
        await store.put(f"{prefix}/topics/t".encode(), b"4")
        group = "late-topics"
        shard = shard_of(group, SHARDS)
        for partition in range(4):
            key = f"{prefix}/offsets/{shard}/{quote(group, safe='')}/t/{partition}"
            offset = OffsetRecord(group, "t", partition, 100 + partition, None)
            await store.put(key.encode(), msgspec.msgpack.encode(offset))
        core = Coordinator()
        node = ClusterNode(
            store, node_id="n1", advertise="127.0.0.1:9001", shards=SHARDS, prefix=prefix,
            ttl_s=TTL_S,
        )  # fmt: skip
        serving = ClusterServing(
            core, store, node, now=time.monotonic, dispatch=lambda out: None, drain=_nothing
        )
        await node.register()
        await node.reconcile()  # takes every shard: nothing seen of t yet
        assert node.serves(shard)
        expected = {("t", p): (100 + p, None) for p in range(4)}

        def kept() -> dict[tuple[str, int], tuple[int, str | None]]:
            return {
                tp: (offset, meta) for tp, (offset, meta, _) in core.groups[group].offsets.items()
            }

        assert kept() == expected
        serving.topics.next_revision = before + 1  # as a watch lagging that far behind
        watching = asyncio.create_task(serving.topics.watch())
        try:
            await wait_until(
                lambda: core.topics.partitions == {"t": 4}, what="the watch catching up"
            )
            assert kept() == expected
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        await node.leave()
    finally:
        await store.close()


async def _nothing() -> None:
    return None


def test_a_cluster_node_s_liveness_is_scraped_as_metrics() -> None:
    metrics = CoordinatorMetrics()
    metrics.liveness = lambda: NodeLiveness(lease_refreshed_s_ago=0.4, reconciled_s_ago=None)
    metrics.restarts = lambda: {("reconcile", "stalled"): 2}
    scraped = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for s in family.samples
    }
    assert scraped[("huddle_cluster_lease_refresh_age_seconds", ())] == 0.4
    assert math.isnan(scraped[("huddle_cluster_reconcile_age_seconds", ())])  # not yet
    restarts = ("huddle_cluster_task_restarts_total", (("task", "reconcile"), ("why", "stalled")))
    assert scraped[restarts] == 2


def test_a_node_s_liveness_in_describe_cluster_is_optional_both_ways() -> None:
    """An older client ignores the field; a newer one reads an older node's answer as None."""

    class Older(msgspec.Struct, kw_only=True, tag_field="type", tag="describe_cluster_response"):
        node_id: str = ""
        shard_count: int = 0

    live = NodeLiveness(lease_refreshed_s_ago=0.2, reconciled_s_ago=0.5, task_restarts=1)
    newer = DescribeClusterResponse(node_id="a", shard_count=6, liveness=live)
    seen = msgspec.msgpack.decode(msgspec.msgpack.encode(newer), type=Older)
    assert (seen.node_id, seen.shard_count) == ("a", 6)
    answer = msgspec.msgpack.encode(seen)  # what an older node sends
    assert msgspec.msgpack.decode(answer, type=DescribeClusterResponse).liveness is None
