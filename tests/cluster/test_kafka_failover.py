"""Real Kafka consumers on a three-node cluster over one real etcd: the node coordinating
their group is killed with SIGKILL, the group moves to another node, and the consumers
carry on in their generation with the partitions they had (no rebalance), committing
through the new coordinator; the partitions the dead node led are led by the others."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Final

import pytest

from huddle.chaos.kafka_workers import brokers, launch
from huddle.chaos.kafka_workers.options import DriverOptions
from huddle.chaos.kafka_workers.running import Drivers, partitions_of
from huddle.chaos.procs import HOST, spawn, stop, wait_listening
from huddle.client import Admin
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.kafka.apis import Api
from huddle.protocol.addresses import free_port
from huddle.protocol.admin_messages import DescribedGroup
from tests.cluster.test_failover import SHARDS, node_flags
from tests.cluster.test_faults import run_status
from tests.etcd import Etcd, etcd
from tests.helpers import eventually
from tests.kafka.raw import RawKafka
from tests.kafka_clients.conftest import require_client

__all__ = ["etcd"]  # the fixture

NODES: Final = 3
PARTITIONS: Final = 6
WAIT_S: Final = 60.0
SESSION_MS: Final = 10_000  # the new coordinator must hear from the members within it


class Node:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int, kafka: int) -> None:
        self.name = name
        self.proc = proc
        self.port = port
        self.kafka = kafka


class KafkaCluster:
    """``huddle serve --cluster`` nodes on one etcd, each with a Kafka listener (node ids
    1, 2, ...: their Kafka broker ids); each stopped by PID when the block ends."""

    def __init__(self, etcd: Etcd, log_dir: Path, stack: ExitStack) -> None:
        self.etcd = etcd
        self.log_dir = log_dir
        self.stack = stack
        self.nodes: list[Node] = []

    def add(self) -> Node:
        i = len(self.nodes) + 1
        port, kafka = free_port(), free_port()
        argv = [sys.executable, "-m", "huddle", "serve", "--host", HOST, "--port", str(port)]
        argv += ["--kafka-port", str(kafka), "--node-id", str(i), "--log-format", "json"]
        argv += ["--initial-rebalance-delay-ms", "0"]
        argv += node_flags(f"{self.etcd.host}:{self.etcd.port}")
        out, log = self.log_dir / f"node-{i}.out", self.log_dir / f"node-{i}.log"
        proc = spawn(argv, stdout=out, stderr=log)
        self.stack.callback(stop, proc)
        wait_listening(proc, kafka, WAIT_S)
        self.nodes.append(Node(str(i), proc, port, kafka))
        return self.nodes[-1]


@contextmanager
def kafka_cluster(etcd: Etcd, log_dir: Path, count: int = NODES) -> Iterator[KafkaCluster]:
    with ExitStack() as stack:
        cluster = KafkaCluster(etcd, log_dir, stack)
        for _ in range(count):
            cluster.add()
        yield cluster


async def _call(port: int, api: int, version: int, **fields: Any) -> Any:
    async with RawKafka(port) as conn:
        return await conn.call(api, version, 1, **fields)


def kafka_call(port: int, api: int, version: int, **fields: Any) -> Any | None:
    """One Kafka request to the listener on ``port``; None if it cannot be had."""
    try:
        return asyncio.run(_call(port, api, version, **fields))
    except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError):
        return None


def coordinator(port: int, group: str) -> int | None:
    """The Kafka port the listener on ``port`` names as ``group``'s coordinator."""
    found = kafka_call(port, Api.FIND_COORDINATOR, 1, key=group, key_type=0)
    return found.port if found is not None and found.error_code == 0 else None


def metadata(port: int, topic: str) -> Any | None:
    return kafka_call(
        port,
        Api.METADATA,
        12,
        topics=[{"name": topic}],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def leaders(port: int, topic: str) -> tuple[frozenset[int], tuple[int, ...]] | None:
    """The brokers the listener on ``port`` names, and the leader of each partition."""
    answer = metadata(port, topic)
    if answer is None or not answer.topics or answer.topics[0].error_code:
        return None
    led = tuple(
        p.leader_id for p in sorted(answer.topics[0].partitions, key=lambda p: p.partition_index)
    )
    return frozenset(b.node_id for b in answer.brokers), led


def describe(nodes: list[Node], group: str) -> DescribedGroup:
    async def ask() -> DescribedGroup:
        bootstrap = ",".join(f"{HOST}:{n.port}" for n in nodes)
        async with Admin(bootstrap) as admin:
            described = await admin.describe_group(group)
        return described

    return asyncio.run(ask())


def agreed(nodes: list[Node], topic: str) -> tuple[int, ...] | None:
    """The leader of each partition, once every node in ``nodes`` names exactly them as
    the brokers and the same leaders."""
    every = frozenset(int(n.name) for n in nodes)  # the node ids are the broker ids
    seen = {leaders(n.kafka, topic) for n in nodes}
    (view,) = seen if len(seen) == 1 else (None,)
    return view[1] if view is not None and view[0] == every else None


class Group:
    """Two consumers of ``client`` in one group, committing what they read."""

    def __init__(self, drv: Drivers, client: str, bootstrap: str, topic: str, group: str):
        self.drv = drv
        self.group = group
        options = DriverOptions(
            bootstrap=bootstrap,
            group=group,
            topic=topic,
            strategy=launch.CLIENTS[client].eager,
            session_ms=SESSION_MS,
            heartbeat_ms=500,
            commit=True,
            max_seconds=240.0,
        )
        self.members = [drv.start(name, client, options) for name in ("m1", "m2")]
        every = partitions_of(topic, PARTITIONS)
        drv.wait(lambda: drv.balanced(("m1", "m2"), every), WAIT_S, "the group forms")
        self.owned = {m.name: m.owned for m in self.members}
        self.joined = {m.name: m.last("joined") for m in self.members}

    def committed_since(self, since: float, what: str) -> None:
        """Until every partition has a commit made after ``since``: records read and
        committed through the group's coordinator, in the members' generation (a member
        dropped from the group would fail to commit)."""

        def done() -> bool | None:
            tps = {
                (t, p)
                for m in self.members
                for e in m.of("committed", since)
                if not e.get("error")
                for t, p, _ in e["offsets"]
            }
            return len(tps) == PARTITIONS or None

        self.drv.wait(done, WAIT_S, what)

    def kept_since(self, since: float, before: DescribedGroup, nodes: list[Node]) -> None:
        """No rebalance since ``since``: the same partitions, nothing revoked, lost,
        assigned or joined, and the group in the same generation with the same members."""
        assert {m.name: m.owned for m in self.members} == self.owned
        for m in self.members:
            later = [e for e in m.events if e["mono"] >= since]
            changes = ("revoked", "lost", "assigned", "joined")
            assert [e for e in later if e["event"] in changes] == [], m.name
            assert m.last("joined") == self.joined[m.name]
        after = describe(nodes, self.group)
        assert after.generation_id == before.generation_id
        assert sorted(x.member_id for x in after.members) == sorted(
            x.member_id for x in before.members
        )


CLIENTS = ["kafka-python", "confluent-kafka", "aiokafka"]


@pytest.mark.e2e
@pytest.mark.parametrize("client", CLIENTS)
def test_the_coordinator_of_kafka_consumers_killed_they_keep_their_partitions(
    etcd: Etcd, tmp_path: Path, client: str
) -> None:
    require_client(client)
    require_client("kafka-python")  # the topic is made and written with its clients
    topic, group = f"t-{os.getpid()}", f"g-{client}"
    with kafka_cluster(etcd, tmp_path / "nodes") as cluster, Drivers(tmp_path / "drivers") as drv:
        nodes = cluster.nodes
        ports = {n.kafka: n for n in nodes}
        bootstrap = ",".join(f"{HOST}:{n.kafka}" for n in nodes)
        brokers.create_topic(bootstrap, topic, PARTITIONS)
        before = drv.wait(lambda: agreed(nodes, topic), WAIT_S, "the nodes agree on leaders")
        consumers = Group(drv, client, bootstrap, topic, group)
        described = describe(nodes, group)
        assert len(described.members) == 2

        owner = drv.wait(lambda: coordinator(nodes[0].kafka, group), WAIT_S, "a coordinator")
        killed_at = time.monotonic()
        ports[owner].proc.send_signal(signal.SIGKILL)  # by its PID
        ports[owner].proc.wait(timeout=WAIT_S)
        survivors = [n for n in nodes if n.kafka != owner]

        def moved() -> int | None:
            found = coordinator(survivors[0].kafka, group)
            return found if found is not None and found != owner else None

        drv.wait(moved, WAIT_S, "another node coordinates the group")
        after = drv.wait(lambda: agreed(survivors, topic), WAIT_S, "the survivors agree")
        dead = int(ports[owner].name)  # only the dead node's partitions moved
        assert all(b == a for a, b in zip(before, after, strict=True) if a != dead)
        brokers.produce(",".join(f"{HOST}:{n.kafka}" for n in survivors), topic, PARTITIONS, 3)
        consumers.committed_since(killed_at, "every partition committed after the failover")
        consumers.kept_since(killed_at, described, survivors)


@pytest.mark.e2e
@pytest.mark.parametrize("client", CLIENTS)
def test_a_kafka_group_handed_to_a_joining_node_carries_on_without_a_rebalance(
    etcd: Etcd, tmp_path: Path, client: str
) -> None:
    """A clean hand-off: the old coordinator, still up, answers the members NOT_COORDINATOR
    (the new one COORDINATOR_LOAD_IN_PROGRESS while it loads the group); they find the new
    one and carry on in their generation."""
    require_client(client)
    require_client("kafka-python")
    topic = f"t-{os.getpid()}"
    # one node holds the 6 shards; a second takes shards 3-5 from it (``target_owners``)
    group = next(g for i in itertools.count() if shard_of(g := f"g{i}", SHARDS) >= SHARDS // 2)
    with (
        kafka_cluster(etcd, tmp_path / "nodes", count=1) as cluster,
        Drivers(tmp_path / "drivers") as drv,
    ):
        first = cluster.nodes[0]
        bootstrap = f"{HOST}:{first.kafka}"
        # the listener opens before the node joins the cluster (CreateTopics is refused
        # COORDINATOR_NOT_AVAILABLE until then)
        drv.wait(lambda: coordinator(first.kafka, group) == first.kafka, WAIT_S, "served")
        brokers.create_topic(bootstrap, topic, PARTITIONS)
        drv.wait(lambda: agreed([first], topic), WAIT_S, "the topic is listed")
        consumers = Group(drv, client, bootstrap, topic, group)
        brokers.produce(bootstrap, topic, PARTITIONS, 3)
        consumers.committed_since(0.0, "every partition committed")
        described = describe(cluster.nodes, group)

        joined_at = time.monotonic()
        second = cluster.add()
        drv.wait(lambda: coordinator(first.kafka, group) == second.kafka, WAIT_S, "handed over")
        drv.wait(lambda: agreed(cluster.nodes, topic), WAIT_S, "the two nodes agree on leaders")
        # more than the 3 read before: a partition whose leader changed starts empty, and a
        # consumer's position 3 is then out of range (it resets) or at the end (it reads on)
        brokers.produce(bootstrap, topic, PARTITIONS, 6)
        consumers.committed_since(joined_at, "every partition committed after the hand-off")
        consumers.kept_since(joined_at, described, [second])


@pytest.mark.e2e
async def test_cluster_status_names_every_node_s_kafka_listener(etcd: Etcd, tmp_path: Path) -> None:
    """``huddle cluster status``, asked at any node, lists each node's Kafka address
    beside its own: where an operator points Kafka clients."""
    with kafka_cluster(etcd, tmp_path / "nodes", count=2) as cluster:
        nodes = cluster.nodes
        want = {n.name: f"{HOST}:{n.kafka}" for n in nodes}

        async def listed() -> bool:
            result = await asyncio.to_thread(run_status, f"{HOST}:{nodes[1].port}", "--json")
            assert result.returncode == 0, result.stderr
            found = {n["node_id"]: n["kafka_address"] for n in json.loads(result.stdout)["nodes"]}
            return found == want

        await eventually(listed, wait_s=WAIT_S, what="both nodes listed with their Kafka address")
        text = (await asyncio.to_thread(run_status, f"{HOST}:{nodes[0].port}")).stdout
    assert "KAFKA" in text.splitlines()[2]
    for address in want.values():
        assert address in text
