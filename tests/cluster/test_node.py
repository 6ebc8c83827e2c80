"""Nodes of a cluster against a real etcd: shards spread, move on a join, and are taken
from a dead node only after it fenced itself."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from huddle.coordinator.cluster import node as node_module
from huddle.coordinator.cluster.node import OURS, ClusterConfigError, ClusterNode
from huddle.coordinator.cluster.store import EtcdStore
from tests.etcd import Etcd, etcd

__all__ = ["etcd"]  # the fixture

TTL_S = 2
SHARDS = 12
DEADLINE_S = 20.0


Connect = Callable[[], Awaitable[EtcdStore]]


@pytest.fixture
async def stores(etcd: Etcd) -> AsyncIterator[Connect]:
    """A connection per node, as each node process would have."""
    opened: list[EtcdStore] = []

    async def connect() -> EtcdStore:
        store = await EtcdStore.connect([etcd.endpoint])
        opened.append(store)
        return store

    yield connect
    for store in opened:
        await store.close()


def node(store: EtcdStore, name: str, **kw: object) -> ClusterNode:
    return ClusterNode(
        store, node_id=name, advertise=f"127.0.0.1:{9000 + ord(name[-1])}", shards=SHARDS,
        prefix="/huddle-test", ttl_s=TTL_S, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


class Watch:
    """Samples the nodes' owned shards until a condition holds, and checks at every
    sample that no shard is served by two nodes."""

    def __init__(self, nodes: list[ClusterNode]) -> None:
        self.nodes = nodes

    async def until(self, predicate: Callable[[list[dict[int, int]]], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            owned = [n.owned() for n in self.nodes]
            served = [s for o in owned for s in o]
            assert len(served) == len(set(served)), f"a shard served twice: {owned}"
            if predicate(owned):
                return
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {owned}"
            await anyio.sleep(0.02)


def counts(owned: list[dict[int, int]]) -> list[int]:
    return sorted(len(o) for o in owned)


async def test_shards_spread_and_move_to_a_joining_node(stores: Connect) -> None:
    a, b, c = [node(await stores(), name) for name in ("na", "nb", "nc")]
    async with anyio.create_task_group() as tg:
        for n in (a, b):
            await n.register()
            tg.start_soon(n.run)
        watch = Watch([a, b, c])
        await watch.until(lambda o: counts(o) == [0, 6, 6], "6 shards each on two nodes")
        kept = {**a.owned(), **b.owned()}
        await c.register()
        tg.start_soon(c.run)
        await watch.until(lambda o: counts(o) == [4, 4, 4], "4 shards each on three nodes")
        now = {**a.owned(), **b.owned()}
        assert all(kept[s] == e for s, e in now.items())  # the others kept their epochs
        tg.cancel_scope.cancel()


async def test_a_dead_nodes_shards_are_taken_only_after_it_fenced_itself(stores: Connect) -> None:
    a, b = node(await stores(), "na"), node(await stores(), "nb")
    async with anyio.create_task_group() as tg:
        await a.register()
        tg.start_soon(a.run)
        watch = Watch([a, b])
        async with anyio.create_task_group() as b_process:
            await b.register()
            b_process.start_soon(b.run)
            await watch.until(lambda o: counts(o) == [6, 6], "6 shards each")
            b_shards = set(b.owned())
            b_process.cancel_scope.cancel()  # b dies: no keep-alive, no goodbye
        fenced_at = b.guard.deadline
        assert fenced_at is not None
        await watch.until(lambda o: o[0].keys() >= b_shards, "a to take b's shards")
        taken_at = b.clock()
        assert b.owned() == {}
        assert taken_at >= fenced_at  # b stopped serving before a could take over
        tg.cancel_scope.cancel()


async def test_conflicting_configuration_is_a_clear_error_at_start(stores: Connect) -> None:
    a = node(await stores(), "na")
    await a.register()
    other = ClusterNode(
        await stores(), node_id="nz", advertise="127.0.0.1:1", shards=SHARDS * 2,
        prefix="/huddle-test", ttl_s=TTL_S,
    )  # fmt: skip
    with pytest.raises(ClusterConfigError, match=f"has {SHARDS} shards, not {SHARDS * 2}"):
        await other.register()
    twin = ClusterNode(
        await stores(), node_id="ny", advertise=a.advertise, shards=SHARDS,
        prefix="/huddle-test", ttl_s=TTL_S,
    )  # fmt: skip
    with pytest.raises(ClusterConfigError, match=f"already advertises {a.advertise}"):
        await twin.register()
    same = node(await stores(), "na")
    with pytest.raises(ClusterConfigError, match="already registered as na"):
        await same.register(wait_s=0.5)  # na is alive: it keeps its lease
    await a.leave()


async def test_a_node_restarted_under_its_id_waits_for_its_old_registration(
    stores: Connect,
) -> None:
    old = node(await stores(), "na")
    await old.register()  # then the process dies: nothing keeps its lease alive
    again = node(await stores(), "na")
    await again.register()  # waits for the old lease to run out, then registers
    assert again.lease is not None
    assert old.lease is not None
    assert again.lease.id != old.lease.id
    await again.leave()


async def test_a_node_s_kafka_address_is_known_to_the_others_with_the_node(
    stores: Connect,
) -> None:
    a = node(await stores(), "na", kafka_advertise="127.0.0.1:19092")
    b = node(await stores(), "nb")  # no Kafka listener
    await a.register()
    await b.register()
    await b.reconcile()
    assert b.kafka_addresses == {"na": "127.0.0.1:19092"}
    assert set(b.addresses) == {"na", "nb"}
    # nobody else may advertise that Kafka address, on either listener
    taken = [
        node(await stores(), "nc", kafka_advertise="127.0.0.1:19092"),
        ClusterNode(
            await stores(),
            node_id="nd",
            advertise="127.0.0.1:19092",
            shards=SHARDS,
            prefix="/huddle-test",
            ttl_s=TTL_S,
        ),
    ]
    for refused in taken:
        with pytest.raises(ClusterConfigError, match=r"already advertises 127\.0\.0\.1:19092"):
            await refused.register()
    await a.leave()  # its lease revoked: its Kafka address goes with it
    await b.reconcile()
    assert b.kafka_addresses == {}
    await b.leave()


async def test_two_nodes_with_one_kafka_broker_id_cannot_both_run(stores: Connect) -> None:
    a = node(await stores(), "7", kafka_advertise="127.0.0.1:19092")
    await a.register()
    same_id = ClusterNode(
        await stores(), node_id="007", advertise="127.0.0.1:9300", shards=SHARDS,
        prefix="/huddle-test", ttl_s=TTL_S, kafka_advertise="127.0.0.1:19093",
    )  # fmt: skip
    with pytest.raises(ClusterConfigError, match="node 7 has Kafka broker id 7 too"):
        await same_id.register()
    assert same_id.lease is None
    await a.leave()


@pytest.mark.parametrize("family", ["topics", "topic-ids", "topic-cuts", "consumer-groups"])
async def test_a_prefix_holding_only_a_cluster_s_own_keys_is_taken(
    stores: Connect, family: str
) -> None:
    """A topic created while the first node registers writes its id and cuts with it: a
    node must not then call the prefix another application's (the topic-ids key once made
    a starting node refuse its own cluster's prefix)."""
    store = await stores()
    prefix = f"/own-{family}"
    await store.put(f"{prefix}/{family}/x".encode(), b"1")
    first = ClusterNode(
        store, node_id="na", advertise="127.0.0.1:1", shards=SHARDS, prefix=prefix, ttl_s=TTL_S
    )
    await first.register()
    await first.leave()


def test_every_key_family_the_cluster_writes_is_known_as_its_own() -> None:
    """The families named in the cluster package's key builders are all in OURS, so a new
    one cannot be forgotten there again."""
    package = Path(node_module.__file__).parent
    source = "\n".join(p.read_text() for p in package.glob("*.py"))
    families = set(re.findall(r'_key\(\s*"([a-z-]+)"', source))
    families |= set(re.findall(r"prefix\}/([a-z-]+)", source))
    families.discard("topic")  # the read of topics, topic-ids and topic-cuts in one prefix
    assert families >= {"topics", "topic-ids", "consumer-groups", "offsets"}
    assert {f.encode() for f in families} <= OURS
